"""The uncertainty measures against hand computations on small fixed distributions, and the detection and retention
scores against slow, obviously correct references."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from vdrnn.nn.mc import MCPrediction, log_predictive
from vdrnn.uncertainty import (
    RETENTION_FRACTIONS,
    Decomposition,
    aupr,
    auroc,
    decompose,
    detection,
    oracle_curve,
    retention_curve,
    selective_prediction,
    uncertainty_scores,
)

LOG2 = math.log(2)


def parts(samples: list[list[float]]) -> dict[str, float]:
    """The decomposition of one prediction whose samples' distributions are ``samples`` [S][C]."""
    p = torch.tensor(samples, dtype=torch.float64)
    mc = MCPrediction(mean=p.mean(0), samples=p)
    return {part: value.item() for part, value in decompose(mc.mean, mc.expected_entropy()).items()}


def test_samples_that_agree_have_no_epistemic_uncertainty_whatever_their_own():
    for p in ([0.5, 0.5], [0.9, 0.1], [1.0, 0.0]):
        got = parts([p, p, p])
        own = -sum(q * math.log(q) for q in p if q)
        assert got["epistemic"] == pytest.approx(0, abs=1e-15)
        assert got["total"] == pytest.approx(own) and got["aleatoric"] == pytest.approx(own)


def test_sure_samples_that_disagree_are_all_epistemic_uncertainty():
    # Two one-hot samples on different classes: each sure (aleatoric 0), their mixture uniform (total log 2).
    assert parts([[1, 0], [0, 1]]) == pytest.approx({"total": LOG2, "aleatoric": 0, "epistemic": LOG2})
    # The most a mixture of C classes can hold: log C, all of it disagreement.
    assert parts([[1, 0, 0], [0, 1, 0], [0, 0, 1]])["epistemic"] == pytest.approx(math.log(3))


def test_uniform_samples_are_all_aleatoric_uncertainty():
    assert parts([[1 / 3] * 3] * 4) == pytest.approx({"total": math.log(3), "aleatoric": math.log(3), "epistemic": 0})


def test_a_mixed_case_by_hand():
    # Samples (0.8, 0.2) and (0.4, 0.6): mixture (0.6, 0.4).
    h = lambda *p: -sum(q * math.log(q) for q in p)  # noqa: E731
    expected = {"total": h(0.6, 0.4), "aleatoric": (h(0.8, 0.2) + h(0.4, 0.6)) / 2}
    expected["epistemic"] = expected["total"] - expected["aleatoric"]
    assert parts([[0.8, 0.2], [0.4, 0.6]]) == pytest.approx(expected)
    assert expected["epistemic"] == pytest.approx(0.0863, abs=1e-4)  # 0.6730 - (0.5004 + 0.6730) / 2


def test_decomposition_averages_over_the_predictions_added_in_batches():
    torch.manual_seed(0)
    p = torch.rand(5, 7, 3).double().softmax(-1)  # [S, N, C]
    whole = decompose(p.mean(0), MCPrediction(p.mean(0), p).expected_entropy())
    summed = Decomposition()
    for rows in (slice(0, 3), slice(3, 7)):
        summed.add(p[:, rows].mean(0), MCPrediction(p[:, rows].mean(0), p[:, rows]).expected_entropy())
    assert summed.summary() == pytest.approx({f"uncertainty_{k}": v.mean().item() for k, v in whole.items()})
    assert Decomposition().summary() == {}


def test_the_geometric_average_is_the_softmax_of_the_mean_logits():
    """Normalised prod_s p_s^(1/S) over the classes, by hand, against log_predictive's; and the arithmetic one is the
    mean of the probabilities, tempered sample by sample."""
    torch.manual_seed(1)
    logits = torch.randn(4, 6, 5).double() * 3  # [S, N, C]
    p = (logits / 1.7).softmax(-1)
    geometric = p.prod(0) ** (1 / 4)
    assert torch.allclose(log_predictive(logits, 0, "geometric", 1.7).exp(), geometric / geometric.sum(-1, True))
    assert torch.allclose(log_predictive(logits, 0, "arithmetic", 1.7).exp(), p.mean(0))


def test_the_scores_of_a_prediction_by_hand():
    probs = torch.tensor([[0.7, 0.2, 0.1], [1 / 3, 1 / 3, 1 / 3]], dtype=torch.float64)
    scores = uncertainty_scores(probs, epistemic=torch.tensor([0.05, 0.0]))
    assert scores["max_prob"].tolist() == pytest.approx([0.3, 2 / 3])
    assert scores["entropy"].tolist() == pytest.approx([-(0.7 * math.log(0.7) + 0.2 * math.log(0.2)
                                                          + 0.1 * math.log(0.1)), math.log(3)])
    assert scores["mutual_information"].tolist() == pytest.approx([0.05, 0.0])
    assert set(uncertainty_scores(probs)) == {"max_prob", "entropy"}  # weight scaling: no samples to disagree


def auroc_by_pairs(inside: list[float], outside: list[float]) -> float:
    """P(out > in) + P(out = in) / 2 over every pair."""
    wins = sum(1.0 if o > i else 0.5 if o == i else 0.0 for i, o in itertools.product(inside, outside))
    return wins / (len(inside) * len(outside))


