"""What the Bayesian reading of dropout buys, through the real `vdrnn` command on fixture runs: the uncertainty's
parts in metrics.json and TensorBoard, out-of-domain detection (`vdrnn eval ood=`), selective prediction, the MC
average every way (`vdrnn eval -m` over eval.average, eval.dropout_scale and eval.temperature) and the report's tables
of them; and each bad input refused in a line."""

from __future__ import annotations

import csv
import gzip
import json
import math
import random
from pathlib import Path

import pytest

from tests.helpers import TINY, cli_in_process, composed, events_of, run_cli, run_in_process
from vdrnn import report
from vdrnn.tasks.sentiment.datasets import imdb
from vdrnn.tasks.sentiment.text import tokenize

WORDS = [f"w{i}" for i in range(30)]


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(f" {line} \n" for line in lines))


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path, Path]:
    """A PTB-layout corpus whose lines count up (an <unk> now and then), and a WikiText-2-layout one whose test split
    holds the very same sentences between headings and blank lines, which the sentences it is cut into leave out."""
    rng = random.Random(0)
    ptb, wiki = tmp_path_factory.mktemp("ptb"), tmp_path_factory.mktemp("wikitext-2")
    for split, n in (("train", 300), ("valid", 30), ("test", 30)):
        lines = []
        for _ in range(n):
            start = rng.randrange(30)
            words = [WORDS[(start + k) % 30] for k in range(rng.randrange(3, 10))]
            lines.append(" ".join("<unk>" if rng.random() < 0.05 else word for word in words))
        write_lines(ptb / f"ptb.{split}.txt", lines)
        write_lines(wiki / f"{split}.txt", [" = Some Title = ", "", *lines[:10], "", " = = Part = = ", "", *lines[10:]])
    return ptb, wiki


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
                words = " ".join(rng.choice(["film", "plot", "scene", "the", "actor"])
                                 for _ in range(rng.randrange(4, 12)))
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
    # The report's calibration table gives the run's parts beside MC's entropy, their sum.
    report.main([str(lm_run), "--out", str(lm_run.parent / "report")])
    with open(lm_run.parent / "report" / "ptb_calibration.csv") as f:
        [line] = list(csv.DictReader(f))
    assert (line["MC aleatoric"], line["MC epistemic"]) == (f"{aleatoric:.4f}", f"{epistemic:.4f}")


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
def test_eval_sweeps_the_mc_average_every_way_with_out_of_domain_text_and_the_report_sets_them_side_by_side(
        lm_run, corpora, tmp_path):
    ptb, wiki = corpora
    # 10 sentences a call (3 samples each), 4 test streams: a second or so a job.
    run_cli("eval", "-m", f"checkpoint={lm_run / 'best.pt'}", f"data.root={ptb}", "eval=mc", "eval.samples=3",
            "eval.batch=30", "data.test_batch_size=4", "eval.average=arithmetic,geometric", "eval.dropout_scale=0.5,1",
            "eval.temperature=1,fit", "ood=wikitext2", f"ood_root={wiki}", "device=cpu", "hydra.sweep.dir=sweep", cwd=tmp_path)
    evaluations = {path.parent.name: json.loads(path.read_text()) for path in (tmp_path / "sweep").glob("*/eval.json")}
    assert len(evaluations) == 8
    # The test's sentences, counted here: the lines of ptb.test.txt, which the other corpus's test split repeats.
    sentences = len((ptb / "ptb.test.txt").read_text().splitlines())
    numbers = set()
    for evaluation in evaluations.values():
        e = evaluation["config"]["eval"]
        assert (evaluation["ood_in_count"], evaluation["ood_out_count"]) == (sentences, sentences)
        # The same sentences on both sides: weight scaling scores each alike, so no score tells them apart.
        for score in ("max_prob", "entropy"):
            assert (evaluation[f"ood_auroc_{score}"], evaluation[f"ood_aupr_{score}"]) == pytest.approx((0.5, 0.5))
        for key in ("ood_auroc_max_prob_mc", "ood_aupr_entropy_mc", "ood_auroc_mutual_information_mc"):
            assert 0 <= evaluation[key] <= 1  # MC draws other masks for each side
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
    with open(tmp_path / "report" / "ptb_ood.csv") as f:
        ood = {Path(line["evaluation"]).name: line for line in csv.DictReader(f)}
    assert ood.keys() == evaluations.keys()
    for folder, line in ood.items():
        assert (line["out-of-domain"], line["in / out"], line["AUPR base rate"]) == ("wikitext2", f"{sentences} / "
                                                                                     f"{sentences}", "0.500")
        assert line["MC MI AUROC"] == f"{evaluations[folder]['ood_auroc_mutual_information_mc']:.3f}"


