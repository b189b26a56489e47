"""Sentiment runs (IMDB, scale data): a table per dataset, cell x scheme, weight scaling beside MC dropout, and the
test error per epoch, as Gal & Ghahramani's sentiment figures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vdrnn.report.found import dataset_of
from vdrnn.report.plots import draw_curves, save_curves
from vdrnn.report.rows import (
    RUN_COLUMNS,
    SENTIMENT_QUIET_OVERRIDES,
    Row,
    dropout_cell,
    dropout_label,
    group_runs,
    mean_std,
    rank,
    scheme_name,
)

CELL_ORDER = ["lstm", "gru", "rnn"]
SCHEME_ORDER = ["none", "zaremba", "moon", "moon_emb", "variational", "variational (untied)", "gaussian",
                "gaussian (untied)", "gaussian (learned alpha)", "gaussian (untied, learned alpha)"]
# Per dataset: (metric, column title, digits, x100), the per-epoch error curve and its axis label.
SENTIMENT_METRICS = {
    "imdb": [("accuracy", "accuracy (%)", 2, True), ("nll", "NLL", 4, False), ("ece", "ECE", 4, False),
             ("entropy", "entropy", 4, False)],
    "scale": [("rmse", "RMSE", 4, False)],
}
CURVES = {"imdb": (lambda r: 100 * (1 - r["test_accuracy"]), "test error (%)"),
          "scale": (lambda r: r["test_rmse"], "test RMSE")}


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
    """(cell, scheme, dropout probabilities): how a sentiment table names a run (see ptb_identity)."""
    config = metrics["config"]
    return config.get("cell", {}).get("type", "lstm"), scheme_name(config), dropout_label(config.get("dropout", {}))


def collect_sentiment(found: list[tuple[Path, dict[str, Any]]],
                      pooled: tuple[str, ...] = ()) -> dict[str, list[SentimentRow]]:
    """dataset -> the rows of its runs among ``found`` (found.find_runs) (cell x scheme, seeds together), in the
    order LSTM, GRU, RNN x none ... variational."""
    runs: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path, metrics in found:
        if dataset_of(metrics) in SENTIMENT_METRICS:
            runs.setdefault(dataset_of(metrics), []).append((path, metrics))

    def order(row: SentimentRow):
        return rank(CELL_ORDER, row.cell), rank(SCHEME_ORDER, row.scheme), row.label, row.dropout

    return {dataset: sorted(group_runs(dataset_runs, sentiment_identity, SentimentRow, CURVES[dataset][0], pooled),
                            key=order)
            for dataset, dataset_runs in sorted(runs.items())}


def sentiment_columns(dataset: str) -> list[str]:
    titles = [title for _, title, _, _ in SENTIMENT_METRICS[dataset]]
    return ["row", "units", "dropout", "seeds", *titles, *(f"MC {t}" for t in titles), *RUN_COLUMNS]


def sentiment_table(dataset: str, rows: list[SentimentRow]) -> list[list[str]]:
    lines = []
    for row in rows:
        cells = {}
        for suffix in ("", "_mc"):
            for key, _, digits, percent in SENTIMENT_METRICS[dataset]:
                values = [v * (100 if percent else 1) for v in row.values(f"test_{key}{suffix}")]
                cells[key + suffix] = mean_std(values, digits, runs=len(row.runs))
        keys = [key for key, _, _, _ in SENTIMENT_METRICS[dataset]]
        lines.append([row.label, row.units, dropout_cell(row.dropout, row.runs), str(len(row.runs)),
                      *(cells[k] for k in keys), *(cells[k + "_mc"] for k in keys), *row.run_cells()])
    return lines


def plot_sentiment(dataset: str, rows: list[SentimentRow], path: Path) -> None:
    """Test error per epoch (mean over seeds, over the epochs all seeds reached): a panel per cell, a line per scheme."""
    cells = list(dict.fromkeys(r.cell for r in rows if r.curves)) or ["lstm"]
    fig, axes = draw_curves({cell: [r for r in rows if r.cell == cell and r.curves] for cell in cells},
                            lambda row: row.scheme)
    for ax, cell in zip(axes, cells, strict=True):
        ax.set(title=f"{dataset}, {cell.upper()}: test error per epoch", xlabel="epoch", ylabel=CURVES[dataset][1])
    save_curves(fig, axes, path)
