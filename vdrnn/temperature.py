"""A softmax temperature fitted on validation (Guo et al. 2017; for MC dropout as Melis et al. 2018 do): the T > 0
that minimises the validation NLL of softmax(z / T) with weight scaling, or of the MC average of softmax(z_s / T).

    T* = argmin_T  -1/N sum_n log p_T(y_n | x_n)

T > 1 softens an overconfident model's predictions, T < 1 sharpens an underconfident one's; the argmax, so accuracy,
is the same at every T for weight scaling (MC's arithmetic average can change it a little).

The search (:func:`fit_temperature`) asks for the NLL at a grid of temperatures at once, because a language model's
MC samples cannot be kept in memory: each ask is one pass over the validation data that scores every temperature of
the grid. It takes the best of 21 temperatures log-spaced over [1/16, 16], then twice the best of 21 over the two grid
steps around the last best: T to within 0.14% in three passes. It finds the global minimum where the NLL has one
minimum over log T, as weight scaling's NLL has (it is convex in 1/T), and the best basin on the first grid otherwise.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch

from vdrnn.nn.mc import log_predictive

log = logging.getLogger("vdrnn")

LOWEST, HIGHEST = 1 / 16, 16.0  # the temperatures searched
POINTS, ROUNDS = 21, 3


def fit_temperature(nll: Callable[[torch.Tensor], torch.Tensor], what: str = "") -> float:
    """The temperature that minimises ``nll(temperatures [G]) -> the validation NLL at each [G]`` (see the module's
    docstring); a warning where it is one of the range's ends, beyond which the NLL may still fall."""
    low, high = math.log(LOWEST), math.log(HIGHEST)
    for _ in range(ROUNDS):
        grid = torch.linspace(low, high, POINTS, dtype=torch.float64)
        values = torch.nan_to_num(torch.as_tensor(nll(grid.exp()), dtype=torch.float64), nan=math.inf)
        best = int(values.argmin())
        step = (high - low) / (POINTS - 1)
        low, high = max(math.log(LOWEST), grid[best] - step), min(math.log(HIGHEST), grid[best] + step)
    temperature = math.exp(grid[best])
    if not LOWEST * 1.01 < temperature < HIGHEST / 1.01:
        log.warning("the temperature fitted %s is %g, the end of the range searched (%g to %g): the validation NLL "
                    "falls on beyond it, so the model is far from calibrated there", what, temperature, LOWEST, HIGHEST)
    return temperature


def nll_of_samples(logits: torch.Tensor, labels: torch.Tensor, average: str = "arithmetic"):
    """The NLL at given temperatures of predictions kept in memory: the samples' logits [S, N, C] averaged as
    ``average`` says (weight scaling: S = 1), against ``labels`` [N]; for :func:`fit_temperature`."""
    labels = labels.to(logits.device).view(1, -1, 1)

    def nll(temperatures: torch.Tensor) -> torch.Tensor:
        return torch.stack([-log_predictive(logits, 0, average, t.item()).unsqueeze(0).gather(-1, labels).mean()
                            for t in temperatures])

    return nll
