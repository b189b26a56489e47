"""Training a language model: truncated BPTT with SGD, as Zaremba et al. (2014) and Gal's code.

One epoch reads the training stream as ``batch_size`` parallel columns (see ``ptb.batchify``) in
minibatches of ``bptt`` steps; the hidden state starts at zero each epoch and is carried (detached)
from one minibatch to the next, while dropout masks are redrawn for every minibatch. After each
epoch: validation perplexity, ``last.pt`` and, if validation improved, ``best.pt``. At the end, the
best checkpoint is tested (weight scaling, and MC dropout with ``eval=mc``).

Resuming from ``last.pt`` restores the model, optimizer, RNG states and progress exactly, so an
interrupted run and an uninterrupted one give the same numbers (tests/test_resume.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

from vdrnn import checkpoint
from vdrnn.config import RunConfig, TrainerConfig, from_dict
from vdrnn.data import ptb
from vdrnn.dropout import make_dropout
from vdrnn.errors import ConfigError, TrainingDiverged
from vdrnn.evaluate import autocast, mc_perplexity, perplexity
from vdrnn.model import LanguageModel, detach_state
from vdrnn.tracking import RunLogger, read_jsonl

log = logging.getLogger("vdrnn")


def exp_or_inf(loss: float) -> float:
    """Perplexity from a mean NLL, saturating at inf instead of raising OverflowError."""
    return math.exp(loss) if loss < 700 else math.inf


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        log.warning("CUDA is not available: running on the CPU, which is slow for the medium and large models")
        return torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name} but CUDA is not available here; use device=auto or device=cpu")
    return device


def build_model(cfg: RunConfig, vocab_size: int, device: torch.device) -> LanguageModel:
    return LanguageModel(vocab_size, cfg.model, make_dropout(cfg.dropout)).to(device)


def load_corpus(cfg: RunConfig) -> ptb.Corpus:
    corpus = ptb.load(cfg.data.root, cfg.data.allow_custom_corpus)
    if cfg.data.eval_max_tokens:  # smoke runs only; recorded in metrics.json
        cap = cfg.data.eval_max_tokens
        corpus.valid, corpus.test = corpus.valid[:cap], corpus.test[:cap]
    return corpus


def rng_state(device: torch.device) -> dict[str, Any]:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def make_optimizer(model: torch.nn.Module, trainer: TrainerConfig, averaging: bool = False) -> torch.optim.Optimizer:
    """SGD, Adam, or (ntasgd) SGD that becomes averaged SGD; weight_decay_mode=l2 puts the decay in it."""
    l2 = trainer.weight_decay if trainer.weight_decay_mode == "l2" else 0.0
    if trainer.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=trainer.lr, weight_decay=l2)
    if averaging:  # Merity et al.'s ASGD: average from the switch on (t0=0), no lr decay (lambd=0)
        return torch.optim.ASGD(model.parameters(), lr=trainer.lr, t0=0, lambd=0.0, weight_decay=l2)
    return torch.optim.SGD(model.parameters(), lr=trainer.lr, weight_decay=l2)


def apply_weight_decay(model: torch.nn.Module, trainer: TrainerConfig) -> None:
    """Gal's decay: w <- w - lambda * w after the SGD step, independent of the learning rate."""
    if trainer.weight_decay > 0 and trainer.weight_decay_mode == "gal":
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.0 - trainer.weight_decay)


