"""`vdrnn report DIR...`: Table 1 from finished runs, beside the paper's numbers, plus validation curves.

Runs are found by their ``metrics.json`` anywhere under the given folders (a run dir, a sweep dir, or
several; a run under two of them counts once); unfinished runs (``metrics.jsonl`` but no ``metrics.json``) are
left out with a warning that names them. Runs that differ only by seed form one row, reported as mean ± std over
seeds (``--pool KEY`` puts runs that differ in KEY too in one row, and names its values there). A row is named
after its experiment preset's Table 1 row (``paper.row``) or, for ad-hoc runs, after its dropout scheme.
The last column lists what its runs' command lines changed beyond their preset (say ``trainer.clip=5``, or
``trainer.clip=5 (seed 1)`` where only some seeds did), so a row that departs from the paper's settings says so
beside the paper's numbers; the epochs column shows a seed that a time cap stopped early.

Sentiment runs (``dataset=imdb|scale``) get a table per dataset, one row per cell x scheme: test
accuracy, NLL, ECE and entropy (IMDB) or RMSE (scale) of the best-validation checkpoint, with weight
scaling and MC dropout; and the test error per epoch, one line per scheme and a panel per cell, as
Gal & Ghahramani's sentiment figures (those curves follow every epoch's weights; the table's numbers
are the best-validation checkpoint's). IMDB runs evaluated with MC dropout also get a calibration table,
a line per run (both ECEs, the floor a calibrated predictor would score, the MC - weight scaling
difference with its 95% interval) and, for a row of several seeds, a line of their means (the difference with a
95% interval over the seeds), and reliability diagrams, a panel per row.

Evaluations (``vdrnn eval``'s ``eval.json`` under the folders) get a table per dataset, a line each: the model
scored, named as above, the checkpoint and epoch, the mode (weight scaling, or MC and its passes) and the numbers.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import re
import statistics
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import OmegaConf

from vdrnn.config import MC_ONLY, key_among
from vdrnn.dropout import DropoutConfig
from vdrnn.tracking import flatten, read_jsonl


def _rank(known: list[str], item: str) -> int:
    """Where ``item`` sorts: its place in ``known``, or after all of them."""
    return known.index(item) if item in known else len(known)


@dataclass(kw_only=True)
class Row:
    """Runs that are seeds of one experiment (see group_runs), and what every table says of them. PtbRow and
    SentimentRow add the fields that name the row, and its ``name``. These fields are keyword-only: with their
    defaults they could not otherwise precede the subclasses' fields, which group_runs fills in by position."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)  # the folder of each run, for its overrides
    curves: list[list[float]] = field(default_factory=list)
    setting: str = ""  # what else sets this row apart from rows named alike (see distinguish)
    pooled: tuple[str, ...] = ()  # settings that do not make its runs other experiments (`vdrnn report --pool`)
    quiet: ClassVar[tuple[str, ...]]  # the overrides its overrides column leaves out (see run_overrides)

    @property
    def label(self) -> str:
        """The table's name of the row: its name, its setting where rows share that name (see distinguish), and
        ``(smoke)`` where a run of it was a smoke run (capped steps or data: its numbers are not results)."""
        smoke = " (smoke)" if any(run.get("smoke") for run in self.runs) else ""
        return (f"{self.name} [{self.setting}]" if self.setting else self.name) + smoke

    @property
    def overrides(self) -> str:
        """What its runs' command lines changed beyond the preset (see overrides_column)."""
        return overrides_column(self.runs, self.dirs, self.quiet)

    def values(self, key: str) -> list[float]:
        return [r[key] for r in self.runs if r.get(key) is not None]

    def settings(self) -> dict[str, str]:
        """The settings of its runs together: they agree wherever two of them have a key (row_for), so a setting
        that only some runs logged (an option their older seeds predate) still tells the row apart."""
        merged = {}
        for run in self.runs:
            merged.update(run_settings(run.get("config") or {}, self.pooled))
        return merged

    def run_cells(self) -> list[str]:
        """The cells under RUN_COLUMNS: the epochs as mean ± std, so that a seed a time cap stopped early stands out."""
        return [mean_std(self.values("epochs"), 0, len(self.runs)), train_and_test_minutes(self.runs),
                self.overrides or "–"]


# The columns every table ends with: how its runs ran.
RUN_COLUMNS = ["epochs", "train + test (min)", "overrides"]


# The dropout sites as the table names them, in the order of the network.
SITE_LABELS = {"embedding": "emb", "input": "in", "hidden": "hid", "recurrent": "h", "cell": "c", "output": "out",
               "weight": "w"}


def dropout_label(dropout: dict[str, Any]) -> str:
    """The non-zero probabilities, e.g. ``emb 0.2, in 0.5, h 0.2, out 0.5``: what tells a grid's runs apart."""
    used = [f"{label} {dropout[site]:g}" for site, label in SITE_LABELS.items() if dropout.get(site)]
    return ", ".join(used) or "–"


