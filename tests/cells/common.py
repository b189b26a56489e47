"""What the cell and dropout tests share: one layer of a cell as vdrnn.cells runs it, on a torch.nn layer's weights."""

from __future__ import annotations

import torch
from torch import nn

from vdrnn.cells.gru import gru_layer, gru_reference
from vdrnn.cells.lstm import lstm_layer, lstm_reference
from vdrnn.cells.rnn import rnn_layer, rnn_reference
from vdrnn.dropout import GATES, LayerMasks

STOCK = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}
LOOPS = {"lstm": lstm_reference, "gru": gru_reference, "rnn": rnn_reference}


class Layer:
    """One layer of ``cell``: ``layer(x, state, masks)`` runs it as the vdrnn.nn modules do (the stock kernel where no
    mask acts inside the recurrence, else the loop or the kernels by ``impl``); ``module`` is the stock one-layer
    torch.nn module holding the weights."""

    def __init__(self, cell: str, input_size: int, hidden_size: int, impl: str = "reference"):
        self.cell, self.impl, self.gates = cell, impl, GATES[cell]
        self.module = STOCK[cell](input_size, hidden_size)

    def to(self, device) -> Layer:
        self.module.to(device)
        return self

    def params(self) -> tuple[torch.Tensor, ...]:
        m = self.module
        return m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0

    def parameters(self):
        return self.module.parameters()

    def zero_grad(self):
        self.module.zero_grad()

    def __call__(self, x, state, masks: LayerMasks | None = None):
        masks = masks or LayerMasks()
        if self.cell == "lstm":
            # a weight-dropped layer takes the kernels under impl="fast", as vdrnn.nn.LSTM's
            return lstm_layer(x, state, self.params(), masks, self.impl, weight_drop_on_kernels=self.impl == "fast")
        if self.cell == "gru":
            return gru_layer(x, state, self.params(), masks, self.impl)
        return rnn_layer(x, state, self.params(), masks)

    def loop(self, x, state, masks: LayerMasks, params=None):
        """The cell's reference loop, on ``params`` where given."""
        return LOOPS[self.cell](x, state, params or self.params(), masks)
