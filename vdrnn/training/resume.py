"""Resuming a run: which checkpoint it continues from, which settings it may change, and what of an earlier attempt
in its folder it keeps.

Checkpoints are written after an epoch has finished and validated (best.pt, then last.pt), and by a signal's stop in
the middle of an epoch (last.pt with its ``epoch_in_progress``), so a run resumes from the last finished epoch or the
step it was stopped at, and a resumed run gives the numbers of an uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from vdrnn.config import key_among
from vdrnn.errors import CheckpointError, ConfigError
from vdrnn.files import write_atomically
from vdrnn.training import checkpoint
from vdrnn.training.device import set_rng_state
from vdrnn.training.optim import Optimization
from vdrnn.training.tracking import flatten, read_jsonl

log = logging.getLogger("vdrnn")

# Settings a resumed run may change: how long and how verbosely it runs, where the data and the device are, how it
# is evaluated, the knobs that the divergence message suggests (lr, clip, amp), and init_from, which only starts a
# run (a resume restores its own weights). Any other change would make the checkpoint's state belong to another
# experiment.
RESUMABLE_CHANGES = ("resume", "checkpoint", "init_from", "device", "paper", "objective", "data.root", "data.eval_batch_size",
                     "data.test_batch_size", "model.impl", "trainer.epochs", "trainer.max_steps", "trainer.max_minutes",
                     "trainer.progress", "trainer.log_every", "trainer.lr", "trainer.clip", "trainer.amp",
                     "trainer.cuda_graph", "eval")

# What defines the score of a run that selects best.pt by MC validation (trainer.select=mc): its earlier epochs'
# scores, which later ones must beat, were estimated with these.
MC_SELECTION_SETTINGS = ("eval.mode", "eval.samples", "eval.word_dropout")


def check_resumable(saved: dict[str, Any], now: dict[str, Any], path: Path, defaults: dict[str, Any] | None = None,
                    takes_init_from: bool = False) -> str:
    """Refuse to resume ``path`` (trained with ``saved``) under settings that change the experiment; return the
    changes it allows, as `trainer.lr: 0.001 -> 0.01, ...` ("" for none), for the resume's log line: the run's
    checkpoints and metrics.json then hold the new values only, while TensorBoard's hparams table keeps the first
    start's (TensorBoard reads the first hparams a run folder's events hold; see tracking.RunLogger).

    A key only ``now`` has is an option vdrnn added since the checkpoint was written; the run trained as its default
    (``defaults``: dotted key -> default, :func:`vdrnn.config.option_defaults`) says, so only another value is a
    change. Keys only ``saved`` has are options vdrnn dropped since: not a change. ``takes_init_from``: the task can
    start a new run from the checkpoint's weights instead, which the refusal then suggests.
    """
    before, after = flatten(saved), flatten(now)
    defaults = defaults or {}
    before.update({k: defaults[k] for k in after.keys() - before.keys() if k in defaults})
    fixed = MC_SELECTION_SETTINGS if before.get("trainer.select") == "mc" else ()
    differ = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    changed = [k for k in differ if not key_among(k, RESUMABLE_CHANGES) or key_among(k, fixed)]

    def listed(keys: list[str]) -> str:
        return ", ".join(f"{k}: {shown(before[k])} -> {shown(after[k])}" for k in keys)

    if changed:
        weights = " (init_from=<checkpoint> starts from its weights)" if takes_init_from else ""
        raise ConfigError(f"cannot resume {path} with other settings ({listed(changed)}). Resume with the run's own "
                          f"settings, or start a new run in a new output dir{weights}")
    return listed([k for k in differ if k != "resume"])


def shown(value: Any) -> str:
    """A flattened config value as an error quotes it: ``'sgd'``, ``0.3``, and None (which flatten writes as the
    string "null", for TensorBoard) as ``null``."""
    return "null" if value == "null" else repr(value)


class RunFolder:
    """A run's output dir as resuming sees it: its checkpoints and its per-epoch history."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir)
        self.last, self.best, self.history = self.path / checkpoint.LAST, self.path / checkpoint.BEST, \
            self.path / "metrics.jsonl"

    def resume_point(self, resume: str | None) -> Path | None:
        """This folder's own last.pt if it has one, else ``resume=``.

        The folder's own checkpoint wins so that rerunning a command after a crash continues the run where it
        stopped, instead of going back to ``resume=`` and overwriting the newer progress.
        """
        if self.last.exists():
            if resume and Path(resume).expanduser().resolve() != self.last.resolve():
                log.warning("%s exists, so the run continues from it, not from resume=%s (to start again from "
                            "that one, use a new output dir)", self.last, resume)
            return self.last
        return Path(resume) if resume else None

    def read_resume(self, path: Path, raw_config: dict[str, Any], defaults: dict[str, Any],
                    takes_init_from: bool) -> tuple[dict[str, Any], str]:
        """The checkpoint ``path`` to continue from and the settings this run changes (``key: old -> new, ...``, or
        ""); refused where it is not one (a best.pt) or was trained under settings this run may not change."""
        payload = checkpoint.load(path)
        if not payload.get("resumable", True):
            raise CheckpointError(
                f"{path} holds the weights as validated (under averaged SGD, the averages), not the state to continue "
                f"training from: resume from the run's last.pt, or start a new run from these weights with "
                f"init_from={path}")
        return payload, check_resumable(payload["config"], raw_config, path, defaults, takes_init_from)

    def continue_from(self, source: Path, epoch: int, best_valid: float, selector: str) -> float:
        """Before a resumed run's first epoch: another folder's checkpoint brings its best.pt and history here
        (:meth:`adopt`), and a best.pt newer than the resumed epoch counts (:meth:`newer_best`, whose score this
        returns)."""
        if source.expanduser().resolve().parent != self.path.resolve():
            self.adopt(source.expanduser())
        return self.newer_best(epoch, best_valid, selector)

    def adopt(self, source: Path) -> None:
        """Resuming another folder's checkpoint: copy that run's best.pt and per-epoch history (metrics.jsonl) here
        too, so that the final test loads the best weights so far (not this run's last ones) and the history is
        whole. TensorBoard's curves stay in the source folder: this folder's start at the resumed step.

        This folder has no last.pt (else the run would continue from it), so a best.pt or history already here is an
        attempt's that died before its first last.pt: the source's replace them, and without one in the source they
        go (a stale best.pt would be tested as this run's best)."""
        for name in (checkpoint.BEST, "metrics.jsonl"):
            src, dst = source.parent / name, self.path / name
            if src.exists():
                checkpoint.copy(src, dst)
            else:
                dst.unlink(missing_ok=True)

    def newer_best(self, epoch: int, best_valid: float, selector: str) -> float:
        """The best score so far, with a best.pt from after the resumed ``epoch`` counted in.

        An epoch saves best.pt, then last.pt: a crash between the two leaves a best.pt from after the state we resume
        from. That epoch is trained again and may score worse this time (GPU kernels are not bit-exact), so its better
        weights stay the run's best: the redone epochs must beat the score they validated to."""
        if not self.best.exists():
            return best_valid
        try:
            saved = checkpoint.load(self.best)
        except CheckpointError as err:  # not a reason to stop resuming from last.pt; the final test reports it
            log.warning("%s", err)
            return best_valid
        if saved.get("epoch", 0) > epoch and saved.get("best_valid", math.inf) < best_valid:
            log.warning("%s is from epoch %d, after the resumed epoch %d (a crash before last.pt was written): it "
                        "stays the best so far, at valid %s %.4g. That epoch is trained again, and its history "
                        "(metrics.jsonl, TensorBoard) will be the new attempt's", self.best, saved["epoch"], epoch,
                        selector, saved["best_valid"])
            return saved["best_valid"]
        return best_valid

    def truncate_history(self, epoch: int) -> None:
        """Drop per-epoch records written after the checkpoint we resume from (a crash between the two), or all of
        them on a fresh start (an attempt that died before its first last.pt)."""
        if self.history.exists():
            kept = [r for r in read_jsonl(self.history) if r["epoch"] <= epoch]
            write_atomically(self.history, "".join(json.dumps(r) + "\n" for r in kept))

    def load_best(self, model: torch.nn.Module, kept: str | None) -> None:
        """Load best.pt into ``model`` for the final test. ``kept``: what the run kept there, if it kept anything (a
        finished epoch writes or keeps a best.pt): then a missing one is refused, since testing the weights in memory
        would report the wrong model."""
        if self.best.exists():
            checkpoint.load_model_state(model, checkpoint.load(self.best), self.best, "it is another run's best.pt: "
                                        "move it out of this run's folder")
        elif kept is not None:
            raise CheckpointError(
                f"{self.best} is missing although the run kept there {kept}; testing the weights in memory instead "
                f"would report the wrong model. Put that run's best.pt there (or pass checkpoint=<its best.pt> to "
                f"`vdrnn eval`)")

    def records(self) -> list[dict[str, Any]]:
        """The per-epoch history so far."""
        return read_jsonl(self.history) if self.history.exists() else []


