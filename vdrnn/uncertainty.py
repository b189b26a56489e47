"""What a prediction's uncertainty is good for: telling inputs unlike the training data apart (out-of-domain
detection) and refusing the predictions most likely wrong (selective prediction).

Under MC dropout the total uncertainty of each prediction splits in two (:class:`Decomposition`): the entropy of the
averaged distribution (total) is the samples' mean entropy (aleatoric: what each sampled model finds uncertain in the
data) plus the mutual information (epistemic: the samples' disagreement, what more training data would remove).

Each input gets an uncertainty score, higher for less sure (:data:`SCORES`): one minus the predicted class's
probability (``max_prob``, Hendrycks & Gimpel 2017), the predictive entropy H[p] (``entropy``), and under MC dropout
the mutual information between the prediction and the weights (``mutual_information``, BALD: the sampled models'
disagreement, :func:`vdrnn.nn.mc.mutual_information`).

Detection (:func:`auroc`, :func:`aupr`) scores how well a score ranks out-of-domain inputs above in-domain ones;
selective prediction (:func:`retention_curve`) how accuracy rises as the least sure inputs are refused. docs/uncertainty.md
says how to read both.
"""

from __future__ import annotations

import math

import torch

from vdrnn.nn.mc import entropy, mutual_information

UNCERTAINTY_PARTS = ("total", "aleatoric", "epistemic")


def decompose(mean: torch.Tensor, expected_entropy: torch.Tensor) -> dict[str, torch.Tensor]:
    """total = H[1/S sum_s p_s], aleatoric = 1/S sum_s H[p_s], epistemic = total - aleatoric (nats) of each prediction,
    from the samples' average ``mean`` [..., C] and mean entropy [...]."""
    return {"total": entropy(mean), "aleatoric": expected_entropy,
            "epistemic": mutual_information(mean, expected_entropy)}


class Decomposition:
    """The mean total, aleatoric and epistemic uncertainty (:func:`decompose`) of MC predictions added a batch at a
    time, as a language model's next-token predictions come a minibatch at a time."""

    def __init__(self):
        self.sums = dict.fromkeys(UNCERTAINTY_PARTS, 0.0)
        self.count = 0

    def add(self, mean: torch.Tensor, expected_entropy: torch.Tensor) -> None:
        for part, values in decompose(mean, expected_entropy).items():
            self.sums[part] = self.sums[part] + values.double().sum()
        self.count += expected_entropy.numel()

    def summary(self) -> dict[str, float]:
        """{uncertainty_total, uncertainty_aleatoric, uncertainty_epistemic}: means per prediction; empty where none
        was added."""
        return {f"uncertainty_{part}": float(value) / self.count for part, value in self.sums.items()} if self.count \
            else {}


def one_minus_max_prob(predictive: torch.Tensor, epistemic: torch.Tensor | None) -> torch.Tensor:
    return 1 - predictive.max(-1).values


def predictive_entropy(predictive: torch.Tensor, epistemic: torch.Tensor | None) -> torch.Tensor:
    return entropy(predictive)


def bald(predictive: torch.Tensor, epistemic: torch.Tensor | None) -> torch.Tensor:
    return epistemic


# name -> the score of each input, from its predictive distribution [..., C] and, under MC, its mutual information [...]
SCORES = {"max_prob": one_minus_max_prob, "entropy": predictive_entropy, "mutual_information": bald}