class Trainer:
    def __init__(self, cfg: RunConfig, run_dir: Path, raw_config: dict[str, Any]):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.raw_config = raw_config
        self.device = resolve_device(cfg.device)
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        if cfg.trainer.amp == "fp16" and self.device.type != "cuda":
            raise ConfigError("trainer.amp=fp16 needs CUDA; use trainer.amp=bf16 or off on the CPU")
        torch.manual_seed(cfg.seed)
        self.corpus = load_corpus(cfg)
        self.model = build_model(cfg, len(self.corpus.vocab), self.device)
        self.optimizer = make_optimizer(self.model, cfg.trainer)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.trainer.amp == "fp16")
        self.epoch = 0  # epochs completed
        self.step = 0  # optimizer steps taken
        self.best_valid = math.inf
        self.train_seconds = 0.0
        self.averaging = False  # ntasgd: switched to averaged SGD
        self.valid_history: list[float] = []  # every epoch's validation perplexity (NT-ASGD's trigger)

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
            "averaging": self.averaging,
            "valid_history": self.valid_history,
            "vocab": self.corpus.vocab,
            "config": self.raw_config,
        }

    def restore(self, path: Path) -> None:
        payload = checkpoint.load(path)
        checkpoint.load_model_state(self.model, payload, path)
        self.averaging, self.valid_history = payload["averaging"], payload["valid_history"]
        if self.averaging:
            self.optimizer = make_optimizer(self.model, self.cfg.trainer, averaging=True)
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scaler.load_state_dict(payload["scaler"])
        set_rng_state(payload["rng"], self.device)
        self.epoch, self.step = payload["epoch"], payload["step"]
        self.best_valid, self.train_seconds = payload["best_valid"], payload["train_seconds"]
        log.info("resumed from %s after epoch %d (step %d)", path, self.epoch, self.step)

    def find_resume_point(self) -> Path | None:
        if self.cfg.resume:
            return Path(self.cfg.resume)
        last = self.run_dir / checkpoint.LAST
        return last if last.exists() else None

    # ----------------------------------------------------------------------------- training
    def minibatches(self, data: torch.Tensor):
        """Fixed-length BPTT minibatches, or AWD's random lengths (``data.variable_bptt``)."""
        d = self.cfg.data
        if not d.variable_bptt:
            yield from ptb.minibatches(data, d.bptt)
            return
        # Merity et al.: mostly bptt, sometimes bptt/2, jittered by N(0, 5), at least 5 steps; the
        # draws come from the CPU generator, whose state the checkpoints keep.
        start = 0
        while start < data.shape[0] - 1:
            base = d.bptt if torch.rand(()).item() < 0.95 else d.bptt / 2
            length = min(max(5, int(torch.normal(float(base), 5.0, ()).item())), data.shape[0] - 1 - start)
            yield data[start : start + length], data[start + 1 : start + 1 + length]
            start += length

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor, state, lr: float):
        """One SGD step: (mean NLL of the minibatch, gradient norm, new state), without host sync."""
        cfg, model = self.cfg, self.model
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with autocast(self.device, cfg.trainer.amp):
            logits, state, (raw, dropped) = model(inputs, state, return_outputs=True)
        nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        loss = nll
        if cfg.trainer.ar > 0:  # activation regularization on the dropped output (Merity et al.)
            loss = loss + cfg.trainer.ar * dropped.float().pow(2).mean()
        if cfg.trainer.tar > 0:  # temporal AR: slowness of the undropped output
            loss = loss + cfg.trainer.tar * (raw[1:] - raw[:-1]).float().pow(2).mean()
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.trainer.clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        apply_weight_decay(model, cfg.trainer)
        return nll.detach(), grad_norm, detach_state(state)

    def train_epoch(self, data: torch.Tensor, lr: float, logger: RunLogger, bar: tqdm) -> dict[str, float]:
        cfg = self.cfg
        self.model.train()
        state = self.model.initial_state(cfg.data.batch_size, self.device)
        window = {"loss": torch.zeros((), device=self.device, dtype=torch.float64), "tokens": 0, "steps": 0,
                  "start": time.perf_counter()}
        totals = {"loss": 0.0, "tokens": 0}
        epoch_start = window["start"]
        grad_norm = None

        def flush() -> None:
            # The one host sync of a window: reading the loss also catches NaN early.
            mean_loss = window["loss"].item() / window["tokens"]
            if not math.isfinite(mean_loss):
                raise self._diverged(f"training loss is {mean_loss} at step {self.step}")
            wps = window["tokens"] / (time.perf_counter() - window["start"])
            logger.scalars({"train/loss": mean_loss, "train/ppl": exp_or_inf(mean_loss), "train/lr": lr,
                            "train/grad_norm": float(grad_norm), "train/wps": wps}, self.step)
            bar.set_postfix(loss=f"{mean_loss:.3f}", ppl=f"{exp_or_inf(mean_loss):.1f}", wps=f"{wps:,.0f}",
                            lr=f"{lr:.4g}")
            totals["loss"] += mean_loss * window["tokens"]
            totals["tokens"] += window["tokens"]
            window.update(tokens=0, steps=0, start=time.perf_counter())
            window["loss"].zero_()

        for inputs, targets in self.minibatches(data):
            # AWD rescales the learning rate with the sequence length, so short minibatches count less.
            step_lr = lr * inputs.shape[0] / cfg.data.bptt if cfg.data.variable_bptt else lr
            loss, grad_norm, state = self.train_step(inputs, targets, state, step_lr)
            self.step += 1
            window["loss"] += loss.double() * targets.numel()
            window["tokens"] += targets.numel()
            window["steps"] += 1
            bar.update(1)
            if window["steps"] == cfg.trainer.log_every:
                flush()
            if self._step_cap_reached():
                break
        if window["tokens"]:
            flush()
        seconds = time.perf_counter() - epoch_start
        self.train_seconds += seconds
        mean = totals["loss"] / totals["tokens"]
        return {"train_loss": mean, "train_ppl": exp_or_inf(mean), "wps": totals["tokens"] / seconds,
                "epoch_seconds": seconds}

    def validate(self) -> float:
        d = self.cfg.data
        return perplexity(self.model, self.corpus.valid, d.eval_batch_size, d.bptt, self.cfg.trainer.amp)

    def fit(self) -> dict[str, Any]:
        cfg = self.cfg
        resume = self.find_resume_point()
        if resume is not None:
            self.restore(resume)
            self._truncate_history()
        logger = RunLogger(self.run_dir, self.raw_config, purge_step=self.step + 1 if resume else None)
        data = ptb.batchify(self.corpus.train, cfg.data.batch_size).to(self.device)
        steps_per_epoch = math.ceil((data.shape[0] - 1) / cfg.data.bptt)
        n_params = sum(p.numel() for p in self.model.parameters())
        log.info("model: %d x %d %s (%s gates), %.1fM parameters; dropout %s; device %s; output %s",
                 cfg.model.num_layers, cfg.model.hidden_size, cfg.model.cell, cfg.model.gates, n_params / 1e6,
                 cfg.dropout.scheme, self.device, self.run_dir)
        try:
            while self.epoch < cfg.trainer.epochs and not self._step_cap_reached():
                epoch = self.epoch + 1
                lr = cfg.trainer.lr_at(epoch)
                bar = tqdm(total=steps_per_epoch, desc=f"epoch {epoch}/{cfg.trainer.epochs}", unit="step",
                           disable=not cfg.trainer.progress, leave=False, dynamic_ncols=True)
                with bar:
                    stats = self.train_epoch(data, lr, logger, bar)
                with self.averaged_weights():  # under averaged SGD, validate and keep the averages
                    valid_ppl = self.validate()
                    if not math.isfinite(valid_ppl):
                        raise self._diverged(f"validation perplexity is {valid_ppl}")
                    self.epoch = epoch
                    improved = valid_ppl < self.best_valid
                    self.best_valid = min(self.best_valid, valid_ppl)
                    if improved:
                        checkpoint.save(self.state(), self.run_dir / checkpoint.BEST)
                self.maybe_start_averaging(valid_ppl)
                logger.scalars({"valid/ppl": valid_ppl, "best/valid_ppl": self.best_valid}, self.step)
                record = {"epoch": epoch, "step": self.step, "lr": lr, "valid_ppl": valid_ppl, **stats}
                logger.epoch(record)
                log.info("epoch %d/%d  lr %.4g  train ppl %.2f  valid ppl %.2f  %s words/s  %.0fs%s", epoch,
                         cfg.trainer.epochs, lr, stats["train_ppl"], valid_ppl, f"{stats['wps']:,.0f}",
                         stats["epoch_seconds"], "  (best)" if improved else "")
                checkpoint.save(self.state(), self.run_dir / checkpoint.LAST)
            metrics = self.test(logger)
        finally:
            logger.close()
        return metrics

    @contextmanager
    def averaged_weights(self):
        """Under averaged SGD, put the running averages in the model for evaluation, then put back."""
        if not self.averaging:
            yield
            return
        params = [p for p in self.model.parameters() if "ax" in self.optimizer.state[p]]
        current = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p in params:
                p.copy_(self.optimizer.state[p]["ax"])
        try:
            yield
        finally:
            with torch.no_grad():
                for p, value in zip(params, current, strict=True):
                    p.copy_(value)

    def maybe_start_averaging(self, valid_ppl: float) -> None:
        """NT-ASGD (Merity et al.): switch SGD to averaged SGD once validation is worse than the best
        of all epochs but the last ``nonmono``."""
        t = self.cfg.trainer
        history, self.valid_history = self.valid_history, [*self.valid_history, valid_ppl]
        if t.optimizer == "ntasgd" and not self.averaging and len(history) > t.nonmono \
                and valid_ppl > min(history[: -t.nonmono]):
            log.info("switching to averaged SGD after epoch %d (NT-ASGD)", self.epoch)
            self.optimizer = make_optimizer(self.model, t, averaging=True)
            self.averaging = True

    def _diverged(self, what: str) -> TrainingDiverged:
        return TrainingDiverged(
            f"training diverged in epoch {self.epoch + 1}: {what}. The run stopped without overwriting its "
            f"checkpoints ({self.run_dir / checkpoint.LAST} is the last good one). Lower trainer.lr or "
            f"trainer.clip, or use trainer.amp=off"
        )

    def _step_cap_reached(self) -> bool:
        return self.cfg.trainer.max_steps is not None and self.step >= self.cfg.trainer.max_steps

    def _truncate_history(self) -> None:
        """Drop per-epoch records written after the checkpoint we resume from (a crash between the two)."""
        path = self.run_dir / "metrics.jsonl"
        if path.exists():
            kept = [r for r in read_jsonl(path) if r["epoch"] <= self.epoch]
            path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    # ----------------------------------------------------------------------------- testing
    def test(self, logger: RunLogger) -> dict[str, Any]:
        cfg = self.cfg
        best = self.run_dir / checkpoint.BEST
        if best.exists():
            checkpoint.load_model_state(self.model, checkpoint.load(best), best)
        metrics = evaluate_all(self.model, self.corpus, cfg)
        metrics.update({
            "best_valid_ppl": self.best_valid,
            "epochs": self.epoch,
            "steps": self.step,
            "train_seconds": self.train_seconds,
            "wps": self._mean_wps(),
            "device": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu",
            "smoke": cfg.trainer.max_steps is not None or cfg.data.eval_max_tokens is not None,
            "paper": self.raw_config.get("paper"),
            "config": self.raw_config,
        })
        logger.final(metrics, self.step)
        log.info("test ppl %.2f (valid %.2f)%s", metrics["test_ppl"], metrics["valid_ppl"],
                 f", MC test ppl {metrics['test_ppl_mc']:.2f} ({cfg.eval.samples} samples)"
                 if "test_ppl_mc" in metrics else "")
        return metrics

    def _mean_wps(self) -> float | None:
        path = self.run_dir / "metrics.jsonl"
        records = read_jsonl(path) if path.exists() else []
        return sum(r["wps"] for r in records) / len(records) if records else None


