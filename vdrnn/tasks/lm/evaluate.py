"""Perplexity with weight scaling (deterministic) and with MC dropout (stochastic, averaged).

Weight scaling runs the network with every mask equal to one; inverted dropout in training makes
that the standard dropout approximation with no rescaling.

MC dropout (Gal & Ghahramani sec. 5.1, "MC"): K stochastic forward passes with the training masks,
recurrent ones included, and the predictive probability of each token averaged over them:

    ppl_MC = exp( -1/N sum_t log( 1/K sum_k p(w_t | w_<t, masks_k) ) )

Probabilities are averaged, not log-probabilities: averaging logs estimates something else (the
geometric mean), which is never better by Jensen's inequality; ``eval.average=geometric`` scores it, renormalised,
to compare (Melis et al. 2018). The K passes are run side by side:
the test stream is replicated as K columns of one batch, each column with its own masks and its
own hidden state, so 1,000 samples cost one pass over the stream at batch 1,000 (a scheme whose masks
are shared by the batch, such as AWD's weight drop, runs its samples one by one instead). As in Gal's code,
each sample keeps its masks for the whole stream by default (``eval.mc_masks=stream``).

What MC buys beyond perplexity: the test's next-token predictions are also scored for calibration
(:mod:`vdrnn.calibration`), by weight scaling and by MC: top-1 expected calibration error over 15 bins, the Brier
score sum_v (p_v - [v = w_t])^2 and the predictive entropy, each per token and averaged, with the reliability
diagram's bins (``test_ece``, ``test_brier``, ``test_entropy``, ``test_reliability``; ``_mc`` for MC); and MC's
uncertainty split into its aleatoric and epistemic parts (:mod:`vdrnn.uncertainty`; ``test_uncertainty_*_mc``).
A softmax temperature (``eval.temperature``, :mod:`vdrnn.temperature`) divides every logit first, weight scaling's
and each sample's alike.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

import vdrnn.nn as vnn
from vdrnn.calibration import Calibration, token_scores
from vdrnn.tasks.lm.data import TokenStreams, batchify, minibatches
from vdrnn.tasks.lm.datasets import EOS
from vdrnn.tasks.lm.model import LanguageModel
from vdrnn.temperature import fit_temperature
from vdrnn.training.bars import finish, mc_progress, pass_bar
from vdrnn.training.device import autocast
from vdrnn.training.evaluation import mc_model, samples_side_by_side
from vdrnn.training.graphs import ShapeGraphs
from vdrnn.uncertainty import Decomposition

log = logging.getLogger("vdrnn")


def exp_or_inf(loss: float) -> float:
    """Perplexity from a mean NLL, saturating at inf instead of raising OverflowError. A NaN loss stays NaN (it
    compares false, so it reaches math.exp): a diverged model is then reported as such, not as merely poor."""
    return math.inf if loss >= 700 else math.exp(loss)


def graphs_apply(device: torch.device, cfg) -> bool:
    """Are evaluation's forward passes replayed from CUDA graphs (``trainer.cuda_graph``, on CUDA, in fp32)?"""
    return cfg.trainer.cuda_graph != "off" and device.type == "cuda" and cfg.trainer.amp == "off"


@torch.no_grad()
def perplexity(model: LanguageModel, stream: torch.Tensor, batch_size: int, bptt: int, amp: str = "off",
               graphed: bool = False, calibration: Calibration | None = None, temperature: float = 1.0,
               label: str = "", progress: bool | str = False) -> float:
    """Weight-scaling perplexity of ``stream`` read as ``batch_size`` parallel streams. Each stream's last token is
    only a target and the tail that does not fill a stream is dropped (as Zaremba's code), so batch_size > 1 scores
    a few tokens fewer than the N - 1 of one stream (73,740 of PTB validation's 73,759 at 20).

    ``graphed`` (CUDA): each minibatch shape's forward pass is recorded once as a CUDA graph and replayed (a test
    stream at batch 1 is a thousand small passes, each otherwise waiting on Python's launches). ``calibration``
    receives every next-token prediction's scores (top-1 confidence and correctness, entropy, Brier score);
    ``temperature`` divides the logits. ``progress`` (trainer.progress): a bar named ``label``."""
    device = next(model.parameters()).device
    data = batchify(stream, batch_size).to(device)
    state = model.initial_state(batch_size, device)

    model.eval()

    def nll_sum(inputs, targets, state):
        with autocast(device, amp):
            logits, state = model(inputs, state)
        logits, targets = logits.flatten(0, 1).float() / temperature, targets.flatten()
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


