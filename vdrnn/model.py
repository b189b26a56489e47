"""The word-level language model: embedding -> stacked LSTM layers -> linear decoder.

Dropout sites (see :mod:`vdrnn.dropout` for which scheme uses which):

    tokens -> embedding -> [word-type mask] -> layer 1 (x-mask, h-mask, c-mask) -> ... -> layer L
           -> [output mask] -> decoder -> logits

Masks are drawn once per call of ``forward``, i.e. once per truncated-BPTT minibatch; the caller
carries the hidden state from one call to the next.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from vdrnn.dropout import DropoutScheme
from vdrnn.errors import ConfigError
from vdrnn.recurrent import IMPLS, LSTMLayer

State = list[tuple[torch.Tensor, torch.Tensor]]
CELLS = ("lstm", "gru", "rnn")


@dataclass(frozen=True)
class ModelConfig:
    num_layers: int = 2
    hidden_size: int = 650
    embedding_size: int | None = None  # None: the hidden size (Zaremba, Gal); AWD uses 400 with 1150 units
    tie_weights: bool = False  # decoder weight = embedding (AWD); the last layer then has embedding_size units
    init: str = "uniform"  # uniform: every parameter U(+-init_range) (Zaremba, Gal) | awd: see LanguageModel
    init_range: float = 0.05
    cell: str = "lstm"
    gates: str = "tied"
    impl: str = "auto"  # masked recurrences: auto (fast on CUDA, reference on CPU) | fast | reference

    def __post_init__(self) -> None:
        if self.cell not in CELLS:
            raise ConfigError(f"cell.type={self.cell!r}; choose `cell=lstm`, `cell=gru` or `cell=rnn`")
        if self.gates not in ("tied", "untied"):
            raise ConfigError(f"cell.gates={self.gates!r}; choose `cell.gates=tied` or `cell.gates=untied`")
        if self.impl not in IMPLS:
            raise ConfigError(f"model.impl={self.impl!r}; choose one of {', '.join(IMPLS)}")
        if self.init not in ("uniform", "awd"):
            raise ConfigError(f"model.init={self.init!r}; choose `uniform` or `awd`")
        if self.num_layers < 1 or self.hidden_size < 1 or (self.embedding_size or 1) < 1:
            raise ConfigError("model.num_layers, model.hidden_size and model.embedding_size must be positive")
        if not self.init_range > 0:
            raise ConfigError(f"model.init_range={self.init_range} must be positive (uniform init in +-range)")

    def layer_sizes(self) -> list[int]:
        """[input of layer 1, output of layer 1, ..., output of layer L]."""
        embedding = self.embedding_size or self.hidden_size
        last = embedding if self.tie_weights else self.hidden_size
        return [embedding] + [self.hidden_size] * (self.num_layers - 1) + [last]


def initialize(model: nn.Module, config: ModelConfig, embedding: nn.Embedding, head: nn.Linear) -> None:
    """``model.init``: uniform sets every parameter, biases included, to U(+-init_range) (Zaremba, Gal);
    awd (Merity et al.) only the embedding, zeroes the output layer's bias and leaves the recurrent
    layers at PyTorch's U(+-1/sqrt(H))."""
    if config.init == "uniform":
        for p in model.parameters():
            nn.init.uniform_(p, -config.init_range, config.init_range)
    else:
        nn.init.uniform_(embedding.weight, -config.init_range, config.init_range)
        nn.init.zeros_(head.bias)


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
        self._frozen: dict | None = None  # see frozen_masks

    @contextmanager
    def frozen_masks(self):
        """Within this context the masks fixed over time (every scheme's but Zaremba's fresh-per-step ones)
        are drawn once, at the first stochastic call, and reused by every later call: one mask per sample
        for a whole stream read in many minibatches, as Gal's MC test (``eval.mc_masks=stream``).
        Word-type masks depend on the tokens and are still drawn per call."""
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
            x = self.dropout.drop_words(x, tokens, self.vocab_size)
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
        logits = self.decoder(x)
        return (logits, new_state, (raw, x)) if return_outputs else (logits, new_state)


def detach_state(state: State) -> State:
    """Truncated BPTT: keep the values, cut the graph to the previous minibatch."""
    return [(h.detach(), c.detach()) for h, c in state]
