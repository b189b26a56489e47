"""The word-level language model: embedding -> stacked LSTM layers -> linear decoder.

Dropout sites (see :mod:`vdrnn.dropout` for which scheme uses which):

    tokens -> embedding -> [word-type mask] -> layer 1 (x-mask, h-mask, c-mask) -> ... -> layer L
           -> [output mask] -> decoder -> logits

Each call of ``forward`` (one truncated-BPTT minibatch) draws its masks as the scheme says: fixed-over-time masks once
per call, Zaremba's afresh at every step; inside :meth:`LanguageModel.frozen_masks` the fixed-over-time ones once for
the whole stream. The caller carries the hidden state from one call to the next.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from vdrnn.cells.init import initialize, layer_shapes, site_weights
from vdrnn.cells.lstm import LSTMLayer
from vdrnn.config import ModelConfig
from vdrnn.dropout import DropoutScheme
from vdrnn.kernels import gemm

State = list[tuple[torch.Tensor, torch.Tensor]]


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
        # Learned dropout noise (dropout.learn_alpha's variances, Concrete dropout's rates), made after initialize,
        # whose uniform init would overwrite their starting values; None for every other scheme.
        self.noise_scales = dropout.noise_scales(layer_shapes(self.layers), vocab_size,
                                               site_weights(self.layers, self.decoder))
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
        if self._frozen is None or not self.dropout.fixed_over_time:
            return draw(*args)
        if key not in self._frozen:
            self._frozen[key] = draw(*args)
        return self._frozen[key]

    def initial_state(self, batch_size: int, device: torch.device | str) -> State:
        return [layer.initial_state(batch_size, device) for layer in self.layers]

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
        off every mask is its mean (weight scaling; zoneout's expectation). MC evaluation calls this with ``stochastic=True``
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
            if stochastic:
                masks = self._masks(index, self.dropout.layer_masks, x, layer.hidden_size, layer.gates, index)
            else:  # weight scaling: no noise, but zoneout's expectation still mixes in the previous state
                masks = self.dropout.expected_masks(x, layer.hidden_size, index)
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
