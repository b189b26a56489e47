"""Stopping on a signal: the step in progress finishes, last.pt keeps the epoch so far, and the same command goes on
to exactly the numbers of an uninterrupted run; a launcher's own handler (submitit's requeue) gets the signal after
the checkpoint; a run folder is one run's at a time."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import TINY, composed, history, run_cli, session_ends, train
from vdrnn.config import to_container
from vdrnn.errors import FolderInUse, RunStopped
from vdrnn.training.lock import RunLock
from vdrnn.training.stopping import StopSignals

# What differs between two runs of one experiment: how long they took.
TIMINGS = {"wps", "train_seconds", "eval_seconds", "epoch_seconds", "mc_seconds", "cpu_threads"}


def same_numbers(a: dict, b: dict) -> None:
    assert {k: v for k, v in a.items() if k not in TIMINGS} == {k: v for k, v in b.items() if k not in TIMINGS}


@pytest.fixture(scope="module")
def long_corpus(tmp_path_factory) -> Path:
    """A corpus whose epoch takes seconds at TINY's sizes, so that a signal lands inside one."""
    folder = tmp_path_factory.mktemp("long_ptb")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    for split, n in (("train", 1400), ("valid", 40), ("test", 40)):
        lines = [" " + " ".join(words[(s + k) % 40] for k in range(rng.randrange(3, 12))) + " "
                 for s in (rng.randrange(40) for _ in range(n))]
        (folder / f"ptb.{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


def started_training(log: Path, timeout: float = 120) -> None:
    """Wait until the run in ``log``'s folder has begun its steps (its model line, logged just before them)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if log.exists() and "model: " in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"the run never started training: {log.read_text() if log.exists() else 'no log'}")


@pytest.mark.slow
def test_sigterm_mid_epoch_saves_the_step_and_the_rerun_ends_as_an_uninterrupted_run(tmp_path, long_corpus):
    common = [*TINY, "trainer.log_every=7", f"data.root={long_corpus}"]
    command = [sys.executable, "-m", "vdrnn.cli", "train", *common, "hydra.run.dir=stopped"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started_training(tmp_path / "stopped" / "vdrnn.log")
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, out + err
    log = (tmp_path / "stopped" / "vdrnn.log").read_text()
    assert "stopped by SIGTERM at step" in log and "(epoch 1, batch" in log  # mid-epoch, and in the log
    assert "to continue, run the same command with hydra.run.dir=" in out + err and "Traceback" not in out + err
    stopped = json.loads((tmp_path / "stopped" / "metrics.json").read_text())
    assert stopped["status"] == "stopped" and stopped["reason"].startswith("stopped by SIGTERM at step")
    assert session_ends(tmp_path / "stopped") == []  # not ended: it goes on

    resumed = run_cli("train", *common, "hydra.run.dir=stopped", cwd=tmp_path)
    assert "in epoch 1 after batch" in resumed.stdout + resumed.stderr
    run_cli("train", *common, "hydra.run.dir=straight", cwd=tmp_path)
    for a, b in zip(history(tmp_path / "stopped"), history(tmp_path / "straight"), strict=True):
        same_numbers(a, b)
    final = [json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("stopped", "straight")]
    assert final[0]["status"] == "finished"
    same_numbers({**final[0], "config": None}, {**final[1], "config": None})
    assert session_ends(tmp_path / "stopped") == ["STATUS_SUCCESS"]


def stop_at_step(monkeypatch, step: int, signum: int = signal.SIGUSR1) -> None:
    """Send this process ``signum`` as the trainer finishes optimizer step ``step`` (of the whole run)."""
    from vdrnn.training.optim import Optimization

    after_step, count = Optimization.after_step, {"steps": 0}

    def counting(self):
        after_step(self)
        count["steps"] += 1
        if count["steps"] == step:
            os.kill(os.getpid(), signum)

    monkeypatch.setattr(Optimization, "after_step", counting)


@pytest.mark.parametrize("overrides", [
    ["dataset=ptb", *TINY, "dropout=awd", "data.variable_bptt=true", "trainer.optimizer=ntasgd", "trainer.ar=1",
     "trainer.nonmono=1", "trainer.loss=mean", "trainer.lr=5"],
    ["dataset=ptb", *TINY, "dropout=variational", "trainer.ema=0.9", "trainer.log_every=4"],
    ["dataset=imdb", "model.hidden_size=8", "data.batch_size=4", "trainer.epochs=2", "trainer.progress=false",
     "trainer.log_every=3", "dropout=variational", "eval=mc", "eval.samples=2"],
], ids=["awd-variable-bptt", "ema", "sentiment"])
def test_a_run_paused_mid_epoch_resumes_to_the_numbers_of_an_uninterrupted_one(tmp_path, tiny_corpus, fake_imdb,
                                                                              monkeypatch, overrides):
    """The epoch's position in the data (a language model's row and carried state, AWD's random lengths, a sentiment
    epoch's shuffle), the loss sums and the random state all come back: every number agrees to the last bit."""
    root = fake_imdb if "dataset=imdb" in overrides else tiny_corpus
    raw = to_container(composed(*overrides, f"data.root={root}"))
    straight = train(raw, tmp_path / "straight")
    with monkeypatch.context() as patch:
        stop_at_step(patch, 7)
        with pytest.raises(RunStopped, match=r"stopped by SIGUSR1 at step 7 \(epoch 1, batch 7 of"):
            train(raw, tmp_path / "paused")
    resumed = train(raw, tmp_path / "paused")
    same_numbers({**resumed, "config": None}, {**straight, "config": None})
    for a, b in zip(history(tmp_path / "paused"), history(tmp_path / "straight"), strict=True):
        same_numbers(a, b)


def test_a_closed_terminal_stops_the_run_as_sigterm_does_and_the_rerun_goes_on(tmp_path, tiny_corpus, monkeypatch):
    """SIGHUP: the step is saved, the status is 129, metrics.json says stopped, and the same command finishes."""
    raw = to_container(composed(*TINY, f"data.root={tiny_corpus}"))
    with monkeypatch.context() as patch:
        stop_at_step(patch, 5, signal.SIGHUP)
        with pytest.raises(RunStopped, match=r"stopped by SIGHUP at step 5 \(epoch 1, batch 5 of") as stopped:
            train(raw, tmp_path / "run")
    assert stopped.value.exit_status == 129
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "stopped"
    assert train(raw, tmp_path / "run")["status"] == "finished"


def test_a_launchers_own_handler_gets_the_signal_after_the_checkpoint_and_the_run_goes_on(tmp_path, tiny_corpus,
                                                                                           monkeypatch, caplog):
    """Under submitit, SIGTERM's handler only logs it (the requeue comes with SIGUSR2): the run saves its step, calls
    that handler and trains on, to the numbers of an uninterrupted run."""
    caplog.set_level(logging.INFO, logger="vdrnn")
    raw = to_container(composed(*TINY, f"data.root={tiny_corpus}"))
    straight = train(raw, tmp_path / "straight")
    called = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: called.append(signum))
    try:
        stop_at_step(monkeypatch, 5, signal.SIGTERM)
        handed = train(raw, tmp_path / "handed")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert called == [signal.SIGTERM]
    assert "saved the run at step 5 (epoch 1, batch 5 of" in caplog.text
    assert "SIGTERM came at step 5" in caplog.text and "handing the signal on" in caplog.text
    same_numbers({**handed, "config": None}, {**straight, "config": None})