@pytest.mark.slow
def test_eval_of_a_classifier_scores_other_text_cut_to_its_reviews_lengths(imdb_run, imdb_dir, corpora, tmp_path):
    ptb, _ = corpora
    run_cli("eval", f"checkpoint={imdb_run / 'best.pt'}", f"data.root={imdb_dir}", "eval.temperature=fit",
            "ood=ptb", f"ood_root={ptb}", "device=cpu", "hydra.run.dir=eval", cwd=tmp_path)
    evaluation = json.loads((tmp_path / "eval" / "eval.json").read_text())
    # PTB's words, its splits in turn and its <unk> left out, cut into pieces as long as the test reviews the
    # classifier reads.
    words = [w for split in ("train", "valid", "test") for line in (ptb / f"ptb.{split}.txt").read_text().splitlines()
             for w in line.split() if w != "<unk>"]
    lengths = [min(16, len(tokenize(review.text))) for review in imdb.load(str(imdb_dir))["test"]]
    pieces = next(k for k in range(len(lengths) + 1) if k == len(lengths) or sum(lengths[: k + 1]) > len(words))
    assert (evaluation["ood_in_count"], evaluation["ood_out_count"]) == (60, pieces)
    assert {key for key in evaluation if key.startswith("ood_au")} == {
        f"ood_{area}_{score}{suffix}" for area in ("auroc", "aupr") for suffix, scores in (
            ("", ("max_prob", "entropy")), ("_mc", ("max_prob", "entropy", "mutual_information"))) for score in scores}
    assert evaluation["temperature"] != 1 and evaluation["temperature_mc"] != 1  # each fitted on validation
    assert evaluation["config"]["eval"]["mode"] == "mc"  # the run's own evaluation: MC, its 3 passes
    report.main([str(tmp_path / "eval"), "--out", str(tmp_path / "report")])
    with open(tmp_path / "report" / "imdb_ood.csv") as f:
        [line] = list(csv.DictReader(f))
    assert line["in / out"] == f"60 / {evaluation['ood_out_count']}"
    assert line["WS entropy AUPR"] == f"{evaluation['ood_aupr_entropy']:.3f}"
    assert math.isclose(float(line["AUPR base rate"]), evaluation["ood_out_count"] / (60 + evaluation["ood_out_count"]),
                        abs_tol=5e-4)


@pytest.mark.parametrize("args, message", [
    (["ood=wikitext2"], "ood=wikitext2 is for `vdrnn eval`"),
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
], ids=["ood-in-train", "average-typo", "scale-zero", "scale-negative", "scale-past-one", "scale-learned",
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


def test_a_regressions_evaluation_refuses_out_of_domain_text_in_a_line(tmp_path, fake_scale):
    run = train_in_process(tmp_path / "run", ["dataset=scale", f"data.root={fake_scale}", "data.test_fraction=0.25",
                                              "model.hidden_size=4", "trainer.epochs=1", "trainer.progress=false",
                                              "device=cpu"])
    result = run_in_process("eval", f"checkpoint={run / 'best.pt'}", f"data.root={fake_scale}", "ood=ptb",
                            "device=cpu", "hydra.run.dir=eval", cwd=tmp_path, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr == ("error: ood=ptb is for a classifier's predictive distributions, and scale is a "
                             "regression, whose MC dropout averages its predicted ratings: drop it\n")
    assert not (tmp_path / "eval" / "eval.json").exists()


@pytest.mark.parametrize("args, message", [
    (["ood=ptb"], "ood=ptb: language models trained on ptb are scored against other text as docs/uncertainty.md "
                  "pairs them; choose ood=wikitext2"),
    (["ood=imdb"], "ood=imdb: language models trained on ptb"),
    (["ood_root=/nowhere"], "ood_root=/nowhere says where the ood= corpus lies, and no ood= is given"),
    (["eval=scale", "eval.average=geometric"], "eval.average is for MC dropout, and this evaluation is weight scaling"),
    (["eval=scale", "eval.dropout_scale=0.5"], "eval.dropout_scale is for MC dropout"),
    (["ood=wikitext2", "ood_root=/nowhere"], "ood=wikitext2: reading its text as dataset=wikitext2 does"),
], ids=["own-corpus", "no-pairing", "root-alone", "mc-average", "mc-dropout-scale", "missing-text"])
def test_bad_out_of_domain_and_evaluation_settings_are_refused_in_a_line(lm_run, corpora, tmp_path, args, message):
    assert_eval_refused_in_a_line(lm_run, corpora[0], tmp_path, args, message)


@pytest.mark.parametrize("args, message", [
    (["ood=imdb"], "ood=imdb: sentiment models trained on imdb are scored against other text as "
                   "docs/uncertainty.md pairs them; choose ood=ptb or ood=wikitext2"),
    (["ood=ptb", "ood_root=/nowhere"], "ood=ptb: reading its text as dataset=ptb does (ood_root as its data.root)"),
], ids=["own-kind", "missing-text"])
def test_a_classifiers_bad_out_of_domain_text_is_refused_in_a_line(imdb_run, imdb_dir, tmp_path, args, message):
    assert_eval_refused_in_a_line(imdb_run, imdb_dir, tmp_path, args, message)


def assert_eval_refused_in_a_line(run, data_root, tmp_path, args, message) -> None:
    """`vdrnn eval` of ``run``'s best.pt with ``args`` ends with status 2 and ``message`` as its one line, scoring
    nothing."""
    result = run_in_process("eval", f"checkpoint={run / 'best.pt'}", f"data.root={data_root}", "device=cpu",
                            "hydra.run.dir=eval", *args, cwd=tmp_path, check=False)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "eval" / "eval.json").exists()
