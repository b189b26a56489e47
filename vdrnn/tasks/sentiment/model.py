"""The sentiment model: embedding -> recurrent layers -> dropout -> linear, read at the last real step.

    tokens -> embedding -> [word-type mask] -> layer 1 (x-, h- or c-masks) -> ... -> layer L
           -> output at step length-1 -> [output mask] -> linear -> logits (IMDB) or rating (scale)

Each ``forward`` (one minibatch) draws its masks as the scheme says (:mod:`vdrnn.dropout`): fixed-over-time
masks once per call, per sample or shared by the batch; Zaremba's afresh at every step. Padding cannot change a
review's output: the recurrence is causal, so the padded steps after a review's end never reach its step
``length - 1``, which is the step the head reads.
"""

from __future__ import annotations

import torch
from torch import nn

from vdrnn.cells import make_layer
from vdrnn.cells.init import initialize, layer_shapes, site_weights
from vdrnn.dropout import DropoutScheme
from vdrnn.tasks.sentiment.config import SentimentModelConfig


class SentimentModel(nn.Module):
    def __init__(self, vocab_size: int, num_outputs: int, config: SentimentModelConfig, dropout: DropoutScheme):
        super().__init__()
        self.vocab_size = vocab_size
        self.config = config
        self.dropout = dropout
        embedding = config.embedding_size or config.hidden_size
        self.embedding = nn.Embedding(vocab_size, embedding)
        sizes = [embedding] + [config.hidden_size] * config.num_layers
        self.layers = nn.ModuleList(make_layer(config.cell, sizes[i], config.hidden_size, config.impl)
                                    for i in range(config.num_layers))
        self.head = nn.Linear(config.hidden_size, num_outputs)
        initialize(self, config, self.embedding, self.head)
        # After initialize, as in LanguageModel: its uniform init would overwrite log alpha's starting values.
        self.noise_scales = dropout.noise_scales(layer_shapes(self.layers), num_outputs,
                                               site_weights(self.layers, self.head))

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor, stochastic: bool | None = None,
                word_dropout: bool = True) -> torch.Tensor:
        """tokens [T, B] (padded after each review's end), lengths [B] -> outputs [B, num_outputs].

        ``stochastic`` (default: ``self.training``) draws dropout masks; off, every mask is one
        (weight scaling). MC evaluation passes ``stochastic=True`` and its ``word_dropout`` choice.
        """
        stochastic = self.training if stochastic is None else stochastic
        x = self.embedding(tokens)
        if stochastic and word_dropout:
            table = self.dropout.word_type_table(tokens.shape[1], self.vocab_size, tokens)
            x = self.dropout.drop_words(x, tokens, table)
        batch = tokens.shape[1]
        for index, layer in enumerate(self.layers):
            masks = (self.dropout.layer_masks(x, layer.hidden_size, layer.gates, index) if stochastic
                     else self.dropout.expected_masks(x, layer.hidden_size, index))
            x, _ = layer(x, layer.initial_state(batch, x.device), masks)
        # The output at each review's last real step: [1, B, H].
        last = x.gather(0, (lengths - 1).to(x.device).view(1, -1, 1).expand(1, -1, x.shape[-1]))
        if stochastic:
            out_mask = self.dropout.output_mask(last)
            if out_mask is not None:
                last = last * out_mask.to(last.dtype)
        return self.head(last.squeeze(0))