def learned_label(runs: list[dict[str, Any]]) -> str:
    """Where learned noise levels ended (``dropout.learn_alpha``; ``metrics.json``'s ``noise``): each site's mean p
    of the tested model, layer by layer, averaged over the seeds, e.g. ``learned p: in 0.50/0.49, h 0.50/0.50,
    out 0.50``; empty for runs with fixed probabilities. The dropout column's own probabilities are then the start."""
    noises = [r["noise"] for r in runs if r.get("noise")]
    if not noises:
        return ""
    parts = []
    for site, label in (("input", "in"), ("recurrent", "h"), ("output", "out")):
        keys = sorted(k for k in noises[0] if k.startswith(f"p_{site}"))
        if keys:
            parts.append(f"{label} " + "/".join(f"{statistics.mean(n[k] for n in noises):.2f}" for k in keys))
    return "learned p: " + ", ".join(parts)


def dropout_cell(dropout: str, runs: list[dict[str, Any]]) -> str:
    """The table's dropout column: the probabilities, and for learned noise where it ended."""
    learned = learned_label(runs)
    return f"{dropout}; {learned}" if learned else dropout


def scheme_name(config: dict[str, Any]) -> str:
    """An ad-hoc run's name: its dropout scheme, e.g. ``variational (untied)``, ``gaussian (learned alpha)``."""
    dropout = config.get("dropout", {})
    scheme = dropout.get("scheme", "?")
    untied = config.get("cell", {}).get("gates") == "untied" and scheme in DropoutConfig.PER_GATE_SCHEMES
    notes = [note for note, on in (("untied", untied), ("learned alpha", dropout.get("learn_alpha"))) if on]
    return scheme + (f" ({', '.join(notes)})" if notes else "")


# Config entries that never make two runs different experiments: which seed, where and how they ran. A wall-clock
# cap (trainer.max_minutes) is one too: a seed it stopped early shows in the epochs column (mean ± std over the
# seeds) and the cap in the overrides column.
NOT_SETTINGS = ("seed", "device", "resume", "checkpoint", "paper", "data.root", "trainer.progress",
                "trainer.log_every", "trainer.max_minutes")


def settings(config: dict[str, Any]) -> dict[str, str]:
    """The config flattened to ``{"trainer.amp": '"bf16"', ...}`` (values as JSON text, so that any two compare),
    without NOT_SETTINGS: runs whose settings are equal are seeds of one experiment. ``init_from`` counts as whether
    it is set: a warm start is another experiment than a fresh one, the same weights under another path are not."""
    flat = flatten(config)
    if "init_from" in config:
        flat["init_from"] = config["init_from"] is not None
    return {key: json.dumps(same_number(value)) for key, value in flat.items() if not key_among(key, NOT_SETTINGS)}


