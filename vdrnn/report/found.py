"""What `vdrnn report` reads: the files of runs under the folders given, and what to say of runs it leaves out."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from vdrnn.config import paper_problem
from vdrnn.errors import RecordError, VdrnnError
from vdrnn.tasks import dataset_name


def numbers_as_numbers(path: str | Path) -> list[str | float]:
    """A sort key that reads the numbers in a path as numbers, decimals too, so that runs go seed 2, seed 10 rather
    than seed 10, seed 2, and p 0.25, 0.5 rather than 0.5, 0.25 (re.split with a group keeps text at the even places
    and numbers at the odd ones, so keys compare)."""
    return [float(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+(?:\.\d+)?)", str(path)))]


def files_named(name: str, folders: list[Path]) -> list[Path]:
    """Every file called ``name`` under ``folders``, in path order with numbers read as numbers (numbers_as_numbers),
    each once where the folders overlap (``runs runs/b``)."""
    found: dict[Path, Path] = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob(name), key=numbers_as_numbers):
            found.setdefault(path.resolve(), path)  # the path as given: the tables name runs by their folder
    return list(found.values())


# A run's metrics.json says how it ended (vdrnn.training.tracking): finished, failed (with the reason), or not yet:
# running, or stopped by a signal to go on later. Runs from before vdrnn recorded it wrote metrics.json only once
# finished.
FINISHED, FAILED, UNFINISHED = "finished", "failed", ("running", "stopped")


def status_of(metrics: dict[str, Any]) -> str:
    return metrics.get("status", FINISHED)


def find_runs(folders: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """(path of metrics.json, its content) of every run under ``folders`` that ended: finished or failed (the
    tables count failed runs in their rows rather than leave them out)."""
    found = [(path, read_metrics(path)) for path in files_named("metrics.json", folders)]
    return [(path, metrics) for path, metrics in found if status_of(metrics) not in UNFINISHED]


def read_metrics(path: Path) -> dict[str, Any]:
    """A run's metrics.json (or an evaluation's eval.json); one that is not a record vdrnn writes stops the report,
    naming it (vdrnn writes them atomically, so that is damage from outside, and which run to look at is what the
    reader needs). Only a plain file is read: a FIFO of that name would wait for a writer forever."""
    fix = "restore it, or move its run out of the folders reported"
    if not path.is_file():
        raise RecordError(f"{path} is not a file (a folder, a FIFO or a device where vdrnn writes a run's record): "
                          f"move it out of the folders reported")
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise RecordError(f"{path} is not UTF-8 text (byte {err.start}); {fix}") from None
    except json.JSONDecodeError as err:
        raise RecordError(f"{path} is not valid JSON ({err}); {fix}") from None
    except OSError as err:
        raise RecordError(f"{path} cannot be read ({err.strerror or err}); make it readable, or move its run out of "
                          f"the folders reported") from None
    problem = record_problem(metrics)
    if problem:
        raise RecordError(f"{path} is no record vdrnn wrote: {problem}; {fix}")
    return metrics


STATUSES = ("finished", "failed", "running", "stopped")
# Entries the tables read, by what they must be (a number may also be null: not measured).
NUMBER_ENTRIES = ("epochs", "steps", "start_epoch", "epoch", "wps", "train_seconds", "eval_seconds", "mc_seconds",
                  "mc_samples", "cpu_threads", "temperature", "temperature_mc", "ood_in_count", "ood_out_count")
NUMBER_PREFIXES = ("valid_", "test_", "best_valid_", "ood_auroc_", "ood_aupr_")
FLAG_ENTRIES = ("smoke", "time_limited")
TEXT_ENTRIES = ("reason", "checkpoint", "device", "ood")
# Curves as lists of numbers under their names: the reliability diagrams' bins and the retention curves.
CURVES = ("test_reliability", "test_reliability_mc", "test_retention_curves", "test_retention_curves_mc")
CONFIG_SECTIONS = ("data", "model", "cell", "dropout", "trainer", "eval")
# Config entries the tables read, with what they must be.
CONFIG_NUMBERS = ("model.hidden_size", "eval.samples", "eval.dropout_scale", *(f"dropout.{site}" for site in
                                                           ("embedding", "input", "hidden", "recurrent", "cell",
                                                            "candidate", "zoneout_cell", "zoneout_hidden", "output",
                                                            "weight")))
CONFIG_TEXTS = ("data.name", "data.task", "dropout.scheme", "cell.type", "cell.gates", "eval.mode", "eval.average")


def is_number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def record_problem(metrics: Any) -> str | None:
    """What makes ``metrics`` no run record (metrics.json) or evaluation (eval.json) of vdrnn's, or None."""
    if not isinstance(metrics, dict):
        return f"it holds {json.dumps(metrics)[:40]}, not a JSON object"
    if metrics.get("status", FINISHED) not in STATUSES:
        return f"its status is {metrics.get('status')!r}, not one of {', '.join(STATUSES)}"
    for key, value in metrics.items():
        if key in CURVES:
            wrong = not (isinstance(value, dict) and all(isinstance(v, list) and all(map(is_number, v))
                                                         for v in value.values()))
        elif key.endswith("_ci"):
            wrong = not (isinstance(value, list) and all(map(is_number, value)))
        elif key in NUMBER_ENTRIES or key.startswith(NUMBER_PREFIXES):
            wrong = not is_number(value)
        elif key in FLAG_ENTRIES:
            wrong = not isinstance(value, bool)
        elif key in TEXT_ENTRIES:
            wrong = not isinstance(value, str)
        elif key == "noise":
            wrong = not (isinstance(value, dict) and all(map(is_number, value.values())))
        else:
            continue
        if wrong:
            return f"its {key!r} entry is {json.dumps(value)[:40]}"
    return config_problem(metrics.get("config", {})) or paper_problem(metrics.get("paper"))