def uncertainty_scores(predictive: torch.Tensor, epistemic: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Every score of :data:`SCORES` that the inputs have: the mutual information only with ``epistemic`` (MC)."""
    return {name: score(predictive, epistemic) for name, score in SCORES.items()
            if epistemic is not None or name != "mutual_information"}


def auroc(in_domain: torch.Tensor, out_of_domain: torch.Tensor) -> float:
    """The area under the ROC curve of a score that flags out-of-domain inputs by being high: the chance that a random
    out-of-domain input scores above a random in-domain one, ties counting half (the Mann-Whitney U statistic over
    n_in n_out). 1: every out-of-domain input above every in-domain one; 0.5: no better than chance."""
    scores = torch.cat([in_domain, out_of_domain]).double()
    ranks = midranks(scores)
    n_in, n_out = len(in_domain), len(out_of_domain)
    # The ranks of the out-of-domain inputs sum to U + n_out (n_out + 1) / 2.
    u = ranks[n_in:].sum().item() - n_out * (n_out + 1) / 2
    return u / (n_in * n_out)


def midranks(scores: torch.Tensor) -> torch.Tensor:
    """Each score's rank among ``scores`` (1 for the lowest), tied scores sharing the mean of the ranks they span."""
    order = scores.argsort()
    values, counts = scores[order].unique_consecutive(return_counts=True)
    last = counts.cumsum(0).double()  # the rank of each distinct value's last copy
    group_ranks = last - (counts.double() - 1) / 2
    ranks = torch.empty_like(scores)
    ranks[order] = group_ranks.repeat_interleave(counts)
    return ranks


def aupr(in_domain: torch.Tensor, out_of_domain: torch.Tensor) -> float:
    """The area under the precision-recall curve with the out-of-domain inputs as positives (average precision):
    sum over thresholds of precision times the recall it adds, a threshold per distinct score (ties flagged
    together). 1 for a perfect score; a score that ranks at random gets the positives' share, n_out / (n_in + n_out),
    so the table gives that base rate beside it."""
    scores = torch.cat([in_domain, out_of_domain]).double()
    positive = torch.cat([torch.zeros(len(in_domain)), torch.ones(len(out_of_domain))]).double()
    order = scores.argsort(descending=True)
    _, counts = scores[order].unique_consecutive(return_counts=True)
    ends = counts.cumsum(0) - 1  # the last input flagged at each threshold, highest threshold first
    true_positives = positive[order].cumsum(0)[ends]
    precision = true_positives / (ends + 1).double()
    recall_added = torch.diff(true_positives, prepend=torch.zeros(1, dtype=torch.float64)) / len(out_of_domain)
    return (precision * recall_added).sum().item()


def detection(in_domain: dict[str, torch.Tensor], out_of_domain: dict[str, torch.Tensor]) -> dict[str, float]:
    """``auroc_<score>`` and ``aupr_<score>`` of every score the two sets share."""
    out = {}
    for name in in_domain.keys() & out_of_domain.keys():
        out[f"auroc_{name}"] = auroc(in_domain[name], out_of_domain[name])
        out[f"aupr_{name}"] = aupr(in_domain[name], out_of_domain[name])
    return dict(sorted(out.items()))


def retention_curve(uncertainty: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
    """Accuracy on the k surest inputs, for k = 1 .. N [N]: the inputs are kept in order of rising ``uncertainty``
    and the rest refused. Inputs of equal uncertainty are kept in a random order, and the curve is its expectation:
    within a tie the right answers come in at their share of the tie. A score that says nothing (all equal) keeps the
    overall accuracy at every k."""
    order = uncertainty.double().argsort()
    _, counts = uncertainty.double()[order].unique_consecutive(return_counts=True)
    tie = torch.arange(len(counts)).repeat_interleave(counts)  # each kept input's tie, in keeping order
    right = torch.zeros(len(counts), dtype=torch.float64).index_add_(0, tie, correct.double()[order])
    before = right.cumsum(0) - right  # right answers of the ties kept before each
    start = counts.cumsum(0) - counts
    within = torch.arange(1, len(order) + 1) - start[tie]  # how many of its tie are kept, this input included
    # Within a tie of n inputs and r right answers, the first j kept hold j r / n of them in expectation.
    expected_right = before[tie] + right[tie] * within / counts[tie]
    return expected_right / torch.arange(1, len(order) + 1, dtype=torch.float64)


def oracle_curve(correct: torch.Tensor) -> torch.Tensor:
    """The retention curve of a score that knows the answers: every wrong prediction refused before any right one.
    Its area is the most any score can reach on these predictions."""
    return retention_curve((~correct.bool()).double(), correct)


# The kept fractions the stored curves give (of the inputs, surest first), for the report's plot.
RETENTION_FRACTIONS = tuple(round(0.05 * k, 2) for k in range(1, 21))


def retention_summary(uncertainty: torch.Tensor, correct: torch.Tensor) -> tuple[float, list[float]]:
    """(area, curve at :data:`RETENTION_FRACTIONS`): the area is the mean accuracy over k = 1 .. N kept, i.e. the area
    under accuracy against the kept fraction; the curve, accuracy on the ceil(f N) surest inputs."""
    curve = retention_curve(uncertainty, correct)
    kept = [max(1, math.ceil(round(f * len(curve), 6))) for f in RETENTION_FRACTIONS]  # round: 0.15 * 20 is 3.0000000004
    return curve.mean().item(), curve[[k - 1 for k in kept]].tolist()


def selective_prediction(scores: dict[str, torch.Tensor], correct: torch.Tensor) -> dict[str, object]:
    """``retention_area_<score>`` of every score and of the oracle, and ``retention_curves``: the kept fractions and
    each score's accuracies there."""
    curves: dict[str, object] = {"kept": list(RETENTION_FRACTIONS)}
    areas = {}
    for name, uncertainty in {**scores, "oracle": (~correct.bool()).double()}.items():
        areas[f"retention_area_{name}"], curves[name] = retention_summary(uncertainty, correct)
    return {**areas, "retention_curves": curves}
