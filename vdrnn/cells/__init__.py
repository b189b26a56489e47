"""Recurrent cells that run any dropout scheme's masks: one module per cell, each with its layer and reference loop.

A layer holds the stock one-layer ``torch.nn`` module of its cell (so an unmasked recurrence runs on the stock kernel,
cuDNN on CUDA, and checkpoints load into the stock module) and runs a masked recurrence on the very same weights, by
``model.impl``:

- ``reference``: the cell's step loop (``lstm_reference``, ``gru_reference``, ``rnn_reference``), slow and
  obviously correct: it defines what every faster path must compute;
- ``fast``: the fused Triton kernels of :mod:`vdrnn.kernels` (the LSTM and the GRU);
- ``auto``: ``fast`` on CUDA, the reference on the CPU.

Tied vs untied gates (Gal eq. 7 vs eq. 5) changes the noise, not the parameters: untied gates get a separate mask per
gate, so one [x; h] product per step becomes G, one per gate.

This module names the cells and their gates without importing torch (the config checks read it); ``make_layer``
imports the layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

# cell=... -> the products its step makes (its gates): the size of a per-gate mask's gate axis.
GATES = {"lstm": 4, "gru": 3, "rnn": 1}
CELLS = tuple(GATES)
IMPLS = ("auto", "fast", "reference")  # model.impl


def make_layer(cell: str, input_size: int, hidden_size: int, impl: str = "auto") -> nn.Module:
    """One recurrent layer of ``cell``: x [T, B, D] and its state -> outputs [T, B, H] and the new state."""
    from vdrnn.cells.gru import GRULayer
    from vdrnn.cells.lstm import LSTMLayer
    from vdrnn.cells.rnn import RNNLayer

    layers = {"lstm": LSTMLayer, "gru": GRULayer, "rnn": RNNLayer}
    return layers[cell](input_size, hidden_size, impl)
