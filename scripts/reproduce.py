#!/usr/bin/env python3
"""Run the Table 1 presets of one model size, several jobs side by side on one GPU, then report.

    python scripts/reproduce.py --size medium --seeds 1 2 --parallel 6 --root runs/ptb-medium
    python scripts/reproduce.py --size large --rows variational variational_untied --deadline-min 9

Each job runs `vdrnn train experiment=<size>_<row> seed=<s>` in its own folder <root>/<row>/seed<s>.
A finished job (metrics.json present) is skipped and an unfinished one resumes from its last.pt, so the
script can be called again and again until every job is done: that is how a run longer than one
session (or one 10-minute command) completes. `--deadline-min` stops the jobs still running after that
many minutes (their last completed epoch is safe in last.pt) and still writes the report of what is done.

Why processes side by side: at batch 20 one job leaves the GPU mostly idle.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROWS = ["none", "moon", "moon_emb", "zaremba", "variational", "variational_untied"]


def vdrnn_command() -> list[str]:
    exe = shutil.which("vdrnn")
    return [exe] if exe else [sys.executable, "-m", "vdrnn.cli"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["medium", "large"], required=True)
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=ROWS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--parallel", type=int, default=6, help="jobs running at once")
    parser.add_argument("--root", type=Path, default=None, help="default: runs/ptb-<size>")
    parser.add_argument("--report", type=Path, default=None, help="default: results/ptb/<size>")
    parser.add_argument("--deadline-min", type=float, default=None, help="stop unfinished jobs after this long")
    parser.add_argument("overrides", nargs="*", help="extra overrides for every job, e.g. trainer.amp=bf16")
    args = parser.parse_args()
    root = args.root or Path("runs") / f"ptb-{args.size}"
    report = args.report or Path("results") / "ptb" / args.size

    pending = [(row, seed) for row in args.rows for seed in args.seeds
               if not (root / row / f"seed{seed}" / "metrics.json").exists()]
    print(f"{len(pending)} job(s) to run in {root}", flush=True)
    deadline = time.monotonic() + 60 * args.deadline_min if args.deadline_min else None
    running: list[tuple[subprocess.Popen, str]] = []
    while pending or running:
        while pending and len(running) < args.parallel:
            row, seed = pending.pop(0)
            folder = root / row / f"seed{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            command = [*vdrnn_command(), "train", f"experiment={args.size}_{row}", f"seed={seed}",
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
