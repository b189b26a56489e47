"""Gal, Hron & Kendall (2017), Concrete dropout: the learned dropout probabilities of ``dropout=concrete``.

:class:`ConcreteRates` holds one p per site and layer and draws the relaxed masks from them; its :meth:`kl` is the
regularizer that makes the p's learnable (without it the likelihood alone would drive every p to 0).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vdrnn.dropout.config import DropoutConfig

EPS = 1e-7  # keeps the logs finite at u or p near 0 and 1, as the reference code


def negative_entropy(logit: torch.Tensor) -> torch.Tensor:
    """p log p + (1-p) log(1-p) of p = sigmoid(logit): minus the entropy of one Bernoulli(p) draw, in nats (<= 0).
    Computed from the logit, so that a p the likelihood drives to 0 in float32 leaves the term and its gradient
    finite (0 log 0 = 0), where log(p) of the rounded p would not."""
    p = torch.sigmoid(logit)
    return p * F.logsigmoid(logit) + (1 - p) * F.logsigmoid(-logit)


class ConcreteRates(nn.Module):
    """Concrete dropout's learned p's and relaxed masks (Gal, Hron & Kendall 2017, and their reference code).

    Parameters: the logit of p under the keys ``input{l}``, ``recurrent{l}`` (layer l's input x_t and h_{t-1}) and
    ``output``, one scalar each (one p per site and layer), starting at the site's ``dropout.*`` probability; a
    site at p = 0 has no mask and learns nothing.

    Masks (relaxed Bernoulli, temperature t = ``dropout.temperature``, u ~ U(0, 1) per entry):

        drop = sigmoid((log p - log(1-p) + log u - log(1-u)) / t),   z = (1 - drop) / (1-p)

    of shape [rows, D]: per sample (or per batch with ``locked_mask=batch``) and fixed over the sequence, as Gal's
    Bernoulli masks, which they approach as t -> 0; z is a differentiable function of p, so the likelihood's
    gradient reaches it.

    Regularizer (:meth:`kl`), per site with dropped vector of size K multiplying the weight W (W_ih, W_hh, the
    decoder):

        l^2 ||W||^2 / (1-p)  +  K (p log p + (1-p) log(1-p))

    to be divided by N, the training examples the loss averages over (PTB tokens): the paper's weight regularizer
    l^2 / N (l = ``dropout.lengthscale``) and dropout regularizer, for a cross-entropy loss 1 / N (the reference
    code's 2 / (tau N) is for a Gaussian likelihood of precision tau, and its docstring drops the 2 for
    cross-entropy). The second term, a negative entropy, pulls p towards 0.5 against the likelihood, which pulls it
    down; the first grows with 1/(1-p).
    """

    def __init__(self, config: DropoutConfig, layers: list[tuple[int, int, int]], weights: dict[str, torch.Tensor]):
        super().__init__()
        self.temperature = config.temperature
        self.lengthscale = config.lengthscale
        self.p_logit = nn.ParameterDict()
        self.size: dict[str, int] = {}  # K: the dropped vector's length
        for index, (inputs, hidden, _gates) in enumerate(layers):
            self._add(f"input{index}", config.input_p(index), inputs)
            self._add(f"recurrent{index}", config.recurrent, hidden)
        self._add("output", config.output, layers[-1][1])
        # The weights each site's mask multiplies, read by the regularizer. A plain dict, so that they stay the model's
        # parameters (weight decay and checkpoints see them there), not this module's.
        self.weights = {key: weights[key] for key in self.p_logit}

    def _add(self, key: str, p: float, size: int) -> None:
        if p > 0:
            self.p_logit[key] = nn.Parameter(torch.tensor(math.log(p / (1.0 - p))))
            self.size[key] = size

    def p(self, key: str) -> torch.Tensor:
        return torch.sigmoid(self.p_logit[key])

    def mask(self, key: str, rows: int, like: torch.Tensor) -> torch.Tensor | None:
        """[rows, K] relaxed keep-mask of ``key``, scaled by 1/(1-p), on ``like``'s device; None if not dropped."""
        if key not in self.p_logit:
            return None
        p = self.p(key)
        u = torch.rand((rows, self.size[key]), device=like.device, dtype=torch.float32)
        logit = (torch.log(p + EPS) - torch.log(1 - p + EPS) + torch.log(u + EPS) - torch.log(1 - u + EPS))
        drop = torch.sigmoid(logit / self.temperature)
        return (1 - drop) / (1 - p)

    def kl(self) -> torch.Tensor:
        """The regularizer summed over the sites (before the division by N)."""
        terms = []
        for key in self.p_logit:
            p = self.p(key)
            weight = self.weights[key]
            terms.append(self.lengthscale**2 * weight.pow(2).sum() / (1 - p)
                         + self.size[key] * negative_entropy(self.p_logit[key]))
        return sum(terms[1:], terms[0]) if terms else torch.zeros(())

    def clamp_(self) -> None:
        """Nothing to project: p = sigmoid(logit) stays in (0, 1)."""

    @torch.no_grad()
    def summary(self) -> dict[str, float]:
        """Each site's learned p, and the regularizer."""
        return {**{f"p_{key}": self.p(key).item() for key in self.p_logit}, "regularizer": float(self.kl())}
