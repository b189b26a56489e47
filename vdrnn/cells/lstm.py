"""The LSTM layer: gate order i, f, g, o as ``torch.nn.LSTM``; masks as :mod:`vdrnn.dropout` draws them.

    i, f, o = sigma(.), g = tanh(.) of W_ih (x_t * z_x) + b_ih + W_hh (h_{t-1} * z_h) + b_hh
    c_t = f*c_{t-1} + i*g   (* Moon's m),   h_t = o * tanh(c_t)   (* Moon's 1/(1-p))

with Semeniuta's mask on g, and zoneout's d mixing c_{t-1} into c_t and h_{t-1} into h_t where the scheme draws them.

The parameters are those of a one-layer ``torch.nn.LSTM`` (``weight_ih_l0`` [4H, D], ``weight_hh_l0`` [4H, H], two
biases), so a layer whose recurrence carries no mask runs the stock kernel and a masked one runs
:func:`lstm_reference` (or the fused kernels, :func:`vdrnn.kernels.lstm.lstm_fused`) on the very same weights.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from vdrnn.cells import GATES
from vdrnn.cells.common import at_step, masked_linear, one_layer_parameters, runs_kernels, zone
from vdrnn.dropout import LayerMasks

LSTM_GATES = GATES["lstm"]


class LSTMLayer(nn.Module):
    cell = "lstm"
    gates = LSTM_GATES  # products per step, hence the size of a per-gate mask's gate axis

    def __init__(self, input_size: int, hidden_size: int, impl: str = "auto"):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.impl = impl
        # A weight-dropped layer (AWD) runs the stock kernel on its dropped W_hh, or the fused kernels, which take any
        # W_hh too: with model.impl=fast, and under auto where its trainer graphs the step (the faster there,
        # scripts/bench_awd.py; launched eagerly, cuDNN is).
        self.weight_drop_on_kernels = impl == "fast"
        # Holding an nn.LSTM (rather than bare Parameters) gives the stock kernel for free and keeps checkpoints
        # loadable into a stock nn.LSTM.
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=1)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
                masks: LayerMasks | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x [T, B, D]; state (h, c), each [B, H]; returns (outputs [T, B, H], (h_T, c_T))."""
        masks = masks or LayerMasks()
        params = self.parameters_tuple()
        masked_recurrence = masks.recurrent or (masks.w_hh is not None and self.weight_drop_on_kernels)
        if masked_recurrence and runs_kernels(self.impl, x, "lstm"):
            from vdrnn.kernels.lstm import lstm_fused  # Triton, only where it runs

            return lstm_fused(x, state, params, masks)  # weight drop's mask applied as the kernels pack W_hh
        if masks.w_hh is not None:
            # Weight drop: a new W_hh for this minibatch, computed from the raw parameter, which thus gets the
            # gradients and is never modified in place.
            w_ih, w_hh, b_ih, b_hh = params
            params = (w_ih, masks.w_hh.apply(w_hh), b_ih, b_hh)
        if masked_recurrence:
            return lstm_reference(x, state, params, masks)
        if masks.x is not None:  # fresh-per-step or fixed-over-time input mask, the same for all gates
            x = x * masks.x.to(x.dtype)
        # The stock kernel runs in fp32 (TF32 on CUDA) even under autocast: cuDNN in bf16 would keep c_t in bf16
        # too, and it is no faster (docs/speed.md).
        h0, c0 = state
        hx = (h0.unsqueeze(0).float(), c0.unsqueeze(0).float())
        with torch.autocast(x.device.type, enabled=False):
            if masks.w_hh is None:
                y, (h, c) = self.lstm(x.float(), hx)
            else:
                y, (h, c) = lstm_with_weights(x.float(), hx, params)
        return y, (h.squeeze(0), c.squeeze(0))

    def initial_state(self, batch: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
        """(h_0, c_0), zeros; separate tensors, which a CUDA graph's capture copies into independently."""
        return (torch.zeros(batch, self.hidden_size, device=device),
                torch.zeros(batch, self.hidden_size, device=device))

    def parameters_tuple(self) -> tuple[torch.Tensor, ...]:
        return one_layer_parameters(self.lstm)


def lstm_with_weights(x: torch.Tensor, hx: tuple[torch.Tensor, torch.Tensor], params: tuple[torch.Tensor, ...]):
    """The stock LSTM kernel (cuDNN on CUDA) on weights passed as arguments, not the module's own.

    cuDNN wants all weights in one buffer and packs them when they are not; with weight drop W_hh is a new tensor
    every minibatch, so that copy (4H x H floats) is inherent and its warning is expected.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")
        # train=True when gradients are wanted: cuDNN's backward needs the workspace its training-mode forward keeps
        # (a train=False forward cannot be differentiated on CUDA; on CPU it can).
        y, h, c = torch.lstm(x, hx, list(params), True, 1, 0.0, torch.is_grad_enabled(), False, False)
    return y, (h, c)


def lstm_reference(x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], params: tuple[torch.Tensor, ...],
                   masks: LayerMasks) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The step-by-step LSTM with every mask of :mod:`vdrnn.dropout` applied where its scheme says.

    Precision: the products may run in bf16/fp16 under autocast, but gate pre-activations and the cell state are kept
    in fp32 (their sums over long sequences are where low precision hurts).
    """
    w_ih, w_hh, b_ih, b_hh = params
    x_proj = masked_linear(x, w_ih, b_ih, masks.x, masks.per_gate)
    h, c = state
    h, c = h.float(), c.float()
    outputs = []
    for t in range(x.shape[0]):
        gates = x_proj[t].float() + masked_linear(h.to(x_proj.dtype), w_hh, b_hh, masks.h, masks.per_gate).float()
        i, f, g, o = gates.chunk(LSTM_GATES, dim=1)
        g = torch.tanh(g)
        if masks.g is not None:  # Semeniuta: the candidate update dropped
            g = g * at_step(masks.g, t)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * g
        if masks.c is not None:
            c_new = c_new * masks.c
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        if masks.c is not None:
            h_new = h_new * masks.c_scale
        # Zoneout: a unit keeps its previous value where d = 1; h's update above read the cell before zoneout.
        c = c_new if masks.zone_c is None else zone(masks.zone_c[t], c, c_new)
        h = h_new if masks.zone_h is None else zone(masks.zone_h[t], h, h_new)
        outputs.append(h)
    y = torch.stack(outputs)
    return y.to(x_proj.dtype), (h, c)
