"""Predictive distributions of a split, with weight scaling or MC dropout, and their metrics.

Weight scaling: one pass with every mask equal to one. MC dropout (Gal & Ghahramani, T=50 in
their sentiment scripts): ``samples`` stochastic passes with the training masks, and the average of
their *probabilities* (classification) or predictions (regression):

    p_MC(y | x) = 1/K sum_k softmax(f(x; masks_k))      then accuracy, NLL, ECE, entropy of p_MC

Averaging probabilities, not logits or log-probabilities, is what makes it the MC estimate of the
predictive distribution. The passes run side by side (:func:`vdrnn.nn.mc_predict`): each review of a minibatch is
replicated min(samples, ``eval.batch``) times, each copy drawing its own per-sequence masks, and a minibatch holds
``data.eval_batch_size`` // replicas reviews (one at least). A scheme whose masks are shared by the batch
(AWD's weight drop, ``*_mask=batch``) runs its passes one at a time instead.
"""

from __future__ import annotations

import math

import torch

import vdrnn.nn as vnn
from vdrnn.tasks.sentiment.config import SentimentRunConfig
from vdrnn.tasks.sentiment.data import CLASSIFICATION, SentimentData, Split, minibatches
from vdrnn.tasks.sentiment.metrics import classification_metrics, rmse
from vdrnn.tasks.sentiment.model import SentimentModel
from vdrnn.training.bars import finish, mc_progress, pass_bar
from vdrnn.training.device import autocast
from vdrnn.training.evaluation import samples_side_by_side


def readout(outputs: torch.Tensor, kind: str) -> torch.Tensor:
    """Model outputs [N, C] -> what is averaged over MC samples: probabilities [N, C] or predictions [N].

    In float64: an fp32 softmax rounds the probability of a class 104 logits behind to exactly 0, and a
    confident mistake would then cost the clamp's 708 nats of NLL instead of its ~104."""
    return outputs.double().softmax(dim=-1) if kind == CLASSIFICATION else outputs.double().squeeze(-1)


@torch.no_grad()
def predict(model: SentimentModel, split: Split, kind: str, batch_size: int, amp: str = "off",
            progress: bool | str = False) -> torch.Tensor:
    """Weight-scaling predictions of every sequence of ``split``, in order (on the CPU; ``progress``,
    trainer.progress: a bar)."""
    device = next(model.parameters()).device
    model.eval()
    out, bar = [], pass_bar("weight scaling", math.ceil(len(split) / batch_size), progress)
    for tokens, lengths, _ in minibatches(split, batch_size):
        with autocast(device, amp):
            outputs = model(tokens.to(device), lengths.to(device))
        out.append(readout(outputs, kind).cpu())
        bar.update()
    finish(bar)
    return torch.cat(out)


@torch.no_grad()
def predict_mc(model: SentimentModel, split: Split, kind: str, samples: int, samples_per_pass: int,
               batch_size: int, word_dropout: bool = False, amp: str = "off", progress: bool | str = False
               ) -> torch.Tensor:
    """MC-dropout predictions: the mean over ``samples`` stochastic passes, ``samples_per_pass`` at a time
    (``progress``, trainer.progress: a bar)."""
    device = next(model.parameters()).device
    replicas = min(samples, samples_side_by_side(model, samples_per_pass, word_dropout))
    reviews = max(1, batch_size // replicas)  # sequences per pass = reviews x replicas
    out, bar = [], mc_progress(samples, len(split), progress)
    for tokens, lengths, _ in minibatches(split, reviews):
        with autocast(device, amp):
            prediction = vnn.mc_predict(model, (tokens.to(device), lengths.to(device)), samples, batch_dim=(1, 0),
                                        output_batch_dim=0, samples_per_call=replicas, embedding=word_dropout,
                                        keep_samples=False, probabilities=lambda outputs: readout(outputs, kind))
        out.append(prediction.mean.cpu())
        bar.update(samples * len(lengths))
    finish(bar)
    return torch.cat(out)


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
