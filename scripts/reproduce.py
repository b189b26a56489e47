#!/usr/bin/env python3
"""Run experiment presets, several jobs side by side on one GPU, then report.

    python scripts/reproduce.py --size medium --seeds 1 2 --parallel 6       # Table 1, medium rows
    python scripts/reproduce.py --size large --rows variational variational_untied --deadline-min 9
    python scripts/reproduce.py --experiments imdb_lstm_variational imdb_gru_variational --root runs/imdb

Each job runs `vdrnn train experiment=<preset> seed=<s>` in its own folder <root>/<preset>/seed<s>
(for --size, <preset> is <size>_<row>).
A finished job (metrics.json present) is skipped and an unfinished one resumes from its last.pt, so the
script can be called again and again until every job is done: that is how a run longer than one
session (or one 10-minute command) completes. `--deadline-min` stops the jobs still running after that
many minutes (their last completed epoch is safe in last.pt) and still writes the report of what is done.

Why processes side by side: at batch 20 one job leaves the GPU mostly idle.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROWS = ["none", "moon", "moon_emb", "zaremba", "variational", "variational_untied"]


def vdrnn_command() -> list[str]:
    # This interpreter's vdrnn, whatever `vdrnn` on PATH belongs to.
    return [sys.executable, "-m", "vdrnn.cli"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--size", choices=["medium", "large"], help="Table 1's rows for this model size")
    which.add_argument("--experiments", nargs="+", help="any presets of conf/experiment/")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=ROWS, help="with --size: which rows")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--parallel", type=int, default=6, help="jobs running at once")
    parser.add_argument("--root", type=Path, default=None, help="default: runs/ptb-<size> (runs/presets)")
    parser.add_argument("--report", type=Path, default=None, help="default: results/ptb/<size> (<root>/report)")
    parser.add_argument("--deadline-min", type=float, default=None, help="stop unfinished jobs after this long")
    parser.add_argument("overrides", nargs="*", help="extra overrides for every job, e.g. trainer.amp=bf16")
    args = parser.parse_args()
    if args.size:
        presets = [f"{args.size}_{row}" for row in args.rows]
        root = args.root or Path("runs") / f"ptb-{args.size}"
        report = args.report or Path("results") / "ptb" / args.size
    else:
        presets = args.experiments
        root = args.root or Path("runs") / "presets"
        report = args.report or root / "report"

    pending = [(preset, seed) for preset in presets for seed in args.seeds
               if not (root / preset / f"seed{seed}" / "metrics.json").exists()]
    print(f"{len(pending)} job(s) to run in {root}", flush=True)
    deadline = time.monotonic() + 60 * args.deadline_min if args.deadline_min else None
    running: list[tuple[subprocess.Popen, str]] = []
    while pending or running:
        while pending and len(running) < args.parallel:
            preset, seed = pending.pop(0)
            folder = root / preset / f"seed{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            command = [*vdrnn_command(), "train", f"experiment={preset}", f"seed={seed}",
                       f"hydra.run.dir={folder}", "trainer.progress=false", *args.overrides]
            log = open(folder / "stdout.log", "a")
            running.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), str(folder)))
            print(f"started {folder}", flush=True)
        time.sleep(5)
        for job in list(running):
            process, folder = job
            if process.poll() is not None:
                running.remove(job)
                print(f"{'finished' if process.returncode == 0 else f'FAILED ({process.returncode})'} {folder}",
                      flush=True)
        if deadline and time.monotonic() > deadline:
            for process, folder in running:
                process.terminate()
                print(f"stopped at the deadline: {folder} (resumes from last.pt next time)", flush=True)
            for process, _ in running:
                process.wait()
            break
    if any(root.rglob("metrics.json")):
        subprocess.run([*vdrnn_command(), "report", str(root), "--out", str(report)], check=True)


if __name__ == "__main__":
    main()
