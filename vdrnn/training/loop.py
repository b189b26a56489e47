"""One epoch's optimizer steps: the loss read off the device once per ``trainer.log_every`` steps, not every
step; the epoch's progress bar, and on the CPU an estimate of the whole run's time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from tqdm import tqdm

from vdrnn.training.bars import bars_shown
from vdrnn.training.progress import Progress

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


class EpochSums:
    """What an epoch in progress has added up: the open window and the closed windows' totals, the batches done and
    the training time. A mid-epoch checkpoint keeps them (:meth:`state`), so that an epoch resumed after a stop
    reports the loss an uninterrupted one does, to the last bit."""

    def __init__(self, device: torch.device, saved: dict[str, Any] | None = None):
        self.window = TrainWindow(device)
        self.loss, self.weight, self.words, self.batches, self.seconds_before = 0.0, 0, 0, 0, 0.0
        if saved is not None:
            self.window.loss.copy_(saved["window_loss"])
            self.window.weight, self.window.words, self.window.steps = (saved["window_weight"],
                                                                        saved["window_words"], saved["window_steps"])
            self.loss, self.weight, self.words = saved["loss"], saved["weight"], saved["words"]
            self.batches, self.seconds_before = saved["batches"], saved["seconds"]
        self.started = time.perf_counter()

    def close_window(self) -> tuple[float, float]:
        """Read the window (mean loss, words/s) into the totals."""
        weight, words = self.window.weight, self.window.words
        mean_loss, wps = self.window.read()
        self.loss += mean_loss * weight
        self.weight += weight
        self.words += words
        return mean_loss, wps

    def seconds(self) -> float:
        return self.seconds_before + time.perf_counter() - self.started

    def window_finite(self) -> bool:
        """Is the open window's loss finite? (A host sync: checked before a checkpoint keeps it.)"""
        return bool(torch.isfinite(self.window.loss))

    def state(self) -> dict[str, Any]:
        return {"window_loss": self.window.loss.detach().cpu(), "window_weight": self.window.weight,
                "window_words": self.window.words, "window_steps": self.window.steps, "loss": self.loss,
                "weight": self.weight, "words": self.words, "batches": self.batches, "seconds": self.seconds()}


# What on_step tells run_steps after a step: go on, end the epoch there (the step cap), or pause it (a stop request:
# the epoch goes on later from its sums).
GO_ON, END_EPOCH, PAUSE = "go on", "end epoch", "pause"


def run_steps(batches: Iterable, step: Step, sums: EpochSums, log_every: int, on_step: Callable[[], str],
              on_window: Callable[[float, float, torch.Tensor | None], None]) -> dict[str, float] | None:
    """Run ``step`` over ``batches`` (those of the epoch after the ``sums.batches`` done already); ``on_step()``
    after each says whether to go on, ``on_window(mean loss, words/s, last grad norm)`` comes at each read of the
    loss (and raises where the loss is not finite). Returns the epoch's ``train_loss`` (weighted mean), ``wps`` and
    ``epoch_seconds`` once the epoch is over, or None where it was paused (``sums`` then holds where it is)."""
    grad_norm = None
    for batch in batches:
        loss, grad_norm, weight, words = step(batch)
        sums.window.add(loss, weight, words)
        sums.batches += 1
        then = on_step()
        if sums.window.steps == log_every:
            on_window(*sums.close_window(), grad_norm)
        if then == PAUSE:
            return None
        if then == END_EPOCH:
            break
    if sums.window.steps:
        on_window(*sums.close_window(), grad_norm)
    seconds = sums.seconds()
    return {"train_loss": sums.loss / sums.weight, "wps": sums.words / seconds, "epoch_seconds": seconds}


class RunEstimate:
    """On the CPU, how long the whole run's training will take, said once its first steps are timed: a preset meant
    for a GPU can take a day there, and the user should know in the first minute, with a run that fits (``first_run``;
    None for a run capped already, a smoke run). Said once per process: the jobs of a sweep, or an Optuna search's
    trials, run one after another in it."""

    TIMED = 3  # steps timed after the first (which warms up)
    SHORT = 120  # seconds of training below which no shorter first run is suggested
    said = False  # by a run of this process already

    def __init__(self, steps_left: int, length: str, first_run: str | None):
        self.steps_left, self.length, self.first_run = steps_left, length, first_run
        self.seen, self.start = 0, None

    @classmethod
    def of_run(cls, trainer, progress: Progress, steps_per_epoch: int, first_run: str | None) -> RunEstimate:
        """The estimate of a run's training from ``progress`` on (``trainer``: its ``trainer.*`` config)."""
        steps_left = progress.steps_left(trainer, steps_per_epoch)
        return cls(steps_left, run_length(trainer, steps_per_epoch), first_run)

    def step(self) -> str | None:
        """Call after each step: the line to log once TIMED steps after the first are timed, else None."""
        self.seen += 1
        if self.seen == 1:
            self.start = time.perf_counter()
        if self.seen != 1 + self.TIMED or RunEstimate.said:
            return None
        RunEstimate.said = True
        per_step = (time.perf_counter() - self.start) / self.TIMED
        seconds = per_step * self.steps_left
        line = (f"on the CPU a step takes {per_step:.2f} s: this run's training ({self.length}) takes about "
                f"{duration(seconds)} here")
        if seconds < self.SHORT or self.first_run is None:
            return line
        return f"{line}. A first run that ends in about a minute: {self.first_run}"


def duration(seconds: float) -> str:
    """``40 seconds``, ``3 minutes``, ``1.5 hours``: an estimate's length, as rounded as an estimate is."""
    if seconds < 60:
        return f"{max(5, 5 * round(seconds / 5))} seconds"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} minute{'s' if minutes > 1 else ''}"
    return f"{seconds / 3600:.1f} hours"


def run_length(trainer, steps_per_epoch: int) -> str:
    """What a run's training is, as RunEstimate names it: ``39 epochs``, or ``150 steps`` under a cap
    (``trainer``: the run's ``trainer.*`` config)."""
    if trainer.max_steps is not None and trainer.max_steps < trainer.epochs * steps_per_epoch:
        return f"{trainer.max_steps} steps, trainer.max_steps"
    return f"{trainer.epochs} epoch{'s' if trainer.epochs > 1 else ''}"


def epoch_bar(epoch: int, trainer, steps_per_epoch: int, done: int, step: int) -> tqdm:
    """The progress bar of epoch ``epoch``, ``done`` of its steps behind it and the run at ``step``; its end
    is where the step cap stops the epoch (``trainer``: the run's ``trainer.*`` config)."""
    steps = steps_per_epoch
    if trainer.max_steps is not None:
        steps = max(0, min(steps, done + trainer.max_steps - step))
    return tqdm(total=steps, initial=done, desc=f"epoch {epoch}/{trainer.epochs}", unit="step",
                disable=not bars_shown(trainer.progress), leave=False, dynamic_ncols=True)
