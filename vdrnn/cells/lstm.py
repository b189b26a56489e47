"""The LSTM layer: gate order i, f, g, o as ``torch.nn.LSTM``; masks as :mod:`vdrnn.dropout` draws them.

    i, f, o = sigma(.), g = tanh(.) of W_ih (x_t * z_x) + b_ih + W_hh (h_{t-1} * z_h) + b_hh
    c_t = f*c_{t-1} + i*g   (* Moon's m),   h_t = o * tanh(c_t)   (* Moon's 1/(1-p))

with Semeniuta's mask on g, and zoneout's d mixing c_{t-1} into c_t and h_{t-1} into h_t where the scheme draws them.

The weights are a ``torch.nn.LSTM`` layer's (``weight_ih_l0`` [4H, D], ``weight_hh_l0`` [4H, H], two biases), so a
layer whose recurrence carries no mask runs the stock kernel and a masked one runs :func:`lstm_reference` (or the
fused kernels, :func:`vdrnn.kernels.lstm.lstm_fused`) on the very same weights.
"""

from __future__ import annotations

import torch

from vdrnn.cells.common import Lengths, at_step, held, masked_linear, runs_kernels, state_dtype, stock, zone
from vdrnn.dropout import GATES, LayerMasks

LSTM_GATES = GATES["lstm"]


def lstm_layer(x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], params: tuple[torch.Tensor, ...],
               masks: LayerMasks, impl: str = "auto", weight_drop_on_kernels: bool = False,
               lengths: Lengths | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One LSTM layer: x [T, B, D], state (h, c) each [B, H] -> (outputs [T, B, H], (h_T, c_T)); ``params``
    (W_ih, W_hh, b_ih, b_hh); ``lengths``: where each sequence of a padded batch ends.

    A weight-dropped layer (AWD) runs the stock kernel on its dropped W_hh, or the fused kernels, which take any W_hh
    too, where ``weight_drop_on_kernels`` (the faster inside a CUDA graph, scripts/bench_awd.py; launched eagerly,
    cuDNN is).
    """
    masked_recurrence = masks.recurrent or (masks.w_hh is not None and weight_drop_on_kernels)
    if lengths is not None and masked_recurrence:
        masks = held(masks, lengths.hold(x, state[0].shape[-1]), cell_state=True)
    if masked_recurrence and runs_kernels(impl, x, "lstm"):
        from vdrnn.kernels.lstm import lstm_fused  # Triton, only where it runs

        return lstm_fused(x, state, params, masks)  # weight drop's mask applied as the kernels pack W_hh
    if masks.w_hh is not None:
        # Weight drop: a new W_hh for this call, computed from the raw parameter, which thus gets the gradients and
        # is never modified in place.
        w_ih, w_hh, *biases = params
        params = (w_ih, masks.w_hh.apply(w_hh), *biases)
    if masked_recurrence:
        return lstm_reference(x, state, params, masks)
    if masks.x is not None:  # fresh-per-step or fixed-over-time input mask, the same for all gates
        x = x * masks.x.to(x.dtype)
    y, (h, c) = stock(torch.lstm, x, state, params, lengths)
    return y, (h, c)


def lstm_reference(x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], params: tuple[torch.Tensor, ...],
                   masks: LayerMasks) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The step-by-step LSTM with every mask of :mod:`vdrnn.dropout` applied where its scheme says.

    Precision: the products may run in bf16/fp16 under autocast, but gate pre-activations and the cell state are kept
    in fp32 (their sums over long sequences are where low precision hurts; float64 for float64 inputs).
    """
    w_ih, w_hh, b_ih, b_hh = params
    x_proj = masked_linear(x, w_ih, b_ih, masks.x, masks.per_gate)
    h, c = state
    acc = state_dtype(x_proj)
    h, c = h.to(acc), c.to(acc)
    outputs = []
    for t in range(x.shape[0]):
        gates = x_proj[t].to(acc) + masked_linear(h.to(x_proj.dtype), w_hh, b_hh, masks.h, masks.per_gate).to(acc)
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
