"""Resuming from checkpoints saved under other settings, by other versions or after a crash between two checkpoint
writes, perplexities of broken models, and an unknown device."""

from __future__ import annotations

import errno
import math
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import TINY, composed, fit, trainer_for
from vdrnn.config import ModelConfig, to_container
from vdrnn.dropout.config import DropoutConfig
from vdrnn.errors import CheckpointError, ConfigError, VdrnnError, WriteError
from vdrnn.tasks.lm.evaluate import exp_or_inf, mc_perplexity, perplexity
from vdrnn.tasks.lm.model import LanguageModel
from vdrnn.tasks.lm.train import LanguageModelTrainer
from vdrnn.training import checkpoint
from vdrnn.training.device import resolve_device


def trainer(run_dir, corpus, *overrides) -> LanguageModelTrainer:
    raw = to_container(composed(*TINY, "device=cpu", f"data.root={corpus}", *overrides))
    return trainer_for(raw, run_dir)


@pytest.fixture(scope="module")
def last_pt(tmp_path_factory, tiny_corpus):
    """The last.pt of a one-epoch run with trainer.amp=off (its GradScaler state is {})."""
    run_dir = tmp_path_factory.mktemp("run")
    fit(trainer(run_dir, tiny_corpus, "trainer.epochs=1"))
    return run_dir / checkpoint.LAST


def test_fp16_resume_from_a_checkpoint_saved_without_loss_scaling(tmp_path, tiny_corpus, last_pt):
    t = trainer(tmp_path, tiny_corpus, "trainer.epochs=2")
    # trainer.amp=fp16 needs CUDA; an enabled GradScaler on the CPU refuses an empty state the same way.
    t.optimization.scaler = torch.amp.GradScaler("cpu", enabled=True)
    t.restore(last_pt)
    assert t.progress.epoch == 1 and t.optimization.scaler.get_scale() == 2.0**16  # loss scaling starts afresh, as in a new fp16 run


def test_a_best_checkpoint_saved_after_the_resumed_epoch_stays_the_best(tmp_path, tiny_corpus, caplog):
    fit(trainer(tmp_path, tiny_corpus, "trainer.epochs=1"))
    after_one = (tmp_path / checkpoint.LAST).read_bytes()
    fit(trainer(tmp_path, tiny_corpus, "trainer.epochs=2"))
    # As if the second epoch died after writing best.pt and before last.pt, having scored better than the
    # redone epoch will (GPU kernels are not bit-exact): best.pt is from epoch 2, last.pt from epoch 1.
    best = {**checkpoint.load(tmp_path / checkpoint.LAST), "resumable": False}
    best["best_valid"] -= 1.0
    checkpoint.save(best, tmp_path / checkpoint.BEST)
    kept = (tmp_path / checkpoint.BEST).read_bytes()
    (tmp_path / checkpoint.LAST).write_bytes(after_one)
    metrics = fit(trainer(tmp_path, tiny_corpus, "trainer.epochs=2"))
    assert "stays the best so far" in caplog.text
    assert (tmp_path / checkpoint.BEST).read_bytes() == kept  # the redone epoch 2 did not replace it
    assert metrics["best_valid_ppl"] == best["best_valid"] and metrics["epochs"] == 2


def test_an_unreadable_best_checkpoint_does_not_stop_a_resume(tmp_path, tiny_corpus, last_pt, caplog):
    t = trainer(tmp_path, tiny_corpus, "trainer.epochs=2")
    t.restore(last_pt)
    (tmp_path / checkpoint.BEST).write_bytes(b"not a checkpoint")
    # a warning; a later best.pt replaces it, else the final test names it
    t.progress.best_valid = t.folder.newer_best(t.progress.epoch, t.progress.best_valid, t.selector)
    assert "is unreadable" in caplog.text and t.progress.best_valid == checkpoint.load(last_pt)["best_valid"]


def drop_step(payload):
    del payload["step"]


def shrink_optimizer_group(payload):
    payload["optimizer"]["param_groups"][0]["params"].pop()


