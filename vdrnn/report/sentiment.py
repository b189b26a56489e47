"""Sentiment runs (IMDB, scale data): a table per dataset, cell x scheme, weight scaling beside MC dropout, and the
test error per epoch, as Gal & Ghahramani's sentiment figures; for classification evaluated both ways, the calibration
table and reliability diagrams (:mod:`~vdrnn.report.sentiment_calibration`); and the table of `vdrnn eval`s."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vdrnn.report.evaluations import Metric, evaluation_columns, evaluation_table
from vdrnn.report.found import by_dataset, numbers_as_numbers
from vdrnn.report.plots import draw_curves, save_curves
from vdrnn.report.rows import (
    QUIET_OVERRIDES,
    RUN_COLUMNS,
    Row,
    dropout_cell,
    dropout_label,
    group_runs,
    mean_std,
    rank,
    scheme_name,
    scheme_rank,
)
from vdrnn.report.sentiment_calibration import (
    CALIBRATION_COLUMNS,
    calibrated_runs,
    calibration_table,
    plot_reliability,
)
from vdrnn.report.tables import write_table
from vdrnn.report.uncertainty import write_ood, write_selective
from vdrnn.tasks.sentiment import TASK

# A row's overrides column leaves out what does not change its numbers, as its grouping does (the task's
# report_ignores: the evaluation batch size, so a row of seeds at 1,000 and 500 reviews a pass is one experiment).
SENTIMENT_QUIET_OVERRIDES = (*QUIET_OVERRIDES, *(f"{key}=" for key in TASK.report_ignores))

CELL_ORDER = ["lstm", "gru", "rnn"]
# Per kind of task: (metric, column title, digits, x100); and the per-epoch error curve and its axis label.
METRICS = {
    "classification": [("accuracy", "accuracy (%)", 2, True), ("nll", "NLL", 4, False), ("ece", "ECE", 4, False),
                       ("entropy", "entropy", 4, False)],
    "regression": [("rmse", "RMSE", 4, False)],
}
CURVES = {"classification": (lambda r: 100 * (1 - r["test_accuracy"]), "test error (%)"),
          "regression": (lambda r: r["test_rmse"], "test RMSE")}


def kind_of(runs: list[dict[str, Any]]) -> str:
    """Classification or regression, by the metrics the runs (of one dataset; metrics.json or eval.json) recorded."""
    return "regression" if any("test_rmse" in metrics for metrics in runs) else "classification"


@dataclass
class SentimentRow(Row):
    cell: str
    scheme: str
    dropout: str
    quiet = SENTIMENT_QUIET_OVERRIDES

    @property
    def name(self) -> str:
        return f"{self.cell.upper()} · {self.scheme}"

    @property
    def units(self) -> str:
        """Its recurrent layer's units (``model.hidden_size``), as PTB's size column gives them; its runs share them
        (rows of other sizes are named apart: distinguish)."""
        return str((self.runs[0].get("config") or {}).get("model", {}).get("hidden_size", "–"))


def sentiment_identity(metrics: dict[str, Any]) -> tuple[str, str, str]:
    """(cell, scheme, dropout probabilities): how a sentiment table names a run (see the LM report's ptb_identity)."""
    config = metrics["config"]
    return config.get("cell", {}).get("type", "lstm"), scheme_name(config), dropout_label(config.get("dropout", {}))


def collect_sentiment(found: list[tuple[Path, dict[str, Any]]], kind: str,
                      pooled: tuple[str, ...] = ()) -> list[SentimentRow]:
    """The rows of one dataset's runs ``found`` (found.find_runs) (cell x scheme, seeds together), in the order LSTM,
    GRU, RNN x the schemes' table order."""

    def order(row: SentimentRow):
        # Numbers in a label read as numbers, as PTB's rows: trainer.epochs=40 before 100, not after.
        return rank(CELL_ORDER, row.cell), scheme_rank(row.scheme), *map(numbers_as_numbers, (row.label, row.dropout))

    return sorted(group_runs(found, sentiment_identity, SentimentRow, CURVES[kind][0], pooled), key=order)


def sentiment_columns(kind: str) -> list[str]:
    titles = [title for _, title, _, _ in METRICS[kind]]
    return ["row", "units", "dropout", "seeds", *titles, *(f"MC {t}" for t in titles), *RUN_COLUMNS]


def sentiment_table(kind: str, rows: list[SentimentRow]) -> list[list[str]]:
    lines = []
    for row in rows:
        cells = {}
        for suffix in ("", "_mc"):
            for key, _, digits, percent in METRICS[kind]:
                values = [v * (100 if percent else 1) for v in row.values(f"test_{key}{suffix}")]
                cells[key + suffix] = mean_std(values, digits, runs=len(row.runs))
        keys = [key for key, _, _, _ in METRICS[kind]]
        lines.append([row.label, row.units, dropout_cell(row.dropout, row.runs), row.seeds_cell(),
                      *(cells[k] for k in keys), *(cells[k + "_mc"] for k in keys), *row.run_cells()])
    return lines


def plot_sentiment(dataset: str, kind: str, rows: list[SentimentRow], path: Path) -> None:
    """Test error per epoch (mean over seeds, over the epochs all seeds reached): a panel per cell, a line per scheme."""
    cells = list(dict.fromkeys(r.cell for r in rows if r.curves)) or ["lstm"]
    fig, axes = draw_curves({cell: [r for r in rows if r.cell == cell and r.curves] for cell in cells},
                            lambda row: row.scheme)
    for ax, cell in zip(axes, cells, strict=True):
        ax.set(title=f"{dataset}, {cell.upper()}: test error per epoch", xlabel="epoch", ylabel=CURVES[kind][1])
    save_curves(fig, axes, path)


def collect(found: list[tuple[Path, dict[str, Any]]], pooled: tuple[str, ...] = ()) -> dict[str, list[SentimentRow]]:
    """dataset -> its rows (collect_sentiment)."""
    return {dataset: collect_sentiment(runs, kind_of([metrics for _, metrics in runs]), pooled)
            for dataset, runs in by_dataset(found).items()}


def write(collected: dict[str, list[SentimentRow]], out: Path) -> tuple[list[str], list[Path]]:
    """Each dataset's table, test curves and (classification evaluated both ways) calibration in ``out``."""
    texts, written = [], []
    for dataset, rows in collected.items():
        kind = kind_of([run for row in rows for run in row.runs])
        text = write_table(sentiment_table(kind, rows), sentiment_columns(kind), out / f"{dataset}_table")
        texts.append(f"{dataset}: test metrics of the kept checkpoints (best.pt)\n\n{text}")
        plot_sentiment(dataset, kind, rows, out / f"{dataset}_test_curves.png")
        written += [out / f"{dataset}_table.md", out / f"{dataset}_table.csv", out / f"{dataset}_test_curves.png"]
        if calibrated_runs(rows):
            text = write_table(calibration_table(rows), CALIBRATION_COLUMNS, out / f"{dataset}_calibration")
            texts.append(f"{dataset}: calibration, MC dropout against weight scaling, per run\n\n{text}")
            plot_reliability(rows, out / f"{dataset}_reliability.png")
            written += [out / f"{dataset}_calibration.md", out / f"{dataset}_calibration.csv",
                        out / f"{dataset}_reliability.png"]
        selective_texts, selective_files = write_selective(rows, dataset, out)
        texts += selective_texts
        written += selective_files
    return texts, written


# A classifier's evaluations also give the temperatures, MC's epistemic uncertainty per review, and the retention
# area of the usual score of each predictor (the selective table has every score's, for training runs).
CLASSIFIER_EVALUATION = [("temperature", "T", 3, False), ("temperature_mc", "MC T", 3, False),
                         ("test_uncertainty_epistemic_mc", "MC epistemic", 4, False),
                         ("test_retention_area_entropy", "entropy area", 4, False),
                         ("test_retention_area_mutual_information_mc", "MC MI area", 4, False)]


def evaluation_metrics(kind: str) -> list[Metric]:
    """A dataset's test metrics with weight scaling and then with MC, as its training table has them."""
    return [(f"test_{key}{suffix}", prefix + title, digits, percent)
            for suffix, prefix in (("", ""), ("_mc", "MC ")) for key, title, digits, percent in METRICS[kind]] + \
        (CLASSIFIER_EVALUATION if kind == "classification" else [])


def evaluated_model(evaluation: dict[str, Any]) -> tuple[str, str]:
    cell, scheme, dropout = sentiment_identity(evaluation)
    return f"{cell.upper()} · {scheme}", dropout


def write_evaluations(evaluations: list[tuple[Path, dict[str, Any]]], out: Path) -> tuple[list[str], list[Path]]:
    """A table per dataset of the `vdrnn eval`s of its checkpoints, and of the out-of-domain detection of those given
    ``ood=`` (``{dataset}_ood.md``)."""
    texts, written = [], []
    for dataset, found in by_dataset(evaluations).items():
        metrics = evaluation_metrics(kind_of([evaluation for _, evaluation in found]))
        text = write_table(evaluation_table(found, metrics, evaluated_model), evaluation_columns(metrics),
                           out / f"{dataset}_evaluations")
        texts.append(f"{dataset}: checkpoints scored by vdrnn eval\n\n{text}")
        written += [out / f"{dataset}_evaluations.md", out / f"{dataset}_evaluations.csv"]
        ood_texts, ood_files = write_ood(found, dataset, out, evaluated_model)
        texts += ood_texts
        written += ood_files
    return texts, written
