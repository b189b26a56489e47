#!/usr/bin/env python3
"""Rewrite every committed results table from the committed runs, or check that they still match them.

    python scripts/tables.py            # vdrnn report's tables and plots of each results/**/runs folder, into
                                        # its parent folder
    python scripts/tables.py --check    # the same into a temporary folder; fails naming each table (.md, .csv)
                                        # that differs from the committed one (plots are not compared)

A results folder's tables come from its own runs/ and, for the folders in EXTRA_RUNS, from runs kept elsewhere
that they are compared with. The check is what keeps a table from being edited by hand or left behind by a change
to `vdrnn report`.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

from vdrnn.report import write_report

RESULTS = Path(__file__).resolve().parent.parent / "results"

# Results folder -> run folders, besides its own runs/, that its report reads (relative to results/).
EXTRA_RUNS: dict[str, list[str]] = {
    # Gal's protocol (all training reviews, the last epoch) beside the same setting with best.pt by validation:
    # the tuned preset's word-type p 0.5, seeds 1-3 (its own runs/ holds the p 0.45 ones).
    "imdb/gals_protocol": [f"imdb/tuned/runs/imdb_lstm_var_tuned_seed{seed}" for seed in range(1, 4)],
}

def reports(results: Path) -> dict[Path, list[Path]]:
    """Each results folder that has runs, with the run folders its report reads."""
    folders = {}
    for runs in sorted(results.glob("**/runs")):
        name = runs.parent.relative_to(results).as_posix()
        folders[runs.parent] = [runs] + [results / folder for folder in EXTRA_RUNS.get(name, [])]
    missing = [str(folder) for sources in folders.values() for folder in sources if not folder.is_dir()]
    if missing:
        sys.exit(f"EXTRA_RUNS names run folders that do not exist: {', '.join(missing)}")
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed tables, write nothing")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results folder (default: the repo's)")
    args = parser.parse_args()
    if not args.check:
        for folder, sources in reports(args.results).items():
            write_report(sources, folder)
            print(f"wrote {folder}")
        return
    differ = []
    with tempfile.TemporaryDirectory() as scratch:
        for folder, sources in reports(args.results).items():
            fresh = Path(scratch) / folder.relative_to(args.results)
            write_report(sources, fresh)
            for table in sorted([*fresh.glob("*.md"), *fresh.glob("*.csv")]):
                committed = folder / table.name
                if not committed.is_file() or not filecmp.cmp(table, committed, shallow=False):
                    differ.append(str(committed))
    if differ:
        sys.exit("these tables differ from what vdrnn report writes from their runs (python scripts/tables.py "
                 "rewrites them):\n  " + "\n  ".join(differ))
    print("every results table matches its runs")


if __name__ == "__main__":
    main()
