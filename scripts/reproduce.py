#!/usr/bin/env python3
"""Run experiment presets, spread over the GPUs of one machine, then report.

    python scripts/reproduce.py --size medium --seeds 1 2                    # Table 1, medium rows
    python scripts/reproduce.py --size large --seeds 1 2 --gpus 0 1 2 3      # large rows on 4 GPUs
    python scripts/reproduce.py --size large --rows variational variational_untied --deadline-min 9
    python scripts/reproduce.py --experiments imdb_lstm_variational imdb_gru_variational --root runs/imdb
    python scripts/reproduce.py --size medium --seeds 1 2 -- trainer.amp=bf16   # overrides for every job after --

Each job runs `vdrnn train experiment=<preset> seed=<s>` in its own folder <root>/<preset>/seed<s>
(for --size, <preset> is <size>_<row>).
A finished job (metrics.json present) is skipped and an unfinished one resumes from its last.pt, so the
script can be called again and again until every job is done: that is how a run longer than one
session (or one 10-minute command) completes. `--deadline-min` stops the jobs still running after that
many minutes (their last completed epoch is safe in last.pt) and still writes the report of what is done.

Each job sees one GPU (CUDA_VISIBLE_DEVICES) from --gpus, the least busy one, with at most --parallel
jobs on each. Why only two by default: a second job fills the gaps one job leaves (validation,
checkpoints, Python between CUDA graphs), but beyond that processes on one GPU only take turns. Two
large runs side by side on one H200 trained at the same total speed as one after the other (README,
"Scale out"), so more jobs per GPU would only make each finish later.

The report goes to <root>/report unless --report says otherwise; the script exits non-zero if a job failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROWS = ["none", "moon", "moon_emb", "zaremba", "variational", "variational_untied"]


def vdrnn_command() -> list[str]:
    # This interpreter's vdrnn, whatever `vdrnn` on PATH belongs to.
    return [sys.executable, "-m", "vdrnn.cli"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Overrides for every job go after `--` (or before the options), since "
                                            "--seeds, --gpus, --rows and --experiments take every value after them.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--size", choices=["medium", "large"], help="Table 1's rows for this model size")
    which.add_argument("--experiments", nargs="+", help="any presets of conf/experiment/")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=ROWS, help="with --size: which rows")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--parallel", type=int, default=2, help="jobs running at once on each GPU")
    parser.add_argument("--gpus", nargs="+", type=int, default=None,
                        help="GPU indices to spread the jobs over (default: leave CUDA_VISIBLE_DEVICES as it is)")
    parser.add_argument("--root", type=Path, default=None, help="default: runs/ptb-<size> (runs/presets)")
    parser.add_argument("--report", type=Path, default=None, help="default: <root>/report")
    parser.add_argument("--deadline-min", type=float, default=None, help="stop unfinished jobs after this long")
    parser.add_argument("overrides", nargs="*", help="extra overrides for every job, e.g. trainer.amp=bf16")
    args = parser.parse_args()
    if args.parallel < 1:
        parser.error(f"--parallel {args.parallel}: at least one job per GPU")
    not_overrides = [o for o in args.overrides if "=" not in o]
    if not_overrides:
        parser.error(f"{' '.join(not_overrides)}: overrides are key=value (e.g. trainer.amp=bf16)")
    if args.size:
        presets = [f"{args.size}_{row}" for row in args.rows]
        root = args.root or Path("runs") / f"ptb-{args.size}"
    else:
        presets = args.experiments
        root = args.root or Path("runs") / "presets"
    # Not results/: a report of new runs must not overwrite the committed tables of the runs kept there.
    report = args.report or root / "report"

    pending = [(preset, seed) for preset in presets for seed in args.seeds
               if not (root / preset / f"seed{seed}" / "metrics.json").exists()]
    print(f"{len(pending)} job(s) to run in {root}", flush=True)
    deadline = time.monotonic() + 60 * args.deadline_min if args.deadline_min else None
    gpus = args.gpus or [None]  # None: the jobs inherit this process's CUDA_VISIBLE_DEVICES
    running: list[tuple[subprocess.Popen, str, int | None]] = []
    failed = []

    def least_busy() -> int | None:
        return min(gpus, key=lambda gpu: sum(job[2] == gpu for job in running))

    while pending or running:
        while pending and len(running) < args.parallel * len(gpus):
            preset, seed = pending.pop(0)
            folder = root / preset / f"seed{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            command = [*vdrnn_command(), "train", f"experiment={preset}", f"seed={seed}",
                       f"hydra.run.dir={folder}", "trainer.progress=false", *args.overrides]
            gpu = least_busy()
            env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else {})}
            log = open(folder / "stdout.log", "a")
            running.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), str(folder), gpu))
            print(f"started {folder}" + (f" on GPU {gpu}" if gpu is not None else ""), flush=True)
        time.sleep(5)
        for job in list(running):
            process, folder, _ = job
            if process.poll() is not None:
                running.remove(job)
                if process.returncode != 0:
                    failed.append(folder)
                print(f"{'finished' if process.returncode == 0 else f'FAILED ({process.returncode})'} {folder}",
                      flush=True)
        if deadline and time.monotonic() > deadline:
            for process, folder, _ in running:
                process.terminate()
                print(f"stopped at the deadline: {folder} (resumes from last.pt next time)", flush=True)
            for process, _, _ in running:
                process.wait()
            break
    if any(root.rglob("metrics.json")):
        subprocess.run([*vdrnn_command(), "report", str(root), "--out", str(report)], check=True)
    if failed:
        sys.exit(f"{len(failed)} job(s) failed, see their stdout.log: {', '.join(failed)}")


if __name__ == "__main__":
    main()
