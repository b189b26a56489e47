"""How far a run has come (its epochs, steps, the score best.pt validated to, its time) and when it is over.

``trainer`` in the methods is the run's ``trainer.*`` config (epochs, the step cap, the time limit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass
class Progress:
    """How far a run has come; a checkpoint keeps each field under its name."""

    epoch: int = 0  # epochs completed
    step: int = 0  # optimizer steps taken
    best_valid: float = math.inf  # the score best.pt validated to (nan: nothing validated, trainer.select=last)
    train_seconds: float = 0.0
    run_seconds: float = 0.0  # training + validation, summed over resumes (trainer.max_minutes)
    start_epoch: int = 0  # the epochs behind the weights it started from (init_from); 0 for a fresh start

    def step_cap_reached(self, trainer) -> bool:
        return trainer.max_steps is not None and self.step >= trainer.max_steps

    def time_limit_reached(self, trainer) -> bool:
        return trainer.max_minutes is not None and self.run_seconds >= 60 * trainer.max_minutes

    def done(self, trainer, stopped_early: bool) -> bool:
        """Is training over: every epoch run, the step cap or the time limit reached, or the task's rule fired?"""
        return (self.epoch >= trainer.epochs or self.step_cap_reached(trainer) or stopped_early
                or self.time_limit_reached(trainer))

    def steps_left(self, trainer, steps_per_epoch: int) -> int:
        """The optimizer steps the run has still to take: its epochs left, or the step cap."""
        left = (trainer.epochs - self.epoch) * steps_per_epoch
        cap = trainer.max_steps
        return left if cap is None else min(left, cap - self.step)

    def validated(self, epoch: int, score: float | None, select: str) -> bool:
        """Count ``epoch`` done, its weights validated to ``score`` (None: the run holds no validation data
        out); True where they are the ones to keep in best.pt: every epoch's under ``select`` last (a fixed
        budget), else those that beat the best score so far."""
        self.epoch = epoch
        if select == "last":
            self.best_valid = math.nan if score is None else score
            return True
        improved = score < self.best_valid
        self.best_valid = min(self.best_valid, score)
        return improved

    def summary(self, selector: str, trainer, stopped_early: bool) -> dict[str, Any]:
        """What metrics.json says of the run's course."""
        return {
            # The score best.pt validated to; None where the run validated nothing (data.valid_fraction=0).
            f"best_valid_{selector}": None if math.isnan(self.best_valid) else self.best_valid,
            "epochs": self.epoch,
            # A fine-tuning run's curve goes on from the epochs of the run it started from (the report's plots).
            "start_epoch": self.start_epoch,
            "steps": self.step,
            "train_seconds": self.train_seconds,
            # Stopped by trainer.max_minutes, not by the epochs, the step cap or early stopping running out first.
            "time_limited": (self.time_limit_reached(trainer) and self.epoch < trainer.epochs
                             and not self.step_cap_reached(trainer) and not stopped_early),
        }
