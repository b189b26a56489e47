"""Initialising a recurrent model's weights (``model.init``), as the papers' code does; shared by the tasks' models."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from vdrnn.config import ModelConfig


def initialize(model: nn.Module, config: ModelConfig, embedding: nn.Embedding, head: nn.Linear) -> None:
    """``model.init``:

    - uniform: every parameter, biases included, U(+-init_range) (Zaremba's and Gal's language models);
    - awd (Merity et al.): only the embedding U(+-init_range) and a zero output bias; the recurrent
      layers keep PyTorch's U(+-1/sqrt(H));
    - keras: the defaults of the Keras 0.3 layers in Gal's sentiment scripts. Embedding U(+-init_range)
      (Keras' ``uniform``, 0.05); each gate's input matrix Glorot-uniform, U(+-sqrt(6 / (D + H)));
      each gate's recurrent matrix orthogonal times 1.1 (Keras' ``orthogonal`` scale); biases zero but
      the LSTM's forget gate, 1 (``forget_bias_init='one'``); the head Glorot-uniform with zero bias.
      Keras' gates use a hard sigmoid; ours keep the logistic one.
    """
    if config.init == "uniform":
        for p in model.parameters():
            nn.init.uniform_(p, -config.init_range, config.init_range)
        return
    nn.init.uniform_(embedding.weight, -config.init_range, config.init_range)
    nn.init.zeros_(head.bias)
    if config.init == "keras":
        nn.init.xavier_uniform_(head.weight)
        for rnn in model.modules():
            if isinstance(rnn, nn.RNNBase):
                keras_init_(rnn)


KERAS_ORTHOGONAL_GAIN = 1.1


def keras_init_(rnn: nn.RNNBase) -> None:
    """A one-layer ``nn.LSTM``/``nn.GRU``/``nn.RNN`` as Keras 0.3 initialises its layer (see :func:`initialize`).

    Keras keeps one [D, H] and one [H, H] matrix per gate; PyTorch stacks the gates along dim 0, so each
    gate's block is initialised on its own. PyTorch's two biases add up: the forget gate's 1 goes in
    ``bias_ih`` and ``bias_hh`` stays zero.
    """
    gates = rnn.weight_ih_l0.shape[0] // rnn.hidden_size
    with torch.no_grad():
        for w_ih, w_hh in zip(rnn.weight_ih_l0.chunk(gates), rnn.weight_hh_l0.chunk(gates), strict=True):
            nn.init.xavier_uniform_(w_ih)
            nn.init.orthogonal_(w_hh, gain=KERAS_ORTHOGONAL_GAIN)
        nn.init.zeros_(rnn.bias_ih_l0)
        nn.init.zeros_(rnn.bias_hh_l0)
        if isinstance(rnn, nn.LSTM):  # gate order i, f, g, o
            rnn.bias_ih_l0[rnn.hidden_size:2 * rnn.hidden_size] = 1.0


def site_weights(layers: nn.ModuleList, head: nn.Linear) -> dict[str, torch.Tensor]:
    """The weight each dropout site's mask multiplies: W_ih (``input{l}``) and W_hh (``recurrent{l}``) of every layer,
    and the head's (``output``); what a learned-rate regularizer reads (Concrete dropout's l^2 ||W||^2 / (1-p))."""
    weights = {"output": head.weight}
    for index, layer in enumerate(layers):
        w_ih, w_hh = layer.parameters_tuple()[:2]
        weights[f"input{index}"], weights[f"recurrent{index}"] = w_ih, w_hh
    return weights


def layer_shapes(layers: nn.ModuleList) -> list[tuple[int, int, int]]:
    """(input size, hidden size, gates) of each recurrent layer: what a dropout scheme sizes its masks by."""
    return [(layer.input_size, layer.hidden_size, layer.gates) for layer in layers]
