"""What a training run says of itself besides its checkpoints: metrics.json's status from "running" to its
end, each epoch's line in metrics.jsonl and in the log, and TensorBoard's scalars, from the trainer's numbers
(the files are :class:`~vdrnn.training.tracking.RunLogger`'s).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from vdrnn.errors import WriteError
from vdrnn.training.device import device_name
from vdrnn.training.progress import Progress
from vdrnn.training.resume import RunFolder
from vdrnn.training.tracking import RunLogger

log = logging.getLogger("vdrnn")


class RunRecord:
    """Opened as training starts: ``selector`` names the validation score that picks best.pt, ``final_tags``
    maps the TensorBoard tags of the final numbers to their metrics.json keys, ``trainer`` is the run's
    ``trainer.*`` config, and ``progress`` where this start goes on from."""

    def __init__(self, folder: RunFolder, raw_config: dict[str, Any], selector: str,
                 final_tags: dict[str, str], trainer, progress: Progress):
        self.folder, self.raw_config, self.selector, self.trainer = folder, raw_config, selector, trainer
        # What an earlier attempt in this folder logged after the state we start from (everything, on a fresh start)
        # goes, from metrics.jsonl and from TensorBoard's curves, so that no epoch or step appears twice.
        folder.truncate_history(progress.epoch)
        self.logger = RunLogger(folder.path, raw_config, final_tags, purge_step=progress.step + 1)
        # Until the end says otherwise, the run is not finished: an earlier attempt's finished metrics.json (a run
        # resumed for more epochs) must not pass for this one's result.
        self.logger.status("running", self.course(progress))

    def course(self, progress: Progress) -> dict[str, Any]:
        """What metrics.json says of a run without its result."""
        return {"epochs": progress.epoch, "steps": progress.step, "config": self.raw_config}

    def window(self, step: int, mean_loss: float, derived: dict[str, float], lr: float,
               grad_norm: torch.Tensor | None, wps: float) -> None:
        """TensorBoard's train/* at a read of the loss: the window's mean loss and what the task derives from
        it (``derived``), the epoch's base lr, the norm (before clipping) of the window's last step: a sample,
        since a mean would read every step's norm off the device (none where a resumed epoch had no step left
        before its last window was read), and words/s."""
        self.logger.scalars({"train/loss": mean_loss, **derived, "train/lr": lr,
                             **({"train/grad_norm": float(grad_norm)} if grad_norm is not None else {}),
                             "train/wps": wps}, step)

    def epoch(self, progress: Progress, lr: float, stats: dict[str, float], valid: dict[str, float],
              noise: dict[str, float], improved: bool, summary: Callable[[dict[str, Any]], str]) -> None:
        """The epoch just validated (``progress.epoch``): its line in metrics.jsonl, its scalars in
        TensorBoard and its log line, whose middle is ``summary`` of the metrics.jsonl line. ``valid`` may
        hold the test metrics of this epoch's weights (``test_*``): a curve, not a result; ``noise``: the
        learned dropout variances, if any."""
        curve = {k.removeprefix("test_"): v for k, v in valid.items() if k.startswith("test_")}
        valid = {k: v for k, v in valid.items() if not k.startswith("test_")}
        record = {"epoch": progress.epoch, "step": progress.step, "lr": lr,
                  **{f"valid_{k}": v for k, v in valid.items()}, **{f"test_{k}": v for k, v in curve.items()},
                  **stats, **noise}
        validated = self.selector in valid
        self.logger.scalars({**{f"valid/{k}": v for k, v in valid.items()},
                             **{f"test_per_epoch/{k}": v for k, v in curve.items()},
                             **{f"noise/{k}": v for k, v in noise.items()},
                             **({f"best/valid_{self.selector}": progress.best_valid} if validated else {})},
                            progress.step)
        self.logger.epoch(record)
        log.info("epoch %d/%d  lr %.4g  %s  %s words/s  %.0fs%s", progress.epoch, self.trainer.epochs, lr,
                 summary(record), f"{stats['wps']:,.0f}", stats["epoch_seconds"],
                 "  (best)" if improved and self.trainer.select != "last" else "")

    def cut_short(self, progress: Progress) -> None:
        """Where the step cap ended training before its epochs, say what that makes of the run."""
        if progress.step_cap_reached(self.trainer) and progress.epoch < self.trainer.epochs:
            # Checkpoints mark the ends of epochs, so an epoch the cap cut short counts as done: a rerun with a higher
            # cap goes on with the next one, and the run then differs from one without the cap.
            log.info("stopped at step %d, trainer.max_steps (the whole run's cap, for smoke runs): epoch %d of %d is "
                     "the last, and counts as done where the cap cut it short, so a rerun with a higher cap goes on "
                     "with epoch %d; for results, run without the cap in a new output dir", progress.step,
                     progress.epoch, self.trainer.epochs, progress.epoch + 1)

    def finished(self, metrics: dict[str, Any], noise: dict[str, float] | None, progress: Progress,
                 stopped_early: bool, device: torch.device, smoke: bool) -> dict[str, Any]:
        """metrics.json of a finished run, and TensorBoard's test/* scalars: the test's ``metrics``, the
        tested model's learned dropout variances (``noise``, if learned), then the run's course, its mean
        words/s over its epochs, where and how it ran; returns them."""
        if noise is not None:
            metrics["noise"] = noise
        epochs = self.folder.records()
        metrics.update({
            **progress.summary(self.selector, self.trainer, stopped_early),
            "wps": sum(r["wps"] for r in epochs) / len(epochs) if epochs else None,
            "device": device_name(device),
            # Beside wps: runs side by side on one host train at very different speeds with their threads shared
            # out or not.
            "cpu_threads": torch.get_num_threads(),
            "smoke": smoke,
            "paper": self.raw_config.get("paper"),
            "config": self.raw_config,
            "status": "finished",
        })
        # One step past the last training step: a rerun of a finished run, or a resume for more epochs, purges
        # TensorBoard from there (purge_step), so its new test replaces this one instead of adding a second point.
        self.logger.final(metrics, progress.step + 1)
        return metrics

    def ended(self, status: str, reason: str, progress: Progress) -> None:
        """metrics.json for a run that ended without its result: ``stopped`` (by a signal; the same command goes on)
        or ``failed`` (diverged, or a file could not be written), with ``reason``."""
        try:
            self.logger.status(status, {**self.course(progress), "reason": reason}, failed=status == "failed")
        except WriteError as err:  # a full disk that ended the run may refuse this too
            log.warning("%s", err)

    def close(self) -> None:
        self.logger.close()
