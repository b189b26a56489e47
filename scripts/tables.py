#!/usr/bin/env python3
"""Rewrite every committed results table from the committed runs, or check that they still match them.

    python scripts/tables.py            # vdrnn report's tables and plots of each results/**/runs folder, into
                                        # its parent folder
    python scripts/tables.py --check    # the same into a temporary folder; fails naming each table (.md, .csv)
                                        # that differs from the committed one (plots are not compared)

A results folder's tables come from its own runs/ and, for the folders in EXTRA_RUNS, from runs kept elsewhere
that they are compared with; the folders in POOLED pool seeds across a setting (`vdrnn report --pool`). The check
is what keeps a table from being edited by hand or left behind by a change to `vdrnn report`.
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
    # Keras' initialisation beside the uniform-init runs of the same settings from earlier sessions.
    "imdb/init": [f"imdb/runs/imdb_{cell}_var_p0.5_len400{seed}" for cell in ("lstm", "gru") for seed in ("", "_seed2")]
    + [f"imdb/search/runs/imdb_lstm_var_h{units}_len400" for units in (256, 512, 1024)]
    + ["imdb/search/runs/imdb_lstm_var_h512_len400_seed2"],
    # The checkpoint selected by MC beside the same seeds' runs selected by weight scaling.
    "imdb/select_mc": ["imdb/tokenizer/runs"],
    # Seeds 6-13 of the LSTM preset selected by MC, with its seeds 1-5 (42 epochs; see POOLED): the 13 seeds of the
    # test written down before the runs (select_mc_seeds/run.sh.txt).
    "imdb/select_mc_seeds": [f"imdb/select_mc_long/runs/imdb_lstm_var_tuned_42ep_selmc_seed{seed}"
                             for seed in range(1, 6)],
    # Gal's protocol (all training reviews, the last epoch) beside the same settings with best.pt by validation:
    # the preset's word-type p 0.5 and the word-type runs' 0.45, seeds 1-3 each.
    "imdb/gals_protocol": [f"imdb/tokenizer/runs/imdb_lstm_var_tuned_seed{seed}" for seed in range(1, 4)]
    + [f"imdb/word_types/runs/imdb_lstm_var_tuned_words0.45_seed{seed}" for seed in range(1, 4)],
}

# Results folder -> settings its report pools: runs that differ only there are seeds of one row.
POOLED: dict[str, tuple[str, ...]] = {
    # Seeds 1-5 ran 42 epochs, 6-13 the preset's 30. Training is the same epoch for epoch up to 30 (nothing in it
    # depends on the number of epochs), and every 42-epoch run kept an epoch <= 30: as a 30-epoch run would.
    "imdb/select_mc_seeds": ("trainer.epochs",),
}


def reports(results: Path) -> dict[Path, tuple[list[Path], tuple[str, ...]]]:
    """Each results folder that has runs, with the run folders its report reads and the settings it pools."""
    folders = {}
    for runs in sorted(results.glob("**/runs")):
        name = runs.parent.relative_to(results).as_posix()
        folders[runs.parent] = [runs] + [results / folder for folder in EXTRA_RUNS.get(name, [])], POOLED.get(name, ())
    missing = [str(folder) for sources, _ in folders.values() for folder in sources if not folder.is_dir()]
    if missing:
        sys.exit(f"EXTRA_RUNS names run folders that do not exist: {', '.join(missing)}")
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed tables, write nothing")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results folder (default: the repo's)")
    args = parser.parse_args()
    if not args.check:
        for folder, (sources, pooled) in reports(args.results).items():
            write_report(sources, folder, pooled)
            print(f"wrote {folder}")
        return
    differ = []
    with tempfile.TemporaryDirectory() as scratch:
        for folder, (sources, pooled) in reports(args.results).items():
            fresh = Path(scratch) / folder.relative_to(args.results)
            write_report(sources, fresh, pooled)
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
