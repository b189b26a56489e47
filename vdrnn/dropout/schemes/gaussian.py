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

from vdrnn.dropout.masks import LayerMasks, Noise, gaussian_mask, locked_rows
from vdrnn.dropout.registry import register
from vdrnn.dropout.schemes.variational import VariationalDropout


@register
class GaussianDropout(VariationalDropout):
    name = "gaussian"
    learns_noise = True
    table_order = 40
    noise: ClassVar[Noise] = staticmethod(gaussian_mask)
    scales = None  # the learned log alpha (a NoiseScales), set by noise_scales() under dropout.learn_alpha

    def noise_scales(self, layers, outputs, weights):
        if not self.config.learn_alpha:
            return None
        # The masks are drawn from these parameters, so a second model built on this scheme would take over the
        # first one's noise: one scheme per model.
        if self.scales is not None:
            raise RuntimeError("this scheme's learned noise scales belong to another model: call make_dropout again "
                               "for each model")
        from vdrnn.dropout.learned import (
            NoiseScales,  # an nn.Module: torch, which only a model being built needs
        )

        self.scales = NoiseScales(self.config, layers, outputs)
        return self.scales

    def layer_masks(self, x, hidden_size, gates, layer=0):
        if self.scales is None:
            return super().layer_masks(x, hidden_size, gates, layer)
        rows = locked_rows(x, self.config.locked_mask)
        x_mask = self.scales.mask(f"input{layer}", rows, x)
        h_mask = self.scales.mask(f"recurrent{layer}", rows, x)
        per_gate = self.config.per_gate and (x_mask is not None or h_mask is not None)
        return LayerMasks(x=x_mask, h=h_mask, per_gate=per_gate)

    def output_mask(self, y):
        if self.scales is None:
            return super().output_mask(y)
        mask = self.scales.mask("output", locked_rows(y, self.config.locked_mask), y)
        return None if mask is None else mask.unsqueeze(0)
