"""The committed results tables are what `vdrnn report` writes from the committed runs (scripts/tables.py)."""

import shutil
import subprocess
import sys

from tests.helpers import REPO

ROOT = REPO


def check_tables(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "tables.py"), "--check", *args],
                          capture_output=True, text=True)


def test_every_committed_table_is_what_vdrnn_report_writes_from_its_runs():
    done = check_tables()
    assert done.returncode == 0, done.stderr


def test_the_check_names_a_table_edited_by_hand(tmp_path):
    shutil.copytree(ROOT / "results" / "scale", tmp_path / "scale")
    assert check_tables("--results", str(tmp_path)).returncode == 0  # the copy, as committed

    table = tmp_path / "scale" / "scale_table.md"
    table.write_text(table.read_text().replace("| 0.1559 |", "| 0.1459 |", 1))  # LSTM, no dropout: a better RMSE
    done = check_tables("--results", str(tmp_path))
    assert done.returncode != 0
    assert str(table) in done.stderr and "scale_table.csv" not in done.stderr
