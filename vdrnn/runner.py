"""What every vdrnn training run shares: device, optimizer step, checkpoints, resume, the epoch loop.

A task (language modelling in :mod:`vdrnn.train`, sentiment in :mod:`vdrnn.sentiment.trainer`)
subclasses :class:`EpochTrainer` and supplies its data, model, one training epoch, the validation
score and the final test. The loop here is then the same for all of them:

    for each epoch: train -> validate -> best.pt if the score improved -> metrics.jsonl -> last.pt
    at the end:     load best.pt -> test -> metrics.json

Resuming from ``last.pt`` restores model, optimizer, RNG states and progress exactly, so an
interrupted run and an uninterrupted one give the same numbers (tests/test_resume.py). Checkpoints
are written only after an epoch has finished and validated to a finite score, so a diverging run
stops with its last good checkpoint in place.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from vdrnn import checkpoint
from vdrnn.config import is_smoke, key_among, option_defaults
from vdrnn.dropout import weights_of
from vdrnn.errors import CheckpointError, ConfigError, TrainingDiverged
from vdrnn.files import write_atomically
from vdrnn.optim import WeightAverage, finish_update, make_optimizer, swapped_weights
from vdrnn.tracking import RunLogger, flatten, read_jsonl

log = logging.getLogger("vdrnn")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        log.warning("CUDA is not available: running on the CPU, which is slow for all but the smallest models")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:  # e.g. device=gpu
        raise ConfigError(f"device={name!r} is not a device: choose auto, cpu or cuda (cuda:N for one GPU of several)") \
            from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name} but CUDA is not available here; use device=auto or device=cpu")
    return device


def device_name(device: torch.device) -> str:
    """What metrics.json and eval.json record as the device: the GPU's name, or cpu."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def prepare_device(name: str, amp: str) -> torch.device:
    """The run's device, set up as training and `vdrnn eval` both use it: TF32 products on CUDA (so that
    evaluating a checkpoint repeats its run's own test numbers; the fused recurrences then store their operands in
    fp16, which holds what TF32 keeps: ``fused._stored_dtype``), and fp16 refused where it cannot run."""
    device = resolve_device(name)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if amp == "fp16" and device.type != "cuda":
        raise ConfigError("trainer.amp=fp16 needs CUDA; use trainer.amp=bf16 or off on the CPU")
    return device


def rng_state(device: torch.device) -> dict[str, Any]:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def load_evaluation_weights(model: torch.nn.Module, payload: dict[str, Any], path: Path) -> None:
    """Put the weights a run validates and tests into ``model``: the checkpoint's model state, or, for a ``last.pt``
    whose model state is the raw weights training continues from, the average it carries: ``trainer.ema``'s moving
    average, or averaged SGD's running means (the optimizer's ``ax``). A ``best.pt`` holds that average as its model
    state already, so both checkpoints give the same model."""
    checkpoint.load_model_state(model, payload, path, "it was saved by another vdrnn version, whose model this "
                                "one no longer builds from its config")
    params = list(model.parameters())
    if "weight_average" in payload:
        average = WeightAverage(params, payload["config"]["trainer"]["ema"])
        average.load_state_dict(payload["weight_average"])
        values = dict(enumerate(average.averages()))
    elif payload.get("averaging"):  # the optimizer state is keyed by the parameters' order
        values = {i: s["ax"] for i, s in payload["optimizer"]["state"].items() if "ax" in s}
    else:
        return
    with torch.no_grad():
        for i, value in values.items():
            params[i].copy_(value)


def evaluate_checkpoint(cfg, path: Path, payload: dict[str, Any], load_data: Callable, build_model: Callable,
                        evaluate_all: Callable) -> dict[str, Any]:
    """`vdrnn eval` for any task: its data (``load_data(cfg)``, which must have the checkpoint's vocabulary), the
    checkpoint's model (``build_model(cfg, data, device)``) with the weights its run tested, and the task's test
    metrics (``evaluate_all(model, data, cfg)``). ``cfg``: the checkpoint's config with the command line's evaluation
    settings (:func:`vdrnn.config.eval_config`)."""
    device = prepare_device(cfg.device, cfg.trainer.amp)
    torch.manual_seed(cfg.seed)
    data = load_data(cfg)
    checkpoint.check_vocab(payload, data.vocab, path, "evaluate it on the data it was trained on (data.root)")
    model = build_model(cfg, data, device)
    load_evaluation_weights(model, payload, path)
    return {**evaluate_all(model, data, cfg), "checkpoint": str(path), "epoch": payload["epoch"],
            "device": device_name(device)}


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


