"""Metrics of predictive distributions: accuracy, NLL, expected calibration error, entropy; RMSE.

All take the *predictive* distribution, so weight scaling (one deterministic pass) and MC dropout
(the average of the probabilities of K stochastic passes, :mod:`vdrnn.sentiment.evaluate`) are
scored by the same functions.
"""

from __future__ import annotations

import torch

ECE_BINS = 15


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, bins: int = ECE_BINS) -> float:
    """ECE (Naeini et al. 2015; Guo et al. 2017) with ``bins`` equal-width confidence bins.

    Confidence is the probability of the predicted (argmax) class; bin k holds the predictions with
    confidence in (k/bins, (k+1)/bins]. ECE = sum_k |B_k|/N * |accuracy(B_k) - mean confidence(B_k)|:
    the gap between how sure the model is and how often it is right, weighted by how often it is that sure.
    """
    confidence, predicted = probs.max(dim=1)
    correct = (predicted == labels).double()
    index = (confidence.double() * bins).ceil().long().clamp(1, bins) - 1
    hits = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, correct)
    sure = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, confidence.double())
    # |B_k|/N * |acc_k - conf_k| = |hits_k - sum of confidences_k| / N
    return ((hits - sure).abs().sum() / len(labels)).item()


def classification_metrics(probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """probs [N, C] (rows sum to one), labels [N] -> accuracy, NLL (nats), ECE, mean predictive entropy (nats)."""
    probs, labels = probs.double().cpu(), labels.cpu()
    tiny = torch.finfo(torch.float64).tiny  # an MC average can round to exactly 0
    return {
        "accuracy": (probs.argmax(dim=1) == labels).double().mean().item(),
        "nll": -probs.gather(1, labels.view(-1, 1)).clamp_min(tiny).log().mean().item(),
        "ece": expected_calibration_error(probs, labels),
        "entropy": -torch.special.xlogy(probs, probs).sum(dim=1).mean().item(),
    }


def rmse(predictions: torch.Tensor, targets: torch.Tensor, scale: float = 1.0) -> float:
    """Root mean squared error, times ``scale`` (the rating std, for standardised targets)."""
    return scale * (predictions.double().cpu() - targets.double().cpu()).square().mean().sqrt().item()