@pytest.mark.parametrize("damage,reason", [(drop_step, "it has no 'step' entry"),
                                           (shrink_optimizer_group, "parameter group")],
                         ids=["missing-entry", "other-optimizer-shape"])
def test_a_checkpoint_without_the_state_to_continue_is_refused_with_the_fix(tmp_path, tiny_corpus, last_pt,
                                                                              damage, reason):
    payload = checkpoint.load(last_pt)
    damage(payload)
    path = tmp_path / "old" / "last.pt"
    path.parent.mkdir()
    checkpoint.save(payload, path)
    t = trainer(tmp_path / "run", tiny_corpus, "trainer.epochs=2")
    with pytest.raises(CheckpointError, match=reason) as err:
        t.restore(path)
    assert f"cannot resume {path}" in str(err.value) and "new output dir" in str(err.value)


def model_with_output_bias(value: float, vocab: int = 12) -> LanguageModel:
    """A model whose every prediction is softmax([value, 0, 0, ...]), whatever it reads."""
    model = LanguageModel(vocab, ModelConfig(num_layers=2, hidden_size=10, impl="reference"),
                          DropoutConfig(scheme="none")).eval()
    with torch.no_grad():
        model.decoder.weight.zero_()
        model.decoder.bias.zero_()
        model.decoder.bias[0] = value
    return model


def test_a_smoke_runs_step_cap_says_it_stopped_the_run_and_may_be_raised_on_resume(tmp_path, tiny_corpus, caplog):
    caplog.set_level("INFO", logger="vdrnn")
    capped = fit(trainer(tmp_path, tiny_corpus, "trainer.epochs=3", "trainer.max_steps=3"))
    assert capped["epochs"] == 1 and capped["steps"] == 3
    # Checkpoints mark the ends of epochs: the cut epoch counts as done, and the line says where a rerun goes on.
    assert ("stopped at step 3, trainer.max_steps (the whole run's cap, for smoke runs): epoch 1 of 3 is the last, and "
            "counts as done where the cap cut it short, so a rerun with a higher cap goes on with epoch 2") in caplog.text
    raised = fit(trainer(tmp_path, tiny_corpus, "trainer.epochs=3", "trainer.max_steps=100000"))
    assert raised["epochs"] == 3 and raised["steps"] > 3


@pytest.mark.parametrize("content,reason", [(b"", "the file is empty"), (b"PK\x03\x04", "Error")])
def test_an_empty_or_cut_checkpoint_is_a_checkpoint_error_with_the_fix(tmp_path, content, reason):
    # An empty last.pt is what a full disk can leave; torch's EOFError for it has no message.
    path = tmp_path / "last.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=f"{path} is unreadable .*{reason}.*move it aside"):
        checkpoint.load(path)
    with pytest.raises(CheckpointError, match=f"checkpoint {tmp_path} is a folder; pass the path of a last.pt"):
        checkpoint.load(tmp_path)


def test_an_unreadable_checkpoint_gives_only_the_first_sentence_of_torchs_reason(tmp_path):
    """torch goes on with advice for other cases (weights_only=False, "your checkpoint file is ..."), cut mid-word."""
    path = tmp_path / "last.pt"
    torch.save({"model": {}, "config": {}}, path)
    path.write_bytes(path.read_bytes()[:100])  # the end of the zip, its central directory, is gone
    with pytest.raises(CheckpointError, match=r"is unreadable \(RuntimeError: [^;]*central directory\.\); it is") as err:
        checkpoint.load(path)
    assert "your checkpoint" not in str(err.value)


def test_a_nan_loss_is_a_nan_perplexity_not_inf():
    assert math.isnan(exp_or_inf(math.nan)) and exp_or_inf(1e4) == math.inf and exp_or_inf(0.0) == 1.0
    stream = torch.ones(30, dtype=torch.long)
    assert math.isnan(perplexity(model_with_output_bias(math.nan), stream, batch_size=1, bptt=5))


