"""Gal, Hron & Kendall (2017), Concrete dropout: Gal's variational masks with each p learned.

    z = (1 - sigmoid((logit p + log u - log(1-u)) / t)) / (1-p),   u ~ U(0, 1)   (the relaxed Bernoulli)

- tensors: the variational scheme's (:mod:`~vdrnn.dropout.schemes.variational`): each layer's input x_t
  (``dropout.input``; ``dropout.hidden`` above layer 1 where set), h_{t-1} (``dropout.recurrent``) and the output
  (``dropout.output``), their p's learned, **one p per site and layer**, starting at those values; word types
  (``dropout.embedding``) keep a fixed p and Bernoulli draws (a word-type mask is no input of a weight matrix);
- shapes and draws: [B, D] per sample, **fixed over the sequence**, tied gates ([1, D] with ``locked_mask=batch``);
- scaling: inverted (1/(1-p)), so weight scaling (``eval=scale``) sets every mask to one;
- MC (``eval=mc``): the relaxed masks at the learned p's, kept for the test stream as Gal's (``mc_masks=stream``);
- objective: the loss plus the regularizer of :class:`vdrnn.dropout.concrete.ConcreteRates` over N, the training
  tokens (times ``dropout.kl_weight``), whose entropy term lets p rise where the likelihood does not pull it down;
  temperature ``dropout.temperature`` (0.1), prior length-scale ``dropout.lengthscale`` (1e-4), as the reference
  code.

The learned p's are logged per site to TensorBoard (``noise/p_input0``, ...) and shown by the report.
"""

from __future__ import annotations

from vdrnn.dropout.registry import register
from vdrnn.dropout.schemes.variational import VariationalDropout


@register
class ConcreteDropout(VariationalDropout):
    name = "concrete"
    per_gate_masks = False
    learns_rates = True
    table_order = 45

    def noise_scales(self, layers, outputs, weights):
        from vdrnn.dropout.concrete import (
            ConcreteRates,  # an nn.Module: torch, which only a model being built needs
        )

        return self.learn(ConcreteRates(self.config, layers, weights))
