"""One epoch's optimizer steps: the loss read off the device once per ``trainer.log_every`` steps, not every step."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

# step(batch) -> (mean loss tensor, grad norm, weight: what the mean is over, words)
Step = Callable[[Any], tuple[torch.Tensor, torch.Tensor, int, int]]


class TrainWindow:
    """Sums the training loss on the device between host syncs (one ``.item()`` per ``log_every`` steps)."""

    def __init__(self, device: torch.device):
        self.loss = torch.zeros((), device=device, dtype=torch.float64)
        self.weight = 0  # what the mean is over: tokens (LM) or sequences (sentiment)
        self.words = 0
        self.steps = 0
        self.start = time.perf_counter()

    def add(self, mean_loss: torch.Tensor, weight: int, words: int) -> None:
        self.loss += mean_loss.detach().double() * weight
        self.weight += weight
        self.words += words
        self.steps += 1

    def read(self) -> tuple[float, float]:
        """(mean loss, words per second) of the window, then start a new one."""
        mean = self.loss.item() / self.weight
        wps = self.words / (time.perf_counter() - self.start)
        self.loss.zero_()
        self.weight = self.words = self.steps = 0
        self.start = time.perf_counter()
        return mean, wps


def run_steps(batches: Iterable, step: Step, device: torch.device, log_every: int, on_step: Callable[[], bool],
              on_window: Callable[[float, float, torch.Tensor], None]) -> dict[str, float]:
    """Run ``step`` over ``batches``; ``on_step()`` after each (True: stop, the step cap), ``on_window(mean loss,
    words/s, last grad norm)`` at each read of the loss (which raises where the loss is not finite). Returns the
    epoch's ``train_loss`` (weighted mean), ``wps`` and ``epoch_seconds``."""
    window, totals = TrainWindow(device), {"loss": 0.0, "weight": 0, "words": 0}
    started = time.perf_counter()
    grad_norm = None

    def read_window() -> None:
        weight, words = window.weight, window.words
        mean_loss, wps = window.read()
        on_window(mean_loss, wps, grad_norm)
        totals["loss"] += mean_loss * weight
        totals["weight"] += weight
        totals["words"] += words

    for batch in batches:
        loss, grad_norm, weight, words = step(batch)
        window.add(loss, weight, words)
        stop = on_step()
        if window.steps == log_every:
            read_window()
        if stop:
            break
    if window.steps:
        read_window()
    seconds = time.perf_counter() - started
    return {"train_loss": totals["loss"] / totals["weight"], "wps": totals["words"] / seconds, "epoch_seconds": seconds}


class RunEstimate:
    """On the CPU, how long the whole run's training will take, said once its first steps are timed: a preset meant
    for a GPU can take a day there, and the user should know in the first minute, with a run that fits."""

    TIMED = 3  # steps timed after the first (which warms up)

    def __init__(self, steps_left: int, length: str, first_run: str):
        self.steps_left, self.length, self.first_run = steps_left, length, first_run
        self.seen, self.start = 0, None

    def step(self) -> str | None:
        """Call after each step: the line to log once TIMED steps after the first are timed, else None."""
        self.seen += 1
        if self.seen == 1:
            self.start = time.perf_counter()
        if self.seen != 1 + self.TIMED:
            return None
        per_step = (time.perf_counter() - self.start) / self.TIMED
        minutes = per_step * self.steps_left / 60
        took = f"{minutes / 60:.1f} hours" if minutes >= 60 else f"{max(1, round(minutes))} minute" + \
            ("s" if round(minutes) > 1 else "")
        return (f"on the CPU a step takes {per_step:.2f} s: this run's training ({self.length}) takes about {took} "
                f"here. A first run that ends in about a minute: {self.first_run}")
