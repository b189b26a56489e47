"""Training a sentiment model: minibatches of whole reviews (or chunks), the best-validation epoch kept.

One epoch reads the shuffled training set in minibatches of ``data.batch_size`` sequences, one
optimizer step each (Adam in Gal's scripts), dropout masks drawn for each minibatch as the scheme says
(vdrnn.dropout). Every epoch of ``trainer.epochs`` runs (no early stopping); after each: validation metrics,
the test metrics of this epoch's weights (weight scaling; the per-epoch curve of Gal's figures, in
``metrics.jsonl``), ``best.pt`` when validation improved, and ``last.pt``. At the end the best-validation
checkpoint is tested with weight scaling and, with ``eval=mc``, MC dropout: those are the headline numbers in
``metrics.json``. ``trainer.select=last`` keeps the last epoch's weights instead (``trainer.epochs`` is then a
fixed budget, chosen beforehand), and with ``data.valid_fraction=0`` the run trains on every training review
and validates nothing: the protocol of Gal's scripts.

Model selection uses the validation loss the model is trained on: NLL (IMDB) or RMSE (scale), of the
weight-scaling predictor, or with ``trainer.select=mc`` of the MC-dropout one (``eval.samples`` passes, the
predictor ``eval=mc`` tests; its validation metrics are logged as ``valid_*_mc``). The MC passes draw their
masks from a fork of the random state, so the training run itself (shuffles, masks, weights) is the one
``trainer.select=scale`` gives: only which epoch's weights best.pt keeps differs.
Resuming from ``last.pt`` restores model, optimizer, RNG states and progress, so the shuffles and
masks continue exactly as an uninterrupted run's.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

from vdrnn.tasks.sentiment.data import CLASSIFICATION, minibatches, shuffled
from vdrnn.tasks.sentiment.evaluate import check_evaluation, evaluate_all
from vdrnn.tasks.sentiment.predict import evaluate_split
from vdrnn.training.device import autocast
from vdrnn.training.loop import EpochSums
from vdrnn.training.trainer import EpochTrainer
from vdrnn.uncertainty import SCORES, UNCERTAINTY_PARTS

log = logging.getLogger("vdrnn")


class SentimentTrainer(EpochTrainer):
    def setup(self) -> None:
        super().setup()
        check_evaluation(self.data, self.cfg)  # the final test's settings, refused before training where they cannot run
        # Model selection uses the validation loss the model is trained on (lower is better), of the predictor
        # trainer.select names.
        self.selector = ("nll" if self.data.kind == CLASSIFICATION else "rmse") + \
            ("_mc" if self.cfg.trainer.select == "mc" else "")

    @property
    def train_examples(self) -> int:
        return len(self.data.train)  # the reviews a learned-noise KL term is spread over

    def steps_per_epoch(self) -> int:
        return -(-len(self.data.train) // self.cfg.data.batch_size)

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.data.kind == CLASSIFICATION:
            return F.cross_entropy(outputs.float(), targets)
        return F.mse_loss(outputs.float().squeeze(-1), targets)  # standardised ratings, as Gal's script

    def train_epoch(self, lr: float, bar: tqdm, sums: EpochSums, position: dict[str, Any] | None):
        cfg, model = self.cfg, self.model
        model.train()
        self.optimization.set_lr(lr)
        # Where the epoch is: its shuffle of the training reviews, drawn at its start, and the next one to read.
        self.order = shuffled(len(self.data.train)) if position is None else position["order"]
        self.next_review = 0 if position is None else position["next"]

        def step(batch):
            words = int(batch[1].sum())  # the lengths, counted on the host before they move
            tokens, lengths, targets = (t.to(self.device) for t in batch)
            with autocast(self.device, cfg.trainer.amp):
                outputs = model(tokens, lengths)
            loss = self.loss(outputs, targets)
            kl = self.kl_term()
            grad_norm = self.optimization.step(loss if kl is None else loss + kl)
            self.next_review += len(targets)
            return loss.detach(), grad_norm, len(targets), words

        batches = minibatches(self.data.train, cfg.data.batch_size, self.order, self.next_review)
        return self.train_loop(batches, step, lr, bar, sums)

    def epoch_position(self) -> dict[str, Any]:
        return {"order": self.order, "next": self.next_review}

    def position_problem(self, position: Any) -> str | None:
        reviews = len(self.data.train)
        order = position.get("order") if isinstance(position, dict) else None
        if not (isinstance(order, torch.Tensor) and order.dtype == torch.int64 and
                torch.equal(order.sort().values, torch.arange(reviews))):
            return f"holds no order of the {reviews} training reviews"
        if not (isinstance(position.get("next"), int) and 0 <= position["next"] <= reviews):
            return "holds no place among the training reviews to go on from"
        return None

    def validate(self) -> dict[str, float]:
        # Empty without validation reviews (data.valid_fraction=0, trainer.select=last): the test curve alone.
        valid = evaluate_split(self.model, self.data.valid, self.data, self.cfg, mc=False)
        if self.cfg.trainer.select == "mc":
            # A fork of the random state, restored after: the MC masks do not shift the training's own draws.
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                mc = evaluate_split(self.model, self.data.valid, self.data, self.cfg, mc=True)
            valid.update({f"{k}_mc": v for k, v in mc.items()})
        # The test metrics of every epoch's weights: the curve of Gal's figures, not the result.
        test = evaluate_split(self.model, self.data.test, self.data, self.cfg, mc=False)
        return {**valid, **{f"test_{k}": v for k, v in test.items()}}

    def summary(self, record: dict[str, Any]) -> str:
        valid = {k.removeprefix("valid_"): v for k, v in record.items() if k.startswith("valid_")}
        test = {k.removeprefix("test_"): v for k, v in record.items() if k.startswith("test_")}
        mc = {k.removesuffix("_mc"): v for k, v in valid.items() if k.endswith("_mc")}
        return (f"train loss {record['train_loss']:.4f}{f'  valid {describe(valid)}' if valid else ''}"
                f"{f'  valid MC {describe(mc)}' if mc else ''}  test {describe(test)}")

    def test_metrics(self) -> dict[str, Any]:
        metrics = evaluate_all(self.model, self.data, self.cfg)
        names = metric_names(self.data.kind)
        kept = "last epoch" if self.cfg.trainer.select == "last" else "best-validation checkpoint"
        log.info("test %s (%s)%s", describe({k: metrics[f"test_{k}"] for k in names}), kept,
                 f", MC test {describe({k: metrics[f'test_{k}_mc'] for k in names})} ({self.cfg.eval.samples} samples)"
                 if self.cfg.eval.mode == "mc" else "")
        if "test_ece_mc_minus_ws" in metrics:
            low, high = metrics["test_ece_mc_minus_ws_ci"]
            log.info("ECE, MC minus weight scaling: %+.4f (95%% interval %+.4f to %+.4f); a calibrated predictor would "
                     "score %.4f / %.4f from sampling alone", metrics["test_ece_mc_minus_ws"], low, high,
                     metrics["test_ece_floor_mc"], metrics["test_ece_floor"])
        return metrics

    def final_tags(self) -> dict[str, str]:
        names = metric_names(self.data.kind)
        tags = {**super().final_tags(), **{f"test/{n}": f"test_{n}" for n in names}}
        mc = self.cfg.eval.mode == "mc"  # MC's only where the test runs it
        if self.data.kind == CLASSIFICATION:
            # Selective prediction by weight scaling's scores (no mutual information: one sample) and the oracle.
            tags.update({f"test/retention_area_{score}": f"test_retention_area_{score}"
                         for score in ("max_prob", "entropy", "oracle")})
        if mc:
            tags.update({f"test/{n}_mc": f"test_{n}_mc" for n in names})
            if self.data.kind == CLASSIFICATION:
                tags["test/ece_mc_minus_ws"] = "test_ece_mc_minus_ws"
                tags.update({f"test/uncertainty_{part}_mc": f"test_uncertainty_{part}_mc" for part in UNCERTAINTY_PARTS})
                tags.update({f"test/retention_area_{score}_mc": f"test_retention_area_{score}_mc"
                             for score in (*SCORES, "oracle")})
        return tags


def metric_names(kind: str) -> tuple[str, ...]:
    """The metrics a task's predictions are scored by (vdrnn.tasks.sentiment.predict.split_metrics)."""
    return ("accuracy", "nll", "ece", "entropy") if kind == CLASSIFICATION else ("rmse",)


def describe(metrics: dict[str, float]) -> str:
    """One log-line summary: "acc 85.12% nll 0.345 ece 0.021 ent 0.301" or "rmse 0.1532"."""
    if "rmse" in metrics:
        return f"rmse {metrics['rmse']:.4f}"
    return (f"acc {100 * metrics['accuracy']:.2f}% nll {metrics['nll']:.4f} ece {metrics['ece']:.4f} "
            f"ent {metrics['entropy']:.4f}")
