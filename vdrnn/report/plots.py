"""The curve plots' shared drawing: a panel per group of rows, a line per row (mean over its seeds)."""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Callable
from pathlib import Path

from vdrnn.files import replaced_atomically
from vdrnn.report.rows import Row


def line_label(name: str, dropout: str, setting: str, dropouts_of_name: set[str]) -> str:
    """A curve's legend: the row's name, its probabilities where the panel holds that name at several (a grid),
    and its setting (see distinguish)."""
    parts = ([dropout] if len(dropouts_of_name) > 1 else []) + ([setting] if setting else [])
    return name + (f" [{'; '.join(parts)}]" if parts else "")


def plot_mean_curve(ax, curves: list[list[float]], name: str, start_epoch: int = 0) -> None:
    """One line: the mean over seeds of a per-epoch metric, over the epochs every seed reached, from epoch
    ``start_epoch`` + 1 (a run that started from another's weights)."""
    epochs = min(len(c) for c in curves)
    mean = [statistics.mean(c[e] for c in curves) for e in range(epochs)]
    # Matplotlib's 10 colours repeat from the 11th line on; a new line style per 10 keeps every line its own look.
    style = ("-", "--", ":")[len(ax.get_lines()) // 10 % 3]
    ax.plot(range(start_epoch + 1, start_epoch + epochs + 1), mean, style, marker="." if epochs < 30 else None,
            label=f"{name} (n={len(curves)})")


def draw_curves(panels: dict[str, list[Row]], line_name: Callable[[Row], str]):
    """(figure, axes): a curve plot per panel (one, empty, where there are none), and in it a line per row, named
    ``line_name(row)`` and by what tells it apart from the panel's other lines of that name (line_label). Each
    legend goes under its panel (the labels are long), so the figure is taller by the lines of the longest legend
    and the axes keep their height."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count, lines = max(1, len(panels)), max(map(len, panels.values()), default=1)
    fig, axes = plt.subplots(1, count, figsize=(6.5 * count, 4.5 + 0.2 * lines), squeeze=False)
    for ax, panel in zip(axes[0], panels.values(), strict=False):
        for row in panel:
            name = line_name(row)
            plot_mean_curve(ax, row.curves, line_label(name, row.dropout, row.setting,
                                                       {r.dropout for r in panel if line_name(r) == name}),
                            row.start_epoch)
    return fig, axes[0]


def save_curves(fig, axes, path: Path) -> None:
    """Grid, whole-epoch ticks (a one-epoch run's axis would otherwise read 0.96-1.04) and legend on every panel,
    then the PNG."""
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        if ax.get_lines():  # a panel with no runs has nothing to name
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    fig.tight_layout()
    save_figure(fig, path)


def reliability_panel(ax, row: Row) -> None:
    """One row's reliability diagram: its seeds' bins pooled (``test_reliability`` in their metrics), by weight
    scaling and, where every run has it, by MC dropout."""
    runs = [run for run in row.runs if "test_reliability" in run]
    kinds = [(suffix, label) for suffix, label in (("", "weight scaling"), ("_mc", "MC dropout"))
             if all(f"test_reliability{suffix}" in run for run in runs)]
    low = 1.0
    for suffix, label in kinds:
        sums = {k: [sum(v) for v in zip(*(run[f"test_reliability{suffix}"][k] for run in runs), strict=True)]
                for k in ("count", "right", "confidence")}
        filled = [i for i, n in enumerate(sums["count"]) if n > 0]
        confidence = [sums["confidence"][i] / sums["count"][i] for i in filled]
        accuracy = [sums["right"][i] / sums["count"][i] for i in filled]
        low = min(low, *confidence, *accuracy)
        # The seeds' ECEs averaged, as the tables give them; the pooled curve's own ECE would be another number.
        ece = statistics.mean(run[f"test_ece{suffix}"] for run in runs)
        ax.plot(confidence, accuracy, "o-", markersize=3, label=f"{label} (mean ECE {ece:.4f})")
    ax.plot([0, 1], [0, 1], "k--", linewidth=0.8, label="calibrated")
    lim = max(0.0, math.floor(low * 10) / 10)
    ax.set(xlim=(lim, 1), ylim=(lim, 1), xlabel="confidence (bin mean)", ylabel="accuracy")
    # Rows named by their overrides can outgrow a panel: wrap them rather than let titles overlap.
    ax.set_title(textwrap.fill(f"{row.title} (n={len(runs)})", 50) + f"\n{row.dropout}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


def reliability_figure(rows: list[Row], path: Path) -> None:
    """Reliability diagrams, a panel per row (its seeds pooled): accuracy against confidence per confidence bin,
    weight scaling and MC; a calibrated model lies on the diagonal, an underconfident one above it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(4, max(1, len(rows)))
    lines = max(1, -(-len(rows) // columns))
    fig, axes = plt.subplots(lines, columns, figsize=(4.2 * columns, 4.4 * lines), squeeze=False)
    for ax, row in zip(axes.flat, rows, strict=False):
        reliability_panel(ax, row)
    for ax in list(axes.flat)[len(rows):]:
        ax.set_visible(False)
    fig.tight_layout()
    save_figure(fig, path)


def save_figure(fig, path: Path) -> None:
    """Write ``fig`` to the PNG ``path`` whole (a failed write is a WriteError), and close it."""
    import matplotlib.pyplot as plt

    try:
        with replaced_atomically(path) as f:
            fig.savefig(f, format="png", dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)
