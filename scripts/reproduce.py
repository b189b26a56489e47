#!/usr/bin/env python3
"""Run experiment presets, spread over the GPUs of one machine, then report.

    python scripts/reproduce.py --size medium --seeds 1 2                    # Table 1, medium rows
    python scripts/reproduce.py --corpus wt2 --size medium --seeds 1 2       # the WikiText-2 table's medium rows
    python scripts/reproduce.py --size large --seeds 1 2 --gpus 0 1 2 3      # large rows on 4 GPUs
    python scripts/reproduce.py --size large --rows variational variational_untied --deadline-min 9
    python scripts/reproduce.py --experiments imdb_lstm_variational imdb_gru_variational --root runs/imdb
    python scripts/reproduce.py --size medium --seeds 1 2 -- trainer.amp=bf16   # overrides for every job after --

Each job runs `vdrnn train experiment=<preset> seed=<s>` in its own folder <root>/<preset>/seed<s>
(for --size, <preset> is <size>_<row> on Penn Treebank, wt2_<size>_<row> on WikiText-2: the rows that have a preset).
A job whose run ended (its metrics.json says finished or failed) is skipped and any other resumes from its last.pt,
so the script can be called again and again until every job is done: that is how a run longer than a machine's time
allocation completes. Each call must ask for the same overrides as the calls before
it: a job folder whose saved run had other settings in its .hydra/overrides.yaml is refused (use a new --root
for other overrides; data.root, device and logging may change).
`--deadline-min` stops the jobs still running after that many minutes (their last completed epoch is safe
in last.pt), starts no job after it, and still writes the report of what is done.

Each job sees one GPU (CUDA_VISIBLE_DEVICES) from --gpus, the least busy one, with at most --parallel
jobs on each. Why only two by default: a second job fills the gaps one job leaves (validation,
checkpoints, Python between CUDA graphs), but beyond that processes on one GPU only take turns, so more
jobs per GPU would only make each finish later.
The jobs share the CPU as well: each gets OMP_NUM_THREADS = its share of the cores (unless you set it), since
torch otherwise gives every process a thread per core and jobs side by side then oversubscribe the machine.

The report goes to <root>/report unless --report says otherwise. Exit status: 0 when every job is done,
1 when a job or the report failed, 3 (EXIT_UNFINISHED) when the deadline left jobs stopped or not started:
call again until it exits 0.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from importlib.resources import files
from pathlib import Path

import yaml

from vdrnn.report.found import UNFINISHED, find_runs, read_metrics, status_of

ROWS = ["none", "moon", "moon_emb", "zaremba", "variational", "variational_untied"]
CORPORA = {"ptb": "", "wt2": "wt2_"}  # --corpus -> its presets' prefix
EXIT_UNFINISHED = 3  # the deadline left jobs to run: not a failure, a "call until done" loop calls again


def ended(folder: Path) -> bool:
    """Has the job's run ended, finished or failed? A run that is running, or stopped to go on later, keeps a
    metrics.json too (saying so): that job resumes from its last.pt."""
    path = folder / "metrics.json"
    return path.exists() and status_of(read_metrics(path)) not in UNFINISHED


def table_presets(corpus: str, size: str, rows: list[str] | None) -> list[str]:
    """The presets of a table's rows at ``size``: those of ``rows`` (default: every row with a preset on ``corpus``),
    or a ValueError naming a row the corpus has no preset for."""
    presets = [f"{CORPORA[corpus]}{size}_{row}" for row in rows or ROWS]
    known = {path.name.removesuffix(".yaml") for path in files("vdrnn.conf").joinpath("experiment").iterdir()}
    missing = [preset for preset in presets if preset not in known]
    if rows and missing:
        raise ValueError(f"{', '.join(missing)}: no such preset in conf/experiment/")
    return [preset for preset in presets if preset in known]


def vdrnn_command() -> list[str]:
    # This interpreter's vdrnn, whatever `vdrnn` on PATH belongs to.
    return [sys.executable, "-m", "vdrnn.cli"]


def job_overrides(preset: str, seed: int, overrides: list[str]) -> list[str]:
    """A job's overrides as Hydra records them in <folder>/.hydra/overrides.yaml (hydra.run.dir, which the job
    also gets, is a Hydra override and recorded elsewhere)."""
    return [f"experiment={preset}", f"seed={seed}", "trainer.progress=false", *overrides]


# Overrides that do not make another experiment: where the data is, the device, logging, Hydra's own, and the time
# budget, which a resume may change (as `vdrnn report` groups runs: its NOT_SETTINGS, there as config keys).
NOT_EXPERIMENT_OVERRIDES = ("data.root=", "device=", "trainer.progress=", "trainer.log_every=", "trainer.max_minutes=",
                            "hydra.")


def earlier_overrides(folder: Path, overrides: list[str]) -> list[str] | None:
    """The overrides an earlier call trained the job in ``folder`` with, if they make another experiment than
    ``overrides``; None if they do not, or if that job saved nothing (its overrides are recorded once a start is
    accepted, so a job that then stopped in its first epoch, say out of memory, must not block its rerun)."""
    recorded = folder / ".hydra" / "overrides.yaml"
    if not recorded.exists() or not ((folder / "last.pt").exists() or (folder / "metrics.json").exists()):
        return None
    earlier = yaml.safe_load(recorded.read_text()) or []

    def settings(items: list[str]) -> list[str]:
        # Sorted: the same overrides in another order compose the same config.
        return sorted(o for o in items if not o.startswith(NOT_EXPERIMENT_OVERRIDES))

    return earlier if settings(earlier) != settings(overrides) else None


def visible_devices(gpus: list[int]) -> list[str]:
    """The CUDA_VISIBLE_DEVICES value of a job on each GPU of ``gpus``, indices among the GPUs this process sees
    (positions in its own CUDA_VISIBLE_DEVICES when that is set, as the job's value replaces it).

    An index no GPU has is a ValueError: the job would see no GPU, and device=auto would train it on the CPU,
    for hours, without a word.
    """
    import torch  # here, not at the top: only --gpus needs it, and it takes seconds to import

    count = torch.cuda.device_count()
    missing = [str(gpu) for gpu in gpus if not 0 <= gpu < count]
    if missing:
        raise ValueError(f"no GPU {', '.join(missing)}: this process sees {count} GPU(s)"
                         + (f", indices 0 to {count - 1}" if count else ""))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return [visible.split(",")[gpu].strip() if visible else str(gpu) for gpu in gpus]


def job_environment(device: str | None, jobs_at_once: int) -> dict[str, str]:
    """A job's environment: this process's, with the job's GPU (``device``: its CUDA_VISIBLE_DEVICES value; None
    keeps this process's) and its share of the CPU cores among ``jobs_at_once`` jobs as OMP_NUM_THREADS, unless that
    is set already (then it is the user's choice and every job keeps it).

    Why the share: torch sizes each process's thread pool to the whole machine, so jobs side by side run cores x
    jobs threads on the cores, and each then trains several times slower than with its share.
    """
    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": device} if device is not None else {})}
    if "OMP_NUM_THREADS" not in env:
        # The cores this process may run on (a container's or a Slurm job's share); macOS has no affinity call.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        env["OMP_NUM_THREADS"] = str(max(1, cores // jobs_at_once))
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Overrides for every job go after `--` (or before the options), since "
                                            "--seeds, --gpus, --rows and --experiments take every value after them. "
                                            f"Exit status {EXIT_UNFINISHED}: the deadline left jobs unfinished, call "
                                            "again; 1: a job or the report failed.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--size", choices=["medium", "large"], help="a table's rows for this model size")
    which.add_argument("--experiments", nargs="+", help="any presets of conf/experiment/")
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="ptb",
                        help="with --size: Table 1 on Penn Treebank, or the WikiText-2 table")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=None, help="with --size: which rows (default: all)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--parallel", type=int, default=2, help="jobs running at once on each GPU")
    parser.add_argument("--gpus", nargs="+", type=int, default=None,
                        help="indices of the GPUs (as this process sees them) to spread the jobs over "
                             "(default: leave CUDA_VISIBLE_DEVICES as it is)")
    parser.add_argument("--root", type=Path, default=None, help="default: runs/<corpus>-<size> (runs/presets)")
    parser.add_argument("--report", type=Path, default=None, help="default: <root>/report")
    parser.add_argument("--deadline-min", type=float, default=None,
                        help="stop unfinished jobs, and start no more, after this many minutes "
                             f"(exit status {EXIT_UNFINISHED} if any are left)")
    parser.add_argument("overrides", nargs="*", help="extra overrides for every job, e.g. trainer.amp=bf16")
    args = parser.parse_args()
    if args.parallel < 1:
        parser.error(f"--parallel {args.parallel}: at least one job per GPU")
    if args.deadline_min is not None and args.deadline_min < 0:
        parser.error(f"--deadline-min {args.deadline_min}: at least 0 minutes")
    not_overrides = [o for o in args.overrides if "=" not in o]
    if not_overrides:
        parser.error(f"{' '.join(not_overrides)}: overrides are key=value (e.g. trainer.amp=bf16)")
    if args.gpus and len(set(args.gpus)) < len(args.gpus):
        parser.error(f"--gpus {' '.join(map(str, args.gpus))}: each GPU once (--parallel sets the jobs per GPU)")
    # A repeat would run one job twice at once, two processes writing the same folder's checkpoints.
    for flag, values in (("--seeds", args.seeds), ("--rows", args.rows or []), ("--experiments", args.experiments or [])):
        if len(set(values)) < len(values):
            parser.error(f"{flag} {' '.join(map(str, values))}: name each once")
    if args.experiments and args.rows:
        parser.error("--rows picks Table 1's rows of --size; with --experiments, name the presets there instead")
    try:
        # None: the jobs inherit this process's CUDA_VISIBLE_DEVICES
        devices = dict(zip(args.gpus, visible_devices(args.gpus), strict=True)) if args.gpus else {None: None}
    except ValueError as err:
        parser.error(f"--gpus: {err}")
    if args.size:
        try:
            presets = table_presets(args.corpus, args.size, args.rows)
        except ValueError as err:
            parser.error(f"--rows: {err}")
        root = args.root or Path("runs") / f"{args.corpus}-{args.size}"
    else:
        presets = args.experiments
        root = args.root or Path("runs") / "presets"
    # Not results/: a report of new runs must not overwrite the committed tables of the runs kept there.
    report = args.report or root / "report"

    jobs = [(preset, seed, root / preset / f"seed{seed}") for preset in presets for seed in args.seeds]
    # A job folder of other overrides would be resumed, or skipped and reported, as if it were this experiment.
    for preset, seed, folder in jobs:
        wanted = job_overrides(preset, seed, args.overrides)
        earlier = earlier_overrides(folder, wanted)
        if earlier is not None:
            sys.exit(f"{folder} was run with the overrides {' '.join(earlier) or '(none)'}, not {' '.join(wanted)}: "
                     "pass a new --root for other overrides")
    pending = [(preset, seed, folder) for preset, seed, folder in jobs if not ended(folder)]
    print(f"{len(pending)} job(s) to run in {root}", flush=True)
    deadline = time.monotonic() + 60 * args.deadline_min if args.deadline_min is not None else None
    gpus = list(devices)
    jobs_at_once = max(1, min(len(pending), args.parallel * len(gpus)))
    running: list[tuple[subprocess.Popen, str, int | None]] = []
    failed = []
    stopped = []

    def least_busy() -> int | None:
        return min(gpus, key=lambda gpu: sum(job[2] == gpu for job in running))

    while pending or running:
        # Jobs that ended first (a failure must be reported as one, not as stopped at the deadline), then the
        # deadline, before starting jobs: one started past it would only be stopped seconds later.
        for job in list(running):
            process, folder, _ = job
            if process.poll() is not None:
                running.remove(job)
                if process.returncode != 0:
                    failed.append(folder)
                print(f"{'finished' if process.returncode == 0 else f'FAILED ({process.returncode})'} {folder}",
                      flush=True)
        if deadline is not None and time.monotonic() >= deadline:
            for process, folder, _ in running:
                process.terminate()
                print(f"stopped at the deadline: {folder} (resumes from last.pt next time)", flush=True)
            for process, _, _ in running:
                process.wait()
            stopped = [folder for _, folder, _ in running]
            break
        while pending and len(running) < args.parallel * len(gpus):
            preset, seed, folder = pending.pop(0)
            folder.mkdir(parents=True, exist_ok=True)
            command = [*vdrnn_command(), "train", *job_overrides(preset, seed, args.overrides),
                       f"hydra.run.dir={folder}"]
            gpu = least_busy()
            log = open(folder / "stdout.log", "a")
            running.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                             env=job_environment(devices[gpu], jobs_at_once)), str(folder), gpu))
            print(f"started {folder}" + (f" on GPU {gpu}" if gpu is not None else ""), flush=True)
        time.sleep(5)
    if pending:
        print(f"{len(pending)} job(s) not started before the deadline: "
              f"{', '.join(str(folder) for _, _, folder in pending)}", flush=True)
    report_status = 0
    if find_runs([root]):  # the report tabulates ended runs; stopped ones alone would make it fail
        # Not check=True: a failed report must not hide the summary of failed jobs below.
        report_status = subprocess.run([*vdrnn_command(), "report", str(root), "--out", str(report)]).returncode
    problems = []
    if failed:
        problems.append(f"{len(failed)} job(s) failed, see their stdout.log: {', '.join(failed)}")
    if report_status != 0:
        problems.append(f"the report failed (vdrnn report exited {report_status}), see its output above")
    if problems:
        sys.exit("\n".join(problems))
    if pending or stopped:
        sys.exit(EXIT_UNFINISHED)


if __name__ == "__main__":
    main()
