"""Metrics of predictive distributions: accuracy, NLL, expected calibration error, entropy; RMSE.

All take the *predictive* distribution, so weight scaling (one deterministic pass) and MC dropout
(the average of the probabilities of K stochastic passes, :mod:`vdrnn.tasks.sentiment.predict`) are
scored by the same functions.

ECE is a finite-sample estimate: even a perfectly calibrated predictor scores above zero on 25,000
reviews, and two predictors' ECEs differ by chance. So that "MC is better calibrated than weight
scaling" can be read off a run, :func:`calibration_report` adds what a calibrated predictor with the
same confidences would score (the floor) and the reliability diagram's bins; the ECE functions
themselves are :mod:`vdrnn.calibration`'s.
"""

from __future__ import annotations

import torch

from vdrnn.calibration import ece_floor, expected_calibration_error, reliability_bins


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
