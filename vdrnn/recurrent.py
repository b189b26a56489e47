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

import torch
import torch.nn.functional as F
from torch import nn

from vdrnn.dropout import LayerMasks

GATES = 4  # i, f, g, o


IMPLS = ("auto", "fast", "reference")


class LSTMLayer(nn.Module):
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
        if masks.recurrent:
            if self.impl == "fast" or (self.impl == "auto" and x.is_cuda):
                from vdrnn.fused import lstm_fused

                return lstm_fused(x, state, self.parameters_tuple(), masks)
            return lstm_reference(x, state, self.parameters_tuple(), masks)
        if masks.x is not None:  # fresh-per-step or fixed-over-time input mask, same for all gates
            x = x * masks.x.to(x.dtype)
        # The fused kernel runs in fp32 (TF32 on CUDA) even under autocast: cuDNN in bf16 would keep
        # c_t in bf16 too, and it measured no faster (../shared/REFERENCE.md sec. 8).
        h0, c0 = state
        with torch.autocast(x.device.type, enabled=False):
            y, (h, c) = self.lstm(x.float(), (h0.unsqueeze(0).float(), c0.unsqueeze(0).float()))
        return y, (h.squeeze(0), c.squeeze(0))

    def parameters_tuple(self) -> tuple[torch.Tensor, ...]:
        m = self.lstm
        return m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0


def input_projection(x: torch.Tensor, w_ih: torch.Tensor, b_ih: torch.Tensor, mask: torch.Tensor | None,
                     per_gate: bool) -> torch.Tensor:
    """W_x (x_t * z_x) + b for all t at once: [T, B, 4H]. Masks fixed over time make this one GEMM."""
    if mask is None:
        return F.linear(x, w_ih, b_ih)
    if not per_gate:
        return F.linear(x * mask.to(x.dtype), w_ih, b_ih)
    # Untied: gate k sees x * z_x^k.  [T,B,1,D] * [B,G,D] -> [T,B,G,D], then a per-gate product.
    steps, batch, _ = x.shape
    masked = x.unsqueeze(2) * mask.to(x.dtype)
    w = w_ih.view(GATES, -1, w_ih.shape[1])  # [G, H, D]
    proj = torch.einsum("tbgd,ghd->tbgh", masked, w)
    return proj.reshape(steps, batch, -1) + b_ih


def masked_input_projection(x: torch.Tensor, w_ih: torch.Tensor, b_ih: torch.Tensor,
                            masks: LayerMasks) -> torch.Tensor:
    """The input half of every gate for all time steps, with the layer's x-mask, whatever its shape."""
    if masks.x is not None and masks.x.dim() == 3 and not masks.per_gate:
        return F.linear(x * masks.x.to(x.dtype), w_ih, b_ih)  # fresh-per-step mask [T, B, D]
    return input_projection(x, w_ih, b_ih, masks.x, masks.per_gate)


def recurrent_projection(h: torch.Tensor, w_hh: torch.Tensor, b_hh: torch.Tensor, mask: torch.Tensor | None,
                         per_gate: bool) -> torch.Tensor:
    """W_h (h_{t-1} * z_h) + b: [B, 4H]."""
    if mask is None:
        return F.linear(h, w_hh, b_hh)
    if not per_gate:
        return F.linear(h * mask.to(h.dtype), w_hh, b_hh)
    w = w_hh.view(GATES, -1, w_hh.shape[1])  # [G, H, H]
    proj = torch.einsum("bgj,ghj->bgh", h.unsqueeze(1) * mask.to(h.dtype), w)
    return proj.reshape(h.shape[0], -1) + b_hh


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
    x_proj = masked_input_projection(x, w_ih, b_ih, masks)
    h, c = state
    h, c = h.float(), c.float()
    h_per_gate = masks.per_gate and masks.h is not None and masks.h.dim() == 3
    outputs = []
    for t in range(x.shape[0]):
        gates = x_proj[t].float() + recurrent_projection(h.to(x_proj.dtype), w_hh, b_hh, masks.h,
                                                         h_per_gate).float()
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
