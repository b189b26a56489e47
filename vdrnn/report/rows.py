"""Runs into rows: which runs are seeds of one experiment, how a row is named and told apart from rows named
alike, and the cells every table shares (dropout probabilities, mean ± std over seeds, what the command lines
changed)."""

from __future__ import annotations

import functools
import json
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import OmegaConf

from vdrnn.config import key_among
from vdrnn.dropout.config import SCHEMES
from vdrnn.eval_settings import MC_ONLY
from vdrnn.report.found import FAILED, numbers_as_numbers, status_of
from vdrnn.tasks import task_of
from vdrnn.training.tracking import flatten, read_jsonl


def rank(known: list[str], item: str) -> int:
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
    def title(self) -> str:
        """Its name where it stands alone, over a plot panel: the label; PtbRow adds the model size, which the
        table gives a column of its own."""
        return self.label

    @property
    def overrides(self) -> str:
        """What its runs' command lines changed beyond the preset (see overrides_column)."""
        return overrides_column(self.runs, self.dirs, self.quiet)

    @property
    def start_epoch(self) -> int:
        """The epochs behind the weights its runs started from (init_from; the fewest where they differ), after
        which its curve starts: a fine-tuning run's goes on where the run it fine-tunes stopped."""
        return min((run.get("start_epoch") or 0 for run in self.runs), default=0)

    def values(self, key: str) -> list[float]:
        return [r[key] for r in self.runs if r.get(key) is not None]

    @property
    def finished(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if status_of(r) != FAILED]

    def seeds_cell(self) -> str:
        """How many runs the row's numbers are over, and how many failed (diverged) beside them: ``3``, ``2 + 1
        failed``. Gal & Ghahramani discarded unstable runs; a table says how many."""
        failed = len(self.runs) - len(self.finished)
        return f"{len(self.finished)} + {failed} failed" if failed else str(len(self.runs))

    def settings(self) -> dict[str, str]:
        """The settings of its runs together: they agree wherever two of them have a key (row_for), so a setting
        that only some runs logged (an option their older seeds predate) still tells the row apart."""
        merged = {}
        for run in self.runs:
            merged.update(run_settings(run.get("config") or {}, self.pooled))
        return merged

    def run_cells(self) -> list[str]:
        """The cells under RUN_COLUMNS: the epochs as mean ± std, so that a seed a time cap stopped early stands out."""
        return [mean_std(self.values("epochs"), 0, len(self.runs)), train_and_test_minutes(self.finished),
                self.overrides or "–"]


# The columns every table ends with: how its runs ran.
RUN_COLUMNS = ["epochs", "train + test (min)", "overrides"]


# The dropout sites as the table names them, in the order of the network.
SITE_LABELS = {"embedding": "emb", "input": "in", "hidden": "hid", "recurrent": "h", "cell": "c", "candidate": "g",
               "zoneout_cell": "zone c", "zoneout_hidden": "zone h", "output": "out", "weight": "w"}


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
    untied = config.get("cell", {}).get("gates") == "untied" and scheme in SCHEMES and SCHEMES[scheme].per_gate_masks
    notes = [note for note, on in (("untied", untied), ("learned alpha", dropout.get("learn_alpha"))) if on]
    return scheme + (f" ({', '.join(notes)})" if notes else "")


def scheme_rank(name: str) -> tuple[float, bool, bool]:
    """Where a row named after its scheme (``gaussian (untied, learned alpha)``) sorts: the schemes' table order, then
    plain before learned alpha, tied before untied; names of no scheme last."""
    scheme, _, notes = name.partition(" (")
    order = SCHEMES[scheme].table_order if scheme in SCHEMES else math.inf
    return order, "learned alpha" in notes, "untied" in notes


# Config entries that never make two runs different experiments: which seed, where and how they ran. A wall-clock
# cap (trainer.max_minutes) is one too: a seed it stopped early shows in the epochs column (mean ± std over the
# seeds) and the cap in the overrides column.
NOT_SETTINGS = ("seed", "device", "resume", "checkpoint", "paper", "objective", "data.root", "trainer.progress",
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


def run_settings(config: dict[str, Any], pooled: tuple[str, ...] = ()) -> dict[str, str]:
    """A run's settings, with those it did not log (options added to vdrnn since) at their defaults, less the
    ``pooled`` ones (dotted keys or groups, ``vdrnn report --pool``)."""
    out = {**base_settings(), **settings(config)}
    ignored = (*pooled, *task_of(config).report_ignores)  # settings that change none of the task's numbers
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
        if history.exists() and status_of(metrics) != FAILED:  # a diverged run's epochs would bend the mean curve
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
    return f"{statistics.mean(seconds) / 60:.1f}" if seconds else "–"