# Settings a resumed run may change: how long and how verbosely it runs, where the data and the device are,
# how it is evaluated, the knobs that the divergence message suggests (lr, clip, amp), and init_from, which only
# starts a run (a resume restores its own weights). Any other change would make the checkpoint's state belong to
# another experiment.
RESUMABLE_CHANGES = ("resume", "checkpoint", "init_from", "device", "paper", "data.root", "data.eval_batch_size",
                     "data.test_batch_size", "model.impl", "trainer.epochs", "trainer.max_steps", "trainer.max_minutes",
                     "trainer.progress",
                     "trainer.log_every", "trainer.lr", "trainer.clip", "trainer.amp", "trainer.cuda_graph", "eval")


# What defines the score of a run that selects best.pt by MC validation (trainer.select=mc): its earlier epochs'
# scores, which later ones must beat, were estimated with these.
MC_SELECTION_SETTINGS = ("eval.mode", "eval.samples", "eval.word_dropout")


def check_resumable(saved: dict[str, Any], now: dict[str, Any], path: Path,
                    defaults: dict[str, Any] | None = None) -> str:
    """Refuse to resume ``path`` (trained with ``saved``) under settings that change the experiment; return the
    changes it allows, as `trainer.lr: 0.001 -> 0.01, ...` ("" for none), for the resume's log line: the run's
    checkpoints and metrics.json then hold the new values only, while TensorBoard's hparams table keeps the first
    start's (TensorBoard reads the first hparams a run folder's events hold; see tracking.RunLogger).

    A key only ``now`` has is an option vdrnn added since the checkpoint was written; the run trained as its
    default (``defaults``: dotted key -> default, :func:`vdrnn.config.option_defaults`) says, so only another value
    is a change. Keys only ``saved`` has are options vdrnn dropped since: not a change."""
    before, after = flatten(saved), flatten(now)
    defaults = defaults or {}
    before.update({k: defaults[k] for k in after.keys() - before.keys() if k in defaults})
    fixed = MC_SELECTION_SETTINGS if before.get("trainer.select") == "mc" else ()
    differ = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    changed = [k for k in differ if not key_among(k, RESUMABLE_CHANGES) or key_among(k, fixed)]

    def listed(keys: list[str]) -> str:
        return ", ".join(f"{k}: {shown(before[k])} -> {shown(after[k])}" for k in keys)

    if changed:
        # init_from starts a new run from a checkpoint's weights; sentiment runs do not take it.
        weights = " (init_from=<checkpoint> starts from its weights)" if saved.get("data", {}).get("name") == "ptb" else ""
        raise ConfigError(f"cannot resume {path} with other settings ({listed(changed)}). Resume with the run's own "
                          f"settings, or start a new run in a new output dir{weights}")
    return listed([k for k in differ if k != "resume"])


def shown(value: Any) -> str:
    """A flattened config value as an error quotes it: ``'sgd'``, ``0.3``, and None (which flatten writes as the
    string "null", for TensorBoard) as ``null``."""
    return "null" if value == "null" else repr(value)


