"""Gal, Hron & Kendall (2017), Concrete dropout: the learned dropout probabilities of
:class:`~vdrnn.dropout.schemes.concrete.Concrete`.

:class:`ConcreteRates` holds one p per site and layer and draws the relaxed masks from them; its :meth:`kl` is the
regularizer that makes the p's learnable (without it the likelihood alone would drive every p to 0).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vdrnn.dropout.learned import LearnedNoise
from vdrnn.dropout.scheme import Site

EPS = 1e-7  # keeps the logs finite at u or p near 0 and 1, as the reference code


def negative_entropy(logit: torch.Tensor) -> torch.Tensor:
    """p log p + (1-p) log(1-p) of p = sigmoid(logit): minus the entropy of one Bernoulli(p) draw, in nats (<= 0).
    Computed from the logit, so that a p the likelihood drives to 0 in float32 leaves the term and its gradient
    finite (0 log 0 = 0), where log(p) of the rounded p would not."""
    p = torch.sigmoid(logit)
    return p * F.logsigmoid(logit) + (1 - p) * F.logsigmoid(-logit)


class ConcreteRates(LearnedNoise):
    """Concrete dropout's learned p's and relaxed masks (Gal, Hron & Kendall 2017, and their reference code).

    Parameters: the logit of p under the keys ``input{l}``, ``recurrent{l}`` (layer l's input x_t and h_{t-1}) and
    ``output``, one scalar each (one p per site and layer), starting at the site's probability; a site at p = 0 has
    no mask and learns nothing.

    Masks (relaxed Bernoulli, temperature t, u ~ U(0, 1) per entry):

        drop = sigmoid((log p - log(1-p) + log u - log(1-u)) / t),   z = (1 - drop) / (1-p)

    of shape [rows, D]: per sequence (or per batch with ``per="batch"``) and fixed over the sequence, as Gal's
    Bernoulli masks, which they approach as t -> 0; z is a differentiable function of p, so the likelihood's
    gradient reaches it.

    Regularizer (:meth:`kl`), per site with dropped vector of size K multiplying the weight W (W_ih, W_hh, the
    next layer's):

        l^2 ||W||^2 / (1-p)  +  K (p log p + (1-p) log(1-p))

    to be divided by N, the training examples the loss averages over (PTB tokens): the paper's weight regularizer
    l^2 / N (l the prior length-scale) and dropout regularizer, for a cross-entropy loss 1 / N (the reference
    code's 2 / (tau N) is for a Gaussian likelihood of precision tau, and its docstring drops the 2 for
    cross-entropy). The second term, a negative entropy, pulls p towards 0.5 against the likelihood, which pulls it
    down; the first grows with 1/(1-p).
    """

    def __init__(self, sites: list[Site], temperature: float, lengthscale: float):
        super().__init__()
        self.temperature = temperature
        self.lengthscale = lengthscale
        self.p_logit = nn.ParameterDict()
        self.size: dict[str, int] = {}  # K: the dropped vector's length
        for site in sites:  # one p per site, shared by the gates (tied masks only)
            if site.p > 0:
                self.p_logit[site.key] = nn.Parameter(torch.tensor(math.log(site.p / (1.0 - site.p))))
                self.size[site.key] = site.size

    def p(self, key: str) -> torch.Tensor:
        return torch.sigmoid(self.p_logit[key])

    def mask(self, key, rows, like):
        """[rows, K] relaxed keep-mask of ``key``, scaled by 1/(1-p), on ``like``'s device; None if not dropped."""
        if key not in self.p_logit:
            return None
        p = self.p(key)
        u = torch.rand((rows, self.size[key]), device=like.device, dtype=p.dtype)  # fp32 in training, as p
        logit = (torch.log(p + EPS) - torch.log(1 - p + EPS) + torch.log(u + EPS) - torch.log(1 - u + EPS))
        drop = torch.sigmoid(logit / self.temperature)
        return (1 - drop) / (1 - p)

    def needs(self, key):
        return key in self.p_logit

    def kl(self, weights):
        terms = []
        for key in self.p_logit:
            p = self.p(key)
            terms.append(self.lengthscale**2 * weights[key].pow(2).sum() / (1 - p)
                         + self.size[key] * negative_entropy(self.p_logit[key]))
        return sum(terms[1:], terms[0]) if terms else torch.zeros(())

    @torch.no_grad()
    def summary(self, weights):
        """Each site's learned p, and the regularizer."""
        return {**{f"p_{key}": self.p(key).item() for key in self.p_logit}, "regularizer": float(self.kl(weights))}