PROGRESS = ("epoch", "step", "best_valid", "train_seconds", "run_seconds", "start_epoch")  # a checkpoint's progress


def restore_state(payload: dict[str, Any], path: Path, model: torch.nn.Module, optimization: Optimization,
                  device: torch.device, vocab: list[str], load_extra: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Put a checkpoint's training state (read from ``path``) into ``model``, ``optimization``, the random generators
    and the task's own state (``load_extra``); return its progress entries. Refused, naming the fix, where it holds
    another vocabulary, model or optimizer."""
    checkpoint.check_vocab(payload, vocab, path, "resume with the same data.* settings, or use a new output dir")
    checkpoint.load_model_state(model, payload, path, "resume with the run's own model.* and cell settings, or start a "
                                "new run in a new output dir")
    if optimization.average is not None and "weight_average" not in payload:  # from before trainer.ema existed
        raise CheckpointError(f"{path} holds no weight average to continue (it was trained before trainer.ema "
                              f"existed): resume it with trainer.ema=0")
    try:
        load_extra(payload)
        optimization.load(payload)
        set_rng_state(payload["rng"], device)
        # Entries older checkpoints lack: run_seconds (before trainer.max_minutes: training time only) and
        # start_epoch (before it was kept: a fresh start).
        older = {"run_seconds": payload["train_seconds"], "start_epoch": 0}
        return {key: payload.get(key, older[key]) if key in older else payload[key] for key in PROGRESS}
    # An entry missing, shaped for another optimizer, or of other types than a run of this vdrnn saves.
    except (KeyError, ValueError, RuntimeError, TypeError, AttributeError, IndexError) as err:
        what = f"it has no {err.args[0]!r} entry" if isinstance(err, KeyError) else \
            (str(err).splitlines() or [type(err).__name__])[0][:200]
        raise CheckpointError(
            f"cannot resume {path}: {what}. It does not hold the training state this run continues from (it was "
            f"saved by another vdrnn version or under other settings). Pass resume=<the run's own last.pt>, or "
            f"start a fresh run in a new output dir (init_from={path} starts from its weights)") from err