def test_a_signal_waits_for_a_checkpoint_write_and_a_second_ctrl_c_stops_the_steps_at_once():
    stops = StopSignals()
    with stops:
        with stops.during_steps():
            with stops.held():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)  # both wait: a write is never cut short
            assert stops.received == signal.SIGINT
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
        # Outside the steps nothing is lost by stopping: at once.
        with pytest.raises(RunStopped, match="stopped by SIGTERM outside the training steps"):
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers before it, back


def test_a_second_start_in_a_live_runs_folder_is_refused_naming_its_process(tmp_path, tiny_corpus):
    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from vdrnn.training.lock import RunLock; "
                               f"lock = RunLock({str(folder)!r}); lock.acquire(); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = run_cli("train", *TINY, f"data.root={tiny_corpus}", f"hydra.run.dir={folder}", cwd=tmp_path,
                         check=False)
        assert result.returncode == 2
        assert f"error: {folder} is in use by another run (pid {holder.pid}, still running)" in result.stderr
        assert not (folder / ".hydra").exists() and not (folder / "metrics.json").exists()
    finally:
        holder.kill()
        holder.wait()
    # The lock died with its process: the folder is free, and a writer's leftovers there go.
    (folder / ".last.pt.123-abcd.tmp").write_bytes(b"half")
    with RunLock(folder):
        assert not list(folder.glob(".*.tmp"))
        with pytest.raises(FolderInUse, match=f"pid {os.getpid()}"):
            RunLock(folder).acquire()


