"""Gal, Hron & Kendall (2017), Concrete dropout: Gal's variational masks with each p learned.

    z = (1 - sigmoid((logit p + log u - log(1-u)) / t)) / (1-p),   u ~ U(0, 1)   (the relaxed Bernoulli)

- tensors: the variational scheme's (:class:`~vdrnn.dropout.schemes.variational.Variational`): each layer's input
  x_t (``input``; ``between`` above layer 1 where set), h_{t-1} (``recurrent``) and the output (``output``), their
  p's learned, **one p per site and layer**, starting at those values; a site at p = 0 has no mask and learns nothing;
- shapes and draws: [B, D] per sequence, **fixed over the sequence**, tied gates ([1, D] with ``per="batch"``);
- scaling: inverted (1/(1-p)), so weight scaling (``module.eval()``) sets every mask to one;
- MC: the relaxed masks at the learned p's, kept across calls inside ``vdrnn.nn.fixed_masks`` as Gal's;
- objective: the loss plus the regularizer of :class:`vdrnn.dropout.concrete.ConcreteRates` over N, the training
  examples the loss averages over (the module's ``regularizer(N)``), whose entropy term lets p rise where the
  likelihood does not pull it down; ``temperature`` t (0.1) and the prior length-scale ``lengthscale`` (1e-4) as the
  reference code.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdrnn.dropout.schemes.variational import Variational, require_something_to_learn


@dataclass(frozen=True, kw_only=True)
class Concrete(Variational):
    temperature: float = 0.1
    lengthscale: float = 1e-4

    def __post_init__(self):
        super().__post_init__()
        if self.gates != "tied":
            raise ValueError("Concrete(gates='untied'): Concrete dropout learns one p per site, shared by the gates; "
                             "use gates='tied'")
        for name in ("temperature", "lengthscale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"Concrete({name}={value!r}): must be a number > 0")
        require_something_to_learn(self)

    @property
    def learns(self):
        return True

    def learned_noise(self, layers, output_size):
        from vdrnn.dropout.concrete import (
            ConcreteRates,  # an nn.Module: torch, which only a model being built needs
        )

        return ConcreteRates(self.noise_sites(layers, output_size), self.temperature, self.lengthscale)

