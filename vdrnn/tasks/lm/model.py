"""The word-level language model: embedding -> stacked LSTM layers -> linear decoder, built from :mod:`vdrnn.nn`.

Dropout sites (the scheme says which it uses, :mod:`vdrnn.dropout`):

    tokens -> embedding [word-type mask] -> layer 1 (x-, h-, c-masks) -> ... -> layer L -> [output mask]
           -> decoder -> logits

Each call of ``forward`` (one truncated-BPTT minibatch) draws its masks as the scheme says in training: fixed-over-time
masks once per call, Zaremba's afresh at every step; inside ``vdrnn.nn.fixed_masks`` the fixed-over-time ones once
for the whole stream. The caller carries the hidden state from one call to the next.
"""

from __future__ import annotations

import torch
from torch import nn

import vdrnn.nn as vnn
from vdrnn.config import ModelConfig
from vdrnn.dropout.config import DropoutConfig
from vdrnn.kernels import gemm
from vdrnn.tasks.model import RecurrentModel, initialize


class LanguageModel(RecurrentModel):
    def __init__(self, vocab_size: int, config: ModelConfig, dropout: DropoutConfig):
        super().__init__()
        self.vocab_size = vocab_size
        self.config = config
        sizes = config.layer_sizes()
        self.embedding = vnn.Embedding(vocab_size, sizes[0], **dropout.word_dropout())
        hidden = sizes[1] if len(set(sizes[1:])) == 1 else sizes[1:]  # AWD's last layer matches the embedding
        self.rnn = vnn.LSTM(sizes[0], hidden, config.num_layers, dropout=dropout.scheme_object(), impl=config.impl)
        self.decoder = nn.Linear(sizes[-1], vocab_size)
        initialize(self, config, self.embedding, self.rnn, self.decoder)
        if config.tie_weights:
            self.decoder.weight = self.embedding.weight  # one parameter, after init

    @property
    def output_layer(self) -> nn.Linear:
        return self.decoder

    def rebuilt(self, dropout: DropoutConfig) -> LanguageModel:
        return LanguageModel(self.vocab_size, self.config, dropout)

    def initial_state(self, batch_size: int, device: torch.device | str):
        return self.rnn.initial_state(batch_size, device)

    def forward(self, tokens: torch.Tensor, state, return_outputs: bool = False):
        """tokens [T, B] -> logits [T, B, V] and the final state. ``return_outputs`` also returns the last layer's
        output before and after output dropout (for AWD's AR and TAR penalties)."""
        raw, state = self.rnn(self.embedding(tokens), state, drop_output=False)
        dropped = self.rnn.drop_output(raw)
        logits = gemm.linear(dropped, self.decoder.weight, self.decoder.bias)  # aligned for cuBLAS where H needs it
        return (logits, state, (raw, dropped)) if return_outputs else (logits, state)