def config_problem(config: Any) -> str | None:
    """What makes ``config`` no run config the tables can read, or None."""
    if not isinstance(config, dict) or not all(isinstance(config.get(name, {}), dict) for name in CONFIG_SECTIONS):
        return "its config is not a run's config (a mapping of data, model, dropout, ... settings)"
    for keys, check, what in ((CONFIG_NUMBERS, is_number, "a number"),
                              (CONFIG_TEXTS, lambda v: v is None or isinstance(v, str), "a string")):
        for key in keys:
            section, _, leaf = key.partition(".")
            if not check(config.get(section, {}).get(leaf)):
                return f"its config's {key} is not {what}"
    if not is_number(config.get("seed")) or isinstance(config.get("seed"), float):
        return "its config's seed is not an integer"
    temperature = config["eval"].get("temperature") if isinstance(config.get("eval"), dict) else None
    if not (is_number(temperature) or temperature == "fit"):
        return "its config's eval.temperature is neither a number nor fit"
    return paper_problem(config.get("paper"))


def unfinished_runs(folders: list[Path]) -> list[Path]:
    """The run folders under ``folders`` whose metrics.json says they are running or stopped (to go on later), or
    with epochs (metrics.jsonl) but no metrics.json: runs the tables leave out."""
    said = [path.parent for path in files_named("metrics.json", folders)
            if status_of(read_metrics(path)) in UNFINISHED]
    silent = [path.parent for path in files_named("metrics.jsonl", folders)
              if not (path.parent / "metrics.json").exists()]
    return sorted(said + silent, key=numbers_as_numbers)


def failed_runs(found: list[tuple[Path, dict[str, Any]]]) -> list[tuple[Path, str]]:
    """(folder, reason) of each failed run among ``found``."""
    return [(path.parent, metrics.get("reason", "no reason recorded")) for path, metrics in found
            if status_of(metrics) == FAILED]


def runs_without_epochs(folders: list[Path]) -> list[Path]:
    """The run folders under ``folders`` (a vdrnn.log) with no finished epoch and no evaluation (eval.json): runs
    refused at the start, or stopped in their first epoch; a sweep's failed job is one. Its vdrnn.log says why."""
    return [path.parent for path in files_named("vdrnn.log", folders)
            if not any((path.parent / name).exists() for name in ("metrics.jsonl", "metrics.json", "eval.json"))]


RESUME_HINT = "to finish one, run its `vdrnn train` command again with hydra.run.dir=<run> (it resumes from last.pt)"


def warn_of_failed(found: list[tuple[Path, dict[str, Any]]]) -> None:
    """Failed runs are counted in their rows (``seeds`` says ``2 + 1 failed``); the reasons are for the terminal."""
    failed = failed_runs(found)
    if failed:
        print(f"warning: {len(failed)} failed run{'s' if len(failed) > 1 else ''}, counted in the tables' seeds column "
              f"and left out of their numbers:", file=sys.stderr)
        for folder, reason in failed:
            print(f"  {folder}: {reason}", file=sys.stderr)


def check_found(folders: list[Path], found: bool) -> None:
    """Stop where ``folders`` hold no finished run (``found`` is false), saying why: only unfinished runs, or none.
    Where there are finished runs, warn of the unfinished ones left out."""
    unfinished = ", ".join(map(str, unfinished_runs(folders)))
    where = ", ".join(map(str, folders))
    if not found and unfinished:
        raise VdrnnError(f"no finished run under {where}, only unfinished ones (running, or stopped to go on later): "
                         f"{unfinished}; {RESUME_HINT}")
    empty = ", ".join(map(str, runs_without_epochs(folders)))
    if not found:
        raise VdrnnError(f"no metrics.json or eval.json under {where}; point at run, sweep or evaluation dirs"
                         + (f" (runs that finished no epoch: {empty}; each one's vdrnn.log says why)" if empty else ""))
    if unfinished:
        print(f"warning: leaving out unfinished runs (running, or stopped to go on later): {unfinished}; "
              f"{RESUME_HINT}", file=sys.stderr)
    if empty:
        print(f"warning: leaving out runs that finished no epoch (refused, or stopped in their first): {empty}; "
              f"each one's vdrnn.log says why", file=sys.stderr)


def by_dataset(found: list[tuple[Path, dict[str, Any]]]) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """``found`` (path, metrics) grouped by dataset, datasets in name order."""
    groups: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path, metrics in found:
        groups.setdefault(dataset_name(metrics.get("config") or {}), []).append((path, metrics))
    return dict(sorted(groups.items()))
