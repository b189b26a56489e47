"""One LSTM layer that can run any dropout scheme's masks.

Three ways to run it, chosen by ``impl`` (``model.impl``):
- the fused ``torch.nn.LSTM`` kernel (cuDNN on CUDA), whenever the recurrence carries no mask;
- ``reference``: the step loop :func:`lstm_reference` below, for masked recurrences;
- ``fast``: the fused Triton recurrence of :mod:`vdrnn.fused` for masked recurrences (CUDA);
  ``auto`` picks it on CUDA and the reference on the CPU.

The parameters are those of a one-layer ``torch.nn.LSTM`` (``weight_ih_l0`` [4H, D], ``weight_hh_l0``
[4H, H], two biases; gate order i, f, g, o), so a layer whose recurrence carries no mask runs on the
fused kernel (cuDNN on CUDA) and a layer whose recurrence is masked runs the step loop below on the
very same weights. The loop is the *reference*: slow and obviously correct, it defines what every
faster path must compute.

Tied vs untied gates (Gal eq. 7 vs eq. 5) changes the noise, not the parameters: untied gates get a
separate mask per gate, so the masked input to each gate differs and one [x; h] product per step
becomes four.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from vdrnn.dropout import LayerMasks

GATES = 4  # i, f, g, o


IMPLS = ("auto", "fast", "reference")


class LSTMLayer(nn.Module):
    gates = GATES  # products per step, hence the size of a per-gate mask's gate axis

    def __init__(self, input_size: int, hidden_size: int, impl: str = "auto"):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.impl = impl
        # Holding an nn.LSTM (rather than bare Parameters) gives the fused kernel for free and
        # keeps checkpoints loadable into a stock nn.LSTM.
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=1)

    def forward(
        self,
        x: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor],
        masks: LayerMasks | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x [T, B, D]; state (h, c), each [B, H]; returns (outputs [T, B, H], (h_T, c_T))."""
        masks = masks or LayerMasks()
        params = self.parameters_tuple()
        if masks.w_hh is not None:
            # Weight drop: a new W_hh for this minibatch, computed from the raw parameter, which thus
            # gets the gradients and is never modified in place.
            w_ih, w_hh, b_ih, b_hh = params
            params = (w_ih, w_hh * masks.w_hh, b_ih, b_hh)
        if masks.recurrent:
            if uses_kernels(self.impl, x):
                from vdrnn.fused import lstm_fused

                return lstm_fused(x, state, params, masks)
            return lstm_reference(x, state, params, masks)
        if masks.x is not None:  # fresh-per-step or fixed-over-time input mask, same for all gates
            x = x * masks.x.to(x.dtype)
        # The fused kernel runs in fp32 (TF32 on CUDA) even under autocast: cuDNN in bf16 would keep
        # c_t in bf16 too, and it measured no faster (../shared/REFERENCE.md sec. 8).
        h0, c0 = state
        hx = (h0.unsqueeze(0).float(), c0.unsqueeze(0).float())
        with torch.autocast(x.device.type, enabled=False):
            if masks.w_hh is None:
                y, (h, c) = self.lstm(x.float(), hx)
            else:
                y, (h, c) = lstm_with_weights(x.float(), hx, params)
        return y, (h.squeeze(0), c.squeeze(0))

    def parameters_tuple(self) -> tuple[torch.Tensor, ...]:
        return one_layer_parameters(self.lstm)


def uses_kernels(impl: str, x: torch.Tensor) -> bool:
    """``model.impl``: does a masked recurrence on ``x`` run the fused Triton kernels (``fast``, or ``auto`` on CUDA
    tensors) rather than the reference loop?"""
    return impl == "fast" or (impl == "auto" and x.is_cuda)


def one_layer_parameters(module: nn.RNNBase) -> tuple[torch.Tensor, ...]:
    """(W_ih, W_hh, b_ih, b_hh) of a one-layer nn.LSTM / nn.GRU / nn.RNN, as the recurrence functions take them."""
    return module.weight_ih_l0, module.weight_hh_l0, module.bias_ih_l0, module.bias_hh_l0


