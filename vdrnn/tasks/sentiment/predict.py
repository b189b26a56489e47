"""Predictive distributions of a split, with weight scaling or MC dropout, their uncertainty, and their metrics.

Weight scaling: one pass with every mask equal to one. MC dropout (Gal & Ghahramani, T=50 in
their sentiment scripts): ``samples`` stochastic passes with the training masks, and the average of
their *probabilities* (classification) or predictions (regression):

    p_MC(y | x) = 1/K sum_k softmax(f(x; masks_k))      then accuracy, NLL, ECE, entropy of p_MC

Averaging probabilities, not logits or log-probabilities, is what makes it the MC estimate of the
predictive distribution. The passes run side by side (:func:`vdrnn.nn.mc_predict`): each review of a minibatch is
replicated min(samples, ``eval.batch``) times, each copy drawing its own per-sequence masks, and a minibatch holds
``data.eval_batch_size`` // replicas reviews (one at least). A scheme whose masks are shared by the batch
(AWD's weight drop, ``*_mask=batch``) runs its passes one at a time instead.

A classifier's test (:func:`predictions`) keeps every sample's logits, so that a temperature can divide them, the
average be the geometric one instead (``eval.average``), and each review's uncertainty split into its parts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import vdrnn.nn as vnn
from vdrnn.nn.mc import log_predictive
from vdrnn.tasks.sentiment.config import SentimentRunConfig
from vdrnn.tasks.sentiment.data import CLASSIFICATION, SentimentData, Split, minibatches
from vdrnn.tasks.sentiment.metrics import classification_metrics, rmse
from vdrnn.tasks.sentiment.model import SentimentModel
from vdrnn.training.bars import finish, mc_progress, pass_bar
from vdrnn.training.device import autocast
from vdrnn.training.evaluation import samples_side_by_side
from vdrnn.uncertainty import uncertainty_scores


def readout(outputs: torch.Tensor, kind: str) -> torch.Tensor:
    """Model outputs [N, C] -> what is averaged over MC samples: probabilities [N, C] or predictions [N].

    In float64: an fp32 softmax rounds the probability of a class 104 logits behind to exactly 0, and a
    confident mistake would then cost the clamp's 708 nats of NLL instead of its ~104."""
    return outputs.double().softmax(dim=-1) if kind == CLASSIFICATION else outputs.double().squeeze(-1)


@torch.no_grad()
def ws_outputs(model: SentimentModel, split: Split, batch_size: int, amp: str = "off",
               progress: bool | str = False) -> torch.Tensor:
    """Weight scaling's outputs [N, C] (logits, or the predicted rating) of every sequence of ``split``, in order (on
    the CPU; ``progress``, trainer.progress: a bar)."""
    device = next(model.parameters()).device
    model.eval()
    out, bar = [], pass_bar("weight scaling", math.ceil(len(split) / batch_size), progress)
    for tokens, lengths, _ in minibatches(split, batch_size):
        with autocast(device, amp):
            out.append(model(tokens.to(device), lengths.to(device)).float().cpu())
        bar.update()
    finish(bar)
    return torch.cat(out)


def predict(model: SentimentModel, split: Split, kind: str, batch_size: int, amp: str = "off",
            progress: bool | str = False) -> torch.Tensor:
    """Weight-scaling predictions of every sequence of ``split``, in order (on the CPU; ``progress``: a bar)."""
    return readout(ws_outputs(model, split, batch_size, amp, progress), kind)


