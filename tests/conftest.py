"""Shared fixtures: the real data (../shared/data, as CI has it) and a tiny synthetic corpus."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """Under pytest-xdist (`make test` runs one worker per core), one thread per worker, and per training run it starts:
    torch's default of a thread per core in every worker oversubscribes the cores, and its OpenMP threads then spin
    against each other (on 2 cores, a tiny training run took 5 times as long as it does alone)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"  # the subprocesses' torch reads it at start
        torch.set_num_threads(1)


def real_data(name: str, marker: str) -> Path:
    """The folder ``name`` (ptb, imdb, scale_data) of the first data dir, $VDRNN_DATA_DIR or ../shared/data (as
    CI has it), that holds ``name/marker``; the calling test is skipped when there is none."""
    for candidate in (os.environ.get("VDRNN_DATA_DIR"), str(REPO.parent / "shared" / "data")):
        if candidate and (Path(candidate) / name / marker).exists():
            return Path(candidate) / name
    pytest.skip(f"real {name} data not found (set VDRNN_DATA_DIR or put it in ../shared/data/{name})")


@pytest.fixture(scope="session")
def ptb_dir() -> Path:
    return real_data("ptb", "ptb.train.txt")


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """A 40-word-type corpus in PTB's file layout: epochs take a fraction of a second."""
    folder = tmp_path_factory.mktemp("tiny_ptb")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]

    def lines(n):
        # Some structure to learn: each line counts up from a random start.
        out = []
        for _ in range(n):
            start, length = rng.randrange(40), rng.randrange(3, 12)
            out.append(" " + " ".join(words[(start + k) % 40] for k in range(length)) + " ")
        return "\n".join(out) + "\n"

    (folder / "ptb.train.txt").write_text(lines(400))
    (folder / "ptb.valid.txt").write_text(lines(40))
    (folder / "ptb.test.txt").write_text(lines(40))
    return folder


def run_cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """Run the installed `vdrnn` console script in a subprocess, as a user would."""
    exe = shutil.which("vdrnn")
    command = [exe] if exe else [sys.executable, "-m", "vdrnn.cli"]
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    result = subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"vdrnn {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def cli_in_process(monkeypatch, run_dir: Path, overrides):
    """The cli module with Hydra's runtime as a single `vdrnn` run in ``run_dir`` with ``overrides`` would see it: its
    commands then run in this process, outside a Hydra run (seconds, not a subprocess's start; and what a command
    returns is seen, as a sweeper sees it)."""
    from types import SimpleNamespace

    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from vdrnn import cli

    run_dir.mkdir(parents=True, exist_ok=True)
    # A DictConfig, as Hydra's is: the commands write it into the run's record (.hydra/hydra.yaml).
    runtime = OmegaConf.create({"runtime": {"output_dir": str(run_dir)}, "mode": RunMode.RUN,
                                "overrides": {"task": list(overrides)}})
    monkeypatch.setattr(cli, "HydraConfig", SimpleNamespace(get=lambda: runtime))
    return cli


def composed(*overrides: str):
    """The config `vdrnn train <overrides>` composes (a DictConfig), through Hydra's compose API: no subprocess."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="vdrnn.conf", version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def history(run: Path) -> list[dict]:
    """A run's metrics.jsonl, one record per epoch, read strictly (every line must be whole JSON)."""
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def events_of(run: Path):
    """A run folder's TensorBoard events, loaded with every scalar point kept."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    return events


# Overrides that make a run take seconds on the CPU: a small model on the tiny corpus.
TINY = [
    "model=small", "model.hidden_size=16", "model.impl=reference", "data.batch_size=4", "data.bptt=6",
    "data.eval_batch_size=4", "data.test_batch_size=1", "data.allow_custom_corpus=true",
    "trainer.progress=false", "trainer.log_every=5", "trainer.epochs=2",
]


@pytest.fixture(params=["default", "split"])
def block_plan(request, monkeypatch):
    """Default block shapes, and narrow K slices with the reduction split over two programs, the second's chunk
    running past H (exercises the split-K partial sums, the masked tail of k and the last-arriver cell at these small
    sizes). The GRU kernels read the same knobs from vdrnn.fused."""
    import vdrnn.fused as fused

    if request.param == "split":
        monkeypatch.setattr(fused, "BLOCK_K", 16)
        monkeypatch.setattr(fused, "FORCE_SPLIT", (2, 2))
    return request.param
