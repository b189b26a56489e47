"""The trainer's state in its checkpoints: what one holds, when it is written, and putting it back.

best.pt is written after a validation that improved, last.pt after every epoch and where a signal paused one
(with what the rest of the epoch goes on from), each whole while a signal waits (:mod:`.stopping`); a resumed
run gets its state back from one, and the final test the weights best.pt kept. The files themselves are
:mod:`.checkpoint`'s; which checkpoint a run goes on from and the checks of its settings are :mod:`.resume`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from vdrnn.errors import CheckpointError
from vdrnn.training import checkpoint
from vdrnn.training.device import rng_state
from vdrnn.training.loop import EpochSums
from vdrnn.training.optim import Optimization
from vdrnn.training.progress import Progress
from vdrnn.training.resume import RunFolder, restore_state
from vdrnn.training.stopping import StopSignals

log = logging.getLogger("vdrnn")


class Checkpoints:
    """The checkpoints of one trainer's ``model``, ``optimization`` and ``device``'s random state, with the
    run's ``vocab`` and ``raw_config``. ``task_state`` in the methods is what the task keeps of its own (its
    trainer's extra_state)."""

    def __init__(self, folder: RunFolder, stops: StopSignals, model: torch.nn.Module,
                 optimization: Optimization, device: torch.device, vocab: list[str],
                 raw_config: dict[str, Any]):
        self.folder, self.stops = folder, stops
        self.model, self.optimization, self.device = model, optimization, device
        self.vocab, self.raw_config = vocab, raw_config
        self.in_progress: dict[str, Any] | None = None  # a paused epoch to go on with (epoch_in_progress)

    def state(self, progress: Progress, task_state: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's contents: model, optimizer and RNG state, ``progress``, vocabulary, config, and
        ``task_state``."""
        return {"model": self.model.state_dict(), **self.optimization.state(), "rng": rng_state(self.device),
                **asdict(progress), "vocab": self.vocab, "config": self.raw_config, **task_state}

    def save(self, payload: dict[str, Any], path: Path) -> None:
        """Write a checkpoint whole: a signal that comes meanwhile waits for the write to end."""
        with self.stops.held():
            checkpoint.save(payload, path)

    def save_best(self, progress: Progress, task_state: dict[str, Any]) -> None:
        """best.pt of the weights as validated. Marked: taken inside evaluation_weights (ASGD's averages) and
        before after_validation, it is not the state to continue training from; last.pt is."""
        self.save({**self.state(progress, task_state), "resumable": False}, self.folder.best)

    def save_last(self, progress: Progress, task_state: dict[str, Any]) -> None:
        """last.pt at the end of an epoch: what the next one goes on from."""
        self.save(self.state(progress, task_state), self.folder.last)

    def save_paused(self, progress: Progress, task_state: dict[str, Any], epoch: int, sums: EpochSums,
                    position: dict[str, Any], steps_per_epoch: int) -> None:
        """last.pt of epoch ``epoch`` paused after ``sums.batches`` batches: the state, and what the rest of
        the epoch goes on from (its sums, and ``position``, the task's place in its data)."""
        paused = {"epoch": epoch, "sums": sums.state(), "data": position}
        self.save({**self.state(progress, task_state), "epoch_in_progress": paused}, self.folder.last)
        log.info("saved the run at step %d (epoch %d, batch %d of %d) in %s", progress.step, epoch,
                 sums.batches, steps_per_epoch, self.folder.last)

    def restore(self, path: Path, payload: dict[str, Any], changes: str,
                load_task_state: Callable[[dict[str, Any]], None],
                position_problem: Callable[[Any], str | None]) -> Progress:
        """Put the checkpoint ``path`` (read: ``payload``, under the settings ``changes`` lists) back, the
        task's state through ``load_task_state``, and keep the paused epoch it holds for :meth:`epoch_start`,
        checked to be one this run can go on with (``position_problem``: what is wrong with the task's place in its
        data); the run's progress."""
        progress = Progress(**restore_state(payload, path, self.model, self.optimization, self.device,
                                            self.vocab, load_task_state))
        self.in_progress = payload.get("epoch_in_progress")
        problem = self.in_progress and paused_problem(self.in_progress, progress, position_problem)
        if problem:
            raise CheckpointError(f"cannot resume {path}: its paused epoch (epoch_in_progress) {problem}. It was "
                                  f"damaged or not written by vdrnn: pass resume=<the run's own last.pt>, or start a "
                                  f"fresh run in a new output dir")
        where = (f"in epoch {self.in_progress['epoch']} after batch {self.in_progress['sums']['batches']}"
                 if self.in_progress else f"after epoch {progress.epoch}")
        log.info("resumed from %s %s (step %d)%s", path, where, progress.step,
                 f", with changed settings: {changes}" if changes else "")
        return progress

    def epoch_start(self) -> tuple[EpochSums, dict[str, Any] | None]:
        """Where the next epoch starts: the sums and data position of the paused epoch restored (once), else a
        fresh epoch's sums and None (its start)."""
        resumed, self.in_progress = self.in_progress, None
        if resumed is None:
            return EpochSums(self.device), None
        return EpochSums(self.device, resumed["sums"]), resumed["data"]

    def load_best(self, progress: Progress, select: str, selector: str) -> None:
        """Load best.pt into the model for the final test; refused where it is missing although an epoch ran
        (what it kept: the last epoch's weights under ``select`` last, else the best-validated by
        ``selector``)."""
        kept = ("its last epoch's weights (trainer.select=last)" if select == "last" else
                f"the weights that validated to {selector} {progress.best_valid:.4g}")
        self.folder.load_best(self.model, kept if progress.epoch > 0 else None)


# A paused epoch's sums (EpochSums.state): the open window's loss, a tensor, and numbers.
SUMS = ("window_weight", "window_words", "window_steps", "loss", "weight", "words", "batches", "seconds")


def paused_problem(paused: Any, progress: Progress, position_problem: Callable[[Any], str | None]) -> str | None:
    """What keeps a run at ``progress`` from going on with the paused epoch ``paused`` (a checkpoint's
    epoch_in_progress), or None: it must be the epoch after the last finished one, with its sums and the task's place
    in its data (``position_problem`` says what is wrong with that)."""
    if not isinstance(paused, dict) or paused.get("epoch") != progress.epoch + 1:
        return f"is not epoch {progress.epoch + 1}, the one after the last finished epoch"
    sums = paused.get("sums")
    if not (isinstance(sums, dict) and isinstance(sums.get("window_loss"), torch.Tensor)
            and sums["window_loss"].numel() == 1 and all(checkpoint.is_number(sums.get(key)) for key in SUMS)):
        return "holds no loss sums of an epoch"
    return position_problem(paused.get("data"))
