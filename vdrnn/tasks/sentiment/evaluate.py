"""Testing a sentiment model: the kept checkpoint's test metrics with weight scaling and, with ``eval=mc``, MC dropout.

A classifier's test predictions are also scored for what their uncertainty is good for: their calibration report
(:mod:`vdrnn.tasks.sentiment.metrics`), under MC their uncertainty split into its aleatoric and epistemic parts
(``test_uncertainty_*_mc``), selective prediction (accuracy as the least sure reviews are refused, per uncertainty
score: ``test_retention_*``) and, with ``ood=``, out-of-domain detection (:mod:`vdrnn.tasks.sentiment.ood`). A
softmax temperature (``eval.temperature``) divides weight scaling's and each MC sample's logits first; ``fit`` fits each
on the validation reviews.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from vdrnn.calibration import ece_difference
from vdrnn.errors import ConfigError
from vdrnn.tasks.sentiment.config import SentimentRunConfig
from vdrnn.tasks.sentiment.data import CLASSIFICATION, SentimentData, Split
from vdrnn.tasks.sentiment.metrics import calibration_report, classification_metrics
from vdrnn.tasks.sentiment.model import SentimentModel
from vdrnn.tasks.sentiment.ood import ood_metrics, ood_split
from vdrnn.tasks.sentiment.predict import (
    Predictions,
    evaluate_split,
    predict_split,
    predictions,
    split_metrics,
    split_outputs,
)
from vdrnn.temperature import fit_temperature, nll_of_samples
from vdrnn.training.evaluation import mc_model
from vdrnn.uncertainty import Decomposition, selective_prediction


def check_evaluation(data: SentimentData, cfg: SentimentRunConfig) -> None:
    """Refuse, once the data says the task is a regression, the settings only a classifier's test reads: a regression's
    MC dropout averages predicted ratings, which have no softmax to temper, no log-probabilities to average and no
    uncertainty score to detect with."""
    if data.kind == CLASSIFICATION:
        return
    e = cfg.eval
    given = [f"eval.average={e.average}" if e.average != "arithmetic" else None,
             f"eval.temperature={e.temperature}" if e.temperature != 1 else None,
             f"ood={cfg.ood}" if cfg.ood else None]
    given = [setting for setting in given if setting]
    if given:
        raise ConfigError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for a classifier's predictive "
                          f"distributions, and {cfg.data.name} is a regression, whose MC dropout averages its "
                          f"predicted ratings: drop {'it' if len(given) == 1 else 'them'}")


def evaluate_all(model: SentimentModel, data: SentimentData, cfg: SentimentRunConfig) -> dict[str, Any]:
    """valid_* and test_* with weight scaling, plus test_*_mc with ``eval=mc`` (see the module's docstring)."""
    check_evaluation(data, cfg)
    outside = ood_split(data, cfg) if cfg.ood else None  # missing text is refused before the test runs
    started = time.perf_counter()
    metrics = {f"valid_{k}": v for k, v in evaluate_split(model, data.valid, data, cfg, mc=False).items()}
    sampled = mc_model(model, cfg) if cfg.eval.mode == "mc" else None
    if data.kind == CLASSIFICATION:
        metrics.update(classification_test(model, sampled, data, cfg, outside))
    else:
        metrics.update(regression_test(model, sampled, data, cfg))
    metrics["eval_seconds"] = time.perf_counter() - started
    return metrics


def regression_test(model: SentimentModel, sampled: SentimentModel | None, data: SentimentData,
                    cfg: SentimentRunConfig) -> dict[str, Any]:
    """test_rmse, and with MC test_rmse_mc: the mean of the samples' predicted ratings."""
    metrics = {f"test_{k}": v for k, v in split_metrics(predict_split(model, data.test, data, cfg, mc=False),
                                                          data.test, data).items()}
    if sampled is not None:
        mc_started = time.perf_counter()
        averaged = predict_split(sampled, data.test, data, cfg, mc=True)
        metrics.update({"mc_seconds": time.perf_counter() - mc_started, "mc_samples": cfg.eval.samples,
                        **{f"test_{k}_mc": v for k, v in split_metrics(averaged, data.test, data).items()}})
    return metrics


def classification_test(model: SentimentModel, sampled: SentimentModel | None, data: SentimentData,
                        cfg: SentimentRunConfig, outside: Split | None = None) -> dict[str, Any]:
    """The test's metrics (:func:`scored`) by weight scaling and MC; with MC test_ece_mc_minus_ws, ECE(MC) - ECE(weight
    scaling) and its 95% interval test_ece_mc_minus_ws_ci, below zero where MC is the better calibrated beyond chance;
    with ``outside`` (``ood=``'s text as reviews), out-of-domain detection."""
    temperatures = evaluation_temperatures(model, sampled, data, cfg)
    labels = data.test.targets
    tested = {"": predictions(split_outputs(model, data.test, cfg, mc=False), False, temperature=temperatures[""])}
    metrics = {**scored(tested[""], labels, ""), "temperature": temperatures[""]}
    if sampled is not None:
        mc_started = time.perf_counter()
        tested["_mc"] = predictions(split_outputs(sampled, data.test, cfg, mc=True), True, cfg.eval.average,
                                    temperatures["_mc"])
        metrics.update({"mc_seconds": time.perf_counter() - mc_started, "mc_samples": cfg.eval.samples,
                        **scored(tested["_mc"], labels, "_mc"), "temperature_mc": temperatures["_mc"]})
        difference, low, high = ece_difference(tested["_mc"].probs, tested[""].probs, labels)
        metrics.update({"test_ece_mc_minus_ws": difference, "test_ece_mc_minus_ws_ci": [low, high]})
    if outside is not None:
        metrics.update(ood_metrics(model, sampled, outside, cfg, tested, temperatures))
    return metrics


def scored(tested: Predictions, labels: torch.Tensor, suffix: str) -> dict[str, Any]:
    """The test's accuracy, NLL, ECE and entropy with the calibration report, selective prediction by each uncertainty
    score, and under MC the uncertainty's parts, as test_<metric><suffix>."""
    scores = {**classification_metrics(tested.probs, labels), **calibration_report(tested.probs, labels),
              **selective_prediction(tested.scores, tested.probs.argmax(dim=1) == labels)}
    if tested.mc is not None:
        parts = Decomposition()
        parts.add(tested.mc.mean, tested.mc.expected_entropy())
        scores.update(parts.summary())
    return {f"test_{key}{suffix}": value for key, value in scores.items()}


def evaluation_temperatures(model: SentimentModel, sampled: SentimentModel | None, data: SentimentData,
                            cfg: SentimentRunConfig) -> dict[str, float]:
    """The temperature of weight scaling's test (``""``) and, where MC samples ``sampled``, of MC's (``"_mc"``):
    ``eval.temperature``, or with ``fit`` each fitted on the validation reviews. The MC passes over them draw from a
    fork of the random state, so that the test's draws are those of an evaluation without the fit."""
    e = cfg.eval
    chosen = {"": e.temperature} if sampled is None else {"": e.temperature, "_mc": e.temperature}
    if e.temperature != "fit":
        return chosen
    labels = data.valid.targets
    fitted = {"": fit_temperature(nll_of_samples(split_outputs(model, data.valid, cfg, mc=False), labels),
                                  "for weight scaling")}
    if sampled is not None:
        device = next(model.parameters()).device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            outputs = split_outputs(sampled, data.valid, cfg, mc=True)
        fitted["_mc"] = fit_temperature(nll_of_samples(outputs, labels, e.average), "for MC dropout")
    return fitted
