"""The language-model trainer's objective: Zaremba's and Gal's sum over BPTT steps, or AWD's mean."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers import composed, events_of, fit, history, trainer_for
from vdrnn.config import to_container
from vdrnn.tasks.lm.train import LanguageModelTrainer


def trainer(tmp_path, corpus, *overrides) -> LanguageModelTrainer:
    device = [] if any(o.startswith("device=") for o in overrides) else ["device=cpu"]
    raw = to_container(composed(
        "model=small", "model.hidden_size=8", "model.impl=reference", "dropout=none", f"data.root={corpus}",
        "data.allow_custom_corpus=true", "data.batch_size=4", "data.bptt=6", *device, "trainer.clip=1e9", *overrides))
    return trainer_for(raw, tmp_path)


# sum-short: a minibatch shorter than data.bptt=6 (an epoch's last, or variable BPTT's) sums over its own 3 steps.
@pytest.mark.parametrize("loss,steps,factor", [("sum_over_time", 6, 6.0), ("sum_over_time", 3, 3.0), ("mean", 6, 1.0)],
                         ids=["sum", "sum-short", "mean"])
def test_objective_is_nll_summed_over_time_or_mean(tmp_path, tiny_corpus, loss, steps, factor):
    t = trainer(tmp_path, tiny_corpus, f"trainer.loss={loss}")
    inputs, targets = t.train_data[:steps], t.train_data[1:steps + 1]
    state = t.model.initial_state(4, "cpu")
    before = [p.detach().clone() for p in t.model.parameters()]
    nll, grad_norm, _ = t.train_step(inputs, targets, state, lr=1e-3)
    # The gradient of the reported (mean) NLL, recomputed on the weights before the step:
    with torch.no_grad():
        for p, b in zip(t.model.parameters(), before, strict=True):
            p.copy_(b)
    t.model.zero_grad()
    logits, _ = t.model(inputs, state)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    mean_norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in t.model.parameters()))
    assert grad_norm.item() == pytest.approx(factor * mean_norm.item(), rel=1e-4)
    assert nll.item() == pytest.approx(
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).item(), rel=1e-5)


@pytest.mark.parametrize("preset", ["medium_zaremba", "medium_variational", "large_zaremba", "large_variational",
                                    "large_variational_untied"])
def test_zaremba_and_gal_presets_sum_over_time(preset):
    """Their lr 1 and clip 5 assume the NLL summed over the BPTT steps (Zaremba's and Gal's Lua code)."""
    assert composed(f"experiment={preset}").trainer.loss == "sum_over_time"


def test_awd_averages_over_tokens(tmp_path, tiny_corpus):
    assert composed("experiment=awd_ptb").trainer.loss == "mean"


def test_nt_asgd_switches_to_averaging_on_the_non_monotone_trigger(tmp_path, tiny_corpus):
    t = trainer(tmp_path, tiny_corpus, "trainer.optimizer=ntasgd", "trainer.nonmono=2")
    for score in (40.0, 39.0, 38.0):  # improving: plain SGD goes on
        t.after_validation(score)
    assert not t.optimization.averaging and isinstance(t.optimization.optimizer, torch.optim.SGD)
    t.after_validation(39.5)  # worse than the last two, but not than the best before them (40): no switch
    assert not t.optimization.averaging and isinstance(t.optimization.optimizer, torch.optim.SGD)
    t.after_validation(41.0)  # worse than the best of all epochs but the last two (39): switch
    assert t.optimization.averaging and isinstance(t.optimization.optimizer, torch.optim.ASGD)
    assert t.checkpoints.state(t.progress, t.extra_state())["averaging"]
    assert not t.stopped_early()  # ntasgd switches; only stop_nonmono stops
    averaged = t.optimization.optimizer
    t.after_validation(50.0)  # a later trigger must not restart the averages with a new optimizer
    assert t.optimization.optimizer is averaged


def test_a_run_resumed_after_nt_asgds_switch_goes_on_averaging_from_its_saved_averages(tmp_path, tiny_corpus):
    """A resume after the switch continues averaged SGD, whose averages are what is validated and tested; SGD built
    afresh from the config would drop or freeze them. The next step then matches the uninterrupted run's."""
    from vdrnn.training import checkpoint

    common = ["trainer.optimizer=ntasgd", "trainer.nonmono=1"]
    t = trainer(tmp_path, tiny_corpus, *common)
    for score in (40.0, 39.0, 41.0):  # 41 is worse than the best but the last: switch
        t.after_validation(score)
    inputs, targets = t.train_data[:6], t.train_data[1:7]
    t.train_step(inputs, targets, t.model.initial_state(4, "cpu"), lr=0.5)
    checkpoint.save(t.checkpoints.state(t.progress, t.extra_state()), tmp_path / "last.pt")
    resumed = trainer(tmp_path, tiny_corpus, *common)
    resumed.restore(tmp_path / "last.pt")
    assert resumed.optimization.averaging and isinstance(resumed.optimization.optimizer, torch.optim.ASGD)
    for run in (t, resumed):
        run.train_step(inputs, targets, run.model.initial_state(4, "cpu"), lr=0.5)
    with t.optimization.evaluation_weights(), resumed.optimization.evaluation_weights():  # both runs' averages
        for a, b in zip(t.model.parameters(), resumed.model.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_fine_tuning_averages_from_the_start_and_stops_on_the_trigger(tmp_path, tiny_corpus):
    t = trainer(tmp_path, tiny_corpus, "trainer.optimizer=asgd", "trainer.stop_nonmono=true", "trainer.nonmono=2")
    assert t.optimization.averaging and isinstance(t.optimization.optimizer, torch.optim.ASGD)
    for score in (40.0, 39.0, 38.0):  # improving: no trigger
        t.after_validation(score)
    assert not t.stopped_early()
    t.after_validation(45.0)  # worse than the best of all epochs but the last two (40): stop
    assert t.stopped_early() and t.extra_state()["stopped"]


def test_init_from_loads_the_weights_only(tmp_path, tiny_corpus):
    first = trainer(tmp_path / "a", tiny_corpus)
    with torch.no_grad():
        for p in first.model.parameters():
            p.add_(1.0)
    first.progress.epoch, first.progress.step, first.progress.start_epoch = 3, 99, 5  # itself a fine-tuning
    from vdrnn.training import checkpoint

    (tmp_path / "a").mkdir(exist_ok=True)
    checkpoint.save(first.checkpoints.state(first.progress, first.extra_state()), tmp_path / "a" / "best.pt")
    second = trainer(tmp_path / "b", tiny_corpus, f"init_from={tmp_path / 'a' / 'best.pt'}")
    assert all(torch.equal(a, b) for a, b in zip(first.model.state_dict().values(),
                                                  second.model.state_dict().values(), strict=True))
    assert (second.progress.epoch, second.progress.step) == (0, 0)
    assert second.progress.start_epoch == 8  # all the epochs behind its weights, after which the report draws its curve


def test_a_run_started_with_init_from_resumes_after_its_source_is_gone(tmp_path, tiny_corpus):
    """init_from only starts a run: a resume restores the run's own weights, with the option or without it, and
    keeps the epochs it started after."""
    assert fit(trainer(tmp_path / "a", tiny_corpus, "trainer.epochs=1"))["start_epoch"] == 0
    source = tmp_path / "a" / "best.pt"
    for run in ("b", "c"):
        assert fit(trainer(tmp_path / run, tiny_corpus, "trainer.epochs=1", f"init_from={source}"))["start_epoch"] == 1
    source.unlink()
    for run, extra in (("b", [f"init_from={source}"]), ("c", [])):
        resumed = fit(trainer(tmp_path / run, tiny_corpus, "trainer.epochs=2", *extra))
        assert (resumed["epochs"], resumed["start_epoch"]) == (2, 1)


def test_a_checkpoint_from_before_run_seconds_and_start_epoch_were_kept_resumes(tmp_path, tiny_corpus):
    """Those entries are read with the values an older run had: training time only, and a fresh start."""
    from vdrnn.training import checkpoint

    fit(trainer(tmp_path / "a", tiny_corpus, "trainer.epochs=1"))
    last = tmp_path / "a" / "last.pt"
    payload = torch.load(last, weights_only=True)
    del payload["run_seconds"], payload["start_epoch"]
    checkpoint.save(payload, last)
    resumed = trainer(tmp_path / "a", tiny_corpus, "trainer.epochs=2")
    assert resumed.progress.run_seconds == payload["train_seconds"] and resumed.progress.start_epoch == 0
    assert fit(resumed)["epochs"] == 2


@pytest.mark.parametrize("schedule", [
    ["trainer.optimizer=ntasgd", "trainer.nonmono=1", "trainer.lr=5"],  # switches to averaging (epoch 4)
    ["trainer.optimizer=asgd", "trainer.stop_nonmono=true", "trainer.nonmono=1", "trainer.lr=5"],  # stops at epoch 3
    ["data.variable_bptt=true"],  # the lengths come from the CPU generator, restored with the checkpoint
], ids=["ntasgd", "stop-nonmono", "variable-bptt"])
def test_resume_is_exact_through_awds_schedule(tmp_path, tiny_corpus, schedule):
    """An interrupted run, resumed, repeats the uninterrupted one epoch for epoch, also where the checkpoint must
    carry more than the weights: NT-ASGD's switch (a new optimizer) and history, the early stop, variable BPTT."""
    common = ["dropout=variational", "dropout.input=0.3", "dropout.recurrent=0.3", "trainer.progress=false", *schedule]
    fit(trainer(tmp_path / "straight", tiny_corpus, "trainer.epochs=6", *common))
    fit(trainer(tmp_path / "resumed", tiny_corpus, "trainer.epochs=2", *common))
    resumed = trainer(tmp_path / "resumed", tiny_corpus, "trainer.epochs=6", *common)
    fit(resumed)
    keys = ("epoch", "step", "lr", "train_loss", "valid_ppl")
    assert [[r[k] for k in keys] for r in history(tmp_path / "resumed")] == \
        [[r[k] for k in keys] for r in history(tmp_path / "straight")]
    if "trainer.optimizer=ntasgd" in schedule:
        assert resumed.optimization.averaging  # the switch happened, so the resume went through it
    if "trainer.stop_nonmono=true" in schedule:
        assert resumed.stopped_early() and resumed.progress.epoch < 6


def test_max_minutes_stops_starting_epochs_and_tests_the_best(tmp_path, tiny_corpus):
    t = trainer(tmp_path, tiny_corpus, "trainer.epochs=50", "trainer.max_minutes=1e-6")
    metrics = fit(t)
    assert t.progress.epoch == 1 and metrics["epochs"] == 1 and metrics["time_limited"]
    assert "test_ppl" in metrics and (tmp_path / "best.pt").exists()
    # The time spent is part of the checkpoint: a resumed run does not get a fresh budget.
    resumed = trainer(tmp_path, tiny_corpus, "trainer.epochs=50", "trainer.max_minutes=1e-6")
    assert fit(resumed)["epochs"] == 1


def test_too_few_tokens_for_the_batch_is_refused_with_the_key(tmp_path, tiny_corpus):
    from vdrnn.errors import DataError

    with pytest.raises(DataError, match="validation split has 6 tokens, too few for data.eval_batch_size=4.*"
                                        "raise data.eval_max_tokens"):
        trainer(tmp_path, tiny_corpus, "data.eval_max_tokens=6", "data.eval_batch_size=4")
    with pytest.raises(DataError, match="test split has 6 tokens, too few for data.test_batch_size=5"):
        trainer(tmp_path, tiny_corpus, "data.eval_max_tokens=6", "data.eval_batch_size=3", "data.test_batch_size=5")


def test_a_larger_time_budget_lets_a_time_limited_run_go_on(tmp_path, tiny_corpus):
    fit(trainer(tmp_path, tiny_corpus, "trainer.epochs=3", "trainer.max_minutes=1e-6"))
    metrics = fit(trainer(tmp_path, tiny_corpus, "trainer.epochs=3", "trainer.max_minutes=60"))
    assert metrics["epochs"] == 3 and not metrics["time_limited"]


def test_a_nan_validation_score_stops_the_run_and_keeps_both_checkpoints(tmp_path, tiny_corpus):
    from vdrnn.errors import TrainingDiverged

    fit(trainer(tmp_path, tiny_corpus, "trainer.epochs=1"))
    kept = {name: (tmp_path / name).read_bytes() for name in ("last.pt", "best.pt")}
    t = trainer(tmp_path, tiny_corpus, "trainer.epochs=2")
    t.validate = lambda: {"ppl": float("nan")}  # finite training loss, diverged validation
    with pytest.raises(TrainingDiverged, match="diverged in epoch 2: validation ppl is nan.*last good one"):
        fit(t)
    assert {name: (tmp_path / name).read_bytes() for name in kept} == kept


def test_max_minutes_must_be_positive(tmp_path, tiny_corpus):
    from vdrnn.errors import ConfigError

    with pytest.raises(ConfigError, match="max_minutes"):
        trainer(tmp_path, tiny_corpus, "trainer.max_minutes=0")


def test_a_checkpoint_of_another_vocabulary_is_refused_to_start_from_and_to_resume(tmp_path, tiny_corpus):
    from vdrnn.errors import CheckpointError
    from vdrnn.training import checkpoint

    t = trainer(tmp_path / "a", tiny_corpus)
    state = t.checkpoints.state(t.progress, t.extra_state())
    state["vocab"] = ["<other>", *state["vocab"][1:]]
    (tmp_path / "a").mkdir(exist_ok=True)
    checkpoint.save(state, tmp_path / "a" / "last.pt")
    with pytest.raises(CheckpointError, match="another vocabulary.*init_from needs"):
        trainer(tmp_path / "b", tiny_corpus, f"init_from={tmp_path / 'a' / 'last.pt'}")
    with pytest.raises(CheckpointError, match="another vocabulary.*resume with the same data"):
        trainer(tmp_path / "a", tiny_corpus)  # its setup resumes from the folder's last.pt


def test_weight_average_is_the_bias_corrected_exponential_average_of_the_iterates():
    from vdrnn.training.optim import WeightAverage

    w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))  # not the zeros the running sums start at
    average, decay, seen = WeightAverage([w], decay=0.9), 0.9, []
    assert torch.equal(average.averages()[0], w)  # nothing averaged yet: the weights themselves
    for step in range(1, 6):
        with torch.no_grad():
            w.copy_(torch.tensor([step, -step, 2.0 * step]))
        seen.append(w.detach().clone())
        average.update()
        # sum_i decay^(n-i) w_i / sum_i decay^(n-i): no weight is left on the (zero) start of the sums
        factors = [decay ** (len(seen) - 1 - i) for i in range(len(seen))]
        expected = sum(f * v for f, v in zip(factors, seen, strict=True)) / sum(factors)
        assert torch.allclose(average.averages()[0], expected)
    restored = WeightAverage([w], decay=0.9)
    restored.load_state_dict(average.state_dict())
    assert restored.steps == 5 and torch.equal(restored.averages()[0], average.averages()[0])


