"""Training a language model on PTB: truncated BPTT with SGD, as Zaremba et al. (2014) and Gal's code.

One epoch reads the training stream as ``batch_size`` parallel columns (see ``ptb.batchify``) in
minibatches of ``bptt`` steps; the hidden state starts at zero each epoch and is carried (detached)
from one minibatch to the next, while dropout masks are redrawn for every minibatch. The epoch loop,
checkpoints and resume are :class:`vdrnn.runner.EpochTrainer`'s; the best checkpoint is tested with
weight scaling, and with MC dropout under ``eval=mc``. AWD-LSTM's pieces live here too: AR/TAR,
variable BPTT lengths and NT-ASGD.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

from vdrnn import checkpoint
from vdrnn.config import RunConfig, from_dict
from vdrnn.data import ptb
from vdrnn.dropout import make_dropout
from vdrnn.errors import DataError
from vdrnn.evaluate import autocast, exp_or_inf, mc_perplexity, perplexity
from vdrnn.graphed import GraphedTrainStep
from vdrnn.model import LanguageModel, detach_state
from vdrnn.optim import make_optimizer, swapped_weights
from vdrnn.runner import EpochTrainer, evaluate_checkpoint
from vdrnn.tracking import RunLogger

log = logging.getLogger("vdrnn")


def build_model(cfg: RunConfig, vocab_size: int, device: torch.device) -> LanguageModel:
    return LanguageModel(vocab_size, cfg.model, make_dropout(cfg.dropout)).to(device)


def load_corpus(cfg: RunConfig) -> ptb.Corpus:
    corpus = ptb.load(cfg.data.root, cfg.data.allow_custom_corpus)
    d = cfg.data
    if d.eval_max_tokens:  # smoke runs only; recorded in metrics.json
        corpus.valid, corpus.test = corpus.valid[:d.eval_max_tokens], corpus.test[:d.eval_max_tokens]
    # Each split is read as `batch` parallel streams; a stream needs two tokens (an input and its target).
    for split, stream, key, batch in (("training", corpus.train, "batch_size", d.batch_size),
                                      ("validation", corpus.valid, "eval_batch_size", d.eval_batch_size),
                                      ("test", corpus.test, "test_batch_size", d.test_batch_size)):
        if len(stream) < 2 * batch:
            fix = f"lower data.{key}" + (" or raise data.eval_max_tokens" if d.eval_max_tokens and key != "batch_size"
                                         else "")
            raise DataError(f"the {split} split has {len(stream)} tokens, too few for data.{key}={batch} streams of "
                            f"at least 2 tokens: {fix}")
    return corpus


class LanguageModelTrainer(EpochTrainer):
    selector = "ppl"

    def setup(self) -> LanguageModel:
        self.corpus = load_corpus(self.cfg)
        self.vocab = self.corpus.vocab
        self.train_data = ptb.batchify(self.corpus.train, self.cfg.data.batch_size).to(self.device)
        self.train_examples = len(self.corpus.train)  # the tokens a learned-noise KL term is spread over
        self.averaging = self.cfg.trainer.optimizer == "asgd"  # averaged SGD (from the start, or after ntasgd's switch)
        self.valid_history: list[float] = []  # every epoch's validation perplexity (NT-ASGD's trigger)
        self.stopped = False  # trainer.stop_nonmono fired
        self._graphed: GraphedTrainStep | None = None  # made on first use, after a resume has loaded
        model = build_model(self.cfg, len(self.vocab), self.device)
        # Weights only: a new run (e.g. AWD's fine-tuning) starts from a trained model. A resume restores its own
        # weights instead, so it must not need the checkpoint it started from (moved or deleted since).
        if self.cfg.init_from and not self.resuming:
            payload = checkpoint.load(self.cfg.init_from)
            checkpoint.check_vocab(payload, self.vocab, self.cfg.init_from,
                                   "init_from needs a model trained on the same data and data.* settings")
            checkpoint.load_model_state(model, payload, self.cfg.init_from, "init_from loads the weights into "
                                        "the model this run builds: give it the checkpoint's model.* and cell settings")
            log.info("starting from the weights of %s (epoch %d)", self.cfg.init_from, payload["epoch"])
        return model

    def steps_per_epoch(self) -> int:
        return math.ceil((self.train_data.shape[0] - 1) / self.cfg.data.bptt)

    def describe_model(self) -> str:
        m = self.cfg.model
        return f"{m.num_layers} x {m.hidden_size} {m.cell} ({m.gates} gates), sizes {m.layer_sizes()}"

    # ----------------------------------------------------------------------------- training
    def minibatches(self):
        """Fixed-length BPTT minibatches, or AWD's random lengths (``data.variable_bptt``)."""
        d, data = self.cfg.data, self.train_data
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
        """One eager step: (mean NLL of the minibatch, gradient norm, new state), without host sync."""
        cfg = self.cfg
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with autocast(self.device, cfg.trainer.amp):
            logits, state, (raw, dropped) = self.model(inputs, state, return_outputs=True)
        nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        kl = self.kl_term()
        loss = nll if kl is None else nll + kl  # per token
        # Zaremba's and Gal's code sum the batch-mean NLL over the BPTT steps: their lr 1 and clip 5 are
        # for that objective, 35 times the per-token mean (AWD's lr 30 is for the mean).
        loss = loss * inputs.shape[0] if cfg.trainer.loss == "sum_over_time" else loss
        if cfg.trainer.ar > 0:  # activation regularization on the dropped output (Merity et al.)
            loss = loss + cfg.trainer.ar * dropped.float().pow(2).mean()
        if cfg.trainer.tar > 0:  # temporal AR: slowness of the undropped output
            loss = loss + cfg.trainer.tar * (raw[1:] - raw[:-1]).float().pow(2).mean()
        grad_norm = self.optimizer_step(loss)
        return nll.detach(), grad_norm, detach_state(state)

    def graphed_step(self) -> GraphedTrainStep | None:
        """The whole step as one CUDA graph (:mod:`vdrnn.graphed`), where that step is the whole story:
        on CUDA, fixed BPTT length, no AR/TAR, plain SGD (Adam and ASGD, as built, refuse graph capture;
        NT-ASGD switches optimizer mid-run), no fp16 loss scaling. A ``trainer.ema`` average is updated after
        each replay, outside the graph (``train_loop``)."""
        t, d = self.cfg.trainer, self.cfg.data
        if t.cuda_graph == "off" or self.device.type != "cuda" or t.amp == "fp16" or d.variable_bptt \
                or t.ar > 0 or t.tar > 0 or t.optimizer != "sgd":
            return None
        if self._graphed is None:
            self._graphed = GraphedTrainStep(self.model, self.optimizer, t.clip, d.batch_size, d.bptt, t.gal_decay,
                                             t.amp, sum_over_time=t.loss == "sum_over_time", kl_scale=self.kl_scale)
        return self._graphed

    def train_epoch(self, lr: float, logger: RunLogger, bar: tqdm) -> dict[str, float]:
        cfg = self.cfg
        self.model.train()
        graphed = self.graphed_step()
        state = self.model.initial_state(cfg.data.batch_size, self.device)

        def step(batch):
            nonlocal state
            inputs, targets = batch
            # AWD rescales the learning rate with the sequence length, so short minibatches count less.
            step_lr = lr * inputs.shape[0] / cfg.data.bptt if cfg.data.variable_bptt else lr
            if graphed is not None:
                for group in self.optimizer.param_groups:
                    group["lr"] = step_lr  # a new value re-records the graph (once per epoch)
                loss, grad_norm, state = graphed(inputs, targets, state)
            else:
                loss, grad_norm, state = self.train_step(inputs, targets, state, step_lr)
            return loss, grad_norm, targets.numel(), targets.numel()

        stats = self.train_loop(self.minibatches(), step, lr, logger, bar)
        return {**stats, "train_ppl": exp_or_inf(stats["train_loss"])}

    def loss_scalars(self, mean_loss: float) -> dict[str, float]:
        return {"train/ppl": exp_or_inf(mean_loss)}

    def validate(self) -> dict[str, float]:
        d = self.cfg.data
        return {"ppl": perplexity(self.model, self.corpus.valid, d.eval_batch_size, d.bptt, self.cfg.trainer.amp)}

    def summary(self, record: dict[str, Any]) -> str:
        return f"train ppl {record['train_ppl']:.2f}  valid ppl {record['valid_ppl']:.2f}"

    # ----------------------------------------------------------------------------- NT-ASGD (AWD)
    def evaluation_weights(self):
        """Under averaged SGD, the running averages are what is validated, kept in best.pt and tested."""
        if not self.averaging:
            return super().evaluation_weights()  # the trainer.ema average, if any
        params = [p for p in self.model.parameters() if "ax" in self.optimizer.state[p]]
        return swapped_weights(params, [self.optimizer.state[p]["ax"] for p in params])

    def after_validation(self, score: float) -> None:
        """Merity et al.'s non-monotone trigger: validation worse than the best of all epochs but the last
        ``nonmono``. With ntasgd it switches SGD to averaged SGD; with ``stop_nonmono`` (fine-tuning) it
        ends training."""
        t = self.cfg.trainer
        history, self.valid_history = self.valid_history, [*self.valid_history, score]
        if not (len(history) > t.nonmono and score > min(history[: -t.nonmono])):
            return
        if t.optimizer == "ntasgd" and not self.averaging:
            log.info("switching to averaged SGD after epoch %d (NT-ASGD)", self.epoch)
            self.optimizer = make_optimizer(self.model, t, averaging=True)
            self.averaging = True
        elif t.stop_nonmono:
            log.info("stopping after epoch %d: validation stopped improving (trainer.stop_nonmono)", self.epoch)
            self.stopped = True

    def stopped_early(self) -> bool:
        return self.stopped

    def extra_state(self) -> dict[str, Any]:
        return {"averaging": self.averaging, "valid_history": self.valid_history, "stopped": self.stopped}

    def load_extra_state(self, payload: dict[str, Any]) -> None:
        self.averaging, self.valid_history = payload["averaging"], payload["valid_history"]
        self.stopped = payload.get("stopped", False)  # checkpoints from before trainer.stop_nonmono
        if self.averaging:
            self.optimizer = make_optimizer(self.model, self.cfg.trainer, averaging=True)

    # ----------------------------------------------------------------------------- testing
    def final_tags(self) -> dict[str, str]:
        return {**super().final_tags(), "test/ppl": "test_ppl", "test/ppl_mc": "test_ppl_mc"}

    def final_metrics(self) -> dict[str, Any]:
        metrics = evaluate_all(self.model, self.corpus, self.cfg)
        log.info("test ppl %.2f (valid %.2f)%s", metrics["test_ppl"], metrics["valid_ppl"],
                 f", MC test ppl {metrics['test_ppl_mc']:.2f} ({self.cfg.eval.samples} samples)"
                 if "test_ppl_mc" in metrics else "")
        return metrics


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
        metrics["test_ppl_mc"] = mc_perplexity(model, corpus.test, e.samples, e.batch, d.bptt, e.word_dropout, amp,
                                               e.mc_masks)
        metrics["mc_samples"] = e.samples
        metrics["mc_seconds"] = time.perf_counter() - mc_started
    metrics["eval_seconds"] = time.perf_counter() - started
    return metrics


def run(raw: dict[str, Any], run_dir: Path, accepted: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """`vdrnn train` on PTB: ``raw`` is the composed config as plain containers; ``accepted`` is called once the
    start is not refused (its settings valid, and a resume's those its checkpoint allows), before training."""
    trainer = LanguageModelTrainer(from_dict(raw), run_dir, raw)
    accepted()
    return trainer.fit()


def evaluate(raw: dict[str, Any], path: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """`vdrnn eval` on a PTB checkpoint (``payload``, read from ``path``); ``raw``: its config with the command line's
    evaluation settings."""
    return evaluate_checkpoint(from_dict(raw), path, payload, load_corpus,
                               lambda cfg, corpus, device: build_model(cfg, len(corpus.vocab), device), evaluate_all)