def lstm_with_weights(x: torch.Tensor, hx: tuple[torch.Tensor, torch.Tensor], params: tuple[torch.Tensor, ...]):
    """The fused LSTM kernel (cuDNN on CUDA) on weights passed as arguments, not the module's own.

    cuDNN wants all weights in one buffer and packs them when they are not; with weight drop W_hh is a
    new tensor every minibatch, so that copy (4H x H floats) is inherent and its warning is expected.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")
        # train=True when gradients are wanted: cuDNN's backward needs the workspace its training-mode
        # forward keeps (a train=False forward cannot be differentiated on CUDA; on CPU it can).
        y, h, c = torch.lstm(x, hx, list(params), True, 1, 0.0, torch.is_grad_enabled(), False, False)
    return y, (h, c)


def masked_linear(v: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None,
                  per_gate: bool) -> torch.Tensor:
    """W (v * z) + b for every gate of a cell at once: v [..., B, D] -> [..., B, G*H].

    ``mask`` is None, broadcastable to v (one mask shared by all gates: [B, D] fixed over time or
    [T, B, D] fresh per step), or with ``per_gate`` a [B, G, D] stack in which gate k (rows
    k*H..(k+1)*H of W) sees v * z[:, k] (Gal's untied weights, eq. 5). G comes from the mask.
    The fast paths' twin, through aligned products, is :func:`vdrnn.fused.input_product`.
    """
    if mask is None:
        return F.linear(v, weight, bias)
    if not per_gate:
        return F.linear(v * mask.to(v.dtype), weight, bias)
    gates = mask.shape[-2]
    masked = v.unsqueeze(-2) * mask.to(v.dtype)  # [..., B, 1, D] * [B, G, D] -> [..., B, G, D]
    per_gate_weight = weight.view(gates, -1, weight.shape[1])  # [G, H, D]
    proj = torch.einsum("...gd,ghd->...gh", masked, per_gate_weight).flatten(-2)
    return (proj + bias).to(proj.dtype)  # the product's dtype (autocast's), as F.linear's, not promoted by the bias


def lstm_reference(
    x: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor],
    params: tuple[torch.Tensor, ...],
    masks: LayerMasks,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The step-by-step LSTM with every mask of :mod:`vdrnn.dropout` applied where its scheme says.

    Precision: the products may run in bf16/fp16 under autocast, but gate pre-activations and the
    cell state are kept in fp32 (their sums over long sequences are where low precision hurts).
    """
    w_ih, w_hh, b_ih, b_hh = params
    x_proj = masked_linear(x, w_ih, b_ih, masks.x, masks.per_gate)
    h, c = state
    h, c = h.float(), c.float()
    outputs = []
    for t in range(x.shape[0]):
        gates = x_proj[t].float() + masked_linear(h.to(x_proj.dtype), w_hh, b_hh, masks.h, masks.per_gate).float()
        i, f, g, o = gates.chunk(GATES, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        if masks.c is not None:
            c = c * masks.c
        h = torch.sigmoid(o) * torch.tanh(c)
        if masks.c is not None:
            h = h * masks.c_scale
        outputs.append(h)
    y = torch.stack(outputs)
    return y.to(x_proj.dtype), (h, c)


# ----------------------------------------------------------------------------- GRU and tanh RNN
# Same design as the LSTM above: the layer holds the stock module (cuDNN on CUDA when the recurrence
# is unmasked, and checkpoints load into a stock nn.GRU / nn.RNN) and masked recurrences run a
# reference step loop on the very same weights. They have no cell state, so Moon's c-mask does not apply.
# Sharing those weights means the GRU is PyTorch's, reset gate applied after the recurrent product, not
# the Keras GRU of Gal's scripts (reset before it); only the masks are Gal's.

GRU_GATES = 3  # r, z, n, as torch.nn.GRU
RNN_GATES = 1


def gru_reference(x: torch.Tensor, h0: torch.Tensor, params: tuple[torch.Tensor, ...],
                  masks: LayerMasks) -> tuple[torch.Tensor, torch.Tensor]:
    """nn.GRU's cell with Gal's masks, step by step; x [T, B, D], h0 [B, H] -> (outputs [T, B, H], h_T).

        r = sigma(W_ir (x_t * z_x^r) + b_ir + W_hr (h_{t-1} * z_h^r) + b_hr)
        z = sigma(W_iz (x_t * z_x^z) + b_iz + W_hz (h_{t-1} * z_h^z) + b_hz)
        n = tanh(W_in (x_t * z_x^n) + b_in + r * (W_hn (h_{t-1} * z_h^n) + b_hn))
        h_t = (1 - z) * n + z * h_{t-1}

    The cell is torch.nn.GRU's (cuDNN's), so the layer's weights are a stock nn.GRU's: the reset gate
    scales the recurrent product, r * (W_hn h + b_hn), where the Keras GRU of Gal's scripts resets the
    state before the product, tanh(x_h + U_h (r * h_{t-1} * z_h)). The masks are Gal's: per sample and
    fixed over time; tied gates use one z_x [B, D] and one z_h [B, H] for r, z and n, untied
    (``masks.per_gate``) a separate mask per gate, [B, 3, D] and [B, 3, H]. z_x may also be Zaremba's
    fresh-per-step [T, B, D]. The masks act on the inputs of the products only: the interpolation
    z * h_{t-1} uses the undropped state, as in Keras. Products may run in low precision under
    autocast; gate sums and h_t stay fp32.
    """
    w_ih, w_hh, b_ih, b_hh = params
    x_proj = masked_linear(x, w_ih, b_ih, masks.x, masks.per_gate)
    h = h0.float()
    outputs = []
    for t in range(x.shape[0]):
        h_proj = masked_linear(h.to(x_proj.dtype), w_hh, b_hh, masks.h, masks.per_gate).float()
        x_r, x_z, x_n = x_proj[t].float().chunk(GRU_GATES, dim=1)
        h_r, h_z, h_n = h_proj.chunk(GRU_GATES, dim=1)
        r = torch.sigmoid(x_r + h_r)
        z = torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * h_n)
        h = (1 - z) * n + z * h
        outputs.append(h)
    return torch.stack(outputs).to(x_proj.dtype), h


def rnn_reference(x: torch.Tensor, h0: torch.Tensor, params: tuple[torch.Tensor, ...],
                  masks: LayerMasks) -> tuple[torch.Tensor, torch.Tensor]:
    """The variational tanh RNN, step by step: h_t = tanh(W_ih (x_t * z_x) + b_ih + W_hh (h_{t-1} * z_h) + b_hh).

    One gate, so tied and untied masks are the same noise ([B, D] or [B, 1, D]); per sample, fixed over time.
    """
    w_ih, w_hh, b_ih, b_hh = params
    x_proj = masked_linear(x, w_ih, b_ih, masks.x, masks.per_gate)
    h = h0.float()
    outputs = []
    for t in range(x.shape[0]):
        h = torch.tanh(x_proj[t].float() + masked_linear(h.to(x_proj.dtype), w_hh, b_hh, masks.h,
                                                         masks.per_gate).float())
        outputs.append(h)
    return torch.stack(outputs).to(x_proj.dtype), h


class _SingleStateLayer(nn.Module):
    """A one-layer recurrence whose state is h alone: ``module``'s fused kernel, or ``reference`` when masked."""

    gates: int  # as LSTMLayer.gates

    def __init__(self, module: nn.RNNBase, reference):
        super().__init__()
        self.module = module
        self.reference = reference
        self.input_size = module.input_size
        self.hidden_size = module.hidden_size

    def forward(self, x: torch.Tensor, h0: torch.Tensor,
                masks: LayerMasks | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, B, D]; h0 [B, H]; returns (outputs [T, B, H], h_T)."""
        masks = masks or LayerMasks()
        if masks.c is not None:
            raise ValueError(f"{type(self).__name__} has no cell state: Moon's c-mask needs an LSTM")
        if masks.w_hh is not None:  # refused rather than silently ignored: AWD's weight drop is for the LSTM
            raise ValueError(f"{type(self).__name__} does not apply a weight-drop mask: AWD's W_hh mask needs an LSTM")
        if masks.recurrent:
            return self.masked_loop(x)(x, h0, self.parameters_tuple(), masks)
        if masks.x is not None:  # input mask shared by all gates: the stock kernel still applies
            x = x * masks.x.to(x.dtype)
        with torch.autocast(x.device.type, enabled=False):  # fp32 state, as the LSTM layer
            y, h = self.module(x.float(), h0.unsqueeze(0).float())
        return y, h.squeeze(0)

    def masked_loop(self, x: torch.Tensor):
        """The function that runs a masked recurrence on ``x``: the reference loop unless a subclass has a faster one."""
        return self.reference

    def parameters_tuple(self) -> tuple[torch.Tensor, ...]:
        return one_layer_parameters(self.module)


class GRULayer(_SingleStateLayer):
    """One GRU layer (parameters of a one-layer ``torch.nn.GRU``); masks as in :func:`gru_reference`.

    ``impl`` as for :class:`LSTMLayer`: masked recurrences run :func:`vdrnn.fused_gru.gru_fused` when it
    is ``fast``, or ``auto`` on CUDA tensors, and the reference loop otherwise.
    """

    gates = GRU_GATES

    def __init__(self, input_size: int, hidden_size: int, impl: str = "auto"):
        super().__init__(nn.GRU(input_size, hidden_size, num_layers=1), gru_reference)
        self.impl = impl

    def masked_loop(self, x: torch.Tensor):
        if uses_kernels(self.impl, x):
            from vdrnn.fused_gru import gru_fused  # imports this module: not at its top

            return gru_fused
        return self.reference


class RNNLayer(_SingleStateLayer):
    """One tanh-RNN layer (parameters of a one-layer ``torch.nn.RNN``); masks as in :func:`rnn_reference`."""

    gates = RNN_GATES

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(nn.RNN(input_size, hidden_size, num_layers=1, nonlinearity="tanh"), rnn_reference)