class EpochTrainer:
    """Base class of the task trainers; subclasses set ``selector`` and implement the hooks below."""

    selector = "loss"  # name of the validation score that picks best.pt; lower is better
    train_examples: int  # set by setup(): what the training loss averages over (the KL term's N)

    def __init__(self, cfg, run_dir: Path, raw_config: dict[str, Any]):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.raw_config = raw_config
        self.device = prepare_device(cfg.device, cfg.trainer.amp)
        torch.manual_seed(cfg.seed)
        # The checkpoint to continue from is read, and refused where its settings differ, before the data loads
        # (IMDB's takes ~15 s), so that a resume under other settings fails at once; fit() restores it.
        self.resume_from = self.resume_point()
        self.resume_read = self.read_resume(self.resume_from) if self.resume_from is not None else None
        self.vocab: list[str] = []
        self.model: torch.nn.Module = self.setup()
        self.optimizer = make_optimizer(self.model, cfg.trainer)
        self.average = WeightAverage(list(self.model.parameters()), cfg.trainer.ema) if cfg.trainer.ema else None
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.trainer.amp == "fp16")
        self.epoch = 0  # epochs completed
        self.step = 0  # optimizer steps taken
        self.best_valid = math.inf
        self.train_seconds = 0.0
        self.run_seconds = 0.0  # training + validation, summed over resumes (trainer.max_minutes)

    # ----------------------------------------------------------------------------- task hooks
    def setup(self) -> torch.nn.Module:
        """Load the data (and set ``self.vocab``); return the model on ``self.device``."""
        raise NotImplementedError

    def steps_per_epoch(self) -> int:
        raise NotImplementedError

    def train_epoch(self, lr: float, logger: RunLogger, bar: tqdm) -> dict[str, float]:
        """One pass over the training data; returns at least ``train_loss``, ``wps``, ``epoch_seconds``."""
        raise NotImplementedError

    def validate(self) -> dict[str, float]:
        """Validation metrics, including ``self.selector``; ``test_*`` entries are logged as a per-epoch curve."""
        raise NotImplementedError

    def final_metrics(self) -> dict[str, Any]:
        """The test of the best checkpoint (loaded already): valid_*, test_*, test_*_mc, eval_seconds."""
        raise NotImplementedError

    def summary(self, record: dict[str, Any]) -> str:
        """The per-epoch log line's middle part."""
        raise NotImplementedError

    def evaluation_weights(self):
        """Context in which the model holds the weights to validate and keep: with ``trainer.ema``, their moving
        average (AWD's trainer has its own, ASGD's averages)."""
        if self.average is None:
            return nullcontext()
        return swapped_weights(self.average.params, self.average.averages())

    def after_validation(self, score: float) -> None:
        """Called after every epoch's validation (AWD: the switch to averaged SGD)."""

    def stopped_early(self) -> bool:
        """True once the task's own stopping rule has fired (AWD's fine-tuning)."""
        return False

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, payload: dict[str, Any]) -> None:
        pass

    # ----------------------------------------------------------------------------- steps
    def optimizer_step(self, loss: torch.Tensor) -> torch.Tensor:
        """Backward, global-norm clipping, the update and Gal's weight decay; returns the gradient norm."""
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.trainer.clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        finish_update(weights_of(self.model), self.cfg.trainer.gal_decay, self.model.noise_scales)
        return grad_norm

    def kl_term(self) -> torch.Tensor | None:
        """Kingma's KL per training example, times ``dropout.kl_weight``, to add to the mean training loss; None
        unless the dropout variances are learned (``dropout.learn_alpha``)."""
        if self.model.noise_scales is None:
            return None
        return self.model.noise_scales.kl() * self.kl_scale

    @property
    def kl_scale(self) -> float:
        return self.cfg.dropout.kl_weight / self.train_examples

    def train_loop(self, batches, step, lr: float, logger: RunLogger, bar: tqdm) -> dict[str, float]:
        """Run ``step(batch) -> (mean loss tensor, grad norm, weight, words)`` over an epoch's batches.

        The loss stays on the device and is read once per ``trainer.log_every`` steps (a NaN or
        infinite loss stops the run there); each read logs train/* to TensorBoard and the bar.
        Returns the epoch's ``train_loss`` (weighted mean), ``wps`` and ``epoch_seconds``.
        """
        window, totals = TrainWindow(self.device), {"loss": 0.0, "weight": 0, "words": 0}
        started = time.perf_counter()
        grad_norm = None

        def read_window() -> None:
            weight, words = window.weight, window.words
            mean_loss, wps = window.read()
            if not math.isfinite(mean_loss):
                raise self.diverged(f"training loss is {mean_loss} at step {self.step}")
            # train/loss is the window's mean; train/grad_norm the norm (before clipping) of this step alone: a sample,
            # since a mean would read every step's norm off the device; train/lr the epoch's base lr.
            logger.scalars({"train/loss": mean_loss, **self.loss_scalars(mean_loss), "train/lr": lr,
                            "train/grad_norm": float(grad_norm), "train/wps": wps}, self.step)
            bar.set_postfix(loss=f"{mean_loss:.4f}", wps=f"{wps:,.0f}", lr=f"{lr:.4g}")
            totals["loss"] += mean_loss * weight
            totals["weight"] += weight
            totals["words"] += words

        for batch in batches:
            loss, grad_norm, weight, words = step(batch)
            self.step += 1
            if self.average is not None:  # here, not in optimizer_step: the LM's graphed step bypasses that
                self.average.update()
            window.add(loss, weight, words)
            bar.update(1)
            if window.steps == self.cfg.trainer.log_every:
                read_window()
            if self.step_cap_reached():
                break
        if window.steps:
            read_window()
        seconds = time.perf_counter() - started
        return {"train_loss": totals["loss"] / totals["weight"], "wps": totals["words"] / seconds,
                "epoch_seconds": seconds}

    def loss_scalars(self, mean_loss: float) -> dict[str, float]:
        """Extra train/* scalars derived from the window's mean loss (the LM's perplexity)."""
        return {}

    def time_limit_reached(self) -> bool:
        limit = self.cfg.trainer.max_minutes
        return limit is not None and self.run_seconds >= 60 * limit

    def step_cap_reached(self) -> bool:
        return self.cfg.trainer.max_steps is not None and self.step >= self.cfg.trainer.max_steps

    def diverged(self, what: str) -> TrainingDiverged:
        last = self.run_dir / checkpoint.LAST
        kept = (f"The run stopped without overwriting its checkpoints ({last} is the last good one)" if last.exists()
                else "The run stopped before its first checkpoint")
        fixes = "Lower trainer.lr or trainer.clip" + (", or use trainer.amp=off" if self.cfg.trainer.amp != "off" else "")
        return TrainingDiverged(f"training diverged in epoch {self.epoch + 1}: {what}. {kept}. {fixes}")

    # ----------------------------------------------------------------------------- checkpoints
    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng_state(self.device),
            "epoch": self.epoch,
            "step": self.step,
            "best_valid": self.best_valid,
            "train_seconds": self.train_seconds,
            "run_seconds": self.run_seconds,
            "vocab": self.vocab,
            "config": self.raw_config,
            **({"weight_average": self.average.state_dict()} if self.average is not None else {}),
            **self.extra_state(),
        }

    def read_resume(self, path: Path) -> tuple[dict[str, Any], str]:
        """The checkpoint ``path`` to continue from and the settings this run changes (``key: old -> new, ...``, or
        ""); refused where it is not one (a best.pt) or was trained under settings this run may not change."""
        payload = checkpoint.load(path)
        if not payload.get("resumable", True):
            raise CheckpointError(
                f"{path} holds the weights as validated (under averaged SGD, the averages), not the state to continue "
                f"training from: resume from the run's last.pt, or start a new run from these weights with "
                f"init_from={path}")
        return payload, check_resumable(payload["config"], self.raw_config, path, option_defaults(self.cfg))

    def restore(self, path: Path, read: tuple[dict[str, Any], str] | None = None) -> None:
        """Continue from the checkpoint ``path`` (``read``: what read_resume returned for it, else read now)."""
        payload, changes = self.read_resume(path) if read is None else read
        checkpoint.check_vocab(payload, self.vocab, path, "resume with the same data.* settings, or use a new output dir")
        checkpoint.load_model_state(self.model, payload, path, "resume with the run's own model.* and cell "
                                    "settings, or start a new run in a new output dir")
        if self.average is not None and "weight_average" not in payload:  # from before trainer.ema existed
            raise CheckpointError(f"{path} holds no weight average to continue (it was trained before trainer.ema "
                                  f"existed): resume it with trainer.ema=0")
        try:
            self.load_extra_state(payload)  # may replace the optimizer (AWD) before its state is loaded
            self.optimizer.load_state_dict(payload["optimizer"])
            if self.average is not None:
                self.average.load_state_dict(payload["weight_average"])
            # A run saved without fp16 loss scaling has an empty scaler state, which an enabled GradScaler refuses
            # to load; switching to trainer.amp=fp16 on resume then starts loss scaling afresh, as a new run would.
            if payload["scaler"]:
                self.scaler.load_state_dict(payload["scaler"])
            set_rng_state(payload["rng"], self.device)
            self.epoch, self.step = payload["epoch"], payload["step"]
            self.best_valid, self.train_seconds = payload["best_valid"], payload["train_seconds"]
        except (KeyError, ValueError, RuntimeError) as err:  # an entry missing, or shaped for another optimizer
            what = f"it has no {err.args[0]!r} entry" if isinstance(err, KeyError) else str(err).splitlines()[0][:200]
            raise CheckpointError(
                f"cannot resume {path}: {what}. It does not hold the training state this run continues from (it was "
                f"saved by another vdrnn version or under other settings). Pass resume=<the run's own last.pt>, or "
                f"start a fresh run in a new output dir (init_from={path} starts from its weights)") from err
        self.run_seconds = payload.get("run_seconds", self.train_seconds)  # checkpoints from before max_minutes
        log.info("resumed from %s after epoch %d (step %d)%s", path, self.epoch, self.step,
                 f", with changed settings: {changes}" if changes else "")

    @property
    def resuming(self) -> bool:
        """Will :meth:`fit` continue from a checkpoint (this folder's last.pt, or ``resume=``)?"""
        return self.resume_from is not None

    def resume_point(self) -> Path | None:
        """This run folder's own last.pt if it has one, else ``resume=``.

        The folder's own checkpoint wins so that rerunning a command after a crash continues the run
        where it stopped, instead of going back to ``resume=`` and overwriting the newer progress.
        """
        last = self.run_dir / checkpoint.LAST
        if last.exists():
            if self.cfg.resume and Path(self.cfg.resume).expanduser().resolve() != last.resolve():
                log.warning("%s exists, so the run continues from it, not from resume=%s (to start again from "
                            "that one, use a new output dir)", last, self.cfg.resume)
            return last
        return Path(self.cfg.resume) if self.cfg.resume else None

    def adopt(self, source: Path) -> None:
        """Resuming another folder's checkpoint: copy that run's best.pt and per-epoch history (metrics.jsonl) here
        too, so that the final test loads the best weights so far (not this run's last ones) and the history is
        whole. TensorBoard's curves stay in the source folder: this folder's start at the resumed step.

        This folder has no last.pt (else the run would continue from it), so a best.pt or history already here is
        an attempt's that died before its first last.pt: the source's replace them, and without one in the source
        they go (a stale best.pt would be tested as this run's best)."""
        for name in (checkpoint.BEST, "metrics.jsonl"):
            src, dst = source.parent / name, self.run_dir / name
            if src.exists():
                checkpoint.copy(src, dst)
            else:
                dst.unlink(missing_ok=True)

    def keep_newer_best(self) -> None:
        """An epoch saves best.pt, then last.pt: a crash between the two leaves a best.pt from after the state we
        resume from. That epoch is trained again and may score worse this time (GPU kernels are not bit-exact), so
        its better weights stay the run's best: the redone epochs must beat the score they validated to."""
        best = self.run_dir / checkpoint.BEST
        if not best.exists():
            return
        try:
            saved = checkpoint.load(best)
        except CheckpointError as err:  # not a reason to stop resuming from last.pt; the final test reports it
            log.warning("%s", err)
            return
        if saved.get("epoch", 0) > self.epoch and saved.get("best_valid", math.inf) < self.best_valid:
            log.warning("%s is from epoch %d, after the resumed epoch %d (a crash before last.pt was written): it "
                        "stays the best so far, at valid %s %.4g. That epoch is trained again, and its history "
                        "(metrics.jsonl, TensorBoard) will be the new attempt's", best, saved["epoch"], self.epoch,
                        self.selector, saved["best_valid"])
            self.best_valid = saved["best_valid"]

    def truncate_history(self) -> None:
        """Drop per-epoch records written after the checkpoint we resume from (a crash between the two), or all of
        them on a fresh start (an attempt that died before its first last.pt)."""
        path = self.run_dir / "metrics.jsonl"
        if path.exists():
            kept = [r for r in read_jsonl(path) if r["epoch"] <= self.epoch]
            write_atomically(path, "".join(json.dumps(r) + "\n" for r in kept))

    # ----------------------------------------------------------------------------- the loop
    def fit(self) -> dict[str, Any]:
        cfg = self.cfg
        resume = self.resume_from
        if resume is not None:
            self.restore(resume, self.resume_read)
            self.resume_read = None  # its tensors are the model's and the optimizer's now
            if resume.expanduser().resolve().parent != self.run_dir.resolve():
                self.adopt(resume.expanduser())
            self.keep_newer_best()
        # What an earlier attempt in this folder logged after the state we start from (everything, on a fresh
        # start) goes, from metrics.jsonl and from TensorBoard's curves, so that no epoch or step appears twice.
        self.truncate_history()
        logger = RunLogger(self.run_dir, self.raw_config, self.final_tags(), purge_step=self.step + 1)
        n_params = sum(p.numel() for p in self.model.parameters())
        log.info("model: %s, %.2fM parameters; dropout %s; device %s; output %s", self.describe_model(),
                 n_params / 1e6, cfg.dropout.scheme, self.device, self.run_dir)
        try:
            while (self.epoch < cfg.trainer.epochs and not self.step_cap_reached() and not self.stopped_early()
                   and not self.time_limit_reached()):
                self.run_epoch(logger)
            if self.step_cap_reached() and self.epoch < cfg.trainer.epochs:
                # Checkpoints mark the ends of epochs, so an epoch the cap cut short counts as done: a rerun with a
                # higher cap goes on with the next one, and the run then differs from one without the cap.
                log.info("stopped at step %d, trainer.max_steps (the whole run's cap, for smoke runs): epoch %d of %d is "
                         "the last, and counts as done where the cap cut it short, so a rerun with a higher cap goes "
                         "on with epoch %d; for results, run without the cap in a new output dir", self.step,
                         self.epoch, cfg.trainer.epochs, self.epoch + 1)
            metrics = self.test(logger)
        finally:
            logger.close()
        return metrics

    def describe_model(self) -> str:
        m = self.cfg.model
        return f"{m.num_layers} x {m.hidden_size} {m.cell} ({m.gates} gates)"

    def run_epoch(self, logger: RunLogger) -> None:
        cfg = self.cfg
        epoch = self.epoch + 1
        lr = cfg.trainer.lr_at(epoch)
        steps = self.steps_per_epoch()
        if cfg.trainer.max_steps is not None:  # the bar's end is where the step cap stops this epoch
            steps = max(0, min(steps, cfg.trainer.max_steps - self.step))
        bar = tqdm(total=steps, desc=f"epoch {epoch}/{cfg.trainer.epochs}", unit="step",
                   disable=not cfg.trainer.progress, leave=False, dynamic_ncols=True)
        started = time.perf_counter()
        with bar:
            stats = self.train_epoch(lr, logger, bar)
        self.train_seconds += time.perf_counter() - started
        with self.evaluation_weights():
            valid = self.validate()
            # None where the run holds no validation data out (a sentiment run with data.valid_fraction=0, which
            # needs trainer.select=last): then nothing is validated and the last epoch is kept.
            score = valid.get(self.selector)
            if score is not None and not math.isfinite(score):
                raise self.diverged(f"validation {self.selector} is {score}")
            self.epoch = epoch
            if self.cfg.trainer.select == "last":  # a fixed budget: every epoch replaces best.pt
                improved = True
                self.best_valid = math.nan if score is None else score
            else:
                improved = score < self.best_valid
                self.best_valid = min(self.best_valid, score)
            if improved:  # the weights as validated
                # Marked: taken inside evaluation_weights (ASGD's averages) and before after_validation, it is not
                # the state to continue training from; last.pt is.
                checkpoint.save({**self.state(), "resumable": False}, self.run_dir / checkpoint.BEST)
        self.after_validation(score)
        self.run_seconds += time.perf_counter() - started
        # validate() may add the test metrics of this epoch's weights (test_*): a curve, not a result.
        curve = {k.removeprefix("test_"): v for k, v in valid.items() if k.startswith("test_")}
        valid = {k: v for k, v in valid.items() if not k.startswith("test_")}
        noise = self.model.noise_scales.summary() if self.model.noise_scales is not None else {}
        record = {"epoch": epoch, "step": self.step, "lr": lr, **{f"valid_{k}": v for k, v in valid.items()},
                  **{f"test_{k}": v for k, v in curve.items()}, **stats, **noise}
        logger.scalars({**{f"valid/{k}": v for k, v in valid.items()},
                        **{f"test_per_epoch/{k}": v for k, v in curve.items()},
                        **{f"noise/{k}": v for k, v in noise.items()},
                        **({f"best/valid_{self.selector}": self.best_valid} if score is not None else {})}, self.step)
        logger.epoch(record)
        log.info("epoch %d/%d  lr %.4g  %s  %s words/s  %.0fs%s", epoch, cfg.trainer.epochs, lr, self.summary(record),
                 f"{stats['wps']:,.0f}", stats["epoch_seconds"],
                 "  (best)" if improved and cfg.trainer.select != "last" else "")
        checkpoint.save(self.state(), self.run_dir / checkpoint.LAST)

    # ----------------------------------------------------------------------------- testing
    def final_tags(self) -> dict[str, str]:
        """TensorBoard tag -> metrics.json key of the final numbers shown in the HParams table."""
        return {f"best/valid_{self.selector}": f"best_valid_{self.selector}"}

    def test(self, logger: RunLogger) -> dict[str, Any]:
        best = self.run_dir / checkpoint.BEST
        if best.exists():
            checkpoint.load_model_state(self.model, checkpoint.load(best), best, "it is another run's best.pt: "
                                        "move it out of this run's folder")
        elif self.epoch > 0:  # every finished epoch writes or keeps a best.pt, yet it is gone
            kept = ("its last epoch's weights (trainer.select=last)" if self.cfg.trainer.select == "last" else
                    f"the weights that validated to {self.selector} {self.best_valid:.4g}")
            raise CheckpointError(
                f"{best} is missing although the run kept there {kept}; testing the weights in memory instead "
                f"would report the wrong model. Put that run's best.pt there (or pass checkpoint=<its best.pt> to "
                f"`vdrnn eval`)")
        metrics = self.final_metrics()
        if self.model.noise_scales is not None:  # the tested model's learned dropout variances
            metrics["noise"] = self.model.noise_scales.summary()
        history = self.run_dir / "metrics.jsonl"
        records = read_jsonl(history) if history.exists() else []
        metrics.update({
            # The score best.pt validated to; None where the run validated nothing (data.valid_fraction=0).
            f"best_valid_{self.selector}": None if math.isnan(self.best_valid) else self.best_valid,
            "epochs": self.epoch,
            "steps": self.step,
            "train_seconds": self.train_seconds,
            # Stopped by trainer.max_minutes, not by the epochs, the step cap or early stopping running out first.
            "time_limited": (self.time_limit_reached() and self.epoch < self.cfg.trainer.epochs
                             and not self.step_cap_reached() and not self.stopped_early()),
            "wps": sum(r["wps"] for r in records) / len(records) if records else None,
            "device": device_name(self.device),
            # Beside wps: runs side by side on one host train at very different speeds with their threads shared
            # out or not (scripts/reproduce.py's job_environment).
            "cpu_threads": torch.get_num_threads(),
            "smoke": is_smoke(self.raw_config),
            "paper": self.raw_config.get("paper"),
            "config": self.raw_config,
        })
        # One step past the last training step: a rerun of a finished run, or a resume for more epochs, purges
        # TensorBoard from there (purge_step), so its new test replaces this one instead of adding a second point.
        logger.final(metrics, self.step + 1)
        return metrics
