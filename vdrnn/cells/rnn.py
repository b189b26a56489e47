"""The tanh RNN layer, as ``torch.nn.RNN``, with Gal's masks:

    h_t = tanh(W_ih (x_t * z_x) + b_ih + W_hh (h_{t-1} * z_h) + b_hh)

One gate, so tied and untied masks would be the same noise (``cell.gates=untied`` is refused for it); per sample,
fixed over time. No fused kernel: a masked recurrence runs the reference loop.
"""

from __future__ import annotations

import torch
from torch import nn

from vdrnn.cells import GATES
from vdrnn.cells.common import SingleStateLayer, masked_linear
from vdrnn.dropout import LayerMasks


class RNNLayer(SingleStateLayer):
    """One tanh-RNN layer (the parameters of a one-layer ``torch.nn.RNN``); masks as in :func:`rnn_reference`."""

    cell = "rnn"
    gates = GATES["rnn"]

    def __init__(self, input_size: int, hidden_size: int, impl: str = "auto"):
        super().__init__(nn.RNN(input_size, hidden_size, num_layers=1, nonlinearity="tanh"), impl)

    def masked_loop(self, x: torch.Tensor):
        return rnn_reference


def rnn_reference(x: torch.Tensor, h0: torch.Tensor, params: tuple[torch.Tensor, ...],
                  masks: LayerMasks) -> tuple[torch.Tensor, torch.Tensor]:
    """The variational tanh RNN, step by step: x [T, B, D], h0 [B, H] -> (outputs [T, B, H], h_T)."""
    if masks.g is not None or masks.zone_h is not None:  # refused rather than silently ignored
        raise ValueError("the tanh RNN layer has no candidate update and no zoneout: Semeniuta's and Krueger's "
                         "schemes need an LSTM or a GRU")
    w_ih, w_hh, b_ih, b_hh = params
    x_proj = masked_linear(x, w_ih, b_ih, masks.x, masks.per_gate)
    h = h0.float()
    outputs = []
    for t in range(x.shape[0]):
        h = torch.tanh(x_proj[t].float() + masked_linear(h.to(x_proj.dtype), w_hh, b_hh, masks.h,
                                                         masks.per_gate).float())
        outputs.append(h)
    return torch.stack(outputs).to(x_proj.dtype), h
