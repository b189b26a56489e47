"""The sentiment model: embedding -> recurrent layers -> dropout -> linear, read at the last real step; built from
:mod:`vdrnn.nn`.

    tokens -> embedding [word-type mask] -> layer 1 (x-, h- or c-masks) -> ... -> layer L
           -> output at step length-1 -> [output mask] -> linear -> logits (IMDB) or rating (scale)

Each ``forward`` (one minibatch) draws its masks as the scheme says in training (:mod:`vdrnn.dropout`):
fixed-over-time masks once per call, per sequence or shared by the batch; Zaremba's afresh at every step. Padding
cannot change a review's output: the recurrence is causal, so the padded steps after a review's end never reach its
step ``length - 1``, which is the step the head reads.
"""

from __future__ import annotations

import torch
from torch import nn

import vdrnn.nn as vnn
from vdrnn.dropout.config import DropoutConfig
from vdrnn.tasks.model import RecurrentModel, initialize
from vdrnn.tasks.sentiment.config import SentimentModelConfig

RECURRENT = {"lstm": vnn.LSTM, "gru": vnn.GRU, "rnn": vnn.RNN}  # cell.type -> the vdrnn.nn module


class SentimentModel(RecurrentModel):
    def __init__(self, vocab_size: int, num_outputs: int, config: SentimentModelConfig, dropout: DropoutConfig):
        super().__init__()
        self.vocab_size = vocab_size
        self.config = config
        embedding = config.embedding_size or config.hidden_size
        self.embedding = vnn.Embedding(vocab_size, embedding, **dropout.word_dropout())
        self.rnn = RECURRENT[config.cell](embedding, config.hidden_size, config.num_layers,
                                          dropout=dropout.scheme_object(), impl=config.impl)
        self.head = nn.Linear(config.hidden_size, num_outputs)
        initialize(self, config, self.embedding, self.rnn, self.head)

    @property
    def output_layer(self) -> nn.Linear:
        return self.head

    def rebuilt(self, dropout: DropoutConfig) -> SentimentModel:
        return SentimentModel(self.vocab_size, self.head.out_features, self.config, dropout)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """tokens [T, B] (padded after each review's end), lengths [B] -> outputs [B, num_outputs]."""
        x, _ = self.rnn(self.embedding(tokens), drop_output=False)
        # The output at each review's last real step: [1, B, H], dropped there alone (a mask on every step would
        # draw T times the masks for the one the head reads).
        last = x.gather(0, (lengths - 1).to(x.device).view(1, -1, 1).expand(1, -1, x.shape[-1]))
        return self.head(self.rnn.drop_output(last).squeeze(0))
