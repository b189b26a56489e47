"""The tanh (or ReLU) RNN layer, as ``torch.nn.RNN``, with Gal's masks:

    h_t = tanh(W_ih (x_t * z_x) + b_ih + W_hh (h_{t-1} * z_h) + b_hh)

One gate, so tied and untied masks would be the same noise; per sequence, fixed over time. No fused kernel: a masked
recurrence runs the reference loop.
"""

from __future__ import annotations

import torch

from vdrnn.cells.common import Lengths, held, masked_linear, state_dtype, stock, zone
from vdrnn.cells.gru import refuse_lstm_masks
from vdrnn.dropout import LayerMasks

NONLINEARITIES = {"tanh": (torch.tanh, torch.rnn_tanh), "relu": (torch.relu, torch.rnn_relu)}


def rnn_layer(x: torch.Tensor, h0: torch.Tensor, params: tuple[torch.Tensor, ...], masks: LayerMasks,
              nonlinearity: str = "tanh", lengths: Lengths | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One RNN layer: x [T, B, D], h0 [B, H] -> (outputs [T, B, H], h_T)."""
    refuse_lstm_masks(masks, "RNN")
    if masks.g is not None or (masks.zone_h is not None and lengths is None):
        raise ValueError("the RNN has no candidate update and no zoneout: Semeniuta's and Krueger's schemes need an "
                         "LSTM or a GRU")
    if lengths is not None and masks.recurrent:
        masks = held(masks, lengths.hold(x, h0.shape[-1]), cell_state=False)
    if masks.recurrent:
        return rnn_reference(x, h0, params, masks, nonlinearity)
    if masks.x is not None:
        x = x * masks.x.to(x.dtype)
    y, (h,) = stock(NONLINEARITIES[nonlinearity][1], x, (h0,), params, lengths)
    return y, h


def rnn_reference(x: torch.Tensor, h0: torch.Tensor, params: tuple[torch.Tensor, ...], masks: LayerMasks,
                  nonlinearity: str = "tanh") -> tuple[torch.Tensor, torch.Tensor]:
    """The variational RNN, step by step: x [T, B, D], h0 [B, H] -> (outputs [T, B, H], h_T); ``masks.zone_h`` only
    where it holds each sequence's state past its end."""
    activation = NONLINEARITIES[nonlinearity][0]
    w_ih, w_hh, b_ih, b_hh = params
    x_proj = masked_linear(x, w_ih, b_ih, masks.x, masks.per_gate)
    acc = state_dtype(x_proj)
    h = h0.to(acc)
    outputs = []
    for t in range(x.shape[0]):
        h_new = activation(x_proj[t].to(acc) + masked_linear(h.to(x_proj.dtype), w_hh, b_hh, masks.h,
                                                              masks.per_gate).to(acc))
        h = h_new if masks.zone_h is None else zone(masks.zone_h[t], h, h_new)
        outputs.append(h)
    return torch.stack(outputs).to(x_proj.dtype), h