def same_number(value: Any) -> Any:
    """A whole float as an int: `trainer.clip=5` on the command line logs 5 where the preset's 5.0 logs 5.0, one
    setting."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


@functools.cache
def base_settings() -> dict[str, str]:
    """The defaults of conf/config.yaml, flattened. A run that predates an option ran with its default, so
    its settings are filled in from here (an old Moon run is a ``dropout.cell_scale=h`` run)."""
    base = OmegaConf.to_container(OmegaConf.load(files("vdrnn.conf") / "config.yaml"))
    defaults = settings({k: v for k, v in base.items() if k not in ("defaults", "hydra")})
    # ??? marks a key that config.yaml documents and a group option sets (model.hidden_size): no default
    return {key: value for key, value in defaults.items() if value != json.dumps("???")}


# A sentiment model scores every review on its own, so how many reviews an evaluation pass holds changes no
# weight-scaling number beyond float rounding (MC draws its masks in another order: another draw). A language
# model's evaluation batch does change its numbers: it cuts the text into other streams.
SENTIMENT_NOT_SETTINGS = ("data.eval_batch_size",)


def run_settings(config: dict[str, Any], pooled: tuple[str, ...] = ()) -> dict[str, str]:
    """A run's settings, with those it did not log (options added to vdrnn since) at their defaults, less the
    ``pooled`` ones (dotted keys or groups, ``vdrnn report --pool``)."""
    out = {**base_settings(), **settings(config)}
    ignored = (*pooled, *SENTIMENT_NOT_SETTINGS) if (config.get("data") or {}).get("name") in SENTIMENT_METRICS \
        else pooled
    if out.get("eval.mode") == json.dumps("scale"):  # MC's keys change nothing of a weight-scaling run
        ignored = (*ignored, *MC_ONLY)
    return {key: value for key, value in out.items() if not key_among(key, ignored)}


def same_experiment(a: dict[str, str], b: dict[str, str]) -> bool:
    """Settings equal wherever both runs have the key (an option added to vdrnn later is missing in older runs)."""
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def row_for(rows: list[Row], config: dict[str, Any], pooled: tuple[str, ...] = ()) -> Row | None:
    """The row among ``rows`` whose runs are each the same experiment as ``config``, or None. Each, not only the
    first: a key that one side lacks matches any value, so an old run without ``data.max_length`` matches runs
    at 200 and at 400, which must still not share a row. Such a run joins the first row it matches, in the order
    the runs are found (by folder). Settings among ``pooled`` do not count (``vdrnn report --pool``)."""
    mine = run_settings(config, pooled)
    for row in rows:
        if all(same_experiment(run_settings(run.get("config") or {}, pooled), mine) for run in row.runs):
            return row
    return None


def distinguish(group: list[Row]) -> None:
    """Set ``row.setting`` to the entries that differ between the rows of ``group``, which are named alike (e.g.
    one preset trained for 20 and for 40 epochs, or in fp32 and bf16), so that no two rows read alike."""
    if len(group) < 2:
        return
    every = [row.settings() for row in group]
    # Keys that only some rows have are options added to vdrnn in between, not differences.
    shared = set.intersection(*(set(s) for s in every))
    differ = sorted(k for k in shared if len({s[k] for s in every}) > 1)
    for row, values in zip(group, every, strict=True):
        row.setting = ", ".join(f"{k}={values[k]}" for k in differ).replace('"', "")


# Overrides that change nothing a run measures, or that the table shows elsewhere: the seed (seeds column) and
# the dropout probabilities (dropout column; other dropout options, e.g. dropout.cell_scale, are not shown there).
QUIET_OVERRIDES = ("experiment=", "seed=", *(f"dropout.{site}=" for site in SITE_LABELS), "trainer.progress=",
                   "trainer.log_every=", "hydra.", "data.root=", "device=", "resume=", "init_from=", "checkpoint=")
# A sentiment row also leaves out what does not change its numbers there, as its grouping does (e.g. the
# evaluation batch size: a row of seeds at 1,000 and 500 reviews a pass is one experiment).
SENTIMENT_QUIET_OVERRIDES = (*QUIET_OVERRIDES, *(f"{key}=" for key in SENTIMENT_NOT_SETTINGS))


def run_overrides(run_dir: Path, quiet: tuple[str, ...]) -> list[str] | None:
    """The command-line overrides a run made to its preset, e.g. ``["trainer.clip=5"]``, so that a row which
    departs from the paper's settings says so, less those starting with one of ``quiet``; None where the run kept
    no record. `vdrnn train` writes those it finished under beside metrics.json (``overrides.yaml``, which results/
    keeps too); runs from before it did have Hydra's record, ``.hydra/overrides.yaml``, which any later start in the
    folder rewrites, a refused one too."""
    for path in (run_dir / "overrides.yaml", run_dir / ".hydra" / "overrides.yaml"):
        if path.exists():
            return [o for o in OmegaConf.load(path) if not o.startswith(quiet)]
    return None


def run_names(runs: list[dict[str, Any]], dirs: list[Path]) -> list[str]:
    """How the overrides column names a row's runs: ``seed 2``, or their folders where seeds do not tell them apart."""
    seeds = [(run.get("config") or {}).get("seed") for run in runs]
    if None in seeds or len(set(seeds)) < len(seeds):
        return [d.name for d in dirs]
    return [f"seed {s}" for s in seeds]


def and_list(names: list[str]) -> str:
    """``seed 1``; ``seeds 1 and 3``; ``seeds 1, 2 and 4`` (folder names likewise, without the word)."""
    if all(n.startswith("seed ") for n in names) and len(names) > 1:
        names = [n.removeprefix("seed ") for n in names]
        prefix = "seeds "
    else:
        prefix = ""
    return prefix + (names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}")


def overrides_column(runs: list[dict[str, Any]], dirs: list[Path], quiet: tuple[str, ...]) -> str:
    """The overrides of every run of a row (see run_overrides), in first-seen order. One that only some runs made
    says which: ``trainer.max_minutes=13 (seed 1), trainer.max_minutes=14 (seed 2)``; runs that kept no record
    of their command line, beside runs that did, are named as ``no record (seed 3)``."""
    records = [run_overrides(d, quiet) for d in dirs]
    names = run_names(runs, dirs)
    parts = []
    for override in dict.fromkeys(o for record in records if record for o in record):
        made = [name for name, record in zip(names, records, strict=True) if record and override in record]
        parts.append(override if len(made) == len(records) else f"{override} ({and_list(made)})")
    unknown = [name for name, record in zip(names, records, strict=True) if record is None]
    if unknown and len(unknown) < len(records):
        parts.append(f"no record ({and_list(unknown)})")
    return ", ".join(parts)


def numbers_as_numbers(path: str | Path) -> list[str | int]:
    """A sort key that reads the digits in a path as numbers, so that runs go seed 2, seed 10 rather than seed 10,
    seed 2 (re.split with a group keeps text at the even places and numbers at the odd ones, so keys compare)."""
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", str(path)))]


