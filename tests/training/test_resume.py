"""Resuming: an interrupted run continues to exactly the numbers of an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY, events_of, history, run_in_process, session_ends
from vdrnn.errors import ConfigError, RecordError
from vdrnn.training.resume import check_resumable
from vdrnn.training.tracking import read_jsonl

pytestmark = pytest.mark.slow

VARIATIONAL = ["dropout=variational", "dropout.embedding=0.2", "dropout.input=0.3", "dropout.recurrent=0.3",
               "dropout.output=0.3", "trainer.lr_decay_start=1", "trainer.lr_decay=2", "trainer.weight_decay=1e-4"]


@pytest.mark.parametrize("variant", [[], ["trainer.ema=0.9"], ["dropout.scheme=gaussian"],
                                     ["dropout.scheme=gaussian", "dropout.learn_alpha=true"]],
                         ids=["weights", "ema", "gaussian-noise", "learned-alpha"])
def test_resumed_run_equals_uninterrupted_run(tmp_path, tiny_corpus, variant):
    common = [*TINY, *VARIATIONAL, *variant, f"data.root={tiny_corpus}"]
    run_in_process("train", *common, "trainer.epochs=3", "hydra.run.dir=straight", cwd=tmp_path)
    # Interrupted after epoch 1, then restarted in the same output dir with the full budget.
    run_in_process("train", *common, "trainer.epochs=1", "hydra.run.dir=resumed", cwd=tmp_path)
    result = run_in_process("train", *common, "trainer.epochs=3", "hydra.run.dir=resumed", cwd=tmp_path)
    assert "after epoch 1 (step" in result.stderr + result.stdout
    assert "with changed settings: trainer.epochs: 1 -> 3" in result.stderr + result.stdout
    straight, resumed = history(tmp_path / "straight"), history(tmp_path / "resumed")
    assert [r["epoch"] for r in resumed] == [1, 2, 3]
    for a, b in zip(straight, resumed, strict=True):
        assert (a["valid_ppl"], a["train_loss"], a["lr"], a["step"]) == (b["valid_ppl"], b["train_loss"], b["lr"], b["step"])
    final = [json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("straight", "resumed")]
    assert final[0]["test_ppl"] == final[1]["test_ppl"] and final[0]["best_valid_ppl"] == final[1]["best_valid_ppl"]
    weights = [torch.load(tmp_path / d / "last.pt", weights_only=True)["model"] for d in ("straight", "resumed")]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    # TensorBoard: the same points as the uninterrupted run, the interrupted attempt's final test purged.
    assert_same_curves(tmp_path / "straight", tmp_path / "resumed")
    if not variant:  # rerunning the finished command tests it again: its test replaces the last one
        run_in_process("train", *common, "trainer.epochs=3", "hydra.run.dir=resumed", cwd=tmp_path)
        assert_same_curves(tmp_path / "straight", tmp_path / "resumed")


def assert_same_curves(a: Path, b: Path) -> None:
    """The two runs' TensorBoard scalars have the same steps, each step once, and one final test point."""
    runs = events_of(a), events_of(b)
    for tag in ("train/loss", "valid/ppl", "best/valid_ppl", "test/ppl"):
        steps = [[e.step for e in run.Scalars(tag)] for run in runs]
        assert steps[0] == steps[1] and len(set(steps[1])) == len(steps[1]), (tag, steps)
    assert len(runs[1].Scalars("test/ppl")) == 1


def test_resume_from_another_folder_carries_its_best_checkpoint_and_history(tmp_path, tiny_corpus):
    common = [*TINY, *VARIATIONAL, f"data.root={tiny_corpus}"]
    run_in_process("train", *common, "trainer.epochs=2", "hydra.run.dir=straight", cwd=tmp_path)
    run_in_process("train", *common, "trainer.epochs=1", "hydra.run.dir=first", cwd=tmp_path)
    run_in_process("train", *common, "trainer.epochs=2", f"resume={tmp_path / 'first' / 'last.pt'}",
            "hydra.run.dir=second", cwd=tmp_path)
    assert [r["epoch"] for r in history(tmp_path / "second")] == [1, 2]  # the first run's epoch came along
    assert (tmp_path / "second" / "best.pt").exists()
    final = [json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("straight", "second")]
    assert (final[0]["test_ppl"], final[0]["best_valid_ppl"]) == (final[1]["test_ppl"], final[1]["best_valid_ppl"])


def test_a_rerun_continues_from_its_own_folder_not_from_resume(tmp_path, tiny_corpus):
    common = [*TINY, f"data.root={tiny_corpus}"]
    run_in_process("train", *common, "trainer.epochs=1", "hydra.run.dir=first", cwd=tmp_path)
    again = [*common, f"resume={tmp_path / 'first' / 'last.pt'}", "hydra.run.dir=second"]
    run_in_process("train", *again, "trainer.epochs=2", cwd=tmp_path)
    result = run_in_process("train", *again, "trainer.epochs=3", cwd=tmp_path)  # the same command, a longer budget
    assert "continues from it, not from resume=" in result.stderr + result.stdout
    assert "after epoch 2" in result.stderr + result.stdout
    assert [r["epoch"] for r in history(tmp_path / "second")] == [1, 2, 3]


