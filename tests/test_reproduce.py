"""scripts/reproduce.py on real (tiny) runs: every row's job, spread over GPUs, then the report; a second call
skips what is finished."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "reproduce.py"


def reproduce(*args: str, cwd: Path) -> str:
    result = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_reproduce_spreads_the_rows_over_gpus_reports_them_and_skips_finished_jobs(tmp_path, tiny_corpus):
    tiny = [a for a in TINY if not a.startswith("model=")]
    args = ["--size", "medium", "--rows", "zaremba", "variational", "--seeds", "1", "--gpus", "0", "1",
            "--parallel", "1", "--root", "runs", "--report", "report", *tiny, f"data.root={tiny_corpus}",
            "eval.samples=2"]
    out = reproduce(*args, cwd=tmp_path)
    # One job per GPU: each starts on the least busy one (on this CPU-only machine the runs fall back to the CPU).
    assert "started runs/medium_zaremba/seed1 on GPU 0" in out
    assert "started runs/medium_variational/seed1 on GPU 1" in out
    assert "FAILED" not in out
    with open(tmp_path / "report" / "table.csv") as f:
        rows = [(r["row"], r["seeds"]) for r in csv.DictReader(f)]
    assert rows == [("Zaremba et al. 2014", "1"), ("Variational (tied weights)", "1")]
    assert "0 job(s) to run" in reproduce(*args, cwd=tmp_path)


def test_a_failed_job_makes_the_script_fail(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), "--experiments", "no_such_preset", "--root", "runs"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "FAILED" in result.stdout and "1 job(s) failed" in result.stderr
