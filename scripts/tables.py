#!/usr/bin/env python3
"""Rewrite every committed results table from the committed runs, or check that they still match them.

    python scripts/tables.py            # vdrnn report's published tables and plots of each results/**/runs
                                        # folder (PUBLISHED), into its parent folder
    python scripts/tables.py --check    # the same into a temporary folder; fails naming each table (.md, .csv)
                                        # that differs from the committed one (plots are not compared), and each
                                        # file beside them that backs no published table or figure

A results folder's tables come from its own runs/ and, for the folders in EXTRA_RUNS, from runs kept elsewhere
that they are compared with. The check is what keeps a table from being edited by hand or left behind by a change
to `vdrnn report`.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
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

# Results folder -> the tables (each as .md and .csv) and figures it publishes, as results/README.md lists them; what
# else `vdrnn report` writes from its runs (a calibration folder's Table 1 rows and curves) is not kept.
PTB_TABLE = ("ptb_table.md", "ptb_table.csv", "ptb_valid_ppl.png")
PTB_CALIBRATION = ("ptb_calibration.md", "ptb_calibration.csv", "ptb_reliability.png")
IMDB = ("imdb_table.md", "imdb_table.csv", "imdb_test_curves.png")
IMDB_CALIBRATION = (*IMDB, "imdb_calibration.md", "imdb_calibration.csv", "imdb_reliability.png")
PUBLISHED: dict[str, tuple[str, ...]] = {
    "ptb/medium": (*PTB_TABLE, *PTB_CALIBRATION),
    "ptb/large": PTB_TABLE,
    "ptb/gaussian": PTB_TABLE,
    "ptb/calibration": (*PTB_CALIBRATION, "ptb_evaluations.md", "ptb_evaluations.csv", "ptb_mc_samples.png"),
    "awd": (*PTB_TABLE, *PTB_CALIBRATION),
    "imdb": IMDB,
    "imdb/tuned": IMDB_CALIBRATION,
    "imdb/gals_protocol": IMDB_CALIBRATION,
    "scale": ("scale_table.md", "scale_table.csv", "scale_test_curves.png"),
    "wt2": ("wikitext2_table.md", "wikitext2_table.csv", "wikitext2_valid_ppl.png", "wikitext2_calibration.md",
            "wikitext2_calibration.csv", "wikitext2_reliability.png"),
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
    differ, unpublished = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for folder, sources in reports(args.results).items():
            fresh = Path(scratch) / folder.relative_to(args.results)
            write_report(sources, fresh)
            published = published_in(folder, args.results)
            if not args.check:
                for name in published:
                    shutil.copyfile(fresh / name, folder / name)
                print(f"wrote {folder}")
                continue
            for table in sorted(name for name in published if name.endswith((".md", ".csv"))):
                if not (folder / table).is_file() or not filecmp.cmp(fresh / table, folder / table, shallow=False):
                    differ.append(str(folder / table))
            unpublished += [str(path) for path in sorted(folder.iterdir())
                            if path.is_file() and path.name not in (*published, "RUNS.md")]
    if differ or unpublished:
        sys.exit("".join([
            "these tables differ from what vdrnn report writes from their runs (python scripts/tables.py rewrites "
            "them):\n  " + "\n  ".join(differ) + "\n" if differ else "",
            "these files back no published table or figure (PUBLISHED in scripts/tables.py): remove them\n  "
            + "\n  ".join(unpublished) + "\n" if unpublished else ""]).rstrip())
    print("every results table matches its runs")


def published_in(folder: Path, results: Path) -> tuple[str, ...]:
    """The tables and figures ``folder`` publishes; every file the report writes for a folder PUBLISHED lacks."""
    name = folder.relative_to(results).as_posix()
    if name not in PUBLISHED:
        sys.exit(f"{folder} has runs but no entry in PUBLISHED (scripts/tables.py): list the tables and figures it "
                 f"publishes")
    return PUBLISHED[name]


if __name__ == "__main__":
    main()
