"""MC dropout (Gal & Ghahramani 2016, sec. 5.1): predictions averaged over stochastic forward passes.

    p_MC(y | x) = 1/S sum_s p(y | x, masks_s)

Probabilities are averaged, not logits or log-probabilities: the average of the samples' distributions is the MC
estimate of the predictive distribution. The S passes run side by side where the model allows: the inputs are
repeated S times along the batch, each copy drawing its own per-sequence masks, so S samples cost one call at S times
the batch. A model that draws a mask shared by its batch (``WeightDrop``'s W_hh mask, ``per="batch"``) gets one
sample per call instead.

:func:`mc_dropout` switches the masks on in an evaluating model (and nothing else: batch norm stays in evaluation);
:func:`fixed_masks` keeps each sequence's fixed-over-time masks across calls, as one sample's masks over a stream
read in many minibatches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from vdrnn.nn.masked import MaskedModule
from vdrnn.nn.rnn import RecurrentBase
from vdrnn.nn.sites import Embedding


def masked_modules(model: nn.Module, embedding: bool = True) -> list[MaskedModule]:
    """The modules of ``model`` that draw masks (its :class:`Embedding`\\ s only with ``embedding``)."""
    return [m for m in model.modules() if isinstance(m, MaskedModule) and (embedding or not isinstance(m, Embedding))]


@contextmanager
def mc_dropout(model: nn.Module, embedding: bool = True) -> Iterator[nn.Module]:
    """Within this context the vdrnn.nn modules of ``model`` draw their masks as in training, whatever
    ``model.training`` says; every other module keeps its mode. ``embedding=False`` leaves word-type dropout off
    (Gal's MC test)."""
    modules = masked_modules(model, embedding)
    modes = [m.training for m in modules]
    try:
        for m in modules:
            m.training = True
        yield model
    finally:
        for m, mode in zip(modules, modes, strict=True):
            m.training = mode


@contextmanager
def fixed_masks(model: nn.Module) -> Iterator[nn.Module]:
    """Within this context the masks fixed over time (every scheme's but those drawn fresh at each step) are drawn at
    the first call that draws any and reused by every later call: one mask per sequence for a whole stream read in
    many minibatches (Gal's MC test over PTB). Every call must then have the first call's batch."""
    modules = masked_modules(model)
    for m in modules:
        m._kept = {}
    try:
        yield model
    finally:
        for m in modules:
            m._kept = None


def shares_draws_across_batch(model: nn.Module, embedding: bool = True) -> bool:
    """Does any module of ``model`` draw one mask for its whole batch (so that MC samples cannot share a call)?"""
    return any(m.shares_draws_across_batch() for m in masked_modules(model, embedding))


@dataclass
class MCPrediction:
    """What :func:`mc_predict` returns.

    ``mean``: the samples' average [..., C] (float64), the predictive distribution; ``samples``: every sample's
    [S, ..., C] (float32), or None with ``keep_samples=False``. For distributions over the last dimension, the
    uncertainty of the prediction in nats: :meth:`predictive_entropy` (total), :meth:`expected_entropy` (aleatoric,
    the data's) and :meth:`mutual_information` (epistemic, the model's own: what more data would remove; BALD).
    """

    mean: torch.Tensor
    samples: torch.Tensor | None

    def predictive_entropy(self) -> torch.Tensor:
        """H[mean] = -sum_c p_c log p_c of the averaged distribution: the total uncertainty [...]."""
        return entropy(self.mean)

    def expected_entropy(self) -> torch.Tensor:
        """1/S sum_s H[p_s]: the uncertainty each sampled model has on its own, the aleatoric part [...]."""
        if self.samples is None:
            raise ValueError("expected_entropy needs every sample: call mc_predict with keep_samples=True")
        return entropy(self.samples.double()).mean(0)

    def mutual_information(self) -> torch.Tensor:
        """H[mean] - 1/S sum_s H[p_s] >= 0: how much the sampled models disagree, the epistemic part [...]."""
        return mutual_information(self.mean, self.expected_entropy())


def entropy(p: torch.Tensor) -> torch.Tensor:
    """-sum p log p over the last dimension, with 0 log 0 = 0."""
    return -torch.special.xlogy(p, p).sum(-1)


def mutual_information(mean: torch.Tensor, expected_entropy: torch.Tensor) -> torch.Tensor:
    """I[y; w] = H[1/S sum_s p_s] - 1/S sum_s H[p_s] (BALD, Houlsby et al. 2011) from the samples' average ``mean``
    [..., C] and their mean entropy [...]: the part of the total uncertainty that the sampled models' disagreement
    makes, zero where they all agree and at most log C. Those who stream the samples pass their running sums here."""
    return entropy(mean) - expected_entropy


def arithmetic_log_mean(log_probs: torch.Tensor, dim: int) -> torch.Tensor:
    """log 1/S sum_s p_s: the mixture of the samples (Gal's MC estimate of the predictive distribution), in log space,
    so that a class every sample all but rules out keeps a finite log-probability."""
    return log_probs.logsumexp(dim) - math.log(log_probs.shape[dim])


def geometric_log_mean(log_probs: torch.Tensor, dim: int) -> torch.Tensor:
    """log of the normalised geometric mean, prod_s p_s^(1/S) / Z: the average of the log-probabilities, renormalised
    (Melis et al. 2018 compare it with the arithmetic mean). For softmax samples p_s = softmax(z_s) it is
    softmax(1/S sum_s z_s): each sample's log-normaliser is the same for every class and cancels."""
    return log_probs.mean(dim).log_softmax(-1)


AVERAGES = {"arithmetic": arithmetic_log_mean, "geometric": geometric_log_mean}  # eval.average -> how samples combine


def log_predictive(logits: torch.Tensor, dim: int = 0, average: str = "arithmetic",
                   temperature: float = 1.0) -> torch.Tensor:
    """log p_MC(y | x) of the samples' logits along ``dim``, each tempered (softmax(z_s / T), Guo et al. 2017) and then
    averaged as ``average`` says (:data:`AVERAGES`); float64, over the last dimension."""
    return AVERAGES[average]((logits.double() / temperature).log_softmax(-1), dim)


def default_batch_dim(model: nn.Module) -> int:
    """Where the batch is, by the model's own recurrent modules: 0 if they are ``batch_first`` (or it has none),
    else 1."""
    layouts = {m.batch_first for m in model.modules() if isinstance(m, RecurrentBase)}
    return 1 if layouts == {False} else 0


def softmax(output: torch.Tensor) -> torch.Tensor:
    """Logits to probabilities over the last dimension, in float64 (an fp32 softmax rounds a class far behind to 0)."""
    return output.double().softmax(dim=-1)


@torch.no_grad()
def mc_predict(model: nn.Module, inputs, samples: int = 100, *, batch_dim: int | tuple[int, ...] | None = None,
               output_batch_dim: int | None = None, samples_per_call: int | None = None, embedding: bool = False,
               keep_samples: bool = True, probabilities: Callable[[torch.Tensor], torch.Tensor] = softmax,
               forward: Callable | None = None) -> MCPrediction:
    """MC dropout: ``samples`` stochastic passes of ``model`` over ``inputs``, their probabilities averaged.

    Args:
        model: any module built with vdrnn.nn modules; it is run in evaluation mode with their masks on
            (:func:`mc_dropout`), and left in the mode it came in.
        inputs: a tensor, or a tuple of the model's positional arguments (tensors are repeated along their batch
            dimension, anything else passed as it is).
        samples: S, the number of passes. Default: 100.
        batch_dim: the batch dimension of the inputs: one for all, or one per input. Default: 0 if the model's
            recurrent modules are ``batch_first``, else 1.
        output_batch_dim: the batch dimension of the output. Default: ``batch_dim`` (where that is one number).
        samples_per_call: how many samples run side by side in one call (memory grows with it). Default: all of them,
            or one where the model draws masks shared by its batch.
        embedding: keep :class:`Embedding`'s word-type dropout on; Gal's MC test leaves it off. Default: False.
        keep_samples: return every sample's probabilities (for :meth:`MCPrediction.expected_entropy` and
            :meth:`MCPrediction.mutual_information`). Default: True.
        probabilities: the model's output to what is averaged. Default: softmax over the last dimension (float64);
            the identity averages a regression's predictions.
        forward: ``forward(model, *inputs)`` -> the output, where calling the model is not enough. Default: the
            model's output, or the first element of a tuple it returns (an RNN's (output, state)).

    Returns: an :class:`MCPrediction`.
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"mc_predict(samples={samples!r}): must be a whole number >= 1")
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    dims = batch_dim if batch_dim is not None else default_batch_dim(model)
    dims = dims if isinstance(dims, tuple) else (dims,) * len(args)
    if len(dims) != len(args):
        raise ValueError(f"mc_predict(batch_dim={batch_dim}): one batch dimension per input ({len(args)})")
    if output_batch_dim is None:
        if len(set(dims)) != 1:
            raise ValueError(f"mc_predict(batch_dim={batch_dim}): the inputs' batch dimensions differ, so pass "
                             f"output_batch_dim, the output's")
        output_batch_dim = dims[0]
    tensors = [(a, d) for a, d in zip(args, dims, strict=True) if isinstance(a, torch.Tensor)]
    if not tensors:
        raise ValueError("mc_predict: no tensor among the inputs to repeat along the batch")
    batch = tensors[0][0].shape[tensors[0][1]]
    per_call = samples if samples_per_call is None else max(1, min(samples_per_call, samples))
    if shares_draws_across_batch(model, embedding):
        per_call = 1  # the copies in one call would all be the same sample
    run = forward or call_model
    total, kept, done = None, [], 0
    training = model.training
    model.eval()
    try:
        with mc_dropout(model, embedding):
            while done < samples:
                k = min(per_call, samples - done)
                # Copy j of sequence i sits at j * B + i: each copy draws its own masks.
                repeated = tuple(torch.cat([a] * k, dim=d) if isinstance(a, torch.Tensor) else a
                                 for a, d in zip(args, dims, strict=True))
                out = probabilities(run(model, *repeated))
                dim = output_batch_dim % out.dim()
                per_sample = out.unflatten(dim, (k, batch)).movedim(dim, 0)  # [k, ..., B, ...]
                summed = per_sample.sum(dim=0)
                total = summed if total is None else total + summed
                if keep_samples:
                    kept.append(per_sample.float())
                done += k
    finally:
        model.train(training)
    return MCPrediction(mean=total / samples, samples=torch.cat(kept) if keep_samples else None)


def call_model(model: nn.Module, *inputs):
    out = model(*inputs)
    return out[0] if isinstance(out, tuple) else out

