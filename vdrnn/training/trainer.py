"""The epoch loop every task trains with, in torchtune's recipe shape: ``setup()``, ``train()``, ``cleanup()``.

    setup:   device and seed -> the checkpoint to resume from, refused now if its settings differ -> data -> model
             -> optimizer -> the checkpoint's state restored
    train:   metrics.json says "running"; for each epoch: train -> validate -> best.pt if the score improved
             -> metrics.jsonl -> last.pt; at the end: load best.pt -> test -> metrics.json says "finished"
    cleanup: close the TensorBoard writer

A task's trainer (``vdrnn/tasks/<task>/train.py``) subclasses :class:`EpochTrainer` and supplies one training
epoch, the validation score and the final test. The trainer hands what the run writes of itself (metrics.json,
metrics.jsonl, TensorBoard, the epoch's log line) to :class:`~.record.RunRecord` and its checkpoints to
:class:`~.checkpoints.Checkpoints`, and keeps how far it has come in a :class:`~.progress.Progress`. Resuming
from ``last.pt`` restores model, optimizer, RNG states and progress exactly, so an interrupted run and an
uninterrupted one give the same numbers. A signal (:mod:`.stopping`) pauses the epoch after the step in
progress and last.pt then holds the epoch so far (``epoch_in_progress``: the task's data position and carried
state, the loss sums), from which a rerun goes on. Checkpoints are written only of finite losses and
validation scores, so a diverging run stops with its last good checkpoint in place and metrics.json saying
"failed" and why.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm import tqdm

from vdrnn.config import option_defaults
from vdrnn.errors import TrainingDiverged
from vdrnn.training.checkpoints import Checkpoints
from vdrnn.training.device import built_model, prepare_device
from vdrnn.training.loop import (
    END_EPOCH,
    GO_ON,
    PAUSE,
    EpochSums,
    RunEstimate,
    epoch_bar,
    run_steps,
)
from vdrnn.training.optim import Optimization
from vdrnn.training.progress import Progress
from vdrnn.training.record import RunRecord
from vdrnn.training.resume import RunFolder
from vdrnn.training.stopping import StopSignals

if TYPE_CHECKING:
    from vdrnn.tasks.base import Task

log = logging.getLogger("vdrnn")


class EpochTrainer:
    """Base class of the task trainers: ``selector`` names the validation score that picks best.pt (lower is
    better); subclasses implement the hooks below and may override the optional ones."""

    selector = "loss"

    def __init__(self, task: Task, cfg, run_dir: Path, raw_config: dict[str, Any]):
        self.task, self.cfg, self.raw_config = task, cfg, raw_config
        self.folder = RunFolder(run_dir)
        self.progress = Progress()
        self.record: RunRecord | None = None  # opened when training starts
        self.estimate: RunEstimate | None = None
        self.stops = StopSignals()  # entered by vdrnn.training.run.train around the whole run

    # ----------------------------------------------------------------------------- the recipe
    def setup(self) -> None:
        """Everything before the first step. A checkpoint to resume from is read, and refused where its settings
        differ, before the data loads (IMDB's takes seconds), so that a resume under other settings fails at once."""
        cfg = self.cfg
        self.device = prepare_device(cfg.device, cfg.trainer.amp)
        torch.manual_seed(cfg.seed)
        self.resume_from = self.folder.resume_point(cfg.resume)
        read = self.read_resume(self.resume_from) if self.resume_from is not None else None
        self.data = self.task.load_data(cfg)
        self.model = self.build_model()
        self.optimization = Optimization(self.model, cfg.trainer, self.device)
        self.checkpoints = Checkpoints(self.folder, self.stops, self.model, self.optimization, self.device,
                                       self.data.vocab, self.raw_config)
        if read is not None:
            self.restore(self.resume_from, read)

    def train(self) -> dict[str, Any]:
        """The epochs, then the test of the kept checkpoint: metrics.json's contents."""
        cfg = self.cfg
        if self.resume_from is not None:
            self.progress.best_valid = self.folder.continue_from(self.resume_from, self.progress.epoch,
                                                                 self.progress.best_valid, self.selector)
        self.record = RunRecord(self.folder, self.raw_config, self.selector, self.final_tags(), cfg.trainer,
                                self.progress)
        n_params = sum(p.numel() for p in self.model.parameters())
        log.info("model: %s, %.2fM parameters; dropout %s; device %s; output %s", self.describe_model(),
                 n_params / 1e6, cfg.dropout.scheme, self.device, self.folder.path)
        if self.device.type == "cpu":  # says after a few steps how long the run takes here
            self.estimate = RunEstimate.of_run(cfg.trainer, self.progress, self.steps_per_epoch(),
                                               None if self.task.is_smoke(self.raw_config) else
                                               self.task.first_run(cfg.data.name))
        while not self.progress.done(cfg.trainer, self.stopped_early()):
            with self.stops.during_steps():
                self.run_epoch()
            signum = self.stops.take()  # one that came during validation or the checkpoints
            if signum is not None:
                self.stops.pass_on(signum, f"after epoch {self.progress.epoch}, which {self.folder.last} holds")
        self.record.cut_short(self.progress)
        return self.test()

    def test(self) -> dict[str, Any]:
        """Load best.pt, test it, and write metrics.json (and TensorBoard's test/* scalars)."""
        self.checkpoints.load_best(self.progress, self.cfg.trainer.select, self.selector)
        return self.record.finished(self.test_metrics(), self.noise_summary(), self.progress, self.stopped_early(),
                                    self.device, self.task.is_smoke(self.raw_config))

    def cleanup(self) -> None:
        if self.record is not None:
            self.record.close()

    def record_end(self, status: str, reason: str) -> None:
        """metrics.json for a run that ended without its result (RunRecord.ended)."""
        if self.record is not None:  # else it ended before training began: nothing of this start to record
            self.record.ended(status, reason, self.progress)

    def read_resume(self, path: Path) -> tuple[dict[str, Any], str]:
        """The checkpoint ``path`` and the settings this run changes from its, or a refusal (RunFolder.read_resume)."""
        return self.folder.read_resume(path, self.raw_config, option_defaults(self.cfg), self.task.takes_init_from)

    def restore(self, path: Path, read: tuple[dict[str, Any], str] | None = None) -> None:
        """Continue from the checkpoint ``path`` (``read``: what read_resume returned for it, else read now)."""
        payload, changes = self.read_resume(path) if read is None else read
        self.progress = self.checkpoints.restore(path, payload, changes, self.load_extra_state, self.position_problem)

    # ----------------------------------------------------------------------------- task hooks
    def steps_per_epoch(self) -> int:
        raise NotImplementedError

    def train_epoch(self, lr: float, bar: tqdm, sums: EpochSums, position: dict[str, Any] | None) -> dict | None:
        """One pass over the training data (through :meth:`train_loop`), from ``position`` (what
        :meth:`epoch_position` said when the epoch was paused; None: its start): at least ``train_loss``, ``wps``,
        ``epoch_seconds``, or None where a stop request paused it."""
        raise NotImplementedError

    def epoch_position(self) -> dict[str, Any]:
        """Where the epoch in progress is (tensors and Python values): what :meth:`train_epoch` goes on from."""
        raise NotImplementedError

    def position_problem(self, position: Any) -> str | None:
        """What keeps :meth:`train_epoch` from going on from ``position`` (a checkpoint's, of a paused epoch), or
        None."""
        raise NotImplementedError

    def validate(self) -> dict[str, float]:
        """Validation metrics, including ``self.selector``; ``test_*`` entries are logged as a per-epoch curve."""
        raise NotImplementedError

    def test_metrics(self) -> dict[str, Any]:
        """The test of the kept checkpoint (loaded already): valid_*, test_*, test_*_mc, eval_seconds."""
        raise NotImplementedError

    def summary(self, record: dict[str, Any]) -> str:
        """The middle of the per-epoch log line."""
        raise NotImplementedError

    @property
    def train_examples(self) -> int:
        """What the training loss averages over (a learned-noise KL term's N)."""
        raise NotImplementedError

    def build_model(self) -> torch.nn.Module:
        return built_model(self.task, self.cfg, self.data, self.device)

    def describe_model(self) -> str:
        m = self.cfg.model
        return f"{m.num_layers} x {m.hidden_size} {m.cell} ({m.gates} gates)"

    def after_validation(self, score: float | None) -> None:
        """Called after every epoch's validation (the language model's NT-ASGD switch)."""

    def stopped_early(self) -> bool:
        """True once the task's own stopping rule has fired (AWD's fine-tuning)."""
        return False

    def loss_scalars(self, mean_loss: float) -> dict[str, float]:
        """Extra train/* scalars derived from a window's mean loss (the language model's perplexity)."""
        return {}

    def extra_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the task's own state."""
        return {}

    def load_extra_state(self, payload: dict[str, Any]) -> None:
        pass

    def final_tags(self) -> dict[str, str]:
        """TensorBoard tag -> metrics.json key of the final numbers shown in the HParams table."""
        return {f"best/valid_{self.selector}": f"best_valid_{self.selector}"}

    # ----------------------------------------------------------------------------- steps
    def kl_term(self) -> torch.Tensor | None:
        """The learned dropout noise's regularizer per training example (Kingma's KL, Concrete dropout's), times
        ``dropout.kl_weight``, to add to the mean training loss; None unless the scheme learns its noise."""
        if self.model.noise_scales is None:
            return None
        return self.model.regularizer(self.train_examples) * self.cfg.dropout.kl_weight

    def noise_summary(self) -> dict[str, float] | None:
        """The model's learned dropout noise by site, and its regularizer; None unless the scheme learns any."""
        return self.model.noise_summary() if self.model.noise_scales is not None else None

    def train_loop(self, batches, step, lr: float, bar: tqdm, sums: EpochSums) -> dict[str, float] | None:
        """Run ``step(batch) -> (mean loss tensor, grad norm, weight, words)`` over an epoch's batches (those after
        the ``sums.batches`` done), counting the steps, logging train/* to TensorBoard and the bar at each read of
        the loss (a NaN or infinite one stops the run there: :class:`~vdrnn.errors.TrainingDiverged`). None where a
        stop request paused the epoch."""

        def on_step() -> str:
            self.progress.step += 1
            self.optimization.after_step()
            bar.update(1)
            said = self.estimate.step() if self.estimate is not None else None
            if said:
                log.info("%s", said)
            if self.progress.step_cap_reached(self.cfg.trainer):
                return END_EPOCH
            return PAUSE if self.stops.received is not None else GO_ON

        def on_window(mean_loss: float, wps: float, grad_norm: torch.Tensor) -> None:
            if not math.isfinite(mean_loss):
                raise self.diverged(f"training loss is {mean_loss} at step {self.progress.step}")
            self.record.window(self.progress.step, mean_loss, self.loss_scalars(mean_loss), lr, grad_norm, wps)
            bar.set_postfix(loss=f"{mean_loss:.4f}", wps=f"{wps:,.0f}", lr=f"{lr:.4g}")

        return run_steps(batches, step, sums, self.cfg.trainer.log_every, on_step, on_window)

    def diverged(self, what: str) -> TrainingDiverged:
        last = self.folder.last
        kept = (f"The run stopped without overwriting its checkpoints ({last} is the last good one)" if last.exists()
                else "The run stopped before its first checkpoint")
        fixes = "Lower trainer.lr or trainer.clip" + (", or use trainer.amp=off" if self.cfg.trainer.amp != "off" else "")
        return TrainingDiverged(f"training diverged in epoch {self.progress.epoch + 1}: {what}. {kept}. {fixes}")

    # ----------------------------------------------------------------------------- an epoch
    def run_epoch(self) -> None:
        cfg, progress = self.cfg, self.progress
        epoch = progress.epoch + 1
        lr = cfg.trainer.lr_at(epoch)
        sums, position = self.checkpoints.epoch_start()
        bar = epoch_bar(epoch, cfg.trainer, self.steps_per_epoch(), sums.batches, progress.step)
        started = time.perf_counter()
        with bar:
            stats = self.train_epoch(lr, bar, sums, position)
            while stats is None:  # paused by a signal: save the epoch so far, then stop, or go on where told to
                signum = self.stops.take()
                position = self.epoch_position()
                if not sums.window_finite():  # the run has diverged: its last good checkpoint stays
                    raise self.diverged(f"training loss is not finite by step {progress.step}")
                self.checkpoints.save_paused(progress, self.extra_state(), epoch, sums, position,
                                             self.steps_per_epoch())
                self.stops.pass_on(signum, f"at step {progress.step} (epoch {epoch}, batch {sums.batches} of "
                                           f"{self.steps_per_epoch()}), which {self.folder.last} holds")
                stats = self.train_epoch(lr, bar, sums, position)
        progress.train_seconds += stats["epoch_seconds"]
        with self.optimization.evaluation_weights():
            valid = self.validate()
            # None where the run holds no validation data out (a sentiment run with data.valid_fraction=0, which
            # needs trainer.select=last): then nothing is validated and the last epoch is kept.
            score = valid.get(self.selector)
            if score is not None and not math.isfinite(score):
                raise self.diverged(f"validation {self.selector} is {score}")
            improved = progress.validated(epoch, score, cfg.trainer.select)
            if improved:  # the weights as validated
                self.checkpoints.save_best(progress, self.extra_state())
        self.after_validation(score)
        progress.run_seconds += sums.seconds_before + time.perf_counter() - started
        self.record.epoch(progress, lr, stats, valid, self.noise_summary() or {}, improved, self.summary)
        self.checkpoints.save_last(progress, self.extra_state())
