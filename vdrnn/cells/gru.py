"""The GRU layer: gate order r, z, n as ``torch.nn.GRU``, with Gal's masks.

    r = sigma(W_ir (x_t * z_x^r) + b_ir + W_hr (h_{t-1} * z_h^r) + b_hr)
    z = sigma(W_iz (x_t * z_x^z) + b_iz + W_hz (h_{t-1} * z_h^z) + b_hz)
    n = tanh(W_in (x_t * z_x^n) + b_in + r * (W_hn (h_{t-1} * z_h^n) + b_hn))
    h_t = (1 - z) * n + z * h_{t-1}      (n * Semeniuta's mask; then zoneout's d * h_{t-1} + (1 - d) * h_t)

The weights are a ``torch.nn.GRU`` layer's, and the cell is PyTorch's (cuDNN's): the reset gate scales the recurrent
product, r * (W_hn h + b_hn), where the Keras GRU of Gal's scripts resets the state before the product; only the
masks are Gal's. Tied gates use one z_x [B, D] and one z_h [B, H] for r, z and n, untied (``masks.per_gate``) a mask
per gate, [B, 3, D] and [B, 3, H]; z_x may also be Zaremba's fresh-per-step [T, B, D]. The masks act on the inputs of
the products only: the interpolation z * h_{t-1} uses the undropped state, as in Keras. No cell state, so Moon's
c-mask does not apply.
"""

from __future__ import annotations

import torch

from vdrnn.cells.common import Lengths, at_step, held, masked_linear, runs_kernels, state_dtype, stock, zone
from vdrnn.dropout import GATES, LayerMasks

GRU_GATES = GATES["gru"]


def gru_layer(x: torch.Tensor, h0: torch.Tensor, params: tuple[torch.Tensor, ...], masks: LayerMasks,
              impl: str = "auto", lengths: Lengths | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One GRU layer: x [T, B, D], h0 [B, H] -> (outputs [T, B, H], h_T); masked recurrences run
    :func:`vdrnn.kernels.gru.gru_fused` under ``impl="fast"`` (``auto`` on CUDA), else :func:`gru_reference`."""
    refuse_lstm_masks(masks, "GRU")
    if lengths is not None and masks.recurrent:
        masks = held(masks, lengths.hold(x, h0.shape[-1]), cell_state=False)
    if masks.recurrent:
        if runs_kernels(impl, x, "gru"):
            from vdrnn.kernels.gru import gru_fused  # Triton, only where it runs

            return gru_fused(x, h0, params, masks)
        return gru_reference(x, h0, params, masks)
    if masks.x is not None:  # an input mask shared by all gates: the stock kernel still applies
        x = x * masks.x.to(x.dtype)
    y, (h,) = stock(torch.gru, x, (h0,), params, lengths)
    return y, h


def refuse_lstm_masks(masks: LayerMasks, cell: str) -> None:
    """A single-state cell refuses the masks only an LSTM applies rather than ignoring them."""
    if masks.c is not None or masks.zone_c is not None:
        raise ValueError(f"the {cell} has no cell state: Moon's c-mask and zoneout on c need an LSTM")
    if masks.w_hh is not None:
        raise ValueError(f"the {cell} does not apply a weight-drop mask: AWD's W_hh mask needs an LSTM")


def gru_reference(x: torch.Tensor, h0: torch.Tensor, params: tuple[torch.Tensor, ...],
                  masks: LayerMasks) -> tuple[torch.Tensor, torch.Tensor]:
    """The GRU of the module docstring, step by step: x [T, B, D], h0 [B, H] -> (outputs [T, B, H], h_T). Products may
    run in low precision under autocast; gate sums and h_t stay fp32 (float64 for float64 inputs)."""
    w_ih, w_hh, b_ih, b_hh = params
    x_proj = masked_linear(x, w_ih, b_ih, masks.x, masks.per_gate)
    acc = state_dtype(x_proj)
    h = h0.to(acc)
    outputs = []
    for t in range(x.shape[0]):
        h_proj = masked_linear(h.to(x_proj.dtype), w_hh, b_hh, masks.h, masks.per_gate).to(acc)
        x_r, x_z, x_n = x_proj[t].to(acc).chunk(GRU_GATES, dim=1)
        h_r, h_z, h_n = h_proj.chunk(GRU_GATES, dim=1)
        r = torch.sigmoid(x_r + h_r)
        z = torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * h_n)
        if masks.g is not None:  # Semeniuta: the candidate update dropped
            n = n * at_step(masks.g, t)
        h_new = (1 - z) * n + z * h
        h = h_new if masks.zone_h is None else zone(masks.zone_h[t], h, h_new)
        outputs.append(h)
    return torch.stack(outputs).to(x_proj.dtype), h
