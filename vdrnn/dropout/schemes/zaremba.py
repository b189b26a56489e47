"""Zaremba, Sutskever & Vinyals (2014): dropout on the non-recurrent connections only.

    x_t <- x_t * z_t,   z_t ~ Bernoulli(1-p) / (1-p)

- tensors: each layer's input x_t (``input``; ``between`` for layers 2..L where set) and the last layer's output
  (``output``); h_{t-1} and c_t are never dropped;
- shape: [T, B, D], a fresh mask **at every time step and for every sequence**, shared by the gates;
- scaling: inverted (1/(1-p) in training), so evaluation with the masks at one is weight scaling;
- MC: fresh masks every step, as in training (nothing fixed to keep across calls).

The recurrence stays the plain cell, so cuDNN runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdrnn.dropout.masks import LayerMasks, bernoulli_mask
from vdrnn.dropout.scheme import Scheme, input_p


@dataclass(frozen=True, kw_only=True)
class Zaremba(Scheme):
    input: float = 0.0
    output: float = 0.0
    between: float | None = None

    probabilities = ("input", "output", "between")
    fixed_over_time = False

    def layer_masks(self, x, hidden_size, gates, layer=0, noise=None):
        p = input_p(self, layer)
        return LayerMasks(x=bernoulli_mask(tuple(x.shape), p, x) if p > 0 else None)

    def output_mask(self, y, noise=None):
        return bernoulli_mask(tuple(y.shape), self.output, y) if self.output > 0 else None