@torch.no_grad()
def mc_outputs(model: SentimentModel, split: Split, samples: int, samples_per_pass: int, batch_size: int,
               word_dropout: bool = False, amp: str = "off", progress: bool | str = False) -> torch.Tensor:
    """Every MC sample's outputs [S, N, C] of every sequence of ``split``, ``samples_per_pass`` samples at a time
    (``progress``, trainer.progress: a bar)."""
    device = next(model.parameters()).device
    replicas = min(samples, samples_side_by_side(model, samples_per_pass, word_dropout))
    reviews = max(1, batch_size // replicas)  # sequences per pass = reviews x replicas
    out, bar = [], mc_progress(samples, len(split), progress)
    for tokens, lengths, _ in minibatches(split, reviews):
        with autocast(device, amp):
            prediction = vnn.mc_predict(model, (tokens.to(device), lengths.to(device)), samples, batch_dim=(1, 0),
                                        output_batch_dim=0, samples_per_call=replicas, embedding=word_dropout,
                                        probabilities=lambda outputs: outputs.double())
        out.append(prediction.samples.cpu())
        bar.update(samples * len(lengths))
    finish(bar)
    return torch.cat(out, dim=1)


def predict_mc(model: SentimentModel, split: Split, kind: str, samples: int, samples_per_pass: int,
               batch_size: int, word_dropout: bool = False, amp: str = "off", progress: bool | str = False
               ) -> torch.Tensor:
    """MC-dropout predictions: the mean over ``samples`` stochastic passes of their probabilities or ratings."""
    return readout(mc_outputs(model, split, samples, samples_per_pass, batch_size, word_dropout, amp, progress),
                   kind).mean(dim=0)


@dataclass
class Predictions:
    """A classifier's predictions of a split: the predictive distributions [N, C] (float64), each review's
    uncertainty scores (:data:`vdrnn.uncertainty.SCORES`), and under MC dropout the samples' distributions."""

    probs: torch.Tensor
    scores: dict[str, torch.Tensor]
    mc: vnn.MCPrediction | None = None


def predictions(outputs: torch.Tensor, mc: bool, average: str = "arithmetic", temperature: float = 1.0) -> Predictions:
    """:class:`Predictions` of the samples' logits [S, N, C] (weight scaling: S = 1), averaged as ``average`` says
    after ``temperature`` divides each sample's (:func:`vdrnn.nn.mc.log_predictive`). The mutual information is of
    the tempered samples' mixture, whatever the average (BALD's)."""
    probs = log_predictive(outputs, 0, average, temperature).exp()
    if not mc:
        return Predictions(probs, uncertainty_scores(probs))
    samples = (outputs.double() / temperature).softmax(dim=-1)
    prediction = vnn.MCPrediction(mean=samples.mean(dim=0), samples=samples)
    return Predictions(probs, uncertainty_scores(probs, prediction.mutual_information()), prediction)


def split_outputs(model: SentimentModel, split: Split, cfg: SentimentRunConfig, mc: bool) -> torch.Tensor:
    """The outputs [S, N, C] of one split, of weight scaling (S = 1) or (``mc``) of every MC sample with the run's eval
    settings."""
    d, e, amp = cfg.data, cfg.eval, cfg.trainer.amp
    if mc:
        return mc_outputs(model, split, e.samples, e.batch, d.eval_batch_size, e.word_dropout, amp,
                          cfg.trainer.progress)
    return ws_outputs(model, split, d.eval_batch_size, amp, cfg.trainer.progress).unsqueeze(0)


def split_metrics(predictions: torch.Tensor, split: Split, data: SentimentData) -> dict[str, float]:
    """accuracy / nll / ece / entropy (classification) or rmse in rating units (regression)."""
    if data.kind == CLASSIFICATION:
        return classification_metrics(predictions, split.targets)
    return {"rmse": rmse(predictions, split.targets, data.target_std)}


def predict_split(model: SentimentModel, split: Split, data: SentimentData, cfg: SentimentRunConfig,
                  mc: bool) -> torch.Tensor:
    """Predictions of one split under weight scaling, or (``mc``) MC dropout with the run's eval settings."""
    d, e, amp = cfg.data, cfg.eval, cfg.trainer.amp
    if mc:
        return predict_mc(model, split, data.kind, e.samples, e.batch, d.eval_batch_size, e.word_dropout, amp,
                          cfg.trainer.progress)
    return predict(model, split, data.kind, d.eval_batch_size, amp, cfg.trainer.progress)


def evaluate_split(model: SentimentModel, split: Split, data: SentimentData, cfg: SentimentRunConfig,
                   mc: bool) -> dict[str, float]:
    """Metrics of one split under weight scaling, or (``mc``) MC dropout with the run's eval settings; none for an
    empty split (the validation reviews under data.valid_fraction=0)."""
    if not len(split):
        return {}
    return split_metrics(predict_split(model, split, data, cfg, mc), split, data)
