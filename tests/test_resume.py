"""Resuming: an interrupted run continues to exactly the numbers of an uninterrupted one."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import TINY, run_cli

pytestmark = pytest.mark.slow

VARIATIONAL = ["dropout=variational", "dropout.embedding=0.2", "dropout.input=0.3", "dropout.recurrent=0.3",
               "dropout.output=0.3", "trainer.lr_decay_start=1", "trainer.lr_decay=2", "trainer.weight_decay=1e-4"]


def history(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_resumed_run_equals_uninterrupted_run(tmp_path, tiny_corpus):
    common = [*TINY, *VARIATIONAL, f"data.root={tiny_corpus}"]
    run_cli("train", *common, "trainer.epochs=3", "hydra.run.dir=straight", cwd=tmp_path)
    # Interrupted after epoch 1, then restarted in the same output dir with the full budget.
    run_cli("train", *common, "trainer.epochs=1", "hydra.run.dir=resumed", cwd=tmp_path)
    result = run_cli("train", *common, "trainer.epochs=3", "hydra.run.dir=resumed", cwd=tmp_path)
    assert "resumed from" in result.stderr + result.stdout
    straight, resumed = history(tmp_path / "straight"), history(tmp_path / "resumed")
    assert [r["epoch"] for r in resumed] == [1, 2, 3]
    for a, b in zip(straight, resumed, strict=True):
        assert (a["valid_ppl"], a["train_loss"], a["lr"], a["step"]) == (b["valid_ppl"], b["train_loss"], b["lr"], b["step"])
    final = [json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("straight", "resumed")]
    assert final[0]["test_ppl"] == final[1]["test_ppl"] and final[0]["best_valid_ppl"] == final[1]["best_valid_ppl"]
    weights = [torch.load(tmp_path / d / "last.pt", weights_only=True)["model"] for d in ("straight", "resumed")]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_resume_from_an_explicit_checkpoint(tmp_path, tiny_corpus):
    common = [*TINY, f"data.root={tiny_corpus}"]
    run_cli("train", *common, "trainer.epochs=1", "hydra.run.dir=first", cwd=tmp_path)
    run_cli("train", *common, "trainer.epochs=2", f"resume={tmp_path / 'first' / 'last.pt'}",
            "hydra.run.dir=second", cwd=tmp_path)
    assert [r["epoch"] for r in history(tmp_path / "second")] == [2]


def test_divergence_stops_without_losing_the_last_good_checkpoint(tmp_path, tiny_corpus):
    common = [*TINY, f"data.root={tiny_corpus}", "hydra.run.dir=run"]
    run_cli("train", *common, "trainer.epochs=1", cwd=tmp_path)
    good = (tmp_path / "run" / "last.pt").read_bytes()
    result = run_cli("train", *common, "trainer.epochs=2", "trainer.lr=1e30", "trainer.clip=1e30", cwd=tmp_path,
                     check=False)
    assert result.returncode == 2
    assert "training diverged in epoch 2" in result.stderr and "last good one" in result.stderr
    assert (tmp_path / "run" / "last.pt").read_bytes() == good
