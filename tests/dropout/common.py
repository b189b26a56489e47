"""What the dropout tests share: sizes, an input, a word-type mask, small models built from vdrnn.nn."""

from __future__ import annotations

import torch
from torch import nn

import vdrnn.nn as vnn

T, B, D, H, V = 7, 6, 5, 9, 13


def x_input():
    return torch.randn(T, B, D)


def word_mask(tokens: torch.Tensor, vocab_size: int, **embedding) -> torch.Tensor:
    """The [T, B, 1] word-type mask of ``tokens`` that a training ``vnn.Embedding(**embedding)`` draws: its output
    for an embedding of ones."""
    layer = vnn.Embedding(vocab_size, 1, **embedding).train()
    nn.init.ones_(layer.weight)
    with torch.no_grad():
        return layer(tokens)


class SmallLM(nn.Module):
    """Embedding -> 2-layer vdrnn.nn.LSTM -> decoder, as a user builds one."""

    def __init__(self, scheme=None, embedding: float = 0.0, impl: str = "reference", **lstm):
        super().__init__()
        self.embedding = vnn.Embedding(V, D, dropout=embedding)
        self.rnn = vnn.LSTM(D, H, num_layers=2, dropout=scheme, impl=impl, **lstm)
        self.decoder = nn.Linear(H, V)

    def forward(self, tokens, state=None):
        y, state = self.rnn(self.embedding(tokens), state)
        return self.decoder(y), state


def lm(scheme=None, embedding: float = 0.0, **lstm) -> SmallLM:
    """A 2-layer language model of ``scheme``'s masks (reference loop), seeded."""
    torch.manual_seed(0)
    return SmallLM(scheme, embedding, **lstm)
