"""What the tasks' models share: their learned dropout noise (:class:`RecurrentModel`), and their weights'
initialization (``model.init``) as the papers' code does it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from vdrnn.config import ModelConfig
    from vdrnn.dropout.config import DropoutConfig
    from vdrnn.nn.rnn import RecurrentBase


class RecurrentModel(nn.Module):
    """A task's model: an embedding, ``rnn`` (a vdrnn.nn recurrent module) and the layer its output feeds
    (``output_layer``); the scheme's learned noise, if any, is the recurrent module's."""

    rnn: RecurrentBase

    @property
    def output_layer(self) -> nn.Linear:
        raise NotImplementedError

    def rebuilt(self, dropout: DropoutConfig) -> RecurrentModel:
        """A model of this one's class and sizes with the dropout settings ``dropout``, freshly initialized."""
        raise NotImplementedError

    def with_dropout(self, dropout: DropoutConfig) -> RecurrentModel:
        """This network with other dropout probabilities (``eval.dropout_scale``): built anew from ``dropout`` on this
        one's device, its weights copied from this one. Building draws an initialization; the random generators are
        put back after, so that the MC passes that follow draw the masks they would have drawn."""
        device = next(self.parameters()).device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), device:
            twin = self.rebuilt(dropout)
        twin.load_state_dict(self.state_dict())
        return twin.train(self.training)

    @property
    def noise_scales(self) -> nn.Module | None:
        """The scheme's learned dropout noise (parameters of the recurrent layers, kept from weight decay), or None."""
        return self.rnn.noise

    def regularizer(self, num_examples: int) -> torch.Tensor:
        """The learned dropout noise's regularizer per training example (zero for a scheme that learns none)."""
        return self.rnn.regularizer(num_examples, self.output_layer.weight)

    def noise_summary(self) -> dict[str, float]:
        """Each site's learned dropout noise and the regularizer; empty for a scheme that learns none."""
        return self.rnn.noise_summary(self.output_layer.weight)


def initialize(model: nn.Module, config: ModelConfig, embedding: nn.Embedding, rnn: RecurrentBase,
               head: nn.Linear) -> None:
    """``model.init``:

    - uniform: every weight, biases included, U(+-init_range) (Zaremba's and Gal's language models);
    - awd (Merity et al.): only the embedding U(+-init_range) and a zero output bias; the recurrent
      layers keep PyTorch's U(+-1/sqrt(H));
    - keras: the defaults of the Keras 0.3 layers in Gal's sentiment scripts. Embedding U(+-init_range)
      (Keras' ``uniform``, 0.05); each gate's input matrix Glorot-uniform, U(+-sqrt(6 / (D + H)));
      each gate's recurrent matrix orthogonal times 1.1 (Keras' ``orthogonal`` scale); biases zero but
      the LSTM's forget gate, 1 (``forget_bias_init='one'``); the head Glorot-uniform with zero bias.
      Keras' gates use a hard sigmoid; ours keep the logistic one.

    A scheme's learned noise keeps the starting values its probabilities give it.
    """
    if config.init == "uniform":
        noise = set() if rnn.noise is None else {id(p) for p in rnn.noise.parameters()}
        for p in model.parameters():
            if id(p) not in noise:
                nn.init.uniform_(p, -config.init_range, config.init_range)
        return
    nn.init.uniform_(embedding.weight, -config.init_range, config.init_range)
    nn.init.zeros_(head.bias)
    if config.init == "keras":
        nn.init.xavier_uniform_(head.weight)
        keras_init_(rnn)


KERAS_ORTHOGONAL_GAIN = 1.1


def keras_init_(rnn: RecurrentBase) -> None:
    """Every layer of ``rnn`` as Keras 0.3 initialises its layer (see :func:`initialize`).

    Keras keeps one [D, H] and one [H, H] matrix per gate; PyTorch stacks the gates along dim 0, so each
    gate's block is initialised on its own. PyTorch's two biases add up: the forget gate's 1 goes in
    ``bias_ih`` and ``bias_hh`` stays zero.
    """
    with torch.no_grad():
        for k in range(len(rnn.names)):
            w_ih, w_hh, b_ih, b_hh = rnn.layer_parameters(k)
            gates = w_ih.shape[0] // w_hh.shape[1]
            for gate_ih, gate_hh in zip(w_ih.chunk(gates), w_hh.chunk(gates), strict=True):
                nn.init.xavier_uniform_(gate_ih)
                nn.init.orthogonal_(gate_hh, gain=KERAS_ORTHOGONAL_GAIN)
            nn.init.zeros_(b_ih)
            nn.init.zeros_(b_hh)
            if rnn.cell == "lstm":  # gate order i, f, g, o
                hidden = w_hh.shape[1]
                b_ih[hidden:2 * hidden] = 1.0
