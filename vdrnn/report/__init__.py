"""`vdrnn report DIR...`: Table 1 from finished runs, beside the paper's numbers, plus validation curves.

Runs are found by their ``metrics.json`` anywhere under the given folders (a run dir, a sweep dir, or
several; a run under two of them counts once); unfinished runs (running, or stopped to go on later) are left out
with a warning that names them, and failed ones (diverged) are counted in their row's seeds column, ``2 + 1 failed``,
beside the numbers of the others, their reasons listed on the terminal. Runs that differ only by seed form one row, reported as mean ± std over
seeds (``--pool KEY`` puts runs that differ in KEY too in one row, and names its values there). A row is named
after its experiment preset's Table 1 row (``paper.row``) or, for ad-hoc runs, after its dropout scheme.
The last column lists what its runs' command lines changed beyond their preset (say ``trainer.clip=5``, or
``trainer.clip=5 (seed 1)`` where only some seeds did), so a row that departs from the paper's settings says so
beside the paper's numbers; the epochs column shows a seed that a time cap stopped early.

Each task has tables of its own (:data:`TASK_TABLES`): language models a Table 1 per corpus. Sentiment runs
(``dataset=imdb|scale``) get a table per dataset, one row per cell x scheme (with its units): test
accuracy, NLL, ECE and entropy (IMDB) or RMSE (scale) of the kept checkpoint (best.pt: the best-validation
epoch's, or under ``trainer.select=last`` the last epoch's), with weight scaling and MC dropout; and the test error
per epoch, one line per scheme and a panel per cell, as Gal & Ghahramani's sentiment figures (those curves follow
every epoch's weights; the table's numbers are the kept checkpoint's). IMDB runs evaluated with MC dropout also get a calibration table,
a line per run (both ECEs, the floor a calibrated predictor would score, the MC - weight scaling
difference with its 95% interval) and, for a row of several seeds, a line of their means (the difference with a
95% interval over the seeds), and reliability diagrams, a panel per row.

IMDB runs also get the selective-prediction table and retention curves (:mod:`~vdrnn.report.uncertainty`).

Evaluations (``vdrnn eval``'s ``eval.json`` under the folders) get a table per dataset, a line each: the model
scored, named as above, the checkpoint and epoch, the mode (weight scaling, or MC, its passes and how they were
averaged) and the numbers; those of ``vdrnn eval ood=`` also a table of their out-of-domain detection.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vdrnn.config import key_among
from vdrnn.errors import ConfigError, VdrnnError
from vdrnn.files import make_folder
from vdrnn.report import lm, sentiment
from vdrnn.report.evaluations import find_evaluations
from vdrnn.report.found import check_found, find_runs, warn_of_failed
from vdrnn.report.rows import NOT_SETTINGS, Row, run_settings
from vdrnn.tasks import TASKS, Task, task_of

# Each task's tables, by its name (data.task): ``collect`` its runs into rows, ``write`` their tables and
# plots, and ``write_evaluations`` the table of its `vdrnn eval`s.
TASK_TABLES = {"lm": lm, "sentiment": sentiment}

# What names a row (its scheme, dropout column, cell, paper row and size: ptb_identity, sentiment_identity), so that
# runs apart in it are never one row, pooled or not.
NAMING_SETTINGS = ("dropout", "cell", "paper", "model.hidden_size")


def check_poolable(pooled: tuple[str, ...]) -> None:
    """Refuse a ``--pool`` key that would pool nothing without a word: one that names rows, or one that never
    splits them (the seed)."""
    for name in pooled:
        if key_among(name, NAMING_SETTINGS) or any(key_among(key, (name,)) for key in NAMING_SETTINGS):
            raise ConfigError(f"--pool {name}: the scheme, dropout probabilities, cell and size name a row "
                              f"({', '.join(NAMING_SETTINGS)}), so runs apart there are never one row; pool another "
                              f"setting, e.g. --pool trainer.epochs")
        if key_among(name, NOT_SETTINGS):
            raise ConfigError(f"--pool {name}: runs that differ only there are one row already "
                              f"({', '.join(NOT_SETTINGS)} never set runs apart)")


def check_pooled_keys_exist(folders: list[Path], rows: list[Row], pooled: tuple[str, ...]) -> None:
    """Refuse a ``--pool`` key that no run of ``rows`` has (a typo), which would pool nothing without a word."""
    known = {key for row in rows for run in row.runs for key in run_settings(run.get("config") or {})}
    unknown = [name for name in pooled if not any(key_among(key, (name,)) for key in known)]
    if unknown:
        raise ConfigError(f"--pool {', '.join(unknown)}: no run under {', '.join(map(str, folders))} has that "
                          f"setting; pool a dotted config key that differs between runs, e.g. --pool trainer.epochs")


def of_task(found: list[tuple[Path, dict[str, Any]]], task: Task) -> list[tuple[Path, dict[str, Any]]]:
    return [(path, metrics) for path, metrics in found if task_of(metrics.get("config") or {}) is task]


def write_report(folders: list[Path], out: Path, pooled: tuple[str, ...] = ()) -> tuple[str, list[Path]]:
    """Write the tables and plots of every run under ``folders`` into ``out``: (the tables as text, files written).
    Runs that differ only in ``pooled`` settings are seeds of one row."""
    check_poolable(pooled)
    runs, evaluations = find_runs(folders), find_evaluations(folders)  # read once, each task takes its own
    collected = {task: TASK_TABLES[task.name].collect(of_task(runs, task), pooled) for task in TASKS.values()}
    check_found(folders, bool(runs or evaluations))
    warn_of_failed(runs)
    check_pooled_keys_exist(folders, [row for groups in collected.values() for rows in groups.values()
                                      for row in rows], pooled)
    make_folder(out)
    texts, written = [], []
    for task, rows in collected.items():
        task_texts, task_files = TASK_TABLES[task.name].write(rows, out)
        texts += task_texts
        written += task_files
    for task in TASKS.values():
        task_texts, task_files = TASK_TABLES[task.name].write_evaluations(of_task(evaluations, task), out)
        texts += task_texts
        written += task_files
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
    try:
        text, written = write_report(args.folders, out, tuple(args.pool))
    except VdrnnError as err:  # a damaged record, no run to report, a bad --pool, an --out it cannot write
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(err.exit_status) from None
    print(text, end="")
    print(f"\nwrote {', '.join(map(str, written))}")
