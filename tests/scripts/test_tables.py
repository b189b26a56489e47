"""The committed results tables are what `vdrnn report` writes from the committed runs (scripts/tables.py), and
every committed run has its provenance line."""

import re
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


def listed_runs(runs_md) -> set[str]:
    """The run folders a RUNS.md's table names (its first column), ``a/{1,10}`` for ``a/1`` and ``a/10``."""
    listed = set()
    for entry in re.findall(r"^\| `([^`]+)` \|", runs_md.read_text(), re.M):
        braces = re.search(r"\{([^}]+)\}", entry)
        listed |= ({entry[:braces.start()] + part + entry[braces.end():] for part in braces[1].split(",")}
                   if braces else {entry})
    return listed


def test_every_committed_run_has_its_command_hardware_and_commit_in_the_runs_md_above_it():
    results = ROOT / "results"
    unlisted = []
    for record in sorted([*results.rglob("metrics.json"), *results.rglob("eval.json")]):
        folder = record.parent
        runs_md = next(parent / "RUNS.md" for parent in folder.parents if (parent / "RUNS.md").exists())
        if str(folder.relative_to(runs_md.parent)) not in listed_runs(runs_md):
            unlisted.append(f"{folder.relative_to(results)} (in {runs_md.relative_to(results)})")
    assert not unlisted, unlisted


def test_results_hold_only_what_backs_a_published_table_or_figure(tmp_path):
    """Beside its runs a results folder holds the tables and figures results/README.md publishes for it, and RUNS.md;
    a run folder holds what the report reads of it."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from tables import PUBLISHED
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    readme = (ROOT / "results" / "README.md").read_text()
    for folder, names in PUBLISHED.items():
        entry = re.search(rf"^- \[`{re.escape(folder)}/`\].*?(?=^- |^## |\Z)", readme, flags=re.M | re.S)
        assert entry and all(f"`{name}`" in entry[0] for name in names), f"results/README.md: {folder}: {names}"
    run_files = {"metrics.json", "metrics.jsonl", "overrides.yaml", "eval.json"}
    stray = [path for path in (ROOT / "results").rglob("*") if path.is_file() and "runs" in path.parts
             and path.name not in run_files]
    assert not stray
    shutil.copytree(ROOT / "results" / "scale", tmp_path / "scale")
    (tmp_path / "scale" / "scale_table_old.md").write_text("| a stale table |\n")
    done = check_tables("--results", str(tmp_path))
    assert done.returncode != 0 and "back no published table or figure" in done.stderr
    assert str(tmp_path / "scale" / "scale_table_old.md") in done.stderr