def test_a_rerun_after_an_attempt_that_died_before_its_first_checkpoint_starts_clean(tmp_path, tiny_corpus):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    common = [*TINY, f"data.root={tiny_corpus}", "trainer.epochs=1", "trainer.max_steps=5", "hydra.run.dir=run"]
    run_in_process("train", *common, cwd=tmp_path)
    (tmp_path / "run" / "last.pt").unlink()  # as if it died after validating epoch 1, before saving last.pt
    run_in_process("train", *common, cwd=tmp_path)
    assert [r["epoch"] for r in history(tmp_path / "run")] == [1]
    # The new events file purges the dead attempt's curves from step 1 on (TensorBoard drops them on reading).
    newest = max((tmp_path / "run").glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime_ns)
    starts = [e.step for e in EventFileLoader(str(newest)).Load() if e.HasField("session_log")]
    assert starts == [1]


def test_resuming_into_a_folder_with_a_dead_attempt_takes_the_sources_best_checkpoint(tmp_path, tiny_corpus):
    common = [*TINY, f"data.root={tiny_corpus}", "trainer.epochs=1", "trainer.max_steps=5"]
    run_in_process("train", *common, "hydra.run.dir=first", cwd=tmp_path)
    run_in_process("train", *common, "seed=2", "hydra.run.dir=second", cwd=tmp_path)  # another model, other numbers
    (tmp_path / "second" / "last.pt").unlink()  # a dead attempt's best.pt and history stay behind
    assert [r["valid_ppl"] for r in history(tmp_path / "second")] != [r["valid_ppl"] for r in history(tmp_path / "first")]
    run_in_process("train", *common, f"resume={tmp_path / 'first' / 'last.pt'}", "hydra.run.dir=second", cwd=tmp_path)
    assert (tmp_path / "second" / "best.pt").read_bytes() == (tmp_path / "first" / "best.pt").read_bytes()
    assert history(tmp_path / "second") == history(tmp_path / "first")


