"""What the Bayesian reading of dropout buys, through the real `vdrnn` command on fixture runs: the uncertainty's
parts in metrics.json and TensorBoard, selective prediction, the MC average every way (`vdrnn eval -m` over
eval.average, eval.dropout_scale and eval.temperature) and the report's tables of them; and each bad input refused
in a line."""

from __future__ import annotations

import csv
import gzip
import json
import random
from pathlib import Path

import pytest

from tests.helpers import TINY, cli_in_process, composed, events_of, run_cli, run_in_process
from vdrnn import report

WORDS = [f"w{i}" for i in range(30)]


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(f" {line} \n" for line in lines))


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path]:
    """A PTB-layout corpus whose lines count up (an <unk> now and then)."""
    rng = random.Random(0)
    ptb = tmp_path_factory.mktemp("ptb")
    for split, n in (("train", 300), ("valid", 30), ("test", 30)):
        lines = []
        for _ in range(n):
            start = rng.randrange(30)
            words = [WORDS[(start + k) % 30] for k in range(rng.randrange(3, 10))]
            lines.append(" ".join("<unk>" if rng.random() < 0.05 else word for word in words))
        write_lines(ptb / f"ptb.{split}.txt", lines)
    return (ptb,)


def train_in_process(run: Path, overrides: list[str]) -> Path:
    with pytest.MonkeyPatch.context() as monkeypatch:
        cli_in_process(monkeypatch, run, overrides).train_command(composed(*overrides))
    return run


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory, corpora) -> Path:
    """A one-epoch variational language model on the counting corpus, tested with MC dropout."""
    return train_in_process(tmp_path_factory.mktemp("lm") / "run", [
        *TINY, f"data.root={corpora[0]}", "trainer.epochs=1", "dropout=variational", "eval=mc", "eval.samples=3",
        "eval.batch=3", "device=cpu"])


@pytest.fixture(scope="module")
def imdb_dir(tmp_path_factory) -> Path:
    """IMDB's file layout: 60 reviews a split, the label said by `good` or `bad` among words that say nothing."""
    folder, rng = tmp_path_factory.mktemp("imdb"), random.Random(1)
    for split in ("train", "test"):
        with gzip.open(folder / f"{split}.jsonl.gz", "wt", encoding="utf-8") as f:
            for i in range(60):
                words = " ".join(rng.choice(["film", "plot", "scene", "the", "actor"]) for _ in range(rng.randrange(4, 12)))
                text = f"{words} {'good' if i % 2 else 'bad'} {words}<br />"
                f.write(json.dumps({"id": i, "rating": 8 if i % 2 else 2, "label": i % 2, "file": "", "text": text})
                        + "\n")
    return folder


@pytest.fixture(scope="module")
def imdb_run(tmp_path_factory, imdb_dir) -> Path:
    """A small variational GRU classifier on the fake reviews, tested with MC dropout."""
    return train_in_process(tmp_path_factory.mktemp("imdb") / "run", [
        "dataset=imdb", "cell=gru", "dropout=variational", f"data.root={imdb_dir}", "model.hidden_size=8",
        "data.max_length=16", "data.batch_size=8", "data.valid_fraction=0.25", "trainer.epochs=3",
        "trainer.progress=false", "device=cpu", "eval=mc", "eval.samples=3"])


