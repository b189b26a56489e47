"""The real `vdrnn` command on the real IMDB and scale data (subsets): outputs, TensorBoard, eval, errors."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from tests.helpers import cli_in_process, composed, events_of, history, real_data, run_in_process
from vdrnn import report
from vdrnn.tasks.sentiment.datasets import imdb, scale

pytestmark = pytest.mark.slow

# A small model on a few hundred reviews: seconds per run on 2 CPU cores.
SMALL = ["model=sentiment", "model.hidden_size=16", "data.max_length=40", "data.limit=200", "data.batch_size=32",
         "trainer.epochs=2", "trainer.log_every=2", "trainer.progress=false", "device=cpu"]
CLASSIFICATION = ("accuracy", "nll", "ece", "entropy")


@pytest.fixture(scope="module")
def imdb_dir():
    return real_data("imdb", "train.jsonl.gz")


@pytest.fixture(scope="module")
def scale_dir():
    return real_data("scale_data", "scaledata")


def test_real_imdb_has_25k_balanced_reviews_per_split_and_scale_5006(imdb_dir, scale_dir):
    reviews = imdb.load(str(imdb_dir))
    for split in ("train", "test"):  # the dataset card's counts, written out: the loader only warns on others
        assert len(reviews[split]) == 25_000
        assert sum(r.target for r in reviews[split]) == 12_500
    assert "<br />" in reviews["train"][0].text or any("<br />" in r.text for r in reviews["train"][:50])
    rated = scale.load(str(scale_dir))
    assert len(rated) == 5_006 and all(0 <= r.target <= 1 for r in rated)


@pytest.fixture(scope="module")
def imdb_run(tmp_path_factory, imdb_dir):
    cwd = tmp_path_factory.mktemp("cwd")
    run_in_process("train", "dataset=imdb", "cell=gru", "dropout=variational", *SMALL, f"data.root={imdb_dir}",
            "eval=mc", "eval.samples=4", "eval.batch=2", "hydra.run.dir=run", cwd=cwd)
    return cwd / "run"


def test_imdb_run_writes_metrics_checkpoints_and_events(imdb_run):
    metrics = json.loads((imdb_run / "metrics.json").read_text())
    assert metrics["smoke"] and metrics["epochs"] == 2 and metrics["config"]["cell"]["type"] == "gru"
    # This tiny run learns nothing (measured: test NLL 0.6932 against log 2 = 0.6931 for the constant 1/2, accuracy
    # 0.49, entropy 0.6931), so no bound says it beats a constant predictor; what holds is what the definitions
    # imply for two classes, plus agreement with the reliability diagram's sums. The calibration report: those sums
    # cover the test set and give back the ECE, and the MC - weight scaling difference is that of the two ECEs,
    # inside its interval.
    n = 200  # data.limit=200: 200 test reviews
    for suffix in ("", "_mc"):
        accuracy, nll, ece, entropy = (metrics[f"test_{key}{suffix}"] for key in CLASSIFICATION)
        bins = metrics[f"test_reliability{suffix}"]
        assert sum(bins["count"]) == n
        assert 0 <= accuracy <= 1 and accuracy * n == pytest.approx(round(accuracy * n))  # a count of reviews
        assert accuracy == pytest.approx(sum(bins["right"]) / n)  # right answers, counted bin by bin
        assert 0.5 <= sum(bins["confidence"]) / n <= 1  # the larger of two probabilities
        assert 0 <= ece <= 1
        assert 0 <= entropy <= math.log(2) + 1e-12  # two classes: at most log 2
        assert 0 <= nll < math.inf
        gaps = sum(abs(r - c) for r, c in zip(bins["right"], bins["confidence"], strict=True))
        assert gaps / sum(bins["count"]) == pytest.approx(ece)
        assert 0 < metrics[f"test_ece_floor{suffix}"] < 1
    low, high = metrics["test_ece_mc_minus_ws_ci"]
    assert metrics["test_ece_mc_minus_ws"] == pytest.approx(metrics["test_ece_mc"] - metrics["test_ece"])
    assert low <= metrics["test_ece_mc_minus_ws"] <= high
    epochs = history(imdb_run)
    assert [e["epoch"] for e in epochs] == [1, 2] and all("test_accuracy" in e and "valid_nll" in e for e in epochs)
    assert min(e["valid_nll"] for e in epochs) == pytest.approx(metrics["best_valid_nll"])
    for name in ("last.pt", "best.pt"):
        payload = torch.load(imdb_run / name, weights_only=True)
        assert payload["config"]["data"]["name"] == "imdb" and "rnn.weight_hh_l0" in payload["model"]
    events = list(imdb_run.glob("events.out.tfevents.*"))
    assert len(events) == 1  # hparams live in the run's own file
    acc = events_of(imdb_run)
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/grad_norm", "train/wps", "valid/accuracy", "best/valid_nll",
            "test_per_epoch/accuracy", "test/accuracy", "test/accuracy_mc", "test/ece_mc", "test/ece_mc_minus_ws"} <= tags
    assert acc.Scalars("test/accuracy")[-1].value == pytest.approx(metrics["test_accuracy"], rel=1e-5)
    assert b"dropout.recurrent" in b"".join(acc.PluginTagToContent("hparams").values())


def test_eval_command_reproduces_the_test_numbers(imdb_run, imdb_dir):
    run_in_process("eval", f"checkpoint={imdb_run / 'best.pt'}", f"data.root={imdb_dir}", "device=cpu",
            "hydra.run.dir=eval", cwd=imdb_run.parent)
    evaluated = json.loads((imdb_run.parent / "eval" / "eval.json").read_text())
    trained = json.loads((imdb_run / "metrics.json").read_text())
    assert evaluated["test_accuracy"] == pytest.approx(trained["test_accuracy"])
    assert evaluated["test_nll"] == pytest.approx(trained["test_nll"], rel=1e-6)
    assert evaluated["mc_samples"] == trained["mc_samples"] == 4  # the run's own MC settings, not eval/mc.yaml's
    # `vdrnn report` gives it a line of the IMDB evaluation table, the model named as the training table names it.
    report.main([str(imdb_run.parent / "eval"), "--out", str(imdb_run.parent / "report")])
    with open(imdb_run.parent / "report" / "imdb_evaluations.csv") as f:
        [line] = list(csv.DictReader(f))
    assert (line["model"], line["mode"]) == ("GRU · variational (smoke)", "MC, 4 passes")
    assert line["accuracy (%)"] == f"{100 * evaluated['test_accuracy']:.2f}"
    assert line["MC ECE"] == f"{evaluated['test_ece_mc']:.4f}"


def test_a_finished_run_resumes_from_last_pt_for_more_epochs(imdb_run, imdb_dir):
    run_in_process("train", "dataset=imdb", "cell=gru", "dropout=variational", *SMALL, f"data.root={imdb_dir}",
            "eval=mc", "eval.samples=4", "eval.batch=2", "trainer.epochs=3", "hydra.run.dir=run", cwd=imdb_run.parent)
    epochs = [record["epoch"] for record in history(imdb_run)]
    assert epochs == [1, 2, 3] and "resumed from" in (imdb_run / "vdrnn.log").read_text()


def test_with_ema_the_test_and_eval_of_either_checkpoint_use_the_weight_average(tmp_path, imdb_dir):
    run_in_process("train", "experiment=imdb_lstm_variational", *SMALL, "trainer.epochs=1", "trainer.ema=0.9", "eval=scale",
            f"data.root={imdb_dir}", "hydra.run.dir=run", cwd=tmp_path)
    trained = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert trained["config"]["trainer"]["ema"] == 0.9
    for name in ("best.pt", "last.pt"):  # one epoch: both hold the same average, last.pt beside the raw weights
        run_in_process("eval", f"checkpoint={tmp_path / 'run' / name}", f"data.root={imdb_dir}", "device=cpu",
                f"hydra.run.dir=eval_{name}", cwd=tmp_path)
        evaluated = json.loads((tmp_path / f"eval_{name}" / "eval.json").read_text())
        assert evaluated["test_nll"] == pytest.approx(trained["test_nll"], rel=1e-6)


def test_scale_regression_run_reports_rmse_both_ways(tmp_path, scale_dir):
    run_in_process("train", "experiment=scale_lstm_variational", *SMALL, "trainer.epochs=1", f"data.root={scale_dir}",
            "eval.samples=3", "hydra.run.dir=run", cwd=tmp_path)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["config"]["data"]["name"] == "scale" and metrics["mc_samples"] == 3 and "best_valid_rmse" in metrics
    # The weight-scaling RMSE recomputed from best.pt in rating units: predictions and targets both mapped back
    # through the training ratings' mean and std (a unit slip, e.g. standardised units, is a factor ~5 off).
    from vdrnn.tasks import TASKS
    from vdrnn.training import checkpoint

    sentiment = TASKS["sentiment"]
    cfg = sentiment.parse(metrics["config"])
    task = sentiment.load_data(cfg)
    model = sentiment.build_model(cfg, task, torch.device("cpu"))
    best = tmp_path / "run" / "best.pt"
    checkpoint.load_model_state(model, checkpoint.load(best), best, "the run's own model")
    with torch.no_grad():
        outputs = model.eval()(task.test.tokens.t(), task.test.lengths).squeeze(-1).double()
    predicted = task.target_mean + task.target_std * outputs
    ratings = task.target_mean + task.target_std * task.test.targets.double()
    assert metrics["test_rmse"] == pytest.approx((predicted - ratings).pow(2).mean().sqrt().item(), rel=1e-5)
    # This tiny run learns nothing (measured: test RMSE 0.2283, the test ratings' std 0.2279, the training mean as
    # a constant 0.2285), so no bound says it beats the std of the targets; an RMSE is positive and finite.
    assert 0 < metrics["test_rmse_mc"] < math.inf


def test_gals_protocol_trains_on_every_training_review_and_tests_the_last_epoch(tmp_path, scale_dir):
    """data.valid_fraction=0 trainer.select=last, the protocol of Gal's scripts (no review held out, a fixed number
    of epochs, the final weights tested), from the command line: no validation anywhere in the outputs, and the run
    read back by TensorBoard and `vdrnn report`."""
    run_in_process("train", "experiment=scale_lstm_variational", *SMALL, f"data.root={scale_dir}", "data.valid_fraction=0",
            "trainer.select=last", "eval.samples=3", "hydra.run.dir=run", cwd=tmp_path)
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["best_valid_rmse"] is None and not any(key.startswith("valid_") for key in metrics)
    assert metrics["epochs"] == 2 and torch.load(run / "best.pt", weights_only=True)["epoch"] == 2
    assert metrics["test_rmse"] == pytest.approx(history(run)[-1]["test_rmse"], rel=1e-6)  # the last epoch's weights
    assert " / 0 valid / " in (run / "vdrnn.log").read_text()
    tags = set(events_of(run).Tags()["scalars"])
    assert {"test_per_epoch/rmse", "test/rmse", "test/rmse_mc"} <= tags
    assert not any(tag.startswith(("valid/", "best/")) for tag in tags)
    report.main([str(run), "--out", str(tmp_path / "report")])
    with open(tmp_path / "report" / "scale_table.csv") as f:
        [row] = list(csv.DictReader(f))
    assert row["RMSE"] == f"{metrics['test_rmse']:.4f}" and row["MC RMSE"] == f"{metrics['test_rmse_mc']:.4f}"
    assert "data.valid_fraction=0" in row["overrides"] and "trainer.select=last" in row["overrides"]
    run_in_process("eval", f"checkpoint={run / 'best.pt'}", f"data.root={scale_dir}", "device=cpu", "hydra.run.dir=eval",
            cwd=tmp_path)
    evaluated = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert evaluated["test_rmse"] == pytest.approx(metrics["test_rmse"], rel=1e-6) and evaluated["epoch"] == 2
    assert not any(key.startswith("valid_") for key in evaluated)


def test_gru_with_learned_gaussian_noise_trains_its_alpha(tmp_path, imdb_dir):
    """dropout.learn_alpha on the sentiment model (per-gate GRU masks): log alpha [3, D] per site, trained, <= 0."""
    run_in_process("train", "experiment=imdb_gru_variational", "dropout=gaussian_untied", "dropout.learn_alpha=true",
            "dropout.recurrent=0.3", *SMALL, "trainer.epochs=1", "eval=scale", f"data.root={imdb_dir}",
            "hydra.run.dir=run", cwd=tmp_path)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert 0 < metrics["noise"]["alpha_recurrent0"] <= 1 and metrics["noise"]["kl"] > 0
    state = torch.load(tmp_path / "run" / "best.pt", weights_only=True)["model"]
    recurrent = state["rnn.noise.log_alpha.recurrent0"]
    assert recurrent.shape == (3, 16) and recurrent.max() <= 0
    assert not torch.allclose(recurrent, torch.full_like(recurrent, math.log(0.3 / 0.7)))  # trained from alpha = p / (1 - p)


@pytest.mark.parametrize("dataset,selector", [("imdb", "nll"), ("scale", "rmse")])
def test_train_returns_the_selection_score_for_a_sweeper(tmp_path, monkeypatch, request, dataset, selector):
    """A Hydra sweeper (e.g. Optuna) minimises what `train` returns: a sentiment run's best_valid_nll or _rmse."""
    root = request.getfixturevalue("imdb_dir" if dataset == "imdb" else "scale_dir")
    cfg = composed(f"dataset={dataset}", *SMALL, "trainer.epochs=1", f"data.root={root}")
    # Called in-process to see the return value: the run's output dir and the overrides Hydra would have recorded.
    score = cli_in_process(monkeypatch, tmp_path, ["trainer.epochs=1"]).train_command(cfg)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert isinstance(score, float) and score == metrics[f"best_valid_{selector}"]
    assert (tmp_path / "overrides.yaml").read_text() == "- trainer.epochs=1\n"  # what `vdrnn report` reads


@pytest.mark.parametrize("args,message", [
    (["cell=gru", "dropout=moon"], "dropout=moon cannot run on cell=gru"),
    (["data.root=MISSING"], "holds none of train.jsonl.gz, test.jsonl.gz"),
])
def test_clear_errors_without_traceback(tmp_path, args, message):
    args = [a.replace("MISSING", str(tmp_path)) for a in args]
    result = run_in_process("train", "dataset=imdb", *SMALL, *args, "hydra.run.dir=run", cwd=tmp_path, check=False)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