def ws_nll_at(model: LanguageModel, stream: torch.Tensor, batch_size: int, bptt: int, temperatures: torch.Tensor,
              amp: str = "off") -> torch.Tensor:
    """Weight scaling's mean NLL of ``stream`` (read as :func:`perplexity` reads it) at each temperature [G]: one
    pass, every temperature scored on each minibatch's logits."""
    device = next(model.parameters()).device
    data = batchify(stream, batch_size).to(device)
    state = model.initial_state(batch_size, device)
    model.eval()
    total, count = torch.zeros(len(temperatures), dtype=torch.float64, device=device), 0
    with torch.no_grad():
        for inputs, targets in minibatches(data, bptt):
            with autocast(device, amp):
                logits, state = model(inputs, state)
            total += tempered_nll(logits.flatten(0, 1).float(), targets.flatten(), temperatures)
            count += targets.numel()
    return (total / count).cpu()


def tempered_nll(logits: torch.Tensor, targets: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """The summed NLL of softmax(logits [N, V] / T) for ``targets`` [N], at each temperature T [G]."""
    return torch.stack([F.cross_entropy(logits / t.item(), targets, reduction="sum") for t in temperatures]).double()


def mc_minibatches(model: LanguageModel, stream: torch.Tensor, samples: int, side_by_side: int, bptt: int,
                   word_dropout: bool = False, amp: str = "off", masks: str = "stream",
                   progress: bool | str = False) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """Every minibatch of the MC passes over ``stream``: (where its targets start, the targets [T], the logits
    [T, k, V] in fp32 of the k samples of its pass), ``samples`` in passes of ``side_by_side`` (``progress``,
    trainer.progress: a bar).

    ``masks="stream"`` keeps each sample's masks for the whole stream, as Gal's ``run_MC_test`` (one
    ``sample_noise`` per pass over the test set); ``"minibatch"`` redraws them every ``bptt`` tokens, as
    in training. Fresh-per-step masks (Zaremba) are fresh either way."""
    device = next(model.parameters()).device
    stream = stream.to(device)
    model.eval()
    steps = math.ceil((stream.numel() - 1) / bptt)  # minibatches per pass, for the bar
    done, bar = 0, mc_progress(samples, steps, progress)
    while done < samples:
        replicas = min(side_by_side, samples - done)
        data = stream.unsqueeze(1).expand(-1, replicas)  # every column is the whole stream
        state = model.initial_state(replicas, device)
        frozen = vnn.fixed_masks(model) if masks == "stream" else nullcontext()
        with frozen, vnn.mc_dropout(model, embedding=word_dropout):
            for start, (inputs, _) in zip(range(0, stream.numel() - 1, bptt), minibatches(data, bptt), strict=True):
                with autocast(device, amp):
                    logits, state = model(inputs, state)
                yield start, stream[start + 1 : start + 1 + inputs.shape[0]], logits.float()
                bar.update(replicas)
        done += replicas
    finish(bar)


class ReplicaSums:
    """What MC dropout sums over its samples for each of ``tokens`` next-token predictions, sample by sample as the
    passes come, so that no sample's [V] distribution outlives its minibatch:

        target   sum_k p_k(w_t)              arithmetic average: the target's probability (for the perplexity)
        logits   sum_k z_k                   geometric average: log p_geo = log softmax(1/K sum_k z_k / T)
        probs    sum_k p_k(.)   [V]          ``full``: the mixture, for calibration and the decomposition
        entropy  sum_k H[p_k]                ``full``: the samples' entropies, the aleatoric part

    with p_k = softmax(z_k / T), T the ``temperature``. The geometric sums are of the raw logits, so any temperature
    may divide them afterwards (:meth:`mean_logits`)."""

    def __init__(self, tokens: int, vocab: int, device, average: str = "arithmetic", full: bool = False,
                 temperature: float = 1.0):
        self.average, self.temperature = average, temperature

        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros(*shape, device=device, dtype=dtype)

        self.target = zeros(tokens, dtype=torch.float64) if average == "arithmetic" else None
        self.logits = zeros(tokens, vocab) if average == "geometric" else None
        self.probs = zeros(tokens, vocab) if full else None
        self.entropy = zeros(tokens, dtype=torch.float64) if full else None

    def add(self, at: slice, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """The k samples' ``logits`` [T, k, V] of the tokens ``at``, whose targets are ``targets`` [T]."""
        k = logits.shape[1]
        tempered = logits if self.temperature == 1 else logits / self.temperature
        if self.logits is not None:
            self.logits[at] += logits.sum(dim=1)
        if self.target is None and self.probs is None:
            return
        # -log p_k(target) of every sample; cross_entropy's fused log-softmax reads the [T, k, V] logits once
        # (logsumexp + gather made several full-size intermediates: 3x slower).
        nll = F.cross_entropy(tempered.flatten(0, 1), targets.repeat_interleave(k), reduction="none").view(-1, k)
        if self.target is not None:
            self.target[at] += (-nll).double().exp().sum(dim=1)
        if self.probs is not None:
            probs = tempered.softmax(dim=-1)  # [T, k, V]: the samples' distributions, the one full-size copy
            self.probs[at] += probs.sum(dim=1)
            # H[p_k] = logsumexp(z_k) - sum_v p_kv z_kv, where logsumexp(z_k) = -log p_k(target) + z_k,target and the
            # sum is a dot product per sample: no other [T, k, V] tensor is made.
            log_normalizer = nll + tempered.gather(2, targets.view(-1, 1, 1).expand(-1, k, 1)).squeeze(2)
            expected_logit = (probs.unsqueeze(2) @ tempered.unsqueeze(3)).flatten(1)  # [T, k]
            self.entropy[at] += (log_normalizer - expected_logit).double().sum(dim=1)

    def mean_logits(self, at: slice, samples: int) -> torch.Tensor:
        """1/K sum_k z_k [T, V] (geometric sums)."""
        return self.logits[at].double() / samples

    def log_target(self, at: slice, targets: torch.Tensor, samples: int) -> torch.Tensor:
        """log p_MC(w_t) [T] of the tokens ``at``, their targets ``targets``, once all ``samples`` are summed."""
        if self.target is not None:
            return (self.target[at] / samples).log()
        return (self.mean_logits(at, samples) / self.temperature).log_softmax(-1).gather(1, targets[:, None])[:, 0]

    def predictive(self, at: slice, samples: int) -> torch.Tensor:
        """p_MC(.) [T, V] of the tokens ``at`` (``full``)."""
        if self.average == "arithmetic":
            return self.probs[at] / samples
        return (self.mean_logits(at, samples) / self.temperature).softmax(-1)

    def mixture(self, at: slice, samples: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(1/K sum_k p_k [T, V], 1/K sum_k H[p_k] [T]) of the tokens ``at`` (``full``): what the total, aleatoric and
        epistemic uncertainty are of, whatever the average (vdrnn.uncertainty.decompose)."""
        return self.probs[at] / samples, self.entropy[at] / samples


# Tokens scored at a time once a stream's sums are complete: [4096, V] distributions.
CHUNK = 4096


def summed_stretches(minibatches: Iterator[tuple[int, torch.Tensor, torch.Tensor]], stream: torch.Tensor,
                     one_pass: bool, make: Callable[[int, int], list[ReplicaSums]]):
    """Every stretch of ``stream``'s tokens once all their samples are summed: (the sums, where the stretch lies in
    them, its targets). ``make(tokens, vocab)``: the sums to add each minibatch's logits to. Where all samples run in
    one pass (``one_pass``) a stretch is a minibatch, summed and scored at once; where they take several, the sums of
    the whole stream wait until the last pass (the distributions' in a [tokens, V] buffer, 3.3 GB for PTB's test set),
    and the stretches are :data:`CHUNK` tokens of it."""
    whole = None
    for start, targets, logits in minibatches:
        if one_pass:
            sums = make(len(targets), logits.shape[-1])
            for s in sums:
                s.add(slice(None), logits, targets)
            yield sums, slice(None), targets
        else:
            whole = whole or make(stream.numel() - 1, logits.shape[-1])
            for s in whole:
                s.add(slice(start, start + len(targets)), logits, targets)
    for start in range(0, stream.numel() - 1, CHUNK) if whole else ():
        yield whole, slice(start, start + CHUNK), stream[start + 1 : start + 1 + CHUNK]


@torch.no_grad()
def mc_perplexity(model: LanguageModel, stream: torch.Tensor, samples: int, batch: int, bptt: int,
                  word_dropout: bool = False, amp: str = "off", masks: str = "stream", progress: bool | str = False,
                  calibration: Calibration | None = None, decomposition: Decomposition | None = None,
                  average: str = "arithmetic", temperature: float = 1.0) -> float:
    """MC-dropout perplexity of one stream, ``samples`` passes run ``batch`` at a time (:func:`mc_minibatches`),
    averaged as ``average`` says (:data:`vdrnn.nn.mc.AVERAGES`) after ``temperature`` divides each sample's logits.

    ``calibration`` receives the scores of each token's MC predictive distribution over the whole vocabulary, and
    ``decomposition`` its total, aleatoric and epistemic uncertainty (:class:`ReplicaSums`, :func:`summed_stretches`).
    """
    side_by_side = samples_side_by_side(model, batch, word_dropout)
    stream = stream.to(next(model.parameters()).device)
    full = calibration is not None or decomposition is not None

    def make(tokens: int, vocab: int) -> list[ReplicaSums]:
        return [ReplicaSums(tokens, vocab, stream.device, average, full, temperature)]

    nll = 0.0
    passes = mc_minibatches(model, stream, samples, side_by_side, bptt, word_dropout, amp, masks, progress)
    for (sums,), at, targets in summed_stretches(passes, stream, side_by_side >= samples, make):
        nll = nll + sums.log_target(at, targets, samples).sum()
        if calibration is not None:
            calibration.add(*token_scores(sums.predictive(at, samples), targets))
        if decomposition is not None:
            decomposition.add(*sums.mixture(at, samples))
    return exp_or_inf(-float(nll) / (stream.numel() - 1))


@torch.no_grad()
def mc_nll_at(model: LanguageModel, stream: torch.Tensor, samples: int, batch: int, bptt: int,
              temperatures: torch.Tensor, word_dropout: bool = False, amp: str = "off", masks: str = "stream",
              average: str = "arithmetic") -> torch.Tensor:
    """MC dropout's mean NLL of ``stream`` at each temperature [G], from one set of passes: the arithmetic average
    sums each temperature's target probabilities; the geometric one sums the logits once, which any temperature then
    divides."""
    side_by_side = samples_side_by_side(model, batch, word_dropout)
    device = next(model.parameters()).device
    stream = stream.to(device)

    def make(tokens: int, vocab: int) -> list[ReplicaSums]:
        if average == "geometric":
            return [ReplicaSums(tokens, vocab, device, average)]
        return [ReplicaSums(tokens, vocab, device, average, temperature=t.item()) for t in temperatures]

    total = torch.zeros(len(temperatures), dtype=torch.float64, device=device)
    passes = mc_minibatches(model, stream, samples, side_by_side, bptt, word_dropout, amp, masks)
    for sums, at, targets in summed_stretches(passes, stream, side_by_side >= samples, make):
        if average == "geometric":
            total += tempered_nll(sums[0].mean_logits(at, samples), targets, temperatures)
        else:
            total -= torch.stack([s.log_target(at, targets, samples).sum() for s in sums])
    return (total / (stream.numel() - 1)).cpu()


def evaluation_temperatures(model: LanguageModel, sampled: LanguageModel | None, corpus: TokenStreams,
                            cfg) -> tuple[float, float | None]:
    """The temperatures of weight scaling's test and, where MC samples ``sampled``, of MC's: ``eval.temperature``,
    or with ``fit`` each fitted on the validation stream (:func:`vdrnn.temperature.fit_temperature`). MC's fit
    replays the same masks for every grid (a fork of the random state, seeded with ``seed``), so that its NLLs differ
    by temperature alone, and leaves the test's draws as they would have been."""
    d, e, amp = cfg.data, cfg.eval, cfg.trainer.amp
    if e.temperature != "fit":
        return e.temperature, None if sampled is None else e.temperature
    ws = fit_temperature(lambda ts: ws_nll_at(model, corpus.valid, d.eval_batch_size, d.bptt, ts, amp),
                         "for weight scaling")
    if sampled is None:
        return ws, None
    device = next(model.parameters()).device

    def mc_nll(temperatures: torch.Tensor) -> torch.Tensor:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(cfg.seed)
            return mc_nll_at(sampled, corpus.valid, e.samples, e.batch, d.bptt, temperatures, e.word_dropout, amp,
                             e.mc_masks, e.average)

    return ws, fit_temperature(mc_nll, "for MC dropout")


def evaluate_all(model: LanguageModel, corpus: TokenStreams, cfg) -> dict[str, Any]:
    """Valid and test perplexity with weight scaling, plus MC test perplexity with ``eval=mc``; with ``ood=``,
    out-of-domain detection (:mod:`vdrnn.tasks.lm.ood`)."""
    from vdrnn.tasks.lm import ood  # it builds on this module's ReplicaSums

    d, e, amp = cfg.data, cfg.eval, cfg.trainer.amp
    graphed = graphs_apply(next(model.parameters()).device, cfg)
    started = time.perf_counter()
    sides = ood.ood_sentences(corpus, cfg) if cfg.ood else None  # missing text is refused before the test runs
    sampled = mc_model(model, cfg) if e.mode == "mc" else None
    temperature, mc_temperature = evaluation_temperatures(model, sampled, corpus, cfg)
    calibration = Calibration()
    metrics: dict[str, Any] = {
        "valid_ppl": perplexity(model, corpus.valid, d.eval_batch_size, d.bptt, amp, graphed,
                                label="validation", progress=cfg.trainer.progress),
        "test_ppl": perplexity(model, corpus.test, d.test_batch_size, d.bptt, amp, graphed, calibration, temperature,
                               label="test", progress=cfg.trainer.progress),
        **{f"test_{key}": value for key, value in calibration.summary().items()},
        "temperature": temperature,
    }
    if e.mode == "mc":
        mc_started = time.perf_counter()
        calibration, decomposition = Calibration(), Decomposition()
        metrics["test_ppl_mc"] = mc_perplexity(sampled, corpus.test, e.samples, e.batch, d.bptt, e.word_dropout, amp,
                                               e.mc_masks, cfg.trainer.progress, calibration, decomposition,
                                               e.average, mc_temperature)
        metrics.update({f"test_{key}_mc": value for key, value in calibration.summary().items()})
        metrics.update({f"test_{key}_mc": value for key, value in decomposition.summary().items()})
        metrics.update({"temperature_mc": mc_temperature, "mc_samples": e.samples,
                        "mc_seconds": time.perf_counter() - mc_started})
    if sides:
        metrics.update(ood.ood_metrics(model, sampled, sides, corpus.vocab.index(EOS), cfg, temperature,
                                       mc_temperature))
    metrics["eval_seconds"] = time.perf_counter() - started
    return metrics
