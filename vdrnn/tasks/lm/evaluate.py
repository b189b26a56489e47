"""Perplexity with weight scaling (deterministic) and with MC dropout (stochastic, averaged).

Weight scaling runs the network with every mask equal to one; inverted dropout in training makes
that the standard dropout approximation with no rescaling.

MC dropout (Gal & Ghahramani sec. 5.1, "MC"): K stochastic forward passes with the training masks,
recurrent ones included, and the predictive probability of each token averaged over them:

    ppl_MC = exp( -1/N sum_t log( 1/K sum_k p(w_t | w_<t, masks_k) ) )

Probabilities are averaged, not log-probabilities: averaging logs estimates something else (the
geometric mean), which is never better by Jensen's inequality. The K passes are run side by side:
the test stream is replicated as K columns of one batch, each column with its own masks and its
own hidden state, so 1,000 samples cost one pass over the stream at batch 1,000 (a scheme whose masks
are shared by the batch, such as AWD's weight drop, runs its samples one by one instead). As in Gal's code,
each sample keeps its masks for the whole stream by default (``eval.mc_masks=stream``).

What MC buys beyond perplexity: the test's next-token predictions are also scored for calibration
(:mod:`vdrnn.calibration`), by weight scaling and by MC: top-1 expected calibration error over 15 bins, the Brier
score sum_v (p_v - [v = w_t])^2 and the predictive entropy, each per token and averaged, with the reliability
diagram's bins (``test_ece``, ``test_brier``, ``test_entropy``, ``test_reliability``; ``_mc`` for MC).
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

import vdrnn.nn as vnn
from vdrnn.calibration import Calibration, token_scores
from vdrnn.tasks.lm.data import TokenStreams, batchify, minibatches
from vdrnn.tasks.lm.model import LanguageModel
from vdrnn.training.bars import finish, mc_progress, pass_bar
from vdrnn.training.device import autocast
from vdrnn.training.evaluation import samples_side_by_side
from vdrnn.training.graphs import ShapeGraphs

log = logging.getLogger("vdrnn")


def exp_or_inf(loss: float) -> float:
    """Perplexity from a mean NLL, saturating at inf instead of raising OverflowError. A NaN loss stays NaN (it
    compares false, so it reaches math.exp): a diverged model is then reported as such, not as merely poor."""
    return math.inf if loss >= 700 else math.exp(loss)


def graphs_apply(device: torch.device, cfg) -> bool:
    """Are evaluation's forward passes replayed from CUDA graphs (``trainer.cuda_graph``, on CUDA, in fp32)?"""
    return cfg.trainer.cuda_graph != "off" and device.type == "cuda" and cfg.trainer.amp == "off"


@torch.no_grad()
def perplexity(model: LanguageModel, stream: torch.Tensor, batch_size: int, bptt: int,
               amp: str = "off", graphed: bool = False, calibration: Calibration | None = None,
               label: str = "", progress: bool | str = False) -> float:
    """Weight-scaling perplexity of ``stream`` read as ``batch_size`` parallel streams. Each stream's last token is
    only a target and the tail that does not fill a stream is dropped (as Zaremba's code), so batch_size > 1 scores
    a few tokens fewer than the N - 1 of one stream (73,740 of PTB validation's 73,759 at 20).

    ``graphed`` (CUDA): each minibatch shape's forward pass is recorded once as a CUDA graph and replayed (a test
    stream at batch 1 is a thousand small passes, each otherwise waiting on Python's launches). ``calibration``
    receives every next-token prediction's scores (top-1 confidence and correctness, entropy, Brier score).
    ``progress`` (trainer.progress): a bar named ``label``."""
    device = next(model.parameters()).device
    data = batchify(stream, batch_size).to(device)
    state = model.initial_state(batch_size, device)

    model.eval()

    def nll_sum(inputs, targets, state):
        with autocast(device, amp):
            logits, state = model(inputs, state)
        logits, targets = logits.flatten(0, 1).float(), targets.flatten()
        scores = token_scores(logits.softmax(dim=-1), targets) if calibration is not None else ()
        return F.cross_entropy(logits, targets, reduction="sum").double(), state, scores

    run = ShapeGraphs(nll_sum, carry=(1, 2)) if graphed else nll_sum  # the state, minibatch to minibatch
    total = torch.zeros((), device=device, dtype=torch.float64)
    count = 0
    bar = pass_bar(label, math.ceil((len(data) - 1) / bptt), progress)
    for inputs, targets in minibatches(data, bptt):
        nll, state, scores = run(inputs, targets, state)
        total += nll
        count += targets.numel()
        if calibration is not None:
            calibration.add(*scores)
        bar.update()
    finish(bar)
    return exp_or_inf(total.item() / count)


