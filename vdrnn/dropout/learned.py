"""Learned dropout noise: the base of every scheme's learnable noise (:class:`LearnedNoise`), and Kingma, Salimans &
Welling's (2015) adaptive variational dropout, the Gaussian masks' variance learned (:class:`NoiseScales`)."""

from __future__ import annotations

import math

import torch
from torch import nn

from vdrnn.dropout.scheme import Site

# Kingma et al.'s polynomial fit of -KL(N(w, alpha w^2) || log-uniform prior) for one weight, valid for alpha <= 1.
KL_C1, KL_C2, KL_C3 = 1.16145124, -1.50204118, 0.58629921
MAX_LOG_ALPHA = 0.0  # alpha <= 1 (p <= 0.5), Kingma's constraint


class LearnedNoise(nn.Module):
    """What a recurrent module asks of its scheme's learned noise: masks drawn from the learned parameters, and the
    regularizer that makes them learnable. Its sites are keyed ``input{l}`` and ``recurrent{l}`` (layer l's input x_t
    and h_{t-1}) and ``output`` (the last layer's output)."""

    def mask(self, key: str, rows: int, like: torch.Tensor) -> torch.Tensor | None:
        """[rows, ...] of site ``key`` on ``like``'s device, or None if the site has no noise."""
        raise NotImplementedError

    def kl(self, weights: dict[str, torch.Tensor]) -> torch.Tensor:
        """The regularizer summed over the sites, before the division by N; ``weights``: the weight each site's
        mask multiplies (W_ih of layer l under ``input{l}``, its W_hh under ``recurrent{l}``, the next layer's under
        ``output``)."""
        raise NotImplementedError

    def constrain_(self) -> None:
        """Project the parameters back onto their allowed set (before each draw)."""

    def summary(self, weights: dict[str, torch.Tensor]) -> dict[str, float]:
        """Each site's learned noise level, and the regularizer."""
        raise NotImplementedError

    def needs(self, key: str) -> bool:
        """Does the regularizer read the weight under ``key``?"""
        raise NotImplementedError


def kl_per_weight(alpha: torch.Tensor) -> torch.Tensor:
    """KL(q || prior) of one weight with noise variance ``alpha``, less its value at alpha = 1 (so >= 0 on (0, 1]).

    -KL ~= const + 0.5 log alpha + c1 alpha + c2 alpha^2 + c3 alpha^3; the constant is unknown and, being
    constant, irrelevant to training. Shifting it to KL(1) = 0 makes the logged ``kl`` read "nats above the
    noisiest allowed posterior".
    """
    neg_kl = 0.5 * alpha.log() + KL_C1 * alpha + KL_C2 * alpha**2 + KL_C3 * alpha**3
    return (KL_C1 + KL_C2 + KL_C3) - neg_kl


class NoiseScales(LearnedNoise):
    """Kingma, Salimans & Welling (2015), adaptive variational dropout: the Gaussian masks' variance, learned.

    Parameters: log alpha, one per unit of each masked tensor, under the keys ``input{l}`` and ``recurrent{l}``
    (layer l's input x_t and h_{t-1}; shape [D], or [G, D] with per-gate masks: one alpha per gate and unit) and
    ``output`` (the last layer's output, [output size]). Each starts at log(p / (1 - p)) of its site's probability and is kept
    <= 0 (alpha <= 1, p <= 0.5, Kingma's constraint: larger alpha makes the gradients' variance blow up and leaves the
    KL fit's range) by :meth:`constrain_` before every draw; so large p start at alpha = 1. A site with p = 0 has no
    noise and learns none.

    Masks: xi = 1 + sqrt(alpha) * eps, eps ~ N(0, 1), with the shapes and draws of :class:`Gaussian`
    (per sequence, or per batch with ``per="batch"``; fixed over the sequence). Being a differentiable function of
    log alpha (the reparameterization trick), the mask passes the likelihood's gradient to it.

    Objective (the negative ELBO per training example): E_q[NLL] + KL / N, N the number of examples the training
    loss averages over (PTB tokens, sentiment reviews), and KL = sum over sites of fan-out * sum over units of
    :func:`kl_per_weight`. The fan-out is how many weights one noise variable scales: a unit of layer l's input (or
    h_{t-1}) multiplies a column of W_ih (W_hh), G*H weights, or H per gate with per-gate masks; a unit of the output
    multiplies a column of the next layer's weight, as many as its rows. The KL pulls alpha up (towards 1), the
    likelihood down; weighting it below 1 is Kingma's down-weighted variant ("A2", 1/3).
    """

    def __init__(self, sites: list[Site]):
        super().__init__()
        self.log_alpha = nn.ParameterDict()
        self.fan_out: dict[str, int | None] = {}  # None: the output's, the rows of the weight it feeds
        for site in sites:
            if site.p > 0:
                start = min(math.log(site.p / (1.0 - site.p)), MAX_LOG_ALPHA)
                shape = (site.gates, site.size) if site.gates > 1 else (site.size,)
                self.log_alpha[site.key] = nn.Parameter(torch.full(shape, start))
                self.fan_out[site.key] = site.fan_out

    def mask(self, key, rows, like):
        if key not in self.log_alpha:
            return None
        log_alpha = self.log_alpha[key]
        eps = torch.randn((rows, *log_alpha.shape), device=like.device, dtype=log_alpha.dtype)
        return 1.0 + (0.5 * log_alpha).exp() * eps

    def needs(self, key):
        return key in self.log_alpha and self.fan_out[key] is None

    def kl(self, weights):
        terms = ((self.fan_out[key] or weights[key].shape[0]) * kl_per_weight(log_alpha.exp()).sum()
                 for key, log_alpha in self.log_alpha.items())
        return sum(terms, torch.zeros(()))

    @torch.no_grad()
    def constrain_(self):
        for log_alpha in self.log_alpha.values():
            log_alpha.clamp_(max=MAX_LOG_ALPHA)

    @torch.no_grad()
    def summary(self, weights):
        """Each site's mean alpha and its equivalent dropout probability p = alpha / (1 + alpha), and the KL."""
        self.constrain_()  # as the next draw would see them
        out = {}
        for key, log_alpha in self.log_alpha.items():
            alpha = log_alpha.exp()
            out[f"alpha_{key}"] = alpha.mean().item()
            out[f"p_{key}"] = (alpha / (1 + alpha)).mean().item()
        return {**out, "kl": float(self.kl(weights))}