def aupr_by_thresholds(inside: list[float], outside: list[float]) -> float:
    """Average precision with out-of-domain positive: at each distinct score t, flag every input scoring >= t; add
    that threshold's precision times the recall it adds."""
    scored = [(s, 0) for s in inside] + [(s, 1) for s in outside]
    area, recall_before = 0.0, 0.0
    for t in sorted({s for s, _ in scored}, reverse=True):
        flagged = [label for s, label in scored if s >= t]
        recall = sum(flagged) / len(outside)
        area += (recall - recall_before) * sum(flagged) / len(flagged)
        recall_before = recall
    return area


def test_a_perfect_score_has_auroc_and_aupr_one_and_a_reversed_one_auroc_zero():
    inside, outside = torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.5, 0.9])
    assert auroc(inside, outside) == 1.0 and aupr(inside, outside) == 1.0
    assert auroc(outside, inside) == 0.0


def test_a_score_that_says_nothing_has_auroc_one_half_and_the_base_rate_as_aupr():
    inside, outside = torch.zeros(6), torch.zeros(2)
    assert auroc(inside, outside) == 0.5 and aupr(inside, outside) == pytest.approx(2 / 8)
    # A random score: chance level, up to sampling.
    generator = torch.Generator().manual_seed(0)
    inside, outside = torch.rand(4000, generator=generator), torch.rand(1000, generator=generator)
    assert auroc(inside, outside) == pytest.approx(0.5, abs=0.03)
    assert aupr(inside, outside) == pytest.approx(0.2, abs=0.03)


def test_auroc_and_aupr_match_the_pairwise_and_threshold_references_with_ties():
    generator = torch.Generator().manual_seed(3)
    for n_in, n_out in ((7, 5), (12, 3), (1, 1)):
        inside = torch.randint(0, 4, (n_in,), generator=generator).double()  # few values: many ties
        outside = torch.randint(1, 6, (n_out,), generator=generator).double()
        assert auroc(inside, outside) == pytest.approx(auroc_by_pairs(inside.tolist(), outside.tolist()))
        assert aupr(inside, outside) == pytest.approx(aupr_by_thresholds(inside.tolist(), outside.tolist()))
    both = detection({"entropy": torch.tensor([0.0, 1.0]), "max_prob": torch.tensor([0.0])},
                     {"entropy": torch.tensor([2.0]), "mutual_information": torch.tensor([1.0])})
    assert both == {"auroc_entropy": 1.0, "aupr_entropy": 1.0}  # only the scores both sides have


def retention_by_orders(uncertainty: list[float], correct: list[bool]) -> list[float]:
    """The retention curve averaged over every order that keeps lower uncertainty first (ties in any order)."""
    orders = [order for order in itertools.permutations(range(len(correct)))
              if all(uncertainty[a] <= uncertainty[b] for a, b in itertools.pairwise(order))]
    return [sum(sum(correct[i] for i in order[:k]) / k for order in orders) / len(orders)
            for k in range(1, len(correct) + 1)]


def test_retention_curve_by_hand_and_against_every_tie_order():
    correct = torch.tensor([True, False, True, True, False])
    # Kept surest first: 0 (right), 2 (right), 3 (right), 4 (wrong), 1 (wrong).
    curve = retention_curve(torch.tensor([0.1, 0.9, 0.2, 0.3, 0.5]), correct)
    assert curve.tolist() == pytest.approx([1, 1, 1, 3 / 4, 3 / 5])
    assert oracle_curve(correct).tolist() == pytest.approx([1, 1, 1, 3 / 4, 3 / 5])
    assert retention_curve(torch.zeros(5), correct).tolist() == pytest.approx([3 / 5] * 5)  # says nothing
    generator = torch.Generator().manual_seed(2)
    for _ in range(5):
        uncertainty = torch.randint(0, 3, (6,), generator=generator).double()
        right = torch.rand(6, generator=generator) < 0.6
        assert retention_curve(uncertainty, right).tolist() == pytest.approx(
            retention_by_orders(uncertainty.tolist(), right.tolist()))


def test_selective_prediction_gives_each_scores_area_and_curve_beside_the_oracles():
    generator = torch.Generator().manual_seed(4)
    correct = torch.rand(40, generator=generator) < 0.7
    scores = {"entropy": torch.rand(40, generator=generator), "max_prob": (~correct).double()}  # max_prob: an oracle
    got = selective_prediction(scores, correct)
    curves = got["retention_curves"]
    assert curves["kept"] == list(RETENTION_FRACTIONS) and curves["kept"][-1] == 1.0
    for name in ("entropy", "max_prob", "oracle"):
        full = retention_curve((~correct).double() if name == "oracle" else scores[name], correct)
        assert got[f"retention_area_{name}"] == pytest.approx(full.mean().item())
        assert curves[name][-1] == pytest.approx(correct.double().mean().item())  # all kept: the accuracy
        assert curves[name][1] == pytest.approx(full[3].item())  # 10% of 40: the 4 surest
    assert got["retention_area_max_prob"] == got["retention_area_oracle"] > got["retention_area_entropy"]
