"""The word-level language model: embedding -> stacked LSTM layers -> linear decoder.

Dropout sites (see :mod:`vdrnn.dropout` for which scheme uses which):

    tokens -> embedding -> [word-type mask] -> layer 1 (x-mask, h-mask, c-mask) -> ... -> layer L
           -> [output mask] -> decoder -> logits

Each call of ``forward`` (one truncated-BPTT minibatch) draws its masks as the scheme says
(:mod:`vdrnn.dropout`): fixed-over-time masks once per call, Zaremba's afresh at every step; inside
:meth:`LanguageModel.frozen_masks` the fixed-over-time ones once for the whole stream. The caller carries
the hidden state from one call to the next.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from vdrnn import gemm
from vdrnn.dropout import DropoutScheme
from vdrnn.errors import ConfigError
from vdrnn.recurrent import IMPLS, LSTMLayer

State = list[tuple[torch.Tensor, torch.Tensor]]
CELLS = ("lstm", "gru", "rnn")
INITS = ("uniform", "awd", "keras")


@dataclass(frozen=True)
class ModelConfig:
    num_layers: int = 2
    hidden_size: int = 650
    embedding_size: int | None = None  # None: the hidden size (Zaremba, Gal); AWD uses 400 with 1150 units
    tie_weights: bool = False  # decoder weight = embedding (AWD); the last layer then has embedding_size units
    init: str = "uniform"  # uniform: every parameter U(+-init_range) (Zaremba, Gal) | awd | keras: see initialize
    init_range: float = 0.05
    cell: str = "lstm"
    # tied | untied: the config's choice, as logged. The layers read it as DropoutConfig.per_gate, which
    # config.dropout_from derives from it: the weights are the same, only the masks differ.
    gates: str = "tied"
    impl: str = "auto"  # masked recurrences: auto (fast on CUDA, reference on CPU) | fast | reference

    def __post_init__(self) -> None:
        if self.cell not in CELLS:
            raise ConfigError(f"cell.type={self.cell!r}; choose `cell=lstm`, `cell=gru` or `cell=rnn`")
        if self.gates not in ("tied", "untied"):
            raise ConfigError(f"cell.gates={self.gates!r}; choose `cell.gates=tied` or `cell.gates=untied`")
        if self.impl not in IMPLS:
            raise ConfigError(f"model.impl={self.impl!r}; choose one of {', '.join(IMPLS)}")
        if self.init not in INITS:
            raise ConfigError(f"model.init={self.init!r}; choose one of {', '.join(INITS)}")
        for key in ("num_layers", "hidden_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be at least 1")
        if self.embedding_size is not None and self.embedding_size < 1:
            raise ConfigError(f"model.embedding_size={self.embedding_size} must be at least 1, or null for the "
                              f"hidden size")
        if self.cell == "rnn" and self.gates == "untied":
            raise ConfigError("cell.gates=untied gives each gate its own dropout masks, and cell=rnn has one gate, "
                              "so they would be the tied masks (run on a slower path). Use cell.gates=tied "
                              "(dropout=variational or dropout=gaussian, not their _untied presets)")
        if not self.init_range > 0:
            raise ConfigError(f"model.init_range={self.init_range} must be positive (uniform init in +-range)")

    def layer_sizes(self) -> list[int]:
        """[input of layer 1, output of layer 1, ..., output of layer L]."""
        embedding = self.embedding_size or self.hidden_size
        last = embedding if self.tie_weights else self.hidden_size
        return [embedding] + [self.hidden_size] * (self.num_layers - 1) + [last]


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


def layer_shapes(layers: nn.ModuleList) -> list[tuple[int, int, int]]:
    """(input size, hidden size, gates) of each recurrent layer: what a dropout scheme sizes its masks by."""
    return [(layer.input_size, layer.hidden_size, layer.gates) for layer in layers]


class LanguageModel(nn.Module):
    def __init__(self, vocab_size: int, config: ModelConfig, dropout: DropoutScheme):
        super().__init__()
        self.vocab_size = vocab_size
        self.config = config
        self.dropout = dropout
        sizes = config.layer_sizes()
        self.embedding = nn.Embedding(vocab_size, sizes[0])
        self.layers = nn.ModuleList(LSTMLayer(sizes[i], sizes[i + 1], config.impl) for i in range(config.num_layers))
        self.decoder = nn.Linear(sizes[-1], vocab_size)
        initialize(self, config, self.embedding, self.decoder)
        if config.tie_weights:
            self.decoder.weight = self.embedding.weight  # one parameter, after init
        # Learned dropout variances (dropout.learn_alpha), made after initialize, whose uniform init would
        # overwrite their starting values; None for every other scheme.
        self.noise_scales = dropout.noise_scales(layer_shapes(self.layers), vocab_size)
        self._frozen: dict | None = None  # see frozen_masks

    @contextmanager
    def frozen_masks(self):
        """Within this context the masks fixed over time (every scheme's but Zaremba's fresh-per-step ones)
        are drawn once, at the first stochastic call, and reused by every later call: one mask per sample
        for a whole stream read in many minibatches, as Gal's MC test (``eval.mc_masks=stream``). Word-type
        dropout too, with ``word_dropout=True``: each sample keeps one draw per word type for the stream."""
        self._frozen = {}
        try:
            yield
        finally:
            self._frozen = None

    def _masks(self, key, draw, *args):
        """``draw(*args)``, or inside ``frozen_masks`` the masks kept under ``key``."""
        if self._frozen is None or not self.dropout.locked:
            return draw(*args)
        if key not in self._frozen:
            self._frozen[key] = draw(*args)
        return self._frozen[key]

    def initial_state(self, batch_size: int, device: torch.device | str) -> State:
        # Separate tensors for h and c: graph capture copies into them independently.
        return [(torch.zeros(batch_size, layer.hidden_size, device=device),
                 torch.zeros(batch_size, layer.hidden_size, device=device)) for layer in self.layers]

    def forward(
        self,
        tokens: torch.Tensor,
        state: State,
        stochastic: bool | None = None,
        word_dropout: bool = True,
        return_outputs: bool = False,
    ):
        """tokens [T, B] -> logits [T, B, V] and the final state of every layer.

        ``stochastic`` (default: ``self.training``) draws this minibatch's dropout masks; with it
        off every mask is one (weight scaling). MC evaluation calls this with ``stochastic=True``
        and, as in Gal's code, ``word_dropout=False``. ``return_outputs`` also returns the last
        layer's output before and after output dropout (for AWD's AR and TAR penalties).
        """
        stochastic = self.training if stochastic is None else stochastic
        x = self.embedding(tokens)
        if stochastic and word_dropout:
            table = self._masks("words", self.dropout.word_type_table, tokens.shape[1], self.vocab_size, tokens)
            x = self.dropout.drop_words(x, tokens, table)
        new_state = []
        for index, (layer, layer_state) in enumerate(zip(self.layers, state, strict=True)):
            masks = self._masks(index, self.dropout.layer_masks, x, layer.hidden_size, layer.gates, index) \
                if stochastic else None
            x, layer_state = layer(x, layer_state, masks)
            new_state.append(layer_state)
        raw = x
        if stochastic:
            out_mask = self._masks("output", self.dropout.output_mask, x)
            if out_mask is not None:
                x = x * out_mask.to(x.dtype)
        logits = gemm.linear(x, self.decoder.weight, self.decoder.bias)  # aligned for cuBLAS where H needs it
        return (logits, new_state, (raw, x)) if return_outputs else (logits, new_state)


def detach_state(state: State) -> State:
    """Truncated BPTT: keep the values, cut the graph to the previous minibatch."""
    return [(h.detach(), c.detach()) for h, c in state]