def files_named(name: str, folders: list[Path]) -> list[Path]:
    """Every file called ``name`` under ``folders``, in path order with numbers read as numbers (numbers_as_numbers),
    each once where the folders overlap (``runs runs/b``)."""
    found: dict[Path, Path] = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob(name), key=numbers_as_numbers):
            found.setdefault(path.resolve(), path)  # the path as given: the tables name runs by their folder
    return list(found.values())


def find_runs(folders: list[Path]):
    """(path of metrics.json, its content) of every finished run under ``folders``."""
    for path in files_named("metrics.json", folders):
        yield path, read_metrics(path)


def read_metrics(path: Path) -> dict[str, Any]:
    """A run's metrics.json; one that is not JSON stops the report, naming it (it is written atomically, so
    that is damage from outside, and which run to look at is what the reader needs)."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise SystemExit(f"error: {path} is not valid JSON ({err}); restore it or move its run out of the "
                         f"folders reported") from err


def unfinished_runs(folders: list[Path]) -> list[Path]:
    """The run folders under ``folders`` with epochs (metrics.jsonl) but no final numbers (metrics.json): runs
    stopped or still going, which the tables leave out."""
    return [path.parent for path in files_named("metrics.jsonl", folders)
            if not (path.parent / "metrics.json").exists()]


def runs_without_epochs(folders: list[Path]) -> list[Path]:
    """The run folders under ``folders`` (a vdrnn.log) with no finished epoch and no evaluation (eval.json): runs
    refused at the start, or stopped in their first epoch; a sweep's failed job is one. Its vdrnn.log says why."""
    return [path.parent for path in files_named("vdrnn.log", folders)
            if not any((path.parent / name).exists() for name in ("metrics.jsonl", "metrics.json", "eval.json"))]


RESUME_HINT = "to finish one, run its `vdrnn train` command again with hydra.run.dir=<run> (it resumes from last.pt)"


def check_found(folders: list[Path], found: bool) -> None:
    """Stop where ``folders`` hold no finished run (``found`` is false), saying why: only unfinished runs, or none.
    Where there are finished runs, warn of the unfinished ones left out."""
    unfinished = ", ".join(map(str, unfinished_runs(folders)))
    where = ", ".join(map(str, folders))
    if not found and unfinished:
        raise SystemExit(f"error: no finished run under {where}, only unfinished ones (metrics.jsonl but no "
                         f"metrics.json): {unfinished}; {RESUME_HINT}")
    empty = ", ".join(map(str, runs_without_epochs(folders)))
    if not found:
        raise SystemExit(f"error: no metrics.json or eval.json under {where}; point at run, sweep or evaluation dirs"
                         + (f" (runs that finished no epoch: {empty}; each one's vdrnn.log says why)" if empty else ""))
    if unfinished:
        print(f"warning: leaving out unfinished runs (metrics.jsonl but no metrics.json): {unfinished}; "
              f"{RESUME_HINT}", file=sys.stderr)
    if empty:
        print(f"warning: leaving out runs that finished no epoch (refused, or stopped in their first): {empty}; "
              f"each one's vdrnn.log says why", file=sys.stderr)


def dataset_of(metrics: dict[str, Any]) -> str:
    return (metrics.get("config") or {}).get("data", {}).get("name", "ptb")


def group_runs(runs: list[tuple[Path, dict[str, Any]]], identity: Callable[[dict[str, Any]], tuple],
               row_type: Callable[..., Row], point: Callable[[dict[str, Any]], float],
               pooled: tuple[str, ...] = ()) -> list[Row]:
    """Rows of ``runs`` (path of metrics.json, its content). A run joins a row of its ``identity(metrics)`` whose
    runs are the same experiment but for the ``pooled`` settings (row_for), or starts one, ``row_type(*identity)``;
    its curve is ``point`` of each epoch in its metrics.jsonl. Rows of one identity are then told apart by their
    setting (distinguish), and a row whose runs differ in a pooled setting says so (pooled_values)."""
    found: dict[tuple, list[Row]] = {}
    for path, metrics in runs:
        key = identity(metrics)
        group = found.setdefault(key, [])
        row = row_for(group, metrics.get("config") or {}, pooled)
        if row is None:
            row = row_type(*key, pooled=pooled)
            group.append(row)
        row.runs.append(metrics)
        row.dirs.append(path.parent)
        history = path.parent / "metrics.jsonl"
        if history.exists():
            row.curves.append([point(epoch) for epoch in read_jsonl(history)])
    for group in found.values():
        distinguish(group)
    rows = [row for group in found.values() for row in group]
    for row in rows:
        row.setting = ", ".join(part for part in (row.setting, pooled_values(row)) if part)
        warn_of_repeated_seeds(row)
    return rows


def pooled_values(row: Row) -> str:
    """The pooled settings whose values differ among the row's runs, each with its values, ``trainer.epochs=30/42
    pooled``: a row that puts seeds of other settings together says so in its name."""
    every = [run_settings(run.get("config") or {}) for run in row.runs]
    parts = []
    for key in sorted({k for s in every for k in s if key_among(k, row.pooled)}):
        values = sorted({s[key] for s in every if key in s}, key=numbers_as_numbers)
        if len(values) > 1:
            parts.append(f"{key}={'/'.join(values)} pooled".replace('"', ""))
    return ", ".join(parts)


