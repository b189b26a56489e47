"""Kingma, Salimans & Welling (2015): variational Gaussian dropout, on Gal's sites and with Gal's masks.

    xi ~ N(1, alpha),   alpha = p / (1 - p)

- tensors, shapes and draws: :class:`~vdrnn.dropout.schemes.variational.Variational`'s (layer inputs, h_{t-1}, the
  output; per sequence, fixed over the call; per gate with ``gates="untied"``; ``per="batch"`` shares them); only the
  entries differ: N(1, alpha) instead of Bernoulli(1-p)/(1-p), the same mean and variance;
- evaluation: weight scaling sets xi = 1 = E[xi]; MC draws xi per sequence as in training.

Why this is Kingma's variational dropout: multiplying the inputs a of a linear map (a * xi) W by xi is sampling each
row w_i of W as xi_i * w_i, a rank-one Gaussian posterior q(W) around the W that training learns ("variational
dropout A"). Tying the draws over time, as Gal does, makes the noise one sample of the weights per sequence. Under
Kingma's log-uniform prior -KL(q || p) = const + 0.5 log alpha + c1 alpha + c2 alpha^2 + c3 alpha^3 depends on alpha
alone, so with alpha fixed the KL term is a constant and the objective is the likelihood under the noise.
``learn=True`` learns alpha per unit instead (Kingma's adaptive variant, alpha <= 1; the parameters and the KL term
of :class:`vdrnn.dropout.learned.NoiseScales`, reached through the module's ``regularizer``).

Kingma's other form, independent weight noise through the local reparameterization trick ("variational dropout B"),
is not offered: it draws the pre-activations afresh at every product, so in a recurrence the weights would not stay
one sample over the sequence, which is Gal's point.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdrnn.dropout.masks import gaussian_mask
from vdrnn.dropout.schemes.variational import Variational, require_something_to_learn


@dataclass(frozen=True, kw_only=True)
class Gaussian(Variational):
    learn: bool = False

    noise = staticmethod(gaussian_mask)

    def __post_init__(self):
        super().__post_init__()
        if self.learn:
            require_something_to_learn(self)

    @property
    def learns(self):
        return self.learn

    def learned_noise(self, layers, output_size):
        if not self.learn:
            return None
        from vdrnn.dropout.learned import (
            NoiseScales,  # an nn.Module: torch, which only a model being built needs
        )

        return NoiseScales(self.noise_sites(layers, output_size))
