"""Metrics of predictive distributions: accuracy, NLL, expected calibration error, entropy; RMSE.

All take the *predictive* distribution, so weight scaling (one deterministic pass) and MC dropout
(the average of the probabilities of K stochastic passes, :mod:`vdrnn.tasks.sentiment.predict`) are
scored by the same functions.

ECE is a finite-sample estimate: even a perfectly calibrated predictor scores above zero on 25,000
reviews, and two predictors' ECEs differ by chance. So that "MC is better calibrated than weight
scaling" can be read off a run, :func:`calibration_report` adds what a calibrated predictor with the
same confidences would score (the floor), the reliability diagram's bins, and :func:`ece_difference`,
a paired bootstrap interval for the difference of two predictors' ECEs on the same examples.
"""

from __future__ import annotations

import torch

ECE_BINS = 15


def _confidence_bins(confidence: torch.Tensor, bins: int) -> torch.Tensor:
    """The bin of each confidence: k for confidence in (k/bins, (k+1)/bins] (0 for confidence 0)."""
    return (confidence.double() * bins).ceil().long().clamp(1, bins) - 1


def _ece(confidence: torch.Tensor, correct: torch.Tensor, bins: int) -> torch.Tensor:
    """ECE of each row of ``confidence`` / ``correct`` [R, N] (or one [N]): a tensor [R] (or a scalar)."""
    shape, n = confidence.shape[:-1], confidence.shape[-1]
    confidence, correct = confidence.reshape(-1, n).double(), correct.reshape(-1, n)
    rows = len(confidence)
    # Row r's bin k is slot r * bins + k of one flat histogram, so that R rows take one index_add_.
    slot = (_confidence_bins(confidence, bins) + bins * torch.arange(rows, device=confidence.device)[:, None]).flatten()
    hits = confidence.new_zeros(rows * bins).index_add_(0, slot, correct.double().flatten())
    sure = confidence.new_zeros(rows * bins).index_add_(0, slot, confidence.flatten())
    # |B_k|/N * |acc_k - conf_k| = |hits_k - sum of confidences_k| / N
    return ((hits - sure).abs().view(rows, bins).sum(dim=1) / n).reshape(shape)


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, bins: int = ECE_BINS) -> float:
    """ECE (Naeini et al. 2015; Guo et al. 2017) with ``bins`` equal-width confidence bins.

    Confidence is the probability of the predicted (argmax) class; bin k holds the predictions with
    confidence in (k/bins, (k+1)/bins]. ECE = sum_k |B_k|/N * |accuracy(B_k) - mean confidence(B_k)|:
    the gap between how sure the model is and how often it is right, weighted by how often it is that sure.
    """
    confidence, predicted = probs.max(dim=1)
    return _ece(confidence, predicted == labels, bins).item()


def ece_floor(probs: torch.Tensor, bins: int = ECE_BINS, draws: int = 200, seed: int = 0) -> float:
    """The ECE a perfectly calibrated predictor with these confidences scores on N examples, on average.

    Such a predictor is right with probability equal to its confidence; drawing "right" that way
    ``draws`` times and scoring each draw gives the ECE that sampling alone produces (about 0.004 for
    the tuned IMDB models' confidences on the 25,000 test reviews). A measured ECE near it is as calibrated
    as N examples can show.
    """
    confidence = probs.max(dim=1).values.double().cpu()
    generator = torch.Generator().manual_seed(seed)
    right = torch.rand(draws, len(confidence), generator=generator, dtype=torch.float64) < confidence
    return _ece(confidence.expand(draws, -1), right, bins).mean().item()


def ece_difference(probs_a: torch.Tensor, probs_b: torch.Tensor, labels: torch.Tensor, bins: int = ECE_BINS,
                   resamples: int = 1000, seed: int = 0, chunk: int = 100) -> tuple[float, float, float]:
    """ECE(a) - ECE(b) on the same examples, with a 95% paired-bootstrap interval: (difference, low, high).

    Each resample draws N examples with replacement and scores both predictors on that same draw, so the
    interval holds the examples' sampling noise that the two share and is tighter than two separate ones.
    An interval below zero says a is the better calibrated beyond chance.

    The interval is the basic (reverse-percentile) one, 2 d - q(97.5%) .. 2 d - q(2.5%) for the measured d and
    the resampled differences' quantiles q. Resampling adds noise to both ECEs and noise raises an ECE, the
    better calibrated predictor's the most, so the resampled differences sit off-centre from d and the plain
    percentile interval inherits that shift. In two simulations (predictors 0.007 apart on 25,000 examples,
    0.035 apart on 10,000) the basic interval held the population's difference 95% and 80% of the time, the
    percentile one 80% and 10%; what it still misses is the ECE's own upward bias near zero (its floor).
    """
    conf_a, pred_a = probs_a.double().cpu().max(dim=1)
    conf_b, pred_b = probs_b.double().cpu().max(dim=1)
    labels = labels.cpu()
    right_a, right_b = pred_a == labels, pred_b == labels
    generator = torch.Generator().manual_seed(seed)
    differences = []
    for start in range(0, resamples, chunk):  # [chunk, N] indices at a time: 20 MB for N = 25,000
        index = torch.randint(len(labels), (min(chunk, resamples - start), len(labels)), generator=generator)
        differences.append(_ece(conf_a[index], right_a[index], bins) - _ece(conf_b[index], right_b[index], bins))
    low, high = torch.cat(differences).quantile(torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    difference = _ece(conf_a, right_a, bins).item() - _ece(conf_b, right_b, bins).item()
    return difference, 2 * difference - high, 2 * difference - low


def reliability_bins(probs: torch.Tensor, labels: torch.Tensor, bins: int = ECE_BINS) -> dict[str, list[float]]:
    """The reliability diagram's sums per confidence bin: examples, right predictions, summed confidence.

    Sums rather than means, so that seeds pool exactly (add them) and an empty bin needs no placeholder.
    """
    confidence, predicted = probs.double().cpu().max(dim=1)
    index = _confidence_bins(confidence, bins)
    total = torch.zeros(bins, dtype=torch.float64)
    return {"count": total.index_add(0, index, torch.ones_like(confidence)).tolist(),
            "right": total.index_add(0, index, (predicted == labels.cpu()).double()).tolist(),
            "confidence": total.index_add(0, index, confidence).tolist()}


def calibration_report(probs: torch.Tensor, labels: torch.Tensor) -> dict[str, object]:
    """What besides the ECE tells how calibrated ``probs`` is: the floor (:func:`ece_floor`) and the bins."""
    return {"ece_floor": ece_floor(probs), "reliability": reliability_bins(probs, labels)}


def classification_metrics(probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """probs [N, C] (rows sum to one), labels [N] -> accuracy, NLL (nats), ECE, mean predictive entropy (nats)."""
    probs, labels = probs.double().cpu(), labels.cpu()
    tiny = torch.finfo(torch.float64).tiny  # log(0) guard: a float64 probability underflows only past ~708 nats
    return {
        "accuracy": (probs.argmax(dim=1) == labels).double().mean().item(),
        "nll": -probs.gather(1, labels.view(-1, 1)).clamp_min(tiny).log().mean().item(),
        "ece": expected_calibration_error(probs, labels),
        "entropy": -torch.special.xlogy(probs, probs).sum(dim=1).mean().item(),
    }


def rmse(predictions: torch.Tensor, targets: torch.Tensor, scale: float = 1.0) -> float:
    """Root mean squared error, times ``scale`` (the rating std, for standardised targets)."""
    return scale * (predictions.double().cpu() - targets.double().cpu()).square().mean().sqrt().item()
