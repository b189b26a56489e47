"""Kingma, Salimans & Welling (2015): variational Gaussian dropout, on Gal's sites and with Gal's masks.

    xi ~ N(1, alpha),   alpha = p / (1 - p)

- tensors, shapes and draws: :mod:`~vdrnn.dropout.schemes.variational`'s (word types, layer inputs, h_{t-1}, the
  output; per sample, fixed over the minibatch; per gate with ``cell.gates=untied``; ``locked_mask=batch`` shares
  them); only the entries differ: N(1, alpha) instead of Bernoulli(1-p)/(1-p), the same mean and variance.
  ``dropout.embedding_noise=bernoulli`` keeps Gal's Bernoulli word types (whole words dropped);
- evaluation: weight scaling sets xi = 1 = E[xi]; MC draws xi per sample as in training.

Why this is Kingma's variational dropout: multiplying the inputs a of a linear map (a * xi) W by xi is sampling each
row w_i of W as xi_i * w_i, a rank-one Gaussian posterior q(W) around the W that training learns ("variational
dropout A"). Tying the draws over time, as Gal does, makes the noise one sample of the weights per sequence. Under
Kingma's log-uniform prior -KL(q || p) = const + 0.5 log alpha + c1 alpha + c2 alpha^2 + c3 alpha^3 depends on alpha
alone, so with alpha fixed by ``dropout.*`` the KL term is a constant and the objective is the likelihood under the
noise. ``dropout.learn_alpha=true`` learns alpha per unit instead (Kingma's adaptive variant, alpha <= 1;
:class:`vdrnn.dropout.learned.NoiseScales`).

Kingma's other form, independent weight noise through the local reparameterization trick ("variational dropout B"),
is not offered: it draws the pre-activations afresh at every product, so in a recurrence the weights would not stay
one sample over the sequence, which is Gal's point.
"""

from __future__ import annotations

from typing import ClassVar

from vdrnn.dropout.masks import Noise, gaussian_mask
from vdrnn.dropout.registry import register
from vdrnn.dropout.schemes.variational import VariationalDropout


@register
class GaussianDropout(VariationalDropout):
    name = "gaussian"
    learns_noise = True
    table_order = 40
    noise: ClassVar[Noise] = staticmethod(gaussian_mask)

    def noise_scales(self, layers, outputs, weights):
        if not self.config.learn_alpha:
            return None
        from vdrnn.dropout.learned import (
            NoiseScales,  # an nn.Module: torch, which only a model being built needs
        )

        return self.learn(NoiseScales(self.config, layers, outputs))