@torch.no_grad()
def mc_perplexity(model: LanguageModel, stream: torch.Tensor, samples: int, batch: int, bptt: int,
                  word_dropout: bool = False, amp: str = "off", masks: str = "stream", progress: bool | str = False,
                  calibration: Calibration | None = None) -> float:
    """MC-dropout perplexity of one stream, ``samples`` passes run ``batch`` at a time (``progress``,
    trainer.progress: a bar).

    ``masks="stream"`` keeps each sample's masks for the whole stream, as Gal's ``run_MC_test`` (one
    ``sample_noise`` per pass over the test set); ``"minibatch"`` redraws them every ``bptt`` tokens, as
    in training. Fresh-per-step masks (Zaremba) are fresh either way.

    ``calibration`` receives the scores of each token's MC predictive distribution, the mean of the samples' softmax
    outputs over the whole vocabulary. Where all samples run in one pass it is taken a minibatch at a time; where
    they take several, the sums wait in a [tokens, vocabulary] buffer (3.3 GB for PTB's test set) until the last.
    """
    device = next(model.parameters()).device
    stream = stream.to(device)
    batch = samples_side_by_side(model, batch, word_dropout)
    model.eval()
    # prob_sum[t] = sum over samples of p(stream[t + 1] | stream[: t + 1]).
    prob_sum = torch.zeros(stream.numel() - 1, device=device, dtype=torch.float64)
    one_pass = batch >= samples
    dist_sum = (torch.zeros(stream.numel() - 1, model.vocab_size, device=device)
                if calibration is not None and not one_pass else None)
    steps = math.ceil((stream.numel() - 1) / bptt)  # minibatches per pass, for the bar
    done, bar = 0, mc_progress(samples, steps, progress)
    while done < samples:
        replicas = min(batch, samples - done)
        data = stream.unsqueeze(1).expand(-1, replicas)  # every column is the whole stream
        state = model.initial_state(replicas, device)
        frozen = vnn.fixed_masks(model) if masks == "stream" else nullcontext()
        with frozen, vnn.mc_dropout(model, embedding=word_dropout):
            for start, (inputs, _) in zip(range(0, stream.numel() - 1, bptt), minibatches(data, bptt), strict=True):
                targets = stream[start + 1 : start + 1 + inputs.shape[0]]
                with autocast(device, amp):
                    logits, state = model(inputs, state)
                # log p(target) of every replica; cross_entropy's fused log-softmax reads the [T, K, V]
                # logits once (logsumexp + gather made several full-size intermediates: 3x slower).
                log_p = -F.cross_entropy(logits.float().flatten(0, 1), targets.repeat_interleave(replicas),
                                         reduction="none").view(-1, replicas)  # [T, replicas]
                prob_sum[start : start + inputs.shape[0]] += log_p.double().exp().sum(dim=1)
                if calibration is not None:
                    dists = logits.float().softmax(dim=-1).sum(dim=1)  # [T, V]: the replicas' distributions summed
                    if one_pass:
                        calibration.add(*token_scores(dists / samples, targets))
                    else:
                        dist_sum[start : start + inputs.shape[0]] += dists
                bar.update(replicas)
        done += replicas
    finish(bar)
    if dist_sum is not None:
        for start in range(0, len(dist_sum), 4096):
            calibration.add(*token_scores(dist_sum[start : start + 4096] / samples, stream[start + 1 : start + 4097]))
    return exp_or_inf(-(prob_sum / samples).log().mean().item())


def evaluate_all(model: LanguageModel, corpus: TokenStreams, cfg) -> dict[str, Any]:
    """Valid and test perplexity with weight scaling, plus MC test perplexity with ``eval=mc``."""
    d, e, amp = cfg.data, cfg.eval, cfg.trainer.amp
    graphed = graphs_apply(next(model.parameters()).device, cfg)
    started = time.perf_counter()
    calibration = Calibration()
    metrics: dict[str, Any] = {
        "valid_ppl": perplexity(model, corpus.valid, d.eval_batch_size, d.bptt, amp, graphed,
                                label="validation", progress=cfg.trainer.progress),
        "test_ppl": perplexity(model, corpus.test, d.test_batch_size, d.bptt, amp, graphed, calibration,
                               label="test", progress=cfg.trainer.progress),
        **{f"test_{key}": value for key, value in calibration.summary().items()},
    }
    if e.mode == "mc":
        mc_started = time.perf_counter()
        calibration = Calibration()
        metrics["test_ppl_mc"] = mc_perplexity(model, corpus.test, e.samples, e.batch, d.bptt, e.word_dropout, amp,
                                               e.mc_masks, progress=cfg.trainer.progress, calibration=calibration)
        metrics.update({f"test_{key}_mc": value for key, value in calibration.summary().items()})
        metrics["mc_samples"] = e.samples
        metrics["mc_seconds"] = time.perf_counter() - mc_started
    metrics["eval_seconds"] = time.perf_counter() - started
    return metrics