def evaluate_all(model: LanguageModel, corpus: ptb.Corpus, cfg: RunConfig) -> dict[str, Any]:
    """Valid and test perplexity with weight scaling, plus MC test perplexity with ``eval=mc``."""
    d, e, amp = cfg.data, cfg.eval, cfg.trainer.amp
    started = time.perf_counter()
    metrics: dict[str, Any] = {
        "valid_ppl": perplexity(model, corpus.valid, d.eval_batch_size, d.bptt, amp),
        "test_ppl": perplexity(model, corpus.test, d.test_batch_size, d.bptt, amp),
    }
    if e.mode == "mc":
        mc_started = time.perf_counter()
        metrics["test_ppl_mc"] = mc_perplexity(model, corpus.test, e.samples, e.batch, d.bptt, e.word_dropout, amp)
        metrics["mc_samples"] = e.samples
        metrics["mc_seconds"] = time.perf_counter() - mc_started
    metrics["eval_seconds"] = time.perf_counter() - started
    return metrics


def run(raw: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """`vdrnn train` on PTB: ``raw`` is the composed config as plain containers."""
    return Trainer(from_dict(raw), run_dir, raw).fit()


def evaluate(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """`vdrnn eval`: rebuild the checkpoint's model and evaluate it under the given eval, device and data root."""
    cfg = from_dict(raw)
    payload = checkpoint.load(path)
    trained = from_dict(payload["config"])
    device = resolve_device(cfg.device)
    # The model and data settings are the checkpoint's; evaluation, device and data location are ours.
    data = dataclasses.replace(trained.data, root=cfg.data.root, eval_max_tokens=cfg.data.eval_max_tokens)
    run_cfg = dataclasses.replace(trained, data=data, eval=cfg.eval, seed=cfg.seed, device=cfg.device)
    torch.manual_seed(cfg.seed)
    corpus = load_corpus(run_cfg)
    if corpus.vocab != payload["vocab"]:
        raise ConfigError(f"checkpoint {path} was trained on another vocabulary than the corpus found now")
    model = build_model(run_cfg, len(corpus.vocab), device)
    checkpoint.load_model_state(model, payload, path)
    metrics = evaluate_all(model, corpus, run_cfg)
    metrics.update({"checkpoint": str(path), "epoch": payload["epoch"]})
    return metrics