def warn_of_repeated_seeds(row: Row) -> None:
    """Two runs of one seed in a row are a rerun, not two seeds: its ± would understate the spread."""
    seeds = [(run.get("config") or {}).get("seed") for run in row.runs]
    repeated = sorted({seed for seed in seeds if seed is not None and seeds.count(seed) > 1})
    if repeated:
        folders = ", ".join(str(d) for d, seed in zip(row.dirs, seeds, strict=True) if seed in repeated)
        print(f"warning: row {row.label!r} holds seed {', '.join(map(str, repeated))} more than once ({folders}); "
              f"reruns of a seed are not other seeds, so its mean ± std is not over seeds: report one run of each",
              file=sys.stderr)


def mean_std(values: list[float], digits: int = 1, runs: int | None = None) -> str:
    """``mean ± std`` over seeds, the std being the sample one (n - 1); a single value alone. ``runs``: the row's
    run count; where fewer runs logged the metric (older runs, from before it existed), the cell says over how
    many, ``(n=2)``. A non-finite value (a diverged run's inf perplexity) leaves the mean alone: inf or nan."""
    if not values:
        return "–"
    count = f" (n={len(values)})" if runs is not None and len(values) < runs else ""
    if len(values) == 1 or not all(math.isfinite(v) for v in values):
        return f"{statistics.mean(values):.{digits}f}{count}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}{count}"


def train_and_test_minutes(runs: list[dict]) -> str:
    """Mean over seeds of the training steps' time plus the final test's: a run's cost without its per-epoch
    validation (and, for sentiment, per-epoch test curve), which its log's span includes."""
    seconds = [(r.get("train_seconds") or 0) + (r.get("eval_seconds") or 0) for r in runs]
    return f"{statistics.mean(seconds) / 60:.1f}"


def markdown(lines: list[list[str]], columns: list[str]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out) + "\n"


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


# ----------------------------------------------------------------------------- PTB runs
# Table 1's order, top to bottom; ad-hoc rows follow in name order.
ROW_ORDER = ["Non-regularized (early stopping)", "Moon et al. 2015", "Moon et al. + emb dropout",
             "Zaremba et al. 2014", "Variational (tied weights)", "Variational (untied weights)"]
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


def collect_ptb(folders: list[Path], pooled: tuple[str, ...] = ()) -> list[PtbRow]:
    """Rows (name x size x dropout, seeds together): small, medium, large, other sizes; each in Table 1's order."""
    runs = [(path, metrics) for path, metrics in find_runs(folders) if dataset_of(metrics) == "ptb"]
    rows = group_runs(runs, ptb_identity, PtbRow, lambda epoch: epoch["valid_ppl"], pooled)

    def order(row: PtbRow):
        return _rank(SIZE_ORDER, row.size), _rank(ROW_ORDER, row.name), row.name, row.dropout, row.setting

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
            row.label, row.size, dropout_cell(row.dropout, row.runs), str(len(row.runs)),
            *(mean_std(row.values(key), runs=len(row.runs)) for key in ("valid_ppl", "test_ppl", "test_ppl_mc")),
            paper_value(row, "valid"), paper_value(row, "test"), paper_value(row, "test_mc"),
            f"{statistics.mean(wps):,.0f}" if wps else "–", *row.run_cells(),
        ])
    return lines


def plot_ptb(rows: list[PtbRow], path: Path) -> None:
    """Validation perplexity per epoch, a panel per size, one line per row (mean over seeds, over the epochs all
    seeds reached)."""
    # Known sizes in their order, others by name: a set's own order changes from run to run.
    sizes = sorted({r.size for r in rows if r.curves}, key=lambda size: (_rank(SIZE_ORDER, size), size))
    fig, axes = draw_curves({size: [r for r in rows if r.size == size and r.curves] for size in sizes},
                            lambda row: row.name)
    for ax, size in zip(axes, sizes, strict=False):  # no curves at all: one empty panel, untitled
        finite = [v for line in ax.get_lines() for v in line.get_ydata() if math.isfinite(v)]
        if finite:
            ax.set_ylim(min(finite) * 0.95, min(max(finite), min(finite) * 2.0))
        ax.set(title=f"PTB {size}: validation perplexity", xlabel="epoch", ylabel="perplexity")
    save_curves(fig, axes, path)


# ----------------------------------------------------------------------------- sentiment runs
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


def sentiment_identity(metrics: dict[str, Any]) -> tuple[str, str, str]:
    """(cell, scheme, dropout probabilities): how a sentiment table names a run (see ptb_identity)."""
    config = metrics["config"]
    return config.get("cell", {}).get("type", "lstm"), scheme_name(config), dropout_label(config.get("dropout", {}))