@pytest.mark.slow
def test_a_full_disk_ends_the_run_in_one_line_with_status_4_and_the_folder_says_failed(tmp_path, tiny_corpus):
    """A file-size limit (ulimit -f) makes the first checkpoint's write fail as a full disk would."""
    limit = 30_000  # below a TINY checkpoint (~36 kB), above the log, metrics and (log_every=1000) events files
    script = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
              f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
              "from vdrnn.cli import main; main(sys.argv[1:])")
    result = subprocess.run([sys.executable, "-c", script, "train", *TINY, "trainer.log_every=1000",
                             f"data.root={tiny_corpus}", "hydra.run.dir=run"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 4, result.stderr
    best = tmp_path / "run" / "best.pt"
    assert f"error: cannot write {best}: File too large. The file is larger than this process may write" \
           in result.stderr
    assert "Traceback" not in result.stderr
    assert "cannot write" in (tmp_path / "run" / "vdrnn.log").read_text()
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["reason"].startswith(f"cannot write {best}")
    assert not list((tmp_path / "run").glob(".*.tmp")) and not best.exists()


@pytest.mark.slow
def test_a_submitit_job_at_its_time_limit_is_requeued_and_goes_on_from_its_step(tmp_path, long_corpus):
    """hydra/launcher=local: submitit sends SIGUSR2 30 s before the job's one-minute limit; the run saves its step,
    submitit's handler requeues the job, and the job started again goes on from that step."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="the slurm extra (pip install -e '.[slurm]') is not installed")
    # Training time, not epochs, ends the run (trainer.max_minutes counts it over attempts), so that on any machine
    # the first attempt is still training at the signal and the second finishes well within its own 30 s.
    common = [*TINY, "trainer.epochs=1000", "trainer.max_minutes=0.6", "trainer.log_every=7",
              f"data.root={long_corpus}"]
    result = run_cli("train", "-m", "hydra/launcher=local", "hydra.launcher.timeout_min=1", *common,
                     "hydra.sweep.dir=sweep", cwd=tmp_path)
    (job,) = [p for p in (tmp_path / "sweep").iterdir() if p.is_dir() and not p.name.startswith(".")]
    log = (job / "vdrnn.log").read_text()
    # The signal lands in a step (most of an epoch's time) or in the validation and checkpoints after one; the job
    # started again goes on from that point either way.
    signalled = re.search(r"SIGUSR2 came (?:at step (\d+) \(epoch (\d+), batch (\d+)|after epoch (\d+))"
                          r".*handing the signal on", log)
    resumed = re.search(r"resumed from \S+ (in epoch (\d+) after batch (\d+)|after epoch (\d+)) \(step (\d+)\)", log)
    assert signalled and resumed, log
    if signalled[1]:
        assert resumed.group(2, 3, 5) == signalled.group(2, 3, 1), log
    else:
        assert resumed[4] == signalled[4], log
    # The numbers of a requeued run are an uninterrupted one's: the SIGTERM test above shows it for a restart.
    assert json.loads((job / "metrics.json").read_text())["status"] == "finished", result.stderr
