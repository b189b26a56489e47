"""scripts/reproduce.py on real (tiny) runs: every row's job, spread over GPUs, then the report; a second call
skips what is finished. And what it refuses or reports: other overrides on the same --root, GPUs that do not
exist, the deadline, failed jobs and a failed report; and the GPU and CPU threads each job gets."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO, TINY

SCRIPT = REPO / "scripts" / "reproduce.py"


def reproduce(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture
def script(monkeypatch):
    """reproduce.py imported, so that a test can fake what torch says about GPUs; CUDA_VISIBLE_DEVICES unset."""
    spec = importlib.util.spec_from_file_location("reproduce", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return module


def run_main(script, monkeypatch, *args: str) -> int | str | None:
    """script.main() on ``args``: the exit code (None when it returns)."""
    monkeypatch.setattr(sys, "argv", ["reproduce.py", *args])
    try:
        script.main()
    except SystemExit as exit:
        return exit.code
    return None


def finished_job(folder: Path, overrides: list[str]) -> None:
    """A job folder as a finished run leaves it, as far as reproduce.py looks: its overrides and metrics.json."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (folder / "metrics.json").write_text("{}\n")


@pytest.mark.slow
def test_reproduce_spreads_the_rows_over_gpus_reports_them_and_skips_finished_jobs(
        tmp_path, tiny_corpus, script, monkeypatch, capsys):
    # Two GPUs as far as --gpus checks; the jobs, shown CUDA_VISIBLE_DEVICES=0 and 1 on this CPU-only machine,
    # fall back to the CPU.
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.chdir(tmp_path)
    tiny = [a for a in TINY if not a.startswith("model=")]
    args = ["--size", "medium", "--rows", "zaremba", "variational", "--seeds", "1", "--gpus", "0", "1",
            "--parallel", "1", "--root", "runs", "--report", "report", *tiny, f"data.root={tiny_corpus}",
            "eval.samples=2"]
    assert run_main(script, monkeypatch, *args) is None
    out = capsys.readouterr().out
    # One job per GPU: each starts on the least busy one.
    assert "started runs/medium_zaremba/seed1 on GPU 0" in out
    assert "started runs/medium_variational/seed1 on GPU 1" in out
    assert "FAILED" not in out
    with open(tmp_path / "report" / "ptb_table.csv") as f:
        rows = [(r["row"], r["seeds"]) for r in csv.DictReader(f)]
    assert rows == [("Zaremba et al. 2014", "1"), ("Variational (tied weights)", "1")]
    # The two jobs ran at once, so each trained with its half of the cores, not a pool the size of the machine.
    for row in "zaremba", "variational":
        metrics = json.loads((tmp_path / "runs" / f"medium_{row}" / "seed1" / "metrics.json").read_text())
        assert metrics["cpu_threads"] == max(1, len(os.sched_getaffinity(0)) // 2)
    # The same overrides again (Hydra's record of them matches): nothing to do.
    assert run_main(script, monkeypatch, *args) is None
    assert "0 job(s) to run" in capsys.readouterr().out


def test_each_job_gets_its_gpu_and_its_share_of_the_cores_unless_the_user_set_the_threads(script, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = script.job_environment("3", jobs_at_once=16)
    assert (env["CUDA_VISIBLE_DEVICES"], env["OMP_NUM_THREADS"]) == ("3", "4")
    assert "CUDA_VISIBLE_DEVICES" not in script.job_environment(None, jobs_at_once=1)
    assert script.job_environment(None, jobs_at_once=100)["OMP_NUM_THREADS"] == "1"  # at least one each
    monkeypatch.setenv("OMP_NUM_THREADS", "12")
    assert script.job_environment("0", jobs_at_once=16)["OMP_NUM_THREADS"] == "12"


@pytest.mark.slow
def test_a_failed_job_and_a_failed_report_make_the_script_fail_and_are_both_named(tmp_path):
    finished_job(tmp_path / "runs" / "medium_zaremba" / "seed1",
                 ["experiment=medium_zaremba", "seed=1", "trainer.progress=false"])
    (tmp_path / "a_file").touch()  # the report's folder cannot be made under a file: the report fails
    result = reproduce("--experiments", "medium_zaremba", "no_such_preset", "--root", "runs",
                       "--report", "a_file/report", cwd=tmp_path)
    assert result.returncode == 1 and "FAILED" in result.stdout, result.stdout + result.stderr
    # The report's failure did not end the script before the summary of the failed job.
    assert "1 job(s) failed" in result.stderr and "the report failed" in result.stderr, result.stderr


def test_a_root_run_with_other_overrides_is_refused_with_its_folder_named(tmp_path):
    finished_job(tmp_path / "runs" / "medium_zaremba" / "seed1",
                 ["experiment=medium_zaremba", "seed=1", "trainer.progress=false"])
    result = reproduce("--size", "medium", "--rows", "zaremba", "--root", "runs", "--", "trainer.amp=bf16",
                       cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "runs/medium_zaremba/seed1 was run with the overrides" in result.stderr
    assert "trainer.amp=bf16" in result.stderr and "new --root" in result.stderr
    assert "job(s) to run" not in result.stdout  # refused before anything is skipped, started or reported


def test_a_job_that_saved_nothing_or_differs_only_in_where_or_how_long_it_ran_is_not_refused(tmp_path):
    # Hydra records the overrides before the job starts: a job that failed at once (a mistyped value) saved nothing,
    # and its corrected rerun must go ahead.
    failed = tmp_path / "runs" / "medium_zaremba" / "seed1"
    finished_job(failed, ["experiment=medium_zaremba", "seed=1", "trainer.progress=false", "trainer.amp=bf61"])
    (failed / "metrics.json").unlink()
    # Where the data is, the device and the time budget (which a resume may raise) make no other experiment.
    finished_job(tmp_path / "runs" / "medium_none" / "seed1",
                 ["experiment=medium_none", "seed=1", "trainer.progress=false", "trainer.amp=off", "data.root=/old",
                  "device=cuda:1", "trainer.max_minutes=10"])
    result = reproduce("--experiments", "medium_zaremba", "medium_none", "--root", "runs", "--deadline-min", "0",
                       "--", "trainer.amp=off", "data.root=/new", "trainer.max_minutes=20", cwd=tmp_path)
    assert "was run with the overrides" not in result.stderr, result.stderr
    assert "1 job(s) to run" in result.stdout and "1 job(s) not started" in result.stdout


def test_a_gpu_given_twice_is_refused(tmp_path, script, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.chdir(tmp_path)
    assert run_main(script, monkeypatch, "--size", "medium", "--gpus", "0", "0", "--root", "runs") == 2
    assert "each GPU once" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--size", "medium", "--seeds", "1", "1"], "--seeds 1 1: name each once"),
    (["--size", "medium", "--rows", "zaremba", "zaremba"], "--rows zaremba zaremba: name each once"),
    (["--experiments", "medium_zaremba", "medium_zaremba"], "--experiments medium_zaremba medium_zaremba: name each"),
    (["--experiments", "medium_zaremba", "--rows", "none"], "with --experiments, name the presets there instead"),
])
def test_a_job_named_twice_or_rows_without_a_size_are_refused(tmp_path, script, monkeypatch, capsys, args, message):
    # Named twice, one job would run twice at once, two processes writing one folder's checkpoints.
    monkeypatch.chdir(tmp_path)
    assert run_main(script, monkeypatch, *args, "--root", "runs") == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_no_job_starts_past_the_deadline_and_the_script_says_work_is_left(tmp_path):
    result = reproduce("--experiments", "medium_zaremba", "medium_variational", "--root", "runs",
                       "--deadline-min", "0", cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "2 job(s) not started before the deadline" in result.stdout
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_job_stopped_at_the_deadline_is_work_left_not_a_failure(tmp_path, tiny_corpus):
    tiny = [a for a in TINY if not a.startswith(("model=", "trainer.epochs="))]
    # Runs far longer than the deadline (0.6 s) plus the first check for finished jobs (5 s).
    result = reproduce("--experiments", "medium_zaremba", "medium_variational", "--parallel", "1",
                       "--root", "runs", "--deadline-min", "0.01", "--", *tiny, f"data.root={tiny_corpus}",
                       "trainer.epochs=10000", cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "stopped at the deadline: runs/medium_zaremba/seed1" in result.stdout
    assert "1 job(s) not started before the deadline: runs/medium_variational/seed1" in result.stdout
    assert "FAILED" not in result.stdout


def test_a_job_whose_run_is_stopped_or_running_is_resumed_and_only_an_ended_one_skipped(tmp_path, script):
    """A run keeps a metrics.json while it runs and when stopped to go on later; only finished (a metrics.json of
    before the status was recorded counts as that) or failed runs are done."""
    for status, done in (("stopped", False), ("running", False), ("finished", True), ("failed", True), (None, True)):
        folder = tmp_path / str(status)
        folder.mkdir()
        (folder / "metrics.json").write_text(json.dumps({} if status is None else {"status": status}))
        assert script.ended(folder) == done, status
    assert not script.ended(tmp_path / "never_started")


def test_gpus_that_do_not_exist_are_refused_before_any_job_starts(tmp_path, script, monkeypatch, capsys):
    # A job shown no GPU would train on the CPU (device=auto) for hours without a word.
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.chdir(tmp_path)
    assert run_main(script, monkeypatch, "--size", "medium", "--gpus", "0", "--root", "runs") == 2
    assert "--gpus: no GPU 0: this process sees 0 GPU(s)" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_gpu_indices_are_positions_among_the_gpus_this_process_sees(script, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert script.visible_devices([1, 0]) == ["1", "0"]
    # A job's CUDA_VISIBLE_DEVICES replaces this process's: index 1 of "3,7" is GPU 7.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,7")
    assert script.visible_devices([1, 0]) == ["7", "3"]
    with pytest.raises(ValueError, match="no GPU 2: this process sees 2 GPU"):
        script.visible_devices([0, 2])


def test_a_corpus_table_runs_the_rows_that_have_a_preset_on_it(script):
    assert script.table_presets("wt2", "medium", None) == [
        "wt2_medium_zaremba", "wt2_medium_variational", "wt2_medium_variational_untied"]
    assert script.table_presets("wt2", "large", None) == ["wt2_large_variational"]
    assert script.table_presets("ptb", "large", ["zaremba"]) == ["large_zaremba"]
    with pytest.raises(ValueError, match="wt2_large_moon: no such preset in conf/experiment/"):
        script.table_presets("wt2", "large", ["moon"])