@pytest.mark.parametrize("select,kept_epoch,best_valid", [("scale", 1, 40.0), ("last", 2, 45.0)])
def test_best_pt_keeps_the_best_validated_epoch_or_with_select_last_the_last(tmp_path, tiny_corpus, select, kept_epoch,
                                                                             best_valid):
    from vdrnn.training import checkpoint

    t = trainer(tmp_path, tiny_corpus, f"trainer.select={select}", "trainer.epochs=2")
    scores = iter([40.0, 45.0])  # the second epoch validates worse
    t.validate = lambda: {"ppl": next(scores)}
    metrics = fit(t)
    assert checkpoint.load(tmp_path / "best.pt")["epoch"] == kept_epoch
    assert metrics["best_valid_ppl"] == best_valid


def test_with_ema_the_average_is_validated_and_kept_while_training_goes_on_from_the_weights(tmp_path, tiny_corpus):
    t = trainer(tmp_path, tiny_corpus, "trainer.ema=0.9", "trainer.epochs=1", "trainer.lr=0.5")
    validated = []
    t.validate = lambda: validated.append([p.detach().clone() for p in t.model.parameters()]) or {"ppl": 1.0}
    fit(t)
    from vdrnn.training import checkpoint

    best, last = (checkpoint.load(tmp_path / name) for name in ("best.pt", "last.pt"))
    names = [n for n, _ in t.model.named_parameters()]
    sums, steps = last["weight_average"]["sums"], last["weight_average"]["steps"]
    assert steps == t.progress.step > 1
    averages = [s / (1 - 0.9**steps) for s in sums]
    assert all(torch.allclose(v, a) for v, a in zip(validated[0], averages, strict=True))  # validated: the average
    assert all(torch.equal(best["model"][n], v) for n, v in zip(names, validated[0], strict=True))  # kept in best.pt
    # ... while last.pt, what training continues from, holds the weights themselves, swapped back after validation
    assert not any(torch.allclose(last["model"][n], v) for n, v in zip(names, validated[0], strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the graphed step runs on CUDA only")
def test_graphed_steps_keep_the_ema_average_as_eager_steps_do(tmp_path, tiny_corpus):
    averages = {}
    for graph in ("auto", "off"):
        (tmp_path / graph).mkdir()
        t = trainer(tmp_path / graph, tiny_corpus, "device=cuda", f"trainer.cuda_graph={graph}", "trainer.ema=0.9",
                    "trainer.epochs=1", "trainer.lr=0.5")
        assert (t.graphed_step() is not None) == (graph == "auto")
        fit(t)
        averages[graph] = t.optimization.average.steps, t.optimization.average.averages()
    (steps, graphed), (eager_steps, eager) = averages["auto"], averages["off"]
    assert steps == eager_steps == t.progress.step > 1  # one update per replay, as per eager step
    assert all(torch.allclose(g, e, atol=1e-6) for g, e in zip(graphed, eager, strict=True))


@pytest.mark.parametrize("override,message", [
    ("trainer.ema=1.0", r"trainer.ema=1.0 is the decay .* \[0, 1\)"),
    ("trainer.optimizer=asgd", "trainer.optimizer=asgd already validates averaged weights"),
    ("trainer.optimizer=ntasgd", "trainer.optimizer=ntasgd already validates averaged weights"),
])
def test_ema_values_that_cannot_work_are_refused(tmp_path, tiny_corpus, override, message):
    from vdrnn.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        trainer(tmp_path, tiny_corpus, "trainer.ema=0.99" if "optimizer" in override else "trainer.lr=1", override)


def test_eval_of_an_ema_runs_last_checkpoint_tests_the_average_as_its_best_does(tmp_path, tiny_corpus):
    from vdrnn.training import checkpoint
    from vdrnn.training.evaluation import evaluate_checkpoint

    t = trainer(tmp_path, tiny_corpus, "trainer.ema=0.9", "trainer.epochs=1", "trainer.lr=0.5")
    metrics = fit(t)  # one epoch: best.pt and last.pt come from the same step
    for name in ("best.pt", "last.pt"):  # last.pt's model state is the raw weights; it carries the average
        evaluated = evaluate_checkpoint(t.task, t.task.parse(t.raw_config), tmp_path / name,
                                        checkpoint.load(tmp_path / name))
        assert evaluated["valid_ppl"] == pytest.approx(metrics["valid_ppl"], rel=1e-6)


def test_eval_of_an_averaged_sgd_runs_last_checkpoint_tests_the_averages(tmp_path, tiny_corpus):
    from vdrnn.training import checkpoint
    from vdrnn.training.evaluation import evaluate_checkpoint

    t = trainer(tmp_path, tiny_corpus, "trainer.optimizer=asgd", "trainer.epochs=1", "trainer.lr=0.5")
    metrics = fit(t)
    for name in ("best.pt", "last.pt"):
        evaluated = evaluate_checkpoint(t.task, t.task.parse(t.raw_config), tmp_path / name,
                                        checkpoint.load(tmp_path / name))
        assert evaluated["valid_ppl"] == pytest.approx(metrics["valid_ppl"], rel=1e-6)


# ----------------------------------------------------------------------------- AWD's AR / TAR
def last_layer_output(model, inputs, state) -> torch.Tensor:
    """The last recurrent layer's output before its output mask (its other masks at p 0 draw nothing)."""
    return model.rnn(model.embedding(inputs), state, drop_output=False)[0]


def step_gradients(t: LanguageModelTrainer, inputs, targets) -> list[torch.Tensor]:
    """The gradient train_step leaves on the parameters; lr 0 leaves the weights as they were."""
    before = [p.detach().clone() for p in t.model.parameters()]
    t.train_step(inputs, targets, t.model.initial_state(4, "cpu"), lr=0.0)
    assert all(torch.equal(p, b) for p, b in zip(t.model.parameters(), before, strict=True))
    return [p.grad.clone() for p in t.model.parameters()]


@pytest.mark.parametrize("knob", ["ar", "tar"])
def test_ar_and_tar_add_their_penalty_on_the_last_layers_output_to_the_objective(tmp_path, tiny_corpus, knob):
    """Merity et al.: loss + ar * mean(h_L^2) (AR) or + tar * mean((h_L[t+1] - h_L[t])^2) (TAR), h_L the last
    layer's output [T, B, H], the mean over all its entries and not scaled by T as the summed NLL is."""
    weight = 2.0  # AWD's AR (conf/model/awd.yaml: ar 2, tar 1); any value > 0 will do
    t = trainer(tmp_path, tiny_corpus, f"trainer.{knob}={weight}")  # dropout=none: raw and dropped outputs agree
    inputs, targets = t.train_data[:6], t.train_data[1:7]
    got = step_gradients(t, inputs, targets)
    params = list(t.model.parameters())
    h = last_layer_output(t.model, inputs, t.model.initial_state(4, "cpu"))
    nll = 6 * torch.nn.functional.cross_entropy(t.model.decoder(h).flatten(0, 1), targets.flatten())  # sum over T=6
    penalty = h.pow(2).mean() if knob == "ar" else (h[1:] - h[:-1]).pow(2).mean()
    nll_grad = torch.autograd.grad(nll, params, retain_graph=True, allow_unused=True)
    penalty_grad = torch.autograd.grad(penalty, params, allow_unused=True)
    zero = torch.zeros_like
    expected = [(n if n is not None else zero(p)) + weight * (r if r is not None else zero(p))
                for p, n, r in zip(params, nll_grad, penalty_grad, strict=True)]
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-7)
    # The penalty's share is far outside that tolerance (so leaving it out, or scaling it by T, would fail):
    share = max(((weight * r).abs() / (1e-7 + 1e-5 * e.abs())).max().item()
                for r, e in zip(penalty_grad, expected, strict=True) if r is not None)
    assert share > 100  # measured: 3.7e4 (ar), 1.2e3 (tar)


def test_ar_penalizes_the_dropped_output_and_tar_the_raw_one(tmp_path, tiny_corpus):
    """With output dropout the two tensors differ: AR reads the output after its mask, TAR before it."""
    t = trainer(tmp_path, tiny_corpus, "dropout=variational", "dropout.embedding=0", "dropout.input=0",
                "dropout.recurrent=0", "dropout.output=0.5", "trainer.ar=2.0", "trainer.tar=1.0")
    inputs, targets = t.train_data[:6], t.train_data[1:7]
    torch.manual_seed(3)
    got = step_gradients(t, inputs, targets)
    params = list(t.model.parameters())
    torch.manual_seed(3)
    raw = last_layer_output(t.model, inputs, t.model.initial_state(4, "cpu"))  # draws nothing: those p are 0
    # The only draw of the step: the output mask, one [B, H] Bernoulli(1 - 0.5) / (1 - 0.5) per sequence.
    mask = torch.empty(4, raw.shape[-1]).bernoulli_(0.5).div_(0.5)
    dropped = raw * mask
    assert not torch.allclose(dropped, raw)

    def gradient(ar_on, tar_on):
        nll = 6 * torch.nn.functional.cross_entropy(t.model.decoder(dropped).flatten(0, 1), targets.flatten())
        loss = nll + 2.0 * ar_on.pow(2).mean() + 1.0 * (tar_on[1:] - tar_on[:-1]).pow(2).mean()
        return torch.autograd.grad(loss, params, retain_graph=True)

    for g, e in zip(got, gradient(dropped, raw), strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-7)
    swapped = gradient(raw, dropped)  # AR on the raw output, TAR on the dropped one: another objective
    assert not all(torch.allclose(g, s, rtol=1e-3, atol=1e-5) for g, s in zip(got, swapped, strict=True))


# ----------------------------------------------------------------------------- weight decay
@pytest.mark.parametrize("mode", ["gal", "l2"])
def test_weight_decay_gal_shrinks_after_the_step_and_l2_goes_through_the_lr(tmp_path, tiny_corpus, mode):
    """gal: w <- (w - lr * g) * (1 - lambda), independent of lr; l2: w <- w - lr * (g + lambda * w)."""
    decay, lr = 0.1, 0.5  # any lambda in (0, 1) and lr > 0
    results, w0 = {}, None
    for name, overrides, step_lr in (("plain", [], lr), ("lr0", [f"trainer.weight_decay={decay}"], 0.0),
                                     ("lr", [f"trainer.weight_decay={decay}"], lr)):
        (tmp_path / name).mkdir()
        t = trainer(tmp_path / name, tiny_corpus, f"trainer.weight_decay_mode={mode}", *overrides)
        start = [p.detach().clone() for p in t.model.parameters()]
        w0 = w0 or start
        assert all(torch.equal(a, b) for a, b in zip(start, w0, strict=True))  # the seed's init, every time
        t.train_step(t.train_data[:6], t.train_data[1:7], t.model.initial_state(4, "cpu"), lr=step_lr)
        results[name] = [p.detach().clone() for p in t.model.parameters()]
    assert all(not torch.equal(p, w) for p, w in zip(results["plain"], w0, strict=True))  # the step did move them
    for w, at_lr0, plain, at_lr in zip(w0, results["lr0"], results["plain"], results["lr"], strict=True):
        if mode == "gal":
            torch.testing.assert_close(at_lr0, w * (1 - decay), rtol=1e-6, atol=0)
            torch.testing.assert_close(at_lr, plain * (1 - decay), rtol=1e-5, atol=1e-7)
        else:
            assert torch.equal(at_lr0, w)  # lr 0: the L2 term is in the gradient, which lr 0 ignores
            torch.testing.assert_close(at_lr, plain - lr * decay * w, rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------- variable BPTT
def test_variable_bptt_minibatches_cover_the_stream_once_with_random_lengths(tmp_path, tiny_corpus):
    t = trainer(tmp_path, tiny_corpus, "data.variable_bptt=true")  # data.bptt=6
    torch.manual_seed(0)
    batches = list(t.minibatches())
    torch.manual_seed(0)
    assert [x.shape[0] for x, _ in list(t.minibatches())] == [x.shape[0] for x, _ in batches]  # the seed decides
    data = t.train_data
    start = 0
    for inputs, targets in batches:  # in order, each row once, the targets the next row of the stream
        length = inputs.shape[0]
        assert torch.equal(inputs, data[start : start + length]) and torch.equal(targets, data[start + 1 : start + 1 + length])
        start += length
    assert start == data.shape[0] - 1  # every row but the last is read (it is only a target)
    lengths = [x.shape[0] for x, _ in batches]
    # Merity et al.'s minimum of 5 steps, reached (the N(6, 5) draws often fall below it); only the last
    # minibatch, cut by the end of the stream, may be shorter.
    assert min(lengths[:-1]) == 5 and lengths[-1] >= 1
    assert max(lengths) > 6 and len(set(lengths)) > 3  # jittered around bptt, not bptt every time


def test_variable_bptt_scales_each_steps_lr_by_its_length_over_bptt(tmp_path, tiny_corpus):
    """Merity et al.: a minibatch of length L trains at lr * L / bptt, so short ones move the weights less."""
    t = trainer(tmp_path, tiny_corpus, "data.variable_bptt=true", "trainer.epochs=1", "trainer.lr=1",
                "trainer.progress=false")  # data.batch_size=4, data.bptt=6
    seen = recording_steps(t)
    fit(t)
    assert len({tokens for _, tokens, _ in seen}) > 2  # several lengths
    for _, tokens, lr in seen:
        assert lr == pytest.approx((tokens / 4) / 6, rel=1e-12)


def test_variable_bptt_lengths_are_mostly_around_bptt_and_only_sometimes_around_half_of_it(tmp_path, tiny_corpus):
    """Merity et al.'s draw: base bptt with probability 0.95, else bptt / 2, jittered by N(0, 5). With AWD's bptt 70
    the two modes are far apart, so the share of minibatches drawn around 35 shows which one is the common one."""
    t = trainer(tmp_path, tiny_corpus, "data.variable_bptt=true", "data.bptt=70")
    t.train_data = torch.zeros(20_001, 1, dtype=torch.long)  # ~290 minibatches: enough draws
    torch.manual_seed(0)
    lengths = torch.tensor([x.shape[0] for x, _ in t.minibatches()][:-1], dtype=torch.float)  # the last one is cut
    near_half = (lengths < 70 * 3 / 4).float().mean().item()  # the modes are 7 sd apart; this line is 3.5 from each
    assert 0.01 < near_half < 0.12  # 0.05 expected; the mode swapped would give 0.95
    assert abs(lengths.median().item() - 70) <= 3


# ----------------------------------------------------------------------------- MC settings reach mc_perplexity
@pytest.mark.parametrize("word_dropout,masks,amp", [(True, "minibatch", "off"), (False, "stream", "bf16")])
def test_the_test_passes_the_mc_settings_to_mc_perplexity(tmp_path, tiny_corpus, monkeypatch, word_dropout, masks,
                                                          amp):
    import inspect

    import vdrnn.tasks.lm.evaluate
    from vdrnn.tasks.lm.evaluate import mc_perplexity

    calls = []

    def fake(*args, **kwargs):
        calls.append(inspect.signature(mc_perplexity).bind(*args, **kwargs).arguments)
        return 7.0

    monkeypatch.setattr(vdrnn.tasks.lm.evaluate, "mc_perplexity", fake)
    t = trainer(tmp_path, tiny_corpus, "eval=mc", "eval.samples=3", "eval.batch=2",
                f"eval.word_dropout={str(word_dropout).lower()}", f"eval.mc_masks={masks}", f"trainer.amp={amp}")
    metrics = t.test_metrics()
    assert metrics["test_ppl_mc"] == 7.0 and len(calls) == 1
    got = calls[0]
    assert got["model"] is t.model and torch.equal(got["stream"], t.data.test)
    assert (got["samples"], got["batch"], got["bptt"]) == (3, 2, 6)
    assert got["word_dropout"] is word_dropout and got["masks"] == masks and got.get("amp", "off") == amp


# ----------------------------------------------------------------------------- the epoch loop
def recording_steps(t: LanguageModelTrainer) -> list[tuple[float, int, float]]:
    """Wrap ``t.train_step`` to record each eager step's (mean NLL, target tokens, lr)."""
    seen, step = [], t.train_step

    def recording(inputs, targets, state, lr):
        out = step(inputs, targets, state, lr)
        seen.append((out[0].item(), targets.numel(), lr))
        return out

    t.train_step = recording
    return seen


def test_the_epochs_training_loss_is_the_token_weighted_mean_of_its_steps_read_every_log_every(tmp_path,
                                                                                              tiny_corpus):
    t = trainer(tmp_path, tiny_corpus, "trainer.epochs=1", "trainer.log_every=7", "trainer.progress=false")
    seen = recording_steps(t)
    fit(t)
    n = len(seen)
    assert n % 7 and len({tokens for _, tokens, _ in seen}) > 1  # a last, shorter window and minibatch
    expected = sum(loss * tokens for loss, tokens, _ in seen) / sum(tokens for _, tokens, _ in seen)
    assert history(tmp_path)[0]["train_loss"] == pytest.approx(expected, rel=1e-9)
    # train/loss: one point per trainer.log_every steps, and one for the epoch's last, partial window
    events = events_of(tmp_path)
    assert [e.step for e in events.Scalars("train/loss")] == [*range(7, n + 1, 7), n]
    # best/* once per epoch, at its last step; the final test one step later
    assert [e.step for e in events.Scalars("best/valid_ppl")] == [n]
    assert [e.step for e in events.Scalars("test/ppl")] == [n + 1]


def test_each_epoch_trains_at_its_scheduled_lr(tmp_path, tiny_corpus):
    t = trainer(tmp_path, tiny_corpus, "trainer.epochs=2", "trainer.lr=1", "trainer.lr_decay=2",
                "trainer.lr_decay_start=0", "trainer.progress=false")
    seen = recording_steps(t)
    fit(t)
    assert [r["lr"] for r in history(tmp_path)] == [1.0, 0.5]  # lr_at(1), lr_at(2)
    steps = history(tmp_path)[0]["step"]
    assert {lr for _, _, lr in seen[:steps]} == {1.0} and {lr for _, _, lr in seen[steps:]} == {0.5}


def test_each_minibatch_starts_from_the_previous_ones_final_state_and_the_epoch_from_zero(tmp_path, tiny_corpus):
    """Truncated BPTT: the hidden state is carried (detached) over an epoch's minibatches, zero only at its start."""
    t = trainer(tmp_path, tiny_corpus, "trainer.epochs=1", "trainer.progress=false")
    step, seen = t.train_step, []

    def recording(inputs, targets, state, lr):
        out = step(inputs, targets, state, lr)
        seen.append((state, out[2]))
        return out

    t.train_step = recording
    fit(t)
    assert len(seen) > 2 and all(not h.any() and not c.any() for h, c in seen[0][0])
    for (_, returned), (passed, _) in zip(seen[:-1], seen[1:], strict=True):
        for (h, c), (h2, c2) in zip(returned, passed, strict=True):
            assert torch.equal(h, h2) and torch.equal(c, c2) and h.abs().sum() > 0
            assert not h2.requires_grad and not c2.requires_grad


def test_a_nan_training_loss_stops_the_run_at_its_read_before_any_checkpoint(tmp_path, tiny_corpus):
    from vdrnn.errors import TrainingDiverged

    t = trainer(tmp_path, tiny_corpus, "trainer.epochs=1", "trainer.log_every=3", "trainer.progress=false")
    step = t.train_step

    def diverging(inputs, targets, state, lr):  # the weights stay finite: only the reported loss diverges
        nll, grad_norm, state = step(inputs, targets, state, lr)
        return (nll * math.nan if t.progress.step == 4 else nll), grad_norm, state

    t.train_step = diverging
    with pytest.raises(TrainingDiverged, match="diverged in epoch 1: training loss is nan at step 6.*before its "
                                               "first checkpoint"):
        fit(t)
    assert not any((tmp_path / name).exists() for name in ("last.pt", "best.pt", "metrics.jsonl"))


def test_max_minutes_counts_minutes_and_a_run_that_ran_all_its_epochs_is_not_time_limited(tmp_path, tiny_corpus):
    t = trainer(tmp_path, tiny_corpus, "trainer.epochs=1", "trainer.max_minutes=2", "trainer.progress=false")
    t.progress.run_seconds = 119.0
    assert not t.progress.time_limit_reached(t.cfg.trainer)
    t.progress.run_seconds = 120.0
    assert t.progress.time_limit_reached(t.cfg.trainer)
    # The budget ran out in the last epoch: the epochs, not the time limit, ended the run.
    metrics = fit(trainer(tmp_path, tiny_corpus, "trainer.epochs=1", "trainer.max_minutes=1e-6",
                      "trainer.progress=false"))
    assert metrics["epochs"] == 1 and not metrics["time_limited"]


def test_a_step_clips_the_global_gradient_norm_to_trainer_clip(tmp_path, tiny_corpus):
    lr, clip = 0.5, 0.01
    t = trainer(tmp_path, tiny_corpus, f"trainer.clip={clip}")
    before = [p.detach().clone() for p in t.model.parameters()]
    _, grad_norm, _ = t.train_step(t.train_data[:6], t.train_data[1:7], t.model.initial_state(4, "cpu"), lr=lr)
    assert grad_norm.item() > 100 * clip  # the norm reported is the one before clipping
    moved = torch.sqrt(sum((p.detach() - b).pow(2).sum() for p, b in zip(t.model.parameters(), before, strict=True)))
    assert moved.item() == pytest.approx(lr * clip, rel=1e-4)  # plain SGD: the step is lr times the clipped gradient


@pytest.mark.parametrize("optimizer,averaging", [("asgd", False), ("ntasgd", True)])
def test_averaged_sgd_takes_plain_sgd_steps_and_averages_the_iterates(optimizer, averaging):
    """Merity et al.'s ASGD (t0=0, lambd=0), from the start or after NT-ASGD's switch: the weights move as under SGD,
    and the averages it validates are the running mean of the iterates, not the last one."""
    from vdrnn.config import TrainerConfig
    from vdrnn.training.optim import make_optimizer

    model = torch.nn.Linear(3, 1, bias=False)
    w = model.weight
    with torch.no_grad():
        w.zero_()
    opt = make_optimizer(model, TrainerConfig(optimizer=optimizer, lr=1.0), averaging=averaging)
    assert isinstance(opt, torch.optim.ASGD)
    seen = []
    for step in range(1, 5):
        w.grad = torch.full_like(w, -float(step))
        opt.step()
        seen.append(w.detach().clone())
        torch.testing.assert_close(w.detach(), torch.full_like(w, step * (step + 1) / 2))  # w - lr * grad
        # torch's ASGD with t0=0 (Merity et al.'s reference uses it so): the mean of the iterates from the second on
        torch.testing.assert_close(opt.state[w]["ax"], torch.stack(seen[1:] or seen).mean(0))


# ----------------------------------------------------------------------------- what is validated and tested
def test_validation_scores_the_validation_split_and_the_test_the_test_split(tmp_path, tiny_corpus):
    """Model selection (best.pt, NT-ASGD's trigger, early stop) reads the validation split only; the final test reads
    the test split at data.test_batch_size (1: every token scored in one stream, as the papers report)."""
    from vdrnn.tasks.lm.evaluate import perplexity

    t = trainer(tmp_path, tiny_corpus, "data.eval_batch_size=4", "data.test_batch_size=1")  # data.bptt=6
    score = {(split, batch): perplexity(t.model, getattr(t.data, split), batch, 6)
             for split in ("valid", "test") for batch in (1, 4)}
    assert len(set(score.values())) == 4  # a mix-up of split or batch size would show
    assert t.validate()["ppl"] == score["valid", 4]
    metrics = t.test_metrics()
    assert (metrics["valid_ppl"], metrics["test_ppl"]) == (score["valid", 4], score["test", 1])
