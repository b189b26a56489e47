"""What a model's uncertainty is good for, as the report tabulates it: out-of-domain detection (`vdrnn eval ood=`, a
line per evaluation) and a classifier's selective prediction (a line per row, and its retention curves).
docs/uncertainty.md says how to read them."""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vdrnn.report.evaluations import evaluation_mode
from vdrnn.report.plots import save_figure
from vdrnn.report.rows import Row, mean_std
from vdrnn.report.tables import write_table
from vdrnn.uncertainty import SCORES, UNCERTAINTY_PARTS

SCORE_TITLES = {"max_prob": "max p", "entropy": "entropy", "mutual_information": "MI"}
# Each score of each predictor: (suffix, the predictor's title, the scores it has); weight scaling has no MI.
PREDICTORS = [("", "WS", ("max_prob", "entropy")), ("_mc", "MC", tuple(SCORES))]


def number(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


OOD_COLUMNS = ["evaluation", "model", "dropout", "checkpoint", "mode", "out-of-domain", "in / out", "AUPR base rate",
               *(f"{predictor} {SCORE_TITLES[score]} {area}" for _, predictor, scores in PREDICTORS
                 for score in scores for area in ("AUROC", "AUPR"))]


def ood_table(evaluations: list[tuple[Path, dict[str, Any]]],
              identity: Callable[[dict[str, Any]], tuple[str, str]]) -> list[list[str]]:
    """A line per `vdrnn eval ood=`: the model scored (named by ``identity``, as the evaluation table names it), how,
    against which text and how many sequences of each side, the AUPR a score that ranks at random gets (the
    out-of-domain share), and each score's AUROC and AUPR by weight scaling and by MC."""
    lines = []
    for folder, evaluation in evaluations:
        model, dropout = identity(evaluation)
        inside, outside = evaluation["ood_in_count"], evaluation["ood_out_count"]
        lines.append([str(folder), model + (" (smoke)" if evaluation.get("smoke") else ""), dropout,
                      evaluation.get("checkpoint", "–"), evaluation_mode(evaluation["config"]), evaluation["ood"],
                      f"{inside} / {outside}", number(outside / (inside + outside)),
                      *(number(evaluation.get(f"ood_{area}_{score}{suffix}")) for suffix, _, scores in PREDICTORS
                        for score in scores for area in ("auroc", "aupr"))])
    return lines


def write_ood(evaluations: list[tuple[Path, dict[str, Any]]], dataset: str, out: Path,
              identity: Callable[[dict[str, Any]], tuple[str, str]]) -> tuple[list[str], list[Path]]:
    """``{dataset}_ood.md`` and .csv where evaluations of the dataset's checkpoints scored out-of-domain text."""
    scored = [(folder, evaluation) for folder, evaluation in evaluations if "ood" in evaluation]
    if not scored:
        return [], []
    text = write_table(ood_table(scored, identity), OOD_COLUMNS, out / f"{dataset}_ood")
    return ([f"{dataset}: out-of-domain detection, AUROC and AUPR of each uncertainty score\n\n{text}"],
            [out / f"{dataset}_ood.md", out / f"{dataset}_ood.csv"])


SELECTIVE_COLUMNS = ["row", "dropout", "seeds", "accuracy (%)", "MC accuracy (%)", "MC total", "MC aleatoric",
                     "MC epistemic", *(f"{predictor} {SCORE_TITLES[score]} area" for _, predictor, scores in PREDICTORS
                                       for score in scores), "WS oracle area", "MC oracle area"]


def selective_rows(rows: list[Row]) -> list[Row]:
    """The rows whose runs were scored for selective prediction."""
    return [row for row in rows if any("test_retention_curves" in run for run in row.runs)]


def selective_table(rows: list[Row]) -> list[list[str]]:
    """A line per row (mean ± std over its seeds): accuracy with every review kept, MC's uncertainty per review split
    into its parts (nats), and the area under accuracy against the kept fraction of each score, beside the oracle's
    (every wrong prediction refused first): the nearer a score's area is to the oracle's, the better it ranks the
    predictions that will be wrong."""
    lines = []
    for row in rows:
        lines.append([row.label, row.dropout, row.seeds_cell(), row_cell(row, "test_accuracy", 2, percent=True),
                      row_cell(row, "test_accuracy_mc", 2, percent=True),
                      *(row_cell(row, f"test_uncertainty_{part}_mc") for part in UNCERTAINTY_PARTS),
                      *(row_cell(row, f"test_retention_area_{score}{suffix}") for suffix, _, scores in PREDICTORS
                        for score in scores),
                      row_cell(row, "test_retention_area_oracle"), row_cell(row, "test_retention_area_oracle_mc")])
    return lines


def row_cell(row: Row, key: str, digits: int = 4, percent: bool = False) -> str:
    """The mean ± std over the row's runs of their ``key`` (x100 with ``percent``)."""
    return mean_std([v * (100 if percent else 1) for v in row.values(key)], digits, runs=len(row.runs))


def mean_curve(runs: list[dict[str, Any]], key: str, name: str) -> tuple[list[float], list[float]] | None:
    """(kept fractions, accuracy there averaged over ``runs``) of score ``name`` in their ``key`` curves, or None where
    a run lacks it."""
    curves = [run.get(key) for run in runs]
    if not all(curve and name in curve for curve in curves):
        return None
    return curves[0]["kept"], [statistics.mean(values) for values in zip(*(c[name] for c in curves), strict=True)]


def plot_retention(rows: list[Row], path: Path) -> None:
    """Retention curves, a panel per row (its seeds averaged): accuracy on the surest reviews against the fraction
    kept, a line per score, weight scaling dashed and MC solid, each one's oracle dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(3, len(rows))
    lines = -(-len(rows) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(5.2 * columns, 4.4 * lines), squeeze=False)
    for ax, row in zip(axes.flat, rows, strict=False):
        for suffix, predictor, scores in PREDICTORS:
            for score in (*scores, "oracle"):
                curve = mean_curve(row.runs, f"test_retention_curves{suffix}", score)
                if curve:
                    style = ":" if score == "oracle" else "-" if suffix else "--"
                    ax.plot(*curve, style, label=f"{predictor} {SCORE_TITLES.get(score, score)}")
        ax.set(xlabel="fraction of reviews kept (surest first)", ylabel="accuracy", xlim=(0, 1))
        ax.set_title(textwrap.fill(f"{row.title} (n={len(row.runs)})", 50) + f"\n{row.dropout}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    for ax in list(axes.flat)[len(rows):]:
        ax.set_visible(False)
    fig.tight_layout()
    save_figure(fig, path)


def write_selective(rows: list[Row], dataset: str, out: Path) -> tuple[list[str], list[Path]]:
    """``{dataset}_selective.md``, .csv and ``{dataset}_retention.png`` where rows were scored for selective
    prediction."""
    scored = selective_rows(rows)
    if not scored:
        return [], []
    text = write_table(selective_table(scored), SELECTIVE_COLUMNS, out / f"{dataset}_selective")
    plot_retention(scored, out / f"{dataset}_retention.png")
    return ([f"{dataset}: selective prediction and MC's uncertainty per review\n\n{text}"],
            [out / f"{dataset}_selective.md", out / f"{dataset}_selective.csv", out / f"{dataset}_retention.png"])