def test_mc_perplexity_of_a_very_poor_model_is_inf_not_an_overflow():
    # Every target (token 1) gets log p = -720: finite in float64, but e^720 overflows a float.
    stream = torch.ones(30, dtype=torch.long)
    assert mc_perplexity(model_with_output_bias(720.0), stream, samples=2, batch=2, bptt=5) == math.inf


def test_an_unknown_device_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="device='gpu' is not a device: choose auto, cpu or cuda"):
        resolve_device("gpu")


@pytest.mark.parametrize("write", ["save", "copy"])
def test_a_checkpoint_write_that_fails_midway_keeps_the_last_good_checkpoint(tmp_path, last_pt, monkeypatch, write):
    import shutil

    path = tmp_path / "last.pt"
    path.write_bytes(last_pt.read_bytes())
    good = path.read_bytes()
    payload = checkpoint.load(last_pt)

    def full_disk(_, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    if write == "save":
        monkeypatch.setattr(torch, "save", full_disk)
        with pytest.raises(WriteError, match=f"cannot write {path}: No space left on device. Free space on that disk"):
            checkpoint.save(payload, path)
    else:
        monkeypatch.setattr(shutil, "copyfileobj", full_disk)
        with pytest.raises(WriteError, match="what the file held before is intact"):
            checkpoint.copy(last_pt, path)
    assert path.read_bytes() == good and list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("content,reason", [
    ({"model": {}, "config": {}, "code": torch.nn.Identity()}, "is unreadable"),  # unpickling would import code
    ({"weights": torch.zeros(2)}, "is not a vdrnn checkpoint"),
], ids=["pickled-object", "foreign-dict"])
def test_a_file_that_is_no_plain_vdrnn_checkpoint_is_refused(tmp_path, content, reason):
    path = tmp_path / "last.pt"
    torch.save(content, path)
    with pytest.raises(CheckpointError, match=f"checkpoint {path} {reason}"):
        checkpoint.load(path)


def test_a_checkpoint_of_another_model_size_is_refused_with_the_fix(tmp_path, tiny_corpus, last_pt):
    model = trainer(tmp_path, tiny_corpus, "model.hidden_size=8").model  # last_pt: hidden_size=16
    # The checkpoint's model and the first weight that differs, beside the fix the caller gives.
    with pytest.raises(CheckpointError, match=rf"checkpoint {last_pt} does not fit this model: it holds a 2 x 16 lstm "
                                              rf"\(tied gates\) \(size mismatch for .*\); the fix"):
        checkpoint.load_model_state(model, checkpoint.load(last_pt), last_pt, "the fix")


def test_a_resume_under_other_settings_is_refused_before_the_data_loads(tmp_path, tiny_corpus, last_pt, monkeypatch):
    """Loading IMDB takes ~15 s: the checkpoint's settings are checked first, so a refused resume says so at once."""
    (tmp_path / checkpoint.LAST).write_bytes(last_pt.read_bytes())
    from vdrnn.tasks.lm import LanguageModelling

    monkeypatch.setattr(LanguageModelling, "load_data", lambda self, cfg: pytest.fail("the data loaded before the check"))
    with pytest.raises(ConfigError, match=r"cannot resume .*model.hidden_size: 16 -> 32"):
        trainer(tmp_path, tiny_corpus, "trainer.epochs=2", "model.hidden_size=32")


# Where a checkpoint is read: resuming a run, `vdrnn eval`, and starting a new run from its weights.
def resume_from(path, tmp_path, corpus):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / checkpoint.LAST).write_bytes(path.read_bytes())
    fit(trainer(tmp_path / "run", corpus, "trainer.epochs=2"))


def evaluate(path, tmp_path, corpus):
    from vdrnn.eval_settings import eval_run
    from vdrnn.training.evaluation import evaluate_checkpoint

    given = {"checkpoint", "data.root", "data.eval_max_tokens"}
    raw = to_container(composed(f"checkpoint={path}", f"data.root={corpus}", "data.eval_max_tokens=40"))
    task, cfg, _ = eval_run(raw, checkpoint.load(path)["config"], given, path)
    evaluate_checkpoint(task, cfg, path, checkpoint.load(path))


