"""The curve plots' shared drawing: a panel per group of rows, a line per row (mean over its seeds)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from vdrnn.report.rows import Row


def line_label(name: str, dropout: str, setting: str, dropouts_of_name: set[str]) -> str:
    """A curve's legend: the row's name, its probabilities where the panel holds that name at several (a grid),
    and its setting (see distinguish)."""
    parts = ([dropout] if len(dropouts_of_name) > 1 else []) + ([setting] if setting else [])
    return name + (f" [{'; '.join(parts)}]" if parts else "")


def plot_mean_curve(ax, curves: list[list[float]], name: str) -> None:
    """One line: the mean over seeds of a per-epoch metric, over the epochs every seed reached."""
    epochs = min(len(c) for c in curves)
    mean = [statistics.mean(c[e] for c in curves) for e in range(epochs)]
    # Matplotlib's 10 colours repeat from the 11th line on; a new line style per 10 keeps every line its own look.
    style = ("-", "--", ":")[len(ax.get_lines()) // 10 % 3]
    ax.plot(range(1, epochs + 1), mean, style, marker="." if epochs < 30 else None, label=f"{name} (n={len(curves)})")


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
                                                       {r.dropout for r in panel if line_name(r) == name}))
    return fig, axes[0]


def save_curves(fig, axes, path: Path) -> None:
    """Grid, whole-epoch ticks (a one-epoch run's axis would otherwise read 0.96-1.04) and legend on every panel,
    then the PNG."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        if ax.get_lines():  # a panel with no runs has nothing to name
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
