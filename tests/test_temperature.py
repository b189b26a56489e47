"""The temperature fit against a brute-force search over a dense grid of temperatures."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from vdrnn.temperature import HIGHEST, LOWEST, fit_temperature, nll_of_samples


def brute_force(nll, points: int = 1001) -> tuple[float, float]:
    """(T, NLL) of the best of ``points`` temperatures log-spaced over the range the fit searches, scored one by one."""
    grid = torch.logspace(math.log10(LOWEST), math.log10(HIGHEST), points, dtype=torch.float64)
    values = torch.cat([nll(t.view(1)) for t in grid])
    best = int(values.argmin())
    return grid[best].item(), values[best].item()


def overconfident(samples: int, scale: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits [S, 300, 4] and labels drawn from softmax(logits / scale): the logits are ``scale`` times too sharp."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(samples, 300, 4, generator=generator, dtype=torch.float64) * 3
    labels = torch.multinomial((logits.mean(0) / scale).softmax(-1), 1, generator=generator).squeeze(1)
    return logits, labels


@pytest.mark.parametrize("samples, average, seed", [(1, "arithmetic", 0), (8, "arithmetic", 1), (8, "geometric", 2)],
                         ids=["weight-scaling", "mc-arithmetic", "mc-geometric"])
def test_the_fit_finds_the_brute_force_minimum(samples, average, seed):
    nll = nll_of_samples(*overconfident(samples, 2.5, seed), average)
    fitted = fit_temperature(nll)
    best, lowest = brute_force(nll)
    # The grid's step is 0.55% in T; the fit's last round, 0.03%: both land in the same flat bottom.
    assert abs(math.log(fitted) - math.log(best)) < 0.006
    assert nll(torch.tensor([fitted])).item() <= lowest + 1e-9
    assert 1.5 < fitted < 4  # the logits were made 2.5 times too sharp
    assert nll(torch.tensor([fitted])).item() < nll(torch.tensor([1.0])).item() - 0.05  # and the fit undoes it


def test_a_fit_at_the_end_of_the_range_warns(caplog):
    # Labels that the logits do not predict at all: the flatter the better, past any temperature searched.
    logits, _ = overconfident(1, 1.0, 3)
    labels = torch.arange(300) % 4
    with caplog.at_level(logging.WARNING, logger="vdrnn"):
        fitted = fit_temperature(nll_of_samples(logits, labels), "for the test")
    assert fitted == pytest.approx(HIGHEST)
    assert "the temperature fitted for the test is 16, the end of the range searched" in caplog.text
