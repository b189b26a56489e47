"""`vdrnn report` on small real runs: seeds grouped, paper numbers beside ours, table files and a plot."""

from __future__ import annotations

import csv

import pytest
from conftest import TINY, run_cli

pytestmark = pytest.mark.slow


def test_report_groups_seeds_and_sets_paper_numbers_beside_ours(tmp_path, tiny_corpus):
    tiny = [a for a in TINY if not a.startswith("model=")]
    run_cli("train", "-m", "experiment=medium_zaremba,medium_variational", "seed=1,2", *tiny,
            f"data.root={tiny_corpus}", "eval.samples=2", "hydra.sweep.dir=sweep", cwd=tmp_path)
    result = run_cli("report", "sweep", "--out", "report", cwd=tmp_path)
    assert "| Zaremba et al. 2014 | medium | in 0.5, out 0.5 | 2 |" in result.stdout
    assert "| Variational (tied weights) | medium | emb 0.2, in 0.3, h 0.2, out 0.3 | 2 |" in result.stdout
    with open(tmp_path / "report" / "table.csv") as f:
        rows = {r["row"]: r for r in csv.DictReader(f)}
    zaremba, variational = rows["Zaremba et al. 2014"], rows["Variational (tied weights)"]
    assert (zaremba["paper valid"], zaremba["paper test"], zaremba["paper MC test"]) == ("86.2", "82.7", "–")
    assert variational["paper MC test"] == "79.0" and " ± " in variational["MC test"]  # 2 seeds: mean ± std
    assert zaremba["MC test"] == "–" and " ± " in zaremba["test"]
    assert list(rows) == ["Zaremba et al. 2014", "Variational (tied weights)"]  # Table 1's order
    # Hydra's record of each job's command line: the smoke settings show, the preset and seed do not.
    assert "eval.samples=2" in variational["overrides"]
    assert not any(word in variational["overrides"] for word in ("experiment=", "seed=", "data.root="))
    png = (tmp_path / "report" / "valid_ppl.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_report_without_runs_says_so(tmp_path):
    result = run_cli("report", str(tmp_path), cwd=tmp_path, check=False)
    assert result.returncode != 0 and "no metrics.json under" in result.stderr


def test_report_keeps_the_points_of_a_dropout_grid_apart(tmp_path, tiny_corpus):
    tiny = [a for a in TINY if not a.startswith("model=")]
    run_cli("train", "-m", "experiment=medium_variational", "dropout.input=0.3,0.4", "dropout.output=0.4", *tiny,
            f"data.root={tiny_corpus}", "eval.samples=2", "hydra.sweep.dir=sweep", cwd=tmp_path)
    run_cli("report", "sweep", "--out", "report", cwd=tmp_path)
    with open(tmp_path / "report" / "table.csv") as f:
        rows = [(r["row"], r["dropout"], r["seeds"]) for r in csv.DictReader(f)]
    assert rows == [("Variational (tied weights)", "emb 0.2, in 0.3, h 0.2, out 0.4", "1"),
                    ("Variational (tied weights)", "emb 0.2, in 0.4, h 0.2, out 0.4", "1")]
