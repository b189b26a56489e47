"""The WikiText-2 table: its rows beside the published numbers, with the sources of those numbers under it."""

from __future__ import annotations

import json

from tests.helpers import composed
from vdrnn import report
from vdrnn.config import to_container


def fake_wt2_run(folder, preset: str, seed: int, valid: float) -> None:
    """A finished run of ``preset`` as metrics.json records it: its config and its preset's paper entry."""
    config = to_container(composed(f"experiment={preset}", f"seed={seed}"))
    folder.mkdir(parents=True)
    metrics = {"valid_ppl": valid, "test_ppl": valid - 3, "epochs": 39, "train_seconds": 600, "wps": 50_000,
               "config": config, "paper": config["paper"], "status": "finished"}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "overrides.yaml").write_text(f"- experiment={preset}\n- seed={seed}\n")


def test_the_wikitext2_table_sets_the_published_numbers_beside_ours_and_names_their_source(tmp_path):
    runs = tmp_path / "runs"
    fake_wt2_run(runs / "awd1", "awd_wt2", 1, 70.0)
    fake_wt2_run(runs / "awd2", "awd_wt2", 2, 72.0)
    fake_wt2_run(runs / "gal", "wt2_medium_variational", 1, 100.0)
    report.write_report([runs], tmp_path / "out")
    table = (tmp_path / "out" / "wikitext2_table.md").read_text()
    awd = next(line for line in table.splitlines() if line.startswith("| AWD-LSTM (no fine-tuning)"))
    assert "| 71.0 ± 1.4 | 68.0 ± 1.4 |" in awd and "| 68.7 | 65.6 |" in awd  # ours (2 seeds), the README's
    gal = next(line for line in table.splitlines() if line.startswith("| Variational (tied weights)"))
    assert "| 100.0 | 97.0 |" in gal and gal.count("| – |") >= 3  # no published numbers found: shown as none
    assert "Published numbers of AWD-LSTM (no fine-tuning): salesforce/awd-lstm-lm README.md." in table
    assert not (tmp_path / "out" / "table.md").exists()  # Table 1's file is Penn Treebank's alone
