"""Training a language model: truncated BPTT with SGD, as Zaremba et al. (2014) and Gal's code.

One epoch reads the training stream as ``batch_size`` parallel columns (:func:`~vdrnn.tasks.lm.data.batchify`) in
minibatches of ``bptt`` steps; the hidden state starts at zero each epoch and is carried (detached) from one minibatch
to the next, while dropout masks are redrawn for every minibatch. The epoch loop, checkpoints and resume are
:class:`~vdrnn.training.trainer.EpochTrainer`'s; the best checkpoint is tested with weight scaling, and with MC
dropout under ``eval=mc``. AWD-LSTM's pieces live here too: variable BPTT lengths, AR/TAR and NT-ASGD's trigger.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

from vdrnn.kernels.graph import GraphedTrainStep
from vdrnn.tasks.lm.data import batchify, minibatches, variable_minibatches
from vdrnn.tasks.lm.evaluate import evaluate_all, exp_or_inf, graphs_apply, perplexity
from vdrnn.tasks.lm.model import LanguageModel
from vdrnn.training import checkpoint
from vdrnn.training.device import autocast
from vdrnn.training.graphs import ShapeGraphs, detach_state, map_tensors
from vdrnn.training.loop import EpochSums
from vdrnn.training.trainer import EpochTrainer
from vdrnn.uncertainty import UNCERTAINTY_PARTS

log = logging.getLogger("vdrnn")


class LanguageModelTrainer(EpochTrainer):
    selector = "ppl"

    def setup(self) -> None:
        self.valid_history: list[float] = []  # every epoch's validation perplexity (NT-ASGD's trigger)
        self.stopped = False  # trainer.stop_nonmono fired
        self._graphed: GraphedTrainStep | None = None  # made on first use, after a resume has loaded
        super().setup()
        self.train_data = batchify(self.data.train, self.cfg.data.batch_size).to(self.device)

    def build_model(self) -> LanguageModel:
        model = super().build_model()
        # Weights only: a new run (e.g. AWD's fine-tuning) starts from a trained model. A resume restores its own
        # weights instead, so it must not need the checkpoint it started from (moved or deleted since).
        if self.cfg.init_from and self.resume_from is None:
            payload = checkpoint.load(self.cfg.init_from)
            checkpoint.check_vocab(payload, self.data.vocab, self.cfg.init_from,
                                   "init_from needs a model trained on the same data and data.* settings")
            checkpoint.load_model_state(model, payload, self.cfg.init_from, "init_from loads the weights into "
                                        "the model this run builds: give it the checkpoint's model.* and cell settings")
            log.info("starting from the weights of %s (epoch %d)", self.cfg.init_from, payload["epoch"])
            self.progress.start_epoch = payload.get("start_epoch", 0) + payload["epoch"]  # a fine-tuning's too
        return model

    @property
    def train_examples(self) -> int:
        return len(self.data.train)  # the tokens a learned-noise KL term is spread over

    def steps_per_epoch(self) -> int:
        return math.ceil((self.train_data.shape[0] - 1) / self.cfg.data.bptt)

    def describe_model(self) -> str:
        return f"{super().describe_model()}, sizes {self.cfg.model.layer_sizes()}"

    # ----------------------------------------------------------------------------- training
    def minibatches(self, start: int = 0):
        """An epoch's minibatches of the training columns from row ``start``: fixed-length BPTT, or AWD's random
        lengths."""
        d = self.cfg.data
        if d.variable_bptt:
            return variable_minibatches(self.train_data, d.bptt, start)
        return minibatches(self.train_data, d.bptt, start)

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor, state, lr: float):
        """One eager step: (mean NLL of the minibatch, gradient norm, new state), without host sync."""
        cfg = self.cfg
        self.optimization.set_lr(lr)
        with autocast(self.device, cfg.trainer.amp):
            logits, state, (raw, dropped) = self.model(inputs, state, return_outputs=True)
        nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        kl = self.kl_term()
        loss = nll if kl is None else nll + kl  # per token
        # Zaremba's and Gal's code sum the batch-mean NLL over the BPTT steps: their lr 1 and clip 5 are for that
        # objective, 35 times the per-token mean (AWD's lr 30 is for the mean).
        loss = loss * inputs.shape[0] if cfg.trainer.loss == "sum_over_time" else loss
        if cfg.trainer.ar > 0:  # activation regularization on the dropped output (Merity et al.)
            loss = loss + cfg.trainer.ar * dropped.float().pow(2).mean()
        if cfg.trainer.tar > 0:  # temporal AR: slowness of the undropped output
            loss = loss + cfg.trainer.tar * (raw[1:] - raw[:-1]).float().pow(2).mean()
        grad_norm = self.optimization.step(loss)
        return nll.detach(), grad_norm, detach_state(state)

    def graphed_step(self) -> GraphedTrainStep | ShapeGraphs | None:
        """The step replayed from CUDA graphs (on CUDA, without fp16 loss scaling, whose scaler reads the host).

        Where the step is Zaremba's and Gal's (fixed BPTT length, no AR/TAR, plain SGD): one graph of its own
        (:mod:`vdrnn.kernels.graph`), whose clip is folded into the update. AWD's (random lengths, AR/TAR, averaged
        SGD), in fp32: the eager :meth:`train_step` itself, recorded once per minibatch length
        (:mod:`vdrnn.training.graphs`), its weight-dropped layers on the fused kernels under ``model.impl=auto`` and
        the clip folded into the update.
        Adam runs eagerly: its state is made at its first step, which a graph would redo at every replay. A
        ``trainer.ema`` average is updated after each replay, outside the graph (``Optimization.after_step``)."""
        t, d = self.cfg.trainer, self.cfg.data
        if t.cuda_graph == "off" or self.device.type != "cuda" or t.amp == "fp16" or t.optimizer == "adam":
            return None
        if self._graphed is None:
            if d.variable_bptt or t.ar > 0 or t.tar > 0 or t.optimizer != "sgd":
                if t.amp != "off":  # autocast's cache of cast weights must not outlive a capture: the eager step
                    return None
                if self.cfg.model.impl == "auto":  # weight drop on the fused kernels: graphed, the faster
                    self.model.rnn.weight_drop_on_kernels = True
                self.optimization.fold_clip = True  # one pass over the weights (vdrnn.kernels.update)
                self._graphed = ShapeGraphs(self.train_step, keep=self.snapshot, carry=(2, 2))  # the state, step to step
            else:
                self._graphed = GraphedTrainStep(self.model, self.optimization.optimizer, t.clip, d.batch_size,
                                                 d.bptt, t.gal_decay, t.amp, sum_over_time=t.loss == "sum_over_time",
                                                 regularizer=self.kl_term)
        return self._graphed

    def snapshot(self):
        """What a step changes (weights, optimizer state, the CUDA generator), kept; returns the function that puts
        it back in place: the tensors a recorded graph reads and writes stay the same objects."""
        weights = [p.detach().clone() for p in self.model.parameters()]
        states = {p: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
                  for p, s in self.optimization.optimizer.state.items()}
        rng = torch.cuda.get_rng_state(self.device)

        @torch.no_grad()
        def restore() -> None:
            for p, w in zip(self.model.parameters(), weights, strict=True):
                p.copy_(w)
            optimizer = self.optimization.optimizer
            for p in states:
                for k, v in states[p].items():
                    if isinstance(v, torch.Tensor):
                        optimizer.state[p][k].copy_(v)
                    else:
                        optimizer.state[p][k] = v
            torch.cuda.set_rng_state(rng, self.device)

        return restore

    def train_epoch(self, lr: float, bar: tqdm, sums: EpochSums, position: dict[str, Any] | None):
        d = self.cfg.data
        self.model.train()
        # Where the epoch is: the next minibatch's first row and the hidden state carried into it (zero at the start).
        if position is None:
            self.next_row, self.carried = 0, self.model.initial_state(d.batch_size, self.device)
        else:
            self.next_row = position["row"]
            self.carried = map_tensors(lambda t: t.to(self.device), position["state"])

        def step(batch):
            inputs, targets = batch
            loss, grad_norm = self.advance(inputs, targets, lr)
            return loss, grad_norm, targets.numel(), targets.numel()

        stats = self.train_loop(self.minibatches(self.next_row), step, lr, bar, sums)
        return None if stats is None else {**stats, "train_ppl": exp_or_inf(stats["train_loss"])}

    def advance(self, inputs: torch.Tensor, targets: torch.Tensor, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the epoch at learning rate ``lr`` from the carried state, graphed where it can be
        (:meth:`graphed_step`): (mean NLL, gradient norm), device tensors; the carried state and row move on."""
        d = self.cfg.data
        # AWD rescales the learning rate with the sequence length, so short minibatches count less.
        step_lr = lr * inputs.shape[0] / d.bptt if d.variable_bptt else lr
        graphed = self.graphed_step()
        if isinstance(graphed, ShapeGraphs):  # a graph per length (and step lr); a new optimizer records anew
            loss, grad_norm, self.carried = graphed(inputs, targets, self.carried, step_lr,
                                                    key=(lr, self.optimization.optimizer))
        elif graphed is not None:
            self.optimization.set_lr(step_lr)  # a new value re-records the graph (once per epoch)
            loss, grad_norm, self.carried = graphed(inputs, targets, self.carried)
        else:
            loss, grad_norm, self.carried = self.train_step(inputs, targets, self.carried, step_lr)
        self.next_row += inputs.shape[0]
        return loss, grad_norm

    def epoch_position(self) -> dict[str, Any]:
        return {"row": self.next_row, "state": map_tensors(lambda t: t.detach().clone(), self.carried)}

    def position_problem(self, position: Any) -> str | None:
        rows = len(self.data.train) // self.cfg.data.batch_size  # batchify's, before setup has batchified
        if not (isinstance(position, dict) and isinstance(position.get("row"), int)
                and 0 <= position["row"] < rows):
            return f"holds no row of the training data (0 to {rows - 1}) to go on from"
        if not same_shapes(position.get("state"), self.model.initial_state(self.cfg.data.batch_size, "cpu")):
            return "holds no hidden state of this model to carry on"
        return None

    def loss_scalars(self, mean_loss: float) -> dict[str, float]:
        return {"train/ppl": exp_or_inf(mean_loss)}

    def validate(self) -> dict[str, float]:
        d = self.cfg.data
        return {"ppl": perplexity(self.model, self.data.valid, d.eval_batch_size, d.bptt, self.cfg.trainer.amp,
                                  graphs_apply(self.device, self.cfg), label="validation",
                                  progress=self.cfg.trainer.progress)}

    def summary(self, record: dict[str, Any]) -> str:
        return f"train ppl {record['train_ppl']:.2f}  valid ppl {record['valid_ppl']:.2f}"

    # ----------------------------------------------------------------------------- NT-ASGD (AWD)
    def after_validation(self, score: float | None) -> None:
        """Merity et al.'s non-monotone trigger: validation worse than the best of all epochs but the last
        ``nonmono``. With ntasgd it switches SGD to averaged SGD; with ``stop_nonmono`` (fine-tuning) it ends
        training."""
        t = self.cfg.trainer
        history, self.valid_history = self.valid_history, [*self.valid_history, score]
        if not (len(history) > t.nonmono and score > min(history[: -t.nonmono])):
            return
        if t.optimizer == "ntasgd" and not self.optimization.averaging:
            log.info("switching to averaged SGD after epoch %d (NT-ASGD)", self.progress.epoch)
            self.optimization.switch_to_averaging()
        elif t.stop_nonmono:
            log.info("stopping after epoch %d: validation stopped improving (trainer.stop_nonmono)", self.progress.epoch)
            self.stopped = True

    def stopped_early(self) -> bool:
        return self.stopped

    def extra_state(self) -> dict[str, Any]:
        return {"valid_history": self.valid_history, "stopped": self.stopped}

    def load_extra_state(self, payload: dict[str, Any]) -> None:
        self.valid_history = payload["valid_history"]
        self.stopped = payload.get("stopped", False)  # checkpoints from before trainer.stop_nonmono

    # ----------------------------------------------------------------------------- testing
    def final_tags(self) -> dict[str, str]:
        estimators = ("", "_mc") if self.cfg.eval.mode == "mc" else ("",)  # MC's only where the test runs it
        scores = {f"test/{score}{mc}": f"test_{score}{mc}" for score in ("ppl", "ece", "brier", "entropy")
                  for mc in estimators}
        if self.cfg.eval.mode == "mc":
            scores.update({f"test/uncertainty_{part}_mc": f"test_uncertainty_{part}_mc" for part in UNCERTAINTY_PARTS})
        return {**super().final_tags(), **scores}

    def test_metrics(self) -> dict[str, Any]:
        metrics = evaluate_all(self.model, self.data, self.cfg)
        ece = {mc: f", ECE {metrics[f'test_ece{mc}']:.4f}" if f"test_ece{mc}" in metrics else "" for mc in ("", "_mc")}
        log.info("test ppl %.2f (valid %.2f)%s%s", metrics["test_ppl"], metrics["valid_ppl"], ece[""],
                 f", MC test ppl {metrics['test_ppl_mc']:.2f}{ece['_mc']} ({self.cfg.eval.samples} samples)"
                 if "test_ppl_mc" in metrics else "")
        return metrics


def same_shapes(state: Any, like: Any) -> bool:
    """Is ``state`` a recurrent state (tensors in nested tuples and lists) of the shapes of ``like``?"""
    if isinstance(like, torch.Tensor):
        return isinstance(state, torch.Tensor) and state.shape == like.shape
    return isinstance(state, (tuple, list)) and len(state) == len(like) and \
        all(same_shapes(s, t) for s, t in zip(state, like, strict=True))
