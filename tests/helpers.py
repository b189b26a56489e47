"""What the tests share besides fixtures: the real data, the CLI as a user runs it, configs, a run's records."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def real_data(name: str, marker: str) -> Path:
    """The folder ``name`` (ptb, imdb, scale_data) of $VDRNN_DATA_DIR if it holds ``name/marker``; the calling test
    is skipped, saying so, when it does not."""
    root = os.environ.get("VDRNN_DATA_DIR")
    if root and (Path(root) / name / marker).exists():
        return Path(root) / name
    pytest.skip(f"real {name} data not found: set VDRNN_DATA_DIR to a folder holding {name}/{marker}")


def run_cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """Run the installed `vdrnn` console script in a subprocess, as a user would."""
    exe = shutil.which("vdrnn")
    command = [exe] if exe else [sys.executable, "-m", "vdrnn.cli"]
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    result = subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"vdrnn {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def run_in_process(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """`vdrnn <args>` as run_cli runs it, in this process (without the seconds a new one takes to import torch):
    the same exit status, stdout and stderr, from ``cwd``."""
    import contextlib
    import io

    from vdrnn import cli

    out, err, status = io.StringIO(), io.StringIO(), 0
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main(list(args))
            except SystemExit as exit_:  # a message for its code is what Python prints at exit
                status = exit_.code if isinstance(exit_.code, int) else 1
                if isinstance(exit_.code, str):
                    print(exit_.code, file=err)
    finally:
        os.chdir(before)
    result = subprocess.CompletedProcess(["vdrnn", *args], status, out.getvalue(), err.getvalue())
    if check and status != 0:
        raise AssertionError(f"vdrnn {' '.join(args)} failed ({status}):\n{result.stdout}\n{result.stderr}")
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
    runtime = OmegaConf.create({"runtime": {"output_dir": str(run_dir), "cwd": os.getcwd()}, "mode": RunMode.RUN,
                                "overrides": {"task": list(overrides)}})
    monkeypatch.setattr(cli, "HydraConfig", SimpleNamespace(get=lambda: runtime))
    return cli


def composed(*overrides: str, with_hydra: bool = False):
    """The config `vdrnn train <overrides>` composes (a DictConfig), through Hydra's compose API: no subprocess;
    ``with_hydra``: with its ``hydra`` node too (the launcher and sweeper settings)."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="vdrnn.conf", version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=with_hydra)


def history(run: Path) -> list[dict]:
    """A run's metrics.jsonl, one record per epoch, read strictly (every line must be whole JSON)."""
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def events_of(run: Path):
    """A run folder's TensorBoard events, loaded with every scalar point kept."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    return events


def session_ends(run: Path) -> list[str]:
    """The end statuses of the TensorBoard hparams record that a run folder's events hold, in order
    (``STATUS_SUCCESS``, ``STATUS_FAILURE``): one once the run has ended, none while it runs or is stopped."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    ends = []
    for path in sorted(run.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == metadata.SESSION_END_INFO_TAG:
                    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                    ends.append(api_pb2.Status.Name(data.session_end_info.status))
    return ends


# Overrides that make a run take seconds on the CPU: a small model on the tiny corpus.
TINY = [
    "model=small", "model.hidden_size=16", "model.impl=reference", "data.batch_size=4", "data.bptt=6",
    "data.eval_batch_size=4", "data.test_batch_size=1", "data.allow_custom_corpus=true",
    "trainer.progress=false", "trainer.log_every=5", "trainer.epochs=2",
]


def train(raw: dict, run_dir: Path, accepted=lambda: None) -> dict:
    """`vdrnn train` of a composed config (plain containers) in this process: its task's setup, train and test."""
    from vdrnn.tasks import task_of
    from vdrnn.training.run import train

    return train(task_of(raw), raw, run_dir, accepted)


def trainer_for(raw: dict, run_dir: Path):
    """The task's trainer of a composed config, set up (data loaded, model built, a checkpoint restored)."""
    from vdrnn.tasks import task_of

    task = task_of(raw)
    trainer = task.trainer()(task, task.parse(raw), run_dir, raw)
    trainer.setup()
    return trainer


def fit(trainer) -> dict:
    """A set-up trainer's run: train, test, close."""
    try:
        return trainer.train()
    finally:
        trainer.cleanup()


def report_rows(tmp_path: Path, table: str) -> list[dict[str, str]]:
    """`vdrnn report` of the runs in tmp_path/runs into tmp_path/out, and the rows of its ``table`` (a .csv)."""
    from vdrnn import report  # imported when called: most tests that import these helpers never report

    report.write_report([tmp_path / "runs"], tmp_path / "out")
    with open(tmp_path / "out" / table) as f:
        return list(csv.DictReader(f))
