"""What the dropout tests share: sizes, a scheme by name, an input, a word-type mask, small language models."""

from __future__ import annotations

import torch

from vdrnn.config import ModelConfig
from vdrnn.dropout import DropoutConfig, make_dropout, words_of
from vdrnn.tasks.lm.model import LanguageModel

T, B, D, H, V = 7, 6, 5, 9, 13


def scheme(name, **p):
    return make_dropout(DropoutConfig(scheme=name, **p))


def x_input():
    return torch.randn(T, B, D)


def word_mask(dropout, tokens, vocab_size):
    """The [T, B, 1] word-type mask of ``tokens`` from a fresh table of ``dropout``."""
    return words_of(dropout.word_type_table(tokens.shape[1], vocab_size, tokens), tokens)


def lm(name="variational", **p):
    """A 2-layer language model of ``name``'s masks (reference loop)."""
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=2, hidden_size=H, impl="reference")
    return LanguageModel(V, cfg, scheme(name, **p))


def learned_model(per_gate=False, **p):
    """A 2-layer language model learning its Gaussian masks' variance."""
    cfg = DropoutConfig(scheme="gaussian", learn_alpha=True, per_gate=per_gate, **p)
    config = ModelConfig(num_layers=2, hidden_size=H, embedding_size=D, gates="untied" if per_gate else "tied")
    return LanguageModel(V, config, make_dropout(cfg))
