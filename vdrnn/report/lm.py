"""Language-model runs: Table 1 beside the paper's numbers, and the validation perplexity per epoch, a table and a plot
per corpus; and the table of `vdrnn eval`s of language models."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vdrnn.report.evaluations import Metric, evaluation_columns, evaluation_table
from vdrnn.report.found import by_dataset, numbers_as_numbers
from vdrnn.report.plots import draw_curves, reliability_figure, save_curves, save_figure
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
from vdrnn.report.tables import write_table
from vdrnn.report.uncertainty import write_ood

# Table 1's order, top to bottom; ad-hoc rows, named after their schemes, follow in the schemes' order.
ROW_ORDER = ["Non-regularized (early stopping)", "Moon et al. 2015", "Moon et al. + emb dropout",
             "Zaremba et al. 2014", "Variational (tied weights)", "Variational (untied weights)",
             "AWD-LSTM (no fine-tuning)", "AWD-LSTM (fine-tuned)"]
SIZE_NAMES = {200: "small", 650: "medium", 1500: "large"}
SIZE_ORDER = list(SIZE_NAMES.values())  # the table's and the plot's order; other sizes follow
# The units of each preset's paper size: Table 1's sizes, and AWD's 1150 (conf/model/awd.yaml).
PAPER_UNITS = {name: units for units, name in SIZE_NAMES.items()} | {"awd": 1150}


@dataclass
class PtbRow(Row):
    name: str
    size: str
    dropout: str
    quiet = QUIET_OVERRIDES

    @property
    def title(self) -> str:
        """The label and the model size, where the name does not say it already (AWD-LSTM's size is "awd")."""
        return self.label if self.size.lower() in self.label.lower() else f"{self.label}, {self.size}"

    @property
    def paper(self) -> dict[str, Any] | None:
        """Table 1's numbers for the row (metrics.json's ``paper``): its runs share them, as its name comes from them."""
        return self.runs[0].get("paper")


def ptb_identity(metrics: dict[str, Any]) -> tuple[str, str, str]:
    """(row name, size, dropout probabilities): how the table names a run. Runs named alike are seeds of one
    row when their other settings agree too (``row_for``). A preset's run at other units than its paper size's
    (``model.hidden_size=...``, a smoke run) says so, "medium (16 units)", beside the paper's medium numbers."""
    config = metrics.get("config") or {}
    paper = metrics.get("paper") or config.get("paper")  # eval.json keeps it in its config only
    hidden = config.get("model", {}).get("hidden_size")
    size = paper["size"] if paper else SIZE_NAMES.get(hidden, f"{hidden} units")
    if paper and PAPER_UNITS.get(paper["size"], hidden) != hidden:
        size = f"{size} ({hidden} units)"
    return (paper["row"] if paper else scheme_name(config)), size, dropout_label(config.get("dropout", {}))


def collect_ptb(found: list[tuple[Path, dict[str, Any]]], pooled: tuple[str, ...] = ()) -> list[PtbRow]:
    """The rows of the language-model runs ``found`` (found.find_runs) of one corpus (name x size x dropout, seeds
    together): small, medium, large, other sizes; each in Table 1's order."""
    rows = group_runs(found, ptb_identity, PtbRow, lambda epoch: epoch["valid_ppl"], pooled)

    def order(row: PtbRow):
        # Numbers in a label read as numbers: a grid's rows go kl_weight=30, 300, 1000 rather than 1000, 30, 300.
        labels = (numbers_as_numbers(label) for label in (row.name, row.dropout, row.setting))
        return rank(SIZE_ORDER, row.size), rank(ROW_ORDER, row.name), scheme_rank(row.name), *labels

    return sorted(rows, key=order)


def paper_value(row: PtbRow, key: str) -> str:
    value = (row.paper or {}).get(key)
    return "–" if value is None else f"{value:.1f}"


PTB_COLUMNS = ["row", "size", "dropout", "seeds", "valid", "test", "MC test", "paper valid", "paper test",
               "paper MC test", "words/s", *RUN_COLUMNS]


def ptb_table(rows: list[PtbRow]) -> list[list[str]]:
    lines = []
    for row in rows:
        wps = row.values("wps")
        lines.append([
            row.label, row.size, dropout_cell(row.dropout, row.runs), row.seeds_cell(),
            *(mean_std(row.values(key), runs=len(row.runs)) for key in ("valid_ppl", "test_ppl", "test_ppl_mc")),
            paper_value(row, "valid"), paper_value(row, "test"), paper_value(row, "test_mc"),
            f"{statistics.mean(wps):,.0f}" if wps else "–", *row.run_cells(),
        ])
    return lines


def plot_ptb(rows: list[PtbRow], path: Path, corpus: str = "PTB") -> None:
    """Validation perplexity per epoch, a panel per size, one line per row (mean over seeds, over the epochs all
    seeds reached)."""
    # Known sizes in their order, others by their units (300 before 1000): a set's own order changes from run to run.
    sizes = sorted({r.size for r in rows if r.curves}, key=lambda size: (rank(SIZE_ORDER, size),
                                                                          numbers_as_numbers(size)))
    fig, axes = draw_curves({size: [r for r in rows if r.size == size and r.curves] for size in sizes},
                            lambda row: row.name)
    for ax, size in zip(axes, sizes, strict=False):  # no curves at all: one empty panel, untitled
        finite = [v for line in ax.get_lines() for v in line.get_ydata() if math.isfinite(v)]
        if finite:
            # Every point in the frame, on a log scale: the first epochs' perplexities are several times the last
            # ones', and a linear axis would flatten the end where the rows part.
            ax.set_yscale("log")
            ax.set_ylim(min(finite) * 0.97, max(finite) * 1.03)
        ax.set(title=f"{corpus} {size}: validation perplexity", xlabel="epoch", ylabel="perplexity (log scale)")
    save_curves(fig, axes, path)


# Table 1's corpus: the report prints its table without naming it.
PAPER_CORPUS = "ptb"


def stems(dataset: str) -> tuple[str, str]:
    """The file stems of a corpus's table and curve plot, named after it as every dataset's (``ptb_table``,
    ``ptb_valid_ppl``)."""
    return f"{dataset}_table", f"{dataset}_valid_ppl"


def collect(found: list[tuple[Path, dict[str, Any]]], pooled: tuple[str, ...] = ()) -> dict[str, list[PtbRow]]:
    """corpus -> its rows (collect_ptb)."""
    return {dataset: collect_ptb(runs, pooled) for dataset, runs in by_dataset(found).items()}


CALIBRATION_COLUMNS = ["row", "size", "dropout", "seeds", "test ppl", "ECE", "Brier", "entropy", "MC test ppl",
                       "MC ECE", "MC Brier", "MC entropy", "MC aleatoric", "MC epistemic", "MC samples", "MC seconds"]


def calibration_table(rows: list[PtbRow]) -> list[list[str]]:
    """What MC dropout buys beyond perplexity, a line per row whose runs were scored for calibration: the test's
    next-token predictions by weight scaling and by MC (top-1 ECE, Brier score, entropy in nats), MC's entropy split
    into its aleatoric and epistemic parts (nats per token; MC's entropy is their sum where it averages
    arithmetically), with the MC test's samples and seconds."""
    lines = []
    for row in rows:
        cells = [mean_std(row.values(f"test_{key}{mc}"), digits, runs=len(row.runs))
                 for mc in ("", "_mc") for key, digits in (("ppl", 2), ("ece", 4), ("brier", 4), ("entropy", 3))]
        parts = [mean_std(row.values(f"test_uncertainty_{part}_mc"), 4, runs=len(row.runs))
                 for part in ("aleatoric", "epistemic")]
        samples = sorted({str(run["mc_samples"]) for run in row.runs if "mc_samples" in run})
        lines.append([row.label, row.size, dropout_cell(row.dropout, row.runs), row.seeds_cell(), *cells, *parts,
                      ", ".join(samples) or "–", mean_std(row.values("mc_seconds"), 1, runs=len(row.runs))])
    return lines


def sources(rows: list[PtbRow]) -> list[str]:
    """Where the published numbers of the rows come from, where their presets name it (``paper.source``): a line per
    source, naming its rows."""
    cited: dict[str, list[str]] = {}
    for row in rows:
        source = (row.paper or {}).get("source")
        if source and row.label not in cited.setdefault(source, []):
            cited[source].append(row.label)
    return [f"Published numbers of {', '.join(labels)}: {source}." for source, labels in cited.items()]


def write(collected: dict[str, list[PtbRow]], out: Path) -> tuple[list[str], list[Path]]:
    """Each corpus's table (.md, .csv) and validation curves (.png) in ``out``, and where runs were scored for
    calibration their table and reliability diagrams: (the tables as text, files written)."""
    texts, written = [], []
    for dataset, rows in collected.items():
        table, curves = stems(dataset)
        text = write_table(ptb_table(rows), PTB_COLUMNS, out / table, sources(rows))
        texts.append(text if dataset == PAPER_CORPUS else f"{dataset}: perplexity of the kept checkpoints\n\n{text}")
        plot_ptb(rows, out / f"{curves}.png", "PTB" if dataset == PAPER_CORPUS else dataset)
        written += [out / f"{table}.md", out / f"{table}.csv", out / f"{curves}.png"]
        scored = [row for row in rows if any("test_reliability" in run for run in row.runs)]
        if scored:  # runs from before vdrnn scored language models' calibration have no such table
            stem = f"{dataset}_calibration"
            text = write_table(calibration_table(scored), CALIBRATION_COLUMNS, out / stem)
            texts.append(f"{dataset}: calibration of the next-token predictions\n\n{text}")
            reliability_figure(scored, out / f"{dataset}_reliability.png")
            written += [out / f"{stem}.md", out / f"{stem}.csv", out / f"{dataset}_reliability.png"]
    return texts, written


EVALUATION_METRICS: list[Metric] = [("valid_ppl", "valid", 1, False), ("test_ppl", "test", 1, False),
                                    ("test_ppl_mc", "MC test", 1, False), ("test_ece", "ECE", 4, False),
                                    ("test_ece_mc", "MC ECE", 4, False), ("test_brier", "Brier", 4, False),
                                    ("test_brier_mc", "MC Brier", 4, False), ("temperature", "T", 3, False),
                                    ("temperature_mc", "MC T", 3, False),
                                    ("test_uncertainty_aleatoric_mc", "MC aleatoric", 4, False),
                                    ("test_uncertainty_epistemic_mc", "MC epistemic", 4, False),
                                    ("mc_seconds", "MC seconds", 1, False)]


def evaluated_model(evaluation: dict[str, Any]) -> tuple[str, str]:
    """How the evaluation table names an eval.json's model (as Table 1 names its run) and its dropout."""
    name, size, dropout = ptb_identity(evaluation)
    return f"{name}, {size}", dropout


def mc_sample_curves(found: list[tuple[Path, dict[str, Any]]]) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """A checkpoint's MC evaluations at several sample counts (``vdrnn eval -m eval=mc eval.samples=1,10,100,1000``):
    checkpoint -> (samples, eval.json) in sample order, for the checkpoints scored at two counts or more."""
    curves: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for _, evaluation in found:
        if "test_ppl_mc" in evaluation:
            curves.setdefault(evaluation.get("checkpoint", "?"), []).append((evaluation["mc_samples"], evaluation))
    return {name: sorted(points, key=lambda point: point[0]) for name, points in curves.items()
            if len({samples for samples, _ in points}) > 1}


def plot_mc_samples(curves: dict[str, list[tuple[int, dict[str, Any]]]], path: Path) -> None:
    """The cost and benefit of MC dropout against its samples: test perplexity, ECE and seconds, a line per checkpoint
    (weight scaling, which costs one pass, as a dotted line of its colour)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for name, points in curves.items():
        samples = [s for s, _ in points]
        label = f"{evaluated_model(points[0][1])[0]}: {Path(name).parent.name}/{Path(name).name}"  # run/best.pt
        for ax, key, ws_key in zip(axes, ("test_ppl_mc", "test_ece_mc", "mc_seconds"), ("test_ppl", "test_ece", None),
                                   strict=True):
            line, = ax.plot(samples, [e.get(key, math.nan) for _, e in points], "o-", label=label)
            if ws_key is not None:
                ax.axhline(points[0][1].get(ws_key, math.nan), color=line.get_color(), linestyle=":", linewidth=1)
    for ax, title in zip(axes, ("MC test perplexity", "MC test ECE (top-1, 15 bins)", "MC test seconds"), strict=True):
        ax.set(xscale="log", xlabel="MC samples", title=title)
        ax.grid(alpha=0.3)
    axes[2].set_yscale("log")
    fig.tight_layout(rect=(0, 0.06 + 0.03 * len(curves), 1, 1))  # room below for the legend, a line per checkpoint
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", fontsize=8)
    save_figure(fig, path)


def write_evaluations(evaluations: list[tuple[Path, dict[str, Any]]], out: Path) -> tuple[list[str], list[Path]]:
    """A table per corpus of the `vdrnn eval`s of its checkpoints (their MC settings side by side: ``vdrnn eval -m``
    over eval.average, eval.dropout_scale and eval.temperature gives a line each), the out-of-domain detection of
    those given ``ood=`` (``{corpus}_ood.md``), and where a checkpoint was scored by MC at several sample counts, the
    curves of what the samples cost and buy (``{corpus}_mc_samples.png``)."""
    texts, written = [], []
    for dataset, found in by_dataset(evaluations).items():
        text = write_table(evaluation_table(found, EVALUATION_METRICS, evaluated_model),
                           evaluation_columns(EVALUATION_METRICS), out / f"{dataset}_evaluations")
        texts.append(f"{dataset}: checkpoints scored by vdrnn eval\n\n{text}")
        written += [out / f"{dataset}_evaluations.md", out / f"{dataset}_evaluations.csv"]
        ood_texts, ood_files = write_ood(found, dataset, out, evaluated_model)
        texts += ood_texts
        written += ood_files
        curves = mc_sample_curves(found)
        if curves:
            plot_mc_samples(curves, out / f"{dataset}_mc_samples.png")
            written.append(out / f"{dataset}_mc_samples.png")
    return texts, written