def init_from(path, tmp_path, corpus):
    fit(trainer(tmp_path / "new", corpus, f"init_from={path}", "trainer.epochs=1", "trainer.max_steps=2"))


ENTRY_POINTS = {"resume": resume_from, "eval": evaluate, "init_from": init_from}


def assert_read_or_refused(entry, path, tmp_path, corpus) -> None:
    """The checkpoint at ``path`` is read and used, or refused with a VdrnnError of one line; never another error."""
    try:
        ENTRY_POINTS[entry](path, tmp_path, corpus)
    except VdrnnError as err:
        assert str(err) and len(str(err).splitlines()) == 1, str(err)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("change,problem", [
    ({"config": "x"}, "its 'config' entry is a str, not a dict"),
    ({"model": "x"}, "its 'model' entry is a str, not a dict"),
    ({"vocab": None}, "it has no 'vocab' entry"),
    ({"epoch": "1"}, "its 'epoch' entry is a str, not a int"),
    ({"optimizer": "x"}, "its 'optimizer' entry is a str, not a dict"),
    ({"epoch_in_progress": {"epoch": 2, "sums": {"batches": "x"}, "data": {}}}, "paused epoch"),
], ids=["config", "model", "no-vocab", "epoch", "optimizer", "epoch-in-progress"])
def test_a_checkpoint_made_by_hand_with_wrong_entries_is_refused_in_a_line(tmp_path, tiny_corpus, last_pt, entry,
                                                                            change, problem):
    payload = {**checkpoint.load(last_pt), **change}
    payload = {key: value for key, value in payload.items() if value is not None}
    path = tmp_path / "made" / "last.pt"
    path.parent.mkdir()
    torch.save(payload, path)
    if entry != "resume" and "epoch_in_progress" in change:  # only a resume goes on with a paused epoch
        ENTRY_POINTS[entry](path, tmp_path, tiny_corpus)
        return
    with pytest.raises(CheckpointError, match=re.escape(problem)):
        ENTRY_POINTS[entry](path, tmp_path, tiny_corpus)


# Values of every type a checkpoint's entries may be given in place of their own.
REPLACEMENTS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=3),
                         st.just([]), st.just({}), st.just(["x"]), st.just({"x": 1}), st.just(torch.zeros(2)),
                         st.just({"epoch": 2}), st.just({"epoch": 2, "sums": {}, "data": {"row": 0, "state": []}}))
CONFIG_ENTRIES = ["data", "model", "cell", "dropout", "trainer", "eval", "seed", "device", "paper"]


@st.composite
def damaged(draw, payload: dict) -> tuple[list[str], dict]:
    """``payload`` with 1 to 3 of its entries, or of its config's, dropped or replaced."""
    payload = {**payload, "config": dict(payload["config"])}
    said = []
    for _ in range(draw(st.integers(1, 3))):
        tree = draw(st.sampled_from([payload, payload["config"]]))
        keys = sorted(tree) + (["epoch_in_progress"] if tree is payload else [])
        key = draw(st.sampled_from(keys))
        if draw(st.booleans()):
            tree.pop(key, None)
            said.append(f"drop {key}")
        else:
            tree[key] = draw(REPLACEMENTS)
            said.append(f"{key}={tree[key]!r}")
    return said, payload


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_any_damaged_checkpoint_is_read_or_refused_in_a_line(tmp_path_factory, tiny_corpus, last_pt, entry):
    valid = checkpoint.load(last_pt)

    @settings(max_examples=6, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(change=damaged(valid))
    def read_or_refused(change):
        said, payload = change
        tmp_path = tmp_path_factory.mktemp(entry)
        path = tmp_path / "made" / "last.pt"
        path.parent.mkdir()
        torch.save(payload, path)
        try:
            assert_read_or_refused(entry, path, tmp_path, tiny_corpus)
        except Exception as err:
            raise AssertionError(f"{said}: {type(err).__name__}: {err}") from err

    read_or_refused()