def final_scalars(run: Path) -> dict[str, float]:
    events = events_of(run)
    return {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"] if tag.startswith("test/")}


def test_an_mc_test_splits_each_tokens_uncertainty_into_its_parts_in_metrics_json_and_tensorboard(lm_run):
    metrics = json.loads((lm_run / "metrics.json").read_text())
    total, aleatoric, epistemic = (metrics[f"test_uncertainty_{part}_mc"] for part in
                                   ("total", "aleatoric", "epistemic"))
    assert total == pytest.approx(metrics["test_entropy_mc"])  # arithmetic, T = 1: the predictor is the mixture
    assert total == pytest.approx(aleatoric + epistemic) and 0 < epistemic < aleatoric
    scalars = final_scalars(lm_run)
    for part, value in (("total", total), ("aleatoric", aleatoric), ("epistemic", epistemic)):
        assert scalars[f"test/uncertainty_{part}_mc"] == pytest.approx(value, rel=1e-6)


def test_a_classifiers_test_gives_selective_prediction_and_the_uncertaintys_parts_per_review(imdb_run):
    metrics = json.loads((imdb_run / "metrics.json").read_text())
    scalars = final_scalars(imdb_run)
    for suffix, scores in (("", ("max_prob", "entropy")), ("_mc", ("max_prob", "entropy", "mutual_information"))):
        curves = metrics[f"test_retention_curves{suffix}"]
        oracle = metrics[f"test_retention_area_oracle{suffix}"]
        for score in (*scores, "oracle"):
            area = metrics[f"test_retention_area_{score}{suffix}"]
            assert curves[score][-1] == pytest.approx(metrics[f"test_accuracy{suffix}"])  # everything kept
            assert 0 < area <= oracle + 1e-12  # no score refuses the wrong predictions sooner than the oracle
            assert scalars[f"test/retention_area_{score}{suffix}"] == pytest.approx(area, rel=1e-6)
    parts = [metrics[f"test_uncertainty_{part}_mc"] for part in ("total", "aleatoric", "epistemic")]
    assert parts[0] == pytest.approx(parts[1] + parts[2]) and parts[2] >= 0
    assert scalars["test/uncertainty_epistemic_mc"] == pytest.approx(parts[2], rel=1e-6)
    # The report's selective-prediction table gives the run's areas; its plot is a PNG.
    report.main([str(imdb_run), "--out", str(imdb_run.parent / "report")])
    with open(imdb_run.parent / "report" / "imdb_selective.csv") as f:
        [line] = list(csv.DictReader(f))
    assert line["MC MI area"] == f"{metrics['test_retention_area_mutual_information_mc']:.4f}"
    assert line["WS oracle area"] == f"{metrics['test_retention_area_oracle']:.4f}"
    assert (imdb_run.parent / "report" / "imdb_retention.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_eval_sweeps_the_mc_average_every_way_and_the_report_sets_them_side_by_side(lm_run, corpora, tmp_path):
    ptb, = corpora
    # 4 test streams: a second or so a job.
    run_cli("eval", "-m", f"checkpoint={lm_run / 'best.pt'}", f"data.root={ptb}", "eval=mc", "eval.samples=3",
            "eval.batch=30", "data.test_batch_size=4", "eval.average=arithmetic,geometric", "eval.dropout_scale=0.5,1", "eval.temperature=1,fit",
            "device=cpu", "hydra.sweep.dir=sweep", cwd=tmp_path)
    evaluations = {path.parent.name: json.loads(path.read_text()) for path in (tmp_path / "sweep").glob("*/eval.json")}
    assert len(evaluations) == 8
    numbers = set()
    for evaluation in evaluations.values():
        e = evaluation["config"]["eval"]
        fitted = e["temperature"] == "fit"
        assert (evaluation["temperature"] != 1, evaluation["temperature_mc"] != 1) == (fitted, fitted)
        numbers.add(round(evaluation["test_ppl_mc"], 9))
    assert len(numbers) == 8  # every way of averaging gives its own number

    report.main([str(tmp_path / "sweep"), "--out", str(tmp_path / "report")])
    with open(tmp_path / "report" / "ptb_evaluations.csv") as f:
        lines = {Path(line["evaluation"]).name: line for line in csv.DictReader(f)}
    for folder, evaluation in evaluations.items():
        e, line = evaluation["config"]["eval"], lines[folder]
        mode = ", ".join(["MC, 3 passes", *(["geometric average"] if e["average"] == "geometric" else []),
                          *(["dropout x0.5"] if e["dropout_scale"] == 0.5 else []),
                          *(["temperature fitted"] if e["temperature"] == "fit" else [])])
        assert (line["mode"], line["MC test"], line["MC T"]) == (
            mode, f"{evaluation['test_ppl_mc']:.1f}", f"{evaluation['temperature_mc']:.3f}")


@pytest.mark.parametrize("args, message", [
    (["eval.average=geometrc"], "eval.average='geometrc'; choose `arithmetic`"),
    (["eval=mc", "eval.dropout_scale=0"], "eval.dropout_scale=0 must be > 0"),
    (["eval=mc", "eval.dropout_scale=-0.5"], "eval.dropout_scale=-0.5 must be > 0"),
    (["dropout=variational", "eval=mc", "eval.dropout_scale=4"],
     "eval.dropout_scale=4 makes dropout.input=0.3 a probability of 1.2, and a probability must stay below 1: use a "
     "scale below 3.333"),
    (["dropout=concrete", "eval=mc", "eval.dropout_scale=0.5"], "under dropout=concrete the model's noise levels are "
                                                                "learned weights of the checkpoint"),
    (["dropout=none", "eval=mc", "eval.dropout_scale=0.5"], "this model has none (all 0): drop eval.dropout_scale"),
    (["eval.temperature=hot"], "eval.temperature='hot'; give a number > 0 (1: none) or `fit`"),
    (["eval.temperature=0"], "eval.temperature=0 must be > 0 (1: none), or `fit`"),
    (["dataset=imdb", "data.valid_fraction=0", "trainer.select=last", "eval.temperature=fit"],
     "eval.temperature=fit fits the temperature on the validation reviews, and data.valid_fraction=0 holds none out"),
], ids=["average-typo", "scale-zero", "scale-negative", "scale-past-one", "scale-learned",
        "scale-nothing", "temperature-word", "temperature-zero", "fit-without-validation"])
def test_bad_uncertainty_settings_are_refused_in_a_line_before_anything_runs(tmp_path, args, message):
    result = run_in_process("train", *args, cwd=tmp_path, check=False)
    assert result.returncode == 2 and result.stderr == f"error: {result.stderr.removeprefix('error: ')}"
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "outputs").exists()  # refused before Hydra made a run folder


def test_a_regression_refuses_what_only_a_classifier_has_before_training(tmp_path, fake_scale):
    result = run_in_process("train", "dataset=scale", f"data.root={fake_scale}", "data.test_fraction=0.25",
                            "eval.temperature=fit", "device=cpu", "hydra.run.dir=run", cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert "eval.temperature=fit is for a classifier's predictive distributions, and scale is a regression" in \
        result.stderr
    assert not (tmp_path / "run" / "last.pt").exists()  # no epoch ran


@pytest.mark.parametrize("args, message", [
    (["eval=scale", "eval.average=geometric"], "eval.average is for MC dropout, and this evaluation is weight scaling"),
    (["eval=scale", "eval.dropout_scale=0.5"], "eval.dropout_scale is for MC dropout"),
], ids=["average", "dropout-scale"])
def test_mc_settings_for_a_weight_scaling_evaluation_are_refused_in_a_line(lm_run, corpora, tmp_path, args, message):
    result = run_in_process("eval", f"checkpoint={lm_run / 'best.pt'}", f"data.root={corpora[0]}", "device=cpu",
                            "hydra.run.dir=eval", *args, cwd=tmp_path, check=False)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "eval" / "eval.json").exists()