def test_resuming_under_other_settings_is_refused_with_the_keys(tmp_path, tiny_corpus):
    common = [*TINY, f"data.root={tiny_corpus}", "hydra.run.dir=run"]
    run_in_process("train", *common, "trainer.epochs=1", cwd=tmp_path)
    result = run_in_process("train", *common, "trainer.epochs=2", "trainer.optimizer=adam", "data.batch_size=3",
                     cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert "cannot resume" in result.stderr and "trainer.optimizer: 'sgd' -> 'adam'" in result.stderr
    assert "init_from=<checkpoint> starts from its weights" in result.stderr
    assert "data.batch_size" in result.stderr and "init_from=" in result.stderr
    assert [r["epoch"] for r in history(tmp_path / "run")] == [1]


def test_a_run_whose_best_checkpoint_is_gone_is_not_tested_on_its_last_weights(tmp_path, tiny_corpus):
    common = [*TINY, f"data.root={tiny_corpus}", "trainer.epochs=1"]
    run_in_process("train", *common, "hydra.run.dir=first", cwd=tmp_path)
    (tmp_path / "first" / "best.pt").unlink()
    result = run_in_process("train", *common, f"resume={tmp_path / 'first' / 'last.pt'}", "hydra.run.dir=second",
                     cwd=tmp_path, check=False)
    assert result.returncode == 2 and "best.pt is missing although the run kept there the weights that validated to ppl" in result.stderr


def test_divergence_stops_without_losing_the_last_good_checkpoint(tmp_path, tiny_corpus):
    common = [*TINY, f"data.root={tiny_corpus}", "hydra.run.dir=run"]
    run_in_process("train", *common, "trainer.epochs=1", cwd=tmp_path)
    good = {name: (tmp_path / "run" / name).read_bytes() for name in ("last.pt", "best.pt")}
    result = run_in_process("train", *common, "trainer.epochs=2", "trainer.lr=1e30", "trainer.clip=1e30", cwd=tmp_path,
                     check=False)
    assert result.returncode == 3
    assert "training diverged in epoch 2" in result.stderr and "last good one" in result.stderr
    assert {name: (tmp_path / "run" / name).read_bytes() for name in good} == good
    # The first start's finished metrics.json is not left to pass for this one's result.
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["reason"].startswith("training diverged in epoch 2")
    assert metrics["epochs"] == 1 and "test_ppl" not in metrics
    assert session_ends(tmp_path / "run") == ["STATUS_SUCCESS", "STATUS_FAILURE"]  # the first start's, this one's
    assert "training diverged in epoch 2" in (tmp_path / "run" / "vdrnn.log").read_text()


def test_a_history_cut_short_mid_line_is_read_without_its_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"epoch": 1}\n{"epoch": 2}\n{"epo')
    assert read_jsonl(path) == [{"epoch": 1}, {"epoch": 2}]
    path.write_text('{"epo\n{"epoch": 2}\n')  # damage before the end is not a torn write: it is reported
    with pytest.raises(RecordError, match=f"{path}, line 1, is not JSON .*delete that line"):
        read_jsonl(path)


def test_a_resume_with_a_damaged_line_in_its_history_is_refused_naming_it(tmp_path, tiny_corpus):
    common = [*TINY, f"data.root={tiny_corpus}", "hydra.run.dir=run"]
    run_in_process("train", *common, "trainer.epochs=2", cwd=tmp_path)
    history = tmp_path / "run" / "metrics.jsonl"
    lines = history.read_text().splitlines()
    history.write_text("\n".join(["{damaged", *lines[1:]]) + "\n")
    result = run_in_process("train", *common, "trainer.epochs=3", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: {history}, line 1, is not JSON ('{{damaged'): it was damaged; restore the file" in result.stderr


def test_options_added_since_a_checkpoint_do_not_block_its_resume():
    saved = {"model": {"hidden_size": 16}, "trainer": {"epochs": 1}}
    now = {"model": {"hidden_size": 16, "init": "uniform"}, "trainer": {"epochs": 3, "lr": 0.5}}
    # model.init is new (not a change), epochs and lr may change, and the changes are named for the resume's log line
    assert check_resumable(saved, now, Path("last.pt")) == "trainer.epochs: 1 -> 3"
    assert check_resumable({**saved, "resume": None}, {**now, "resume": "a/last.pt"}, Path("last.pt")) == \
        "trainer.epochs: 1 -> 3"  # resume= names the checkpoint; it changes nothing of the run
    assert check_resumable(saved, saved, Path("last.pt")) == ""
    with pytest.raises(ConfigError, match=r"model.hidden_size: 16 -> 32"):
        check_resumable(saved, {"model": {"hidden_size": 32}}, Path("last.pt"))
    # trainer.lr may change, trainer.lr_decay (the schedule) may not: whole key names, not prefixes
    with pytest.raises(ConfigError, match=r"trainer.lr_decay: 1.2 -> 2.0"):
        check_resumable({"trainer": {"lr": 1.0, "lr_decay": 1.2}}, {"trainer": {"lr": 0.5, "lr_decay": 2.0}},
                        Path("last.pt"))


def test_an_option_added_since_a_checkpoint_may_only_take_its_default_on_resume():
    """A checkpoint from before trainer.select trained as its default (scale) says: resuming it to select by MC
    would compare MC scores with the weight-scaling ones it kept."""
    saved = {"trainer": {"epochs": 1}}
    defaults = {"trainer.select": "scale", "trainer.epochs": 39}
    check_resumable(saved, {"trainer": {"epochs": 3, "select": "scale"}}, Path("last.pt"), defaults)
    with pytest.raises(ConfigError, match=r"trainer.select: 'scale' -> 'mc'"):
        check_resumable(saved, {"trainer": {"epochs": 3, "select": "mc"}}, Path("last.pt"), defaults)


def test_a_refused_resume_quotes_an_unset_value_as_null():
    """None is flattened to the string "null" (for TensorBoard); the error writes it as the command line would."""
    with pytest.raises(ConfigError, match=r"\(dropout.hidden: null -> 0.3\)"):
        check_resumable({"dropout": {"hidden": None}}, {"dropout": {"hidden": 0.3}}, Path("last.pt"))


def test_best_checkpoint_is_not_a_resume_point(tmp_path, tiny_corpus):
    common = [*TINY, f"data.root={tiny_corpus}", "trainer.epochs=1"]
    run_in_process("train", *common, "hydra.run.dir=first", cwd=tmp_path)
    result = run_in_process("train", *common, "trainer.epochs=2", f"resume={tmp_path / 'first' / 'best.pt'}",
                     "hydra.run.dir=second", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "resume from the run's last.pt" in result.stderr


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path):
    from vdrnn.files import replaced_atomically

    path = tmp_path / "last.pt"
    path.write_bytes(b"the last good checkpoint")
    with pytest.raises(RuntimeError), replaced_atomically(path) as f:
        f.write(b"half of a new one")
        raise RuntimeError("disk full")
    assert path.read_bytes() == b"the last good checkpoint" and list(tmp_path.iterdir()) == [path]
    with replaced_atomically(path) as f:
        f.write(b"a new one")
    assert path.read_bytes() == b"a new one" and list(tmp_path.iterdir()) == [path]