def collect_sentiment(folders: list[Path], pooled: tuple[str, ...] = ()) -> dict[str, list[SentimentRow]]:
    """dataset -> rows (cell x scheme, seeds together), in the order LSTM, GRU, RNN x none ... variational."""
    runs: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path, metrics in find_runs(folders):
        if dataset_of(metrics) in SENTIMENT_METRICS:
            runs.setdefault(dataset_of(metrics), []).append((path, metrics))

    def order(row: SentimentRow):
        return _rank(CELL_ORDER, row.cell), _rank(SCHEME_ORDER, row.scheme), row.label, row.dropout

    return {dataset: sorted(group_runs(dataset_runs, sentiment_identity, SentimentRow, CURVES[dataset][0], pooled),
                            key=order)
            for dataset, dataset_runs in sorted(runs.items())}


def sentiment_columns(dataset: str) -> list[str]:
    titles = [title for _, title, _, _ in SENTIMENT_METRICS[dataset]]
    return ["row", "dropout", "seeds", *titles, *(f"MC {t}" for t in titles), *RUN_COLUMNS]


def sentiment_table(dataset: str, rows: list[SentimentRow]) -> list[list[str]]:
    lines = []
    for row in rows:
        cells = {}
        for suffix in ("", "_mc"):
            for key, _, digits, percent in SENTIMENT_METRICS[dataset]:
                values = [v * (100 if percent else 1) for v in row.values(f"test_{key}{suffix}")]
                cells[key + suffix] = mean_std(values, digits, runs=len(row.runs))
        keys = [key for key, _, _, _ in SENTIMENT_METRICS[dataset]]
        lines.append([row.label, dropout_cell(row.dropout, row.runs), str(len(row.runs)),
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


CALIBRATION_COLUMNS = ["run", "row", "accuracy (%)", "ECE", "ECE floor", "MC ECE", "MC ECE floor",
                       "MC - WS ECE (95% interval)", "better calibrated"]


def calibrated_runs(rows: list[SentimentRow]) -> list[tuple[SentimentRow, Path, dict[str, Any]]]:
    """(row, folder, metrics) of each run that compared MC's calibration with weight scaling's."""
    return [(row, folder, run) for row in rows for folder, run in zip(row.dirs, row.runs, strict=True)
            if "test_ece_mc_minus_ws" in run]


# Student's t, 97.5% quantile, for 1-30 degrees of freedom; more take the last one, at most 0.08 above their own
# (the limit is the normal's 1.96), so their interval is a little wider than it need be, never narrower.
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """The mean of ``values`` (two or more) with its 95% Student-t interval: (mean, low, high)."""
    mean = statistics.mean(values)
    half = T_975[min(len(values) - 1, len(T_975)) - 1] * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def better_calibrated(low: float, high: float) -> str:
    """Which evaluation a 95% interval of ECE(MC) - ECE(weight scaling) says is the better calibrated."""
    return "MC" if high < 0 else "weight scaling" if low > 0 else "neither (interval holds 0)"


def calibration_line(name: str, label: str, runs: list[dict[str, Any]], difference: float, low: float, high: float,
                     verdict: str) -> list[str]:
    """A calibration table line: ``runs``' mean accuracy, ECEs and floors, and the MC - weight scaling difference."""
    def mean(key: str) -> float:
        return statistics.mean(run[key] for run in runs)

    return [name, label, f"{100 * mean('test_accuracy'):.2f}", f"{mean('test_ece'):.4f}", f"{mean('test_ece_floor'):.4f}",
            f"{mean('test_ece_mc'):.4f}", f"{mean('test_ece_floor_mc'):.4f}",
            f"{difference:+.4f} ({low:+.4f} to {high:+.4f})", verdict]


def calibration_table(rows: list[SentimentRow]) -> list[list[str]]:
    """A line per run: both ECEs beside the floor a calibrated predictor would score, and which is the better
    calibrated beyond chance (the difference's 95% interval excludes zero; see sentiment.metrics.ece_difference).

    After a row's runs, where it has two seeds or more, a line of their means, which says which is the better
    calibrated across seeds: the mean difference with a 95% Student-t interval over the seeds (a run's own interval
    covers only the test set's sampling; the seeds' spread is the training's), and how many runs had each verdict.
    """
    lines = []
    for row in rows:
        runs, verdicts = [], []
        for _, folder, run in calibrated_runs([row]):
            low, high = run["test_ece_mc_minus_ws_ci"]
            runs.append(run)
            verdicts.append(better_calibrated(low, high))
            lines.append(calibration_line(folder.name, row.label, [run], run["test_ece_mc_minus_ws"], low, high,
                                          verdicts[-1]))
        if len(runs) >= 2:
            counts = ", ".join(f"{name} {sum(v.startswith(name) for v in verdicts)}"
                               for name in ("MC", "weight scaling", "neither"))
            difference, low, high = mean_interval([run["test_ece_mc_minus_ws"] for run in runs])
            lines.append(calibration_line(f"mean of {len(runs)} seeds", row.label, runs, difference, low, high,
                                          f"{better_calibrated(low, high)} across seeds; per run: {counts}"))
    return lines


def plot_reliability(rows: list[SentimentRow], path: Path) -> None:
    """Reliability diagrams, a panel per row (its seeds pooled): accuracy against confidence per confidence bin,
    weight scaling and MC; a calibrated model lies on the diagonal, an underconfident one above it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [row for row in rows if any("test_reliability_mc" in run for run in row.runs)]
    columns = min(4, len(panels))
    lines = -(-len(panels) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4.2 * columns, 4.4 * lines), squeeze=False)
    for ax, row in zip(axes.flat, panels, strict=False):
        reliability_panel(ax, row)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def reliability_panel(ax, row: SentimentRow) -> None:
    """One row's reliability diagram: its seeds' bins pooled, weight scaling and MC."""
    runs = [run for run in row.runs if "test_reliability_mc" in run]
    low = 1.0
    for suffix, label in (("", "weight scaling"), ("_mc", "MC dropout")):
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
    ax.set_title(textwrap.fill(f"{row.label} (n={len(runs)})", 50) + f"\n{row.dropout}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


# ----------------------------------------------------------------------------- evaluations (`vdrnn eval`)
def find_evaluations(folders: list[Path]) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """dataset -> (folder, eval.json) of every `vdrnn eval` under ``folders``, in path order. An eval.json from
    before it recorded its config is left out with a warning: without it, which model it scored is unknown."""
    found: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path in files_named("eval.json", folders):
        evaluation = read_metrics(path)
        if not evaluation.get("config"):
            print(f"warning: leaving out {path}: it records no config (an older vdrnn eval's), so which model it "
                  f"scored is unknown; run that vdrnn eval again for a line of the table", file=sys.stderr)
            continue
        found.setdefault(dataset_of(evaluation), []).append((path.parent, evaluation))
    return dict(sorted(found.items()))


def evaluation_mode(config: dict[str, Any]) -> str:
    """How `vdrnn eval` scored: ``weight scaling``, or ``MC, 1000 passes`` and what departs from Gal's MC test
    (word-type dropout kept on; PTB masks redrawn every minibatch instead of kept for the stream)."""
    eval_settings = config.get("eval", {})
    if eval_settings.get("mode") != "mc":
        return "weight scaling"
    notes = [note for note, on in (("word-type dropout on", eval_settings.get("word_dropout")),
                                   ("masks per minibatch", eval_settings.get("mc_masks") == "minibatch")) if on]
    return f"MC, {eval_settings.get('samples')} passes" + "".join(f", {note}" for note in notes)


def evaluation_metrics(dataset: str) -> list[tuple[str, str, int, bool]]:
    """(eval.json key, column title, digits, x100) of a dataset's evaluation table: PTB's perplexities, or a sentiment
    dataset's test metrics with weight scaling and then with MC, as its training table has them."""
    if dataset == "ptb":
        return [("valid_ppl", "valid", 1, False), ("test_ppl", "test", 1, False), ("test_ppl_mc", "MC test", 1, False)]
    return [(f"test_{key}{suffix}", prefix + title, digits, percent)
            for suffix, prefix in (("", ""), ("_mc", "MC ")) for key, title, digits, percent in SENTIMENT_METRICS[dataset]]


def evaluation_columns(dataset: str) -> list[str]:
    return ["evaluation", "model", "dropout", "checkpoint", "epoch", "mode",
            *(title for _, title, _, _ in evaluation_metrics(dataset))]


def evaluation_table(dataset: str, evaluations: list[tuple[Path, dict[str, Any]]]) -> list[list[str]]:
    """A line per `vdrnn eval`: its folder, the model it scored named as the training tables name it (``(smoke)``
    where its numbers are a smoke run's), the checkpoint and its epoch, the mode, and the numbers."""
    lines = []
    for folder, evaluation in evaluations:
        if dataset == "ptb":
            name, size, dropout = ptb_identity(evaluation)
            model = f"{name}, {size}"
        else:
            cell, scheme, dropout = sentiment_identity(evaluation)
            model = f"{cell.upper()} · {scheme}"
        numbers = [f"{evaluation[key] * (100 if percent else 1):.{digits}f}" if evaluation.get(key) is not None
                   else "–" for key, _, digits, percent in evaluation_metrics(dataset)]
        lines.append([str(folder), model + (" (smoke)" if evaluation.get("smoke") else ""), dropout,
                      evaluation.get("checkpoint", "–"), str(evaluation.get("epoch", "–")),
                      evaluation_mode(evaluation["config"]), *numbers])
    return lines


def write_table(lines: list[list[str]], columns: list[str], stem: Path) -> str:
    text = markdown(lines, columns)
    stem.with_suffix(".md").write_text(text)
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(lines)
    return text


# What names a row (its scheme, dropout column, cell, paper row and size: ptb_identity, sentiment_identity), so that
# runs apart in it are never one row, pooled or not.
NAMING_SETTINGS = ("dropout", "cell", "paper", "model.hidden_size")


def check_poolable(pooled: tuple[str, ...]) -> None:
    """Refuse a ``--pool`` key that would pool nothing without a word: one that names rows, or one that never
    splits them (the seed)."""
    for name in pooled:
        if key_among(name, NAMING_SETTINGS) or any(key_among(key, (name,)) for key in NAMING_SETTINGS):
            raise SystemExit(f"error: --pool {name}: the scheme, dropout probabilities, cell and size name a row "
                             f"({', '.join(NAMING_SETTINGS)}), so runs apart there are never one row; pool another "
                             f"setting, e.g. --pool trainer.epochs")
        if key_among(name, NOT_SETTINGS):
            raise SystemExit(f"error: --pool {name}: runs that differ only there are one row already "
                             f"({', '.join(NOT_SETTINGS)} never set runs apart)")


def check_pooled_keys_exist(folders: list[Path], rows: list[Row], pooled: tuple[str, ...]) -> None:
    """Refuse a ``--pool`` key that no run of ``rows`` has (a typo), which would pool nothing without a word."""
    known = {key for row in rows for run in row.runs for key in run_settings(run.get("config") or {})}
    unknown = [name for name in pooled if not any(key_among(key, (name,)) for key in known)]
    if unknown:
        raise SystemExit(f"error: --pool {', '.join(unknown)}: no run under {', '.join(map(str, folders))} has that "
                         f"setting; pool a dotted config key that differs between runs, e.g. --pool trainer.epochs")


def write_report(folders: list[Path], out: Path, pooled: tuple[str, ...] = ()) -> tuple[str, list[Path]]:
    """Write the tables and plots of every run under ``folders`` into ``out``: (the tables as text, files written).
    Runs that differ only in ``pooled`` settings are seeds of one row."""
    check_poolable(pooled)
    rows = collect_ptb(folders, pooled)
    sentiment = collect_sentiment(folders, pooled)
    evaluations = find_evaluations(folders)
    check_found(folders, bool(rows or sentiment or evaluations))
    check_pooled_keys_exist(folders, [*rows, *(row for group in sentiment.values() for row in group)], pooled)
    out.mkdir(parents=True, exist_ok=True)
    texts, written = [], []
    if rows:
        texts.append(write_table(ptb_table(rows), PTB_COLUMNS, out / "table"))
        plot_ptb(rows, out / "valid_ppl.png")
        written += [out / "table.md", out / "table.csv", out / "valid_ppl.png"]
    for dataset, dataset_rows in sentiment.items():
        text = write_table(sentiment_table(dataset, dataset_rows), sentiment_columns(dataset), out / f"{dataset}_table")
        texts.append(f"{dataset}: test metrics of the best-validation checkpoints\n\n{text}")
        plot_sentiment(dataset, dataset_rows, out / f"{dataset}_test_curves.png")
        written += [out / f"{dataset}_table.md", out / f"{dataset}_table.csv", out / f"{dataset}_test_curves.png"]
        if calibrated_runs(dataset_rows):
            text = write_table(calibration_table(dataset_rows), CALIBRATION_COLUMNS, out / f"{dataset}_calibration")
            texts.append(f"{dataset}: calibration, MC dropout against weight scaling, per run\n\n{text}")
            plot_reliability(dataset_rows, out / f"{dataset}_reliability.png")
            written += [out / f"{dataset}_calibration.md", out / f"{dataset}_calibration.csv",
                        out / f"{dataset}_reliability.png"]
    for dataset, dataset_evaluations in evaluations.items():
        text = write_table(evaluation_table(dataset, dataset_evaluations), evaluation_columns(dataset),
                           out / f"{dataset}_evaluations")
        texts.append(f"{dataset}: checkpoints scored by vdrnn eval\n\n{text}")
        written += [out / f"{dataset}_evaluations.md", out / f"{dataset}_evaluations.csv"]
    return "\n".join(texts), written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="vdrnn report", description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run or sweep dirs holding metrics.json files")
    parser.add_argument("--out", type=Path, default=None, help="where the tables (.md, .csv) and plots (.png) go "
                                                               "(default: the first folder)")
    parser.add_argument("--pool", metavar="KEY", action="append", default=[],
                        help="a setting that does not split runs into rows: runs that differ only there are seeds "
                             "of one row, whose name gives the values (e.g. --pool trainer.epochs, for seeds run "
                             "to different lengths that kept the same epochs); repeatable")
    args = parser.parse_args(argv)
    # A mistyped folder beside one with runs would otherwise leave its runs out without a word.
    missing = [str(folder) for folder in args.folders if not folder.is_dir()]
    if missing:
        parser.error(f"no such folder: {', '.join(missing)}")
    out = args.out or args.folders[0]
    if out.exists() and not out.is_dir():
        parser.error(f"--out {out} is a file; give a folder for the tables and plots (it is made if missing)")
    text, written = write_report(args.folders, out, tuple(args.pool))
    print(text, end="")
    print(f"\nwrote {', '.join(map(str, written))}")
