"""The real `vdrnn` command in a subprocess: training on real PTB, TensorBoard, sweeps, eval, errors."""

from __future__ import annotations

import csv
import json
import math
import re

import pytest
import torch

from tests.helpers import TINY, cli_in_process, composed, events_of, history, run_cli, session_ends
from vdrnn import cli

pytestmark = pytest.mark.slow

TRAIN_TAGS = {"train/loss", "train/ppl", "train/lr", "train/grad_norm", "train/wps"}
FINAL_TAGS = {"valid/ppl", "best/valid_ppl", "test/ppl", "test/ppl_mc", "test/ece", "test/ece_mc", "test/brier",
              "test/brier_mc", "test/entropy", "test/entropy_mc"}


@pytest.fixture(scope="module")
def ptb_run(tmp_path_factory, ptb_dir):
    """A few steps of the small variational model on the real PTB, with MC test, from a foreign cwd."""
    cwd = tmp_path_factory.mktemp("cwd")
    result = run_cli("train", "dataset=ptb", "dropout=variational", "model=small", "model.hidden_size=32",
                     f"data.root={ptb_dir}", "trainer.max_steps=12", "trainer.log_every=4", "data.eval_max_tokens=1500",
                     "eval=mc", "eval.samples=3", "device=auto", "trainer.progress=true", "hydra.run.dir=run", cwd=cwd)
    return cwd / "run", result


def test_train_writes_metrics_checkpoints_and_logs(ptb_run):
    run, result = ptb_run
    if not torch.cuda.is_available():  # device=auto says why it runs on the CPU
        assert "CUDA is not available: running on the CPU" in result.stderr + result.stdout
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] == 12 and metrics["smoke"] is True and metrics["mc_samples"] == 3
    # An untrained model scores about the uniform 10,000-way guess over PTB's vocabulary. These 12 SGD steps
    # bring test perplexity to about 1,850 (weight scaling and MC alike, measured on the CPU), so 3,000 leaves room
    # for another device's dropout masks yet fails a run that did not learn; 100 is far below what 12 steps reach.
    assert 100 < metrics["test_ppl"] < 3_000 and 100 < metrics["test_ppl_mc"] < 3_000
    epochs = history(run)
    assert len(epochs) == 1 and epochs[0]["valid_ppl"] == pytest.approx(metrics["best_valid_ppl"])
    for name in ("last.pt", "best.pt"):
        payload = torch.load(run / name, weights_only=True)
        assert payload["epoch"] == 1 and payload["config"]["dropout"]["scheme"] == "variational"
    assert "test ppl" in (run / "vdrnn.log").read_text()
    assert "| 0/12 [" in result.stderr  # the progress bar ends where trainer.max_steps stops the epoch
    # The last line says where the run is and what it scored; the MC test shows its own bar, samples counted.
    last = [line for line in result.stdout.splitlines() if "[vdrnn]" in line][-1]  # Hydra logs to stdout
    assert f"finished: test ppl {metrics['test_ppl']:.2f}, MC {metrics['test_ppl_mc']:.2f} (valid " in last
    assert f"{run} holds metrics.json" in last
    # Asked for (trainer.progress=true; auto draws them on a terminal only), the bars of validation, the test and MC
    # dropout, this one counting whole samples up to its end, without tqdm's warning of a count past its total.
    assert "validation: " in result.stderr and "test: " in result.stderr
    assert "MC dropout: 100%" in result.stderr and "3/3 samples" in result.stderr
    assert "clamping frac" not in result.stderr and "-" not in re.findall(r"samples \[[^]]*\]", result.stderr)[-1]
    if not torch.cuda.is_available():  # and says, after its first steps, how long the whole run takes here
        assert re.search(r"on the CPU a step takes [0-9.]+ s: this run's training \(12 steps, trainer.max_steps\) takes "
                         r"about [0-9]+ seconds here\n", result.stdout)


def test_tensorboard_events_read_back_with_hparams_in_the_same_file(ptb_run):
    run, _ = ptb_run
    events = list(run.glob("events.out.tfevents.*"))
    assert len(events) == 1  # one run per job: hparams did not create a second one
    acc = events_of(run)
    tags = set(acc.Tags()["scalars"])
    assert TRAIN_TAGS | FINAL_TAGS <= tags
    assert [e.step for e in acc.Scalars("train/loss")] == [4, 8, 12]
    metrics = json.loads((run / "metrics.json").read_text())
    for tag in ("test/ppl", "test/ece_mc", "test/brier"):
        assert acc.Scalars(tag)[-1].value == pytest.approx(metrics[tag.replace("/", "_")], rel=1e-5)
    # The next-token predictions' calibration by both estimators: 12 steps leave them near-uniform and unsure.
    assert 0 <= metrics["test_ece"] < 1 and 0 < metrics["test_brier"] < 2 and metrics["test_entropy"] > 5
    assert sum(metrics["test_reliability_mc"]["count"]) == sum(metrics["test_reliability"]["count"]) > 0
    # The hparams table, in this run's file: the experiment (its columns: the config keys and the final
    # tags) and this run's start (the values) and end, as tracking.RunLogger writes them.
    hp = acc.PluginTagToContent("hparams")
    assert set(hp) == {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"}
    assert b"dropout.recurrent" in hp["_hparams_/experiment"] and b"test/ppl_mc" in hp["_hparams_/experiment"]
    assert b"dropout.recurrent" in hp["_hparams_/session_start_info"]
    assert session_ends(run) == ["STATUS_SUCCESS"]  # written once the run had finished
    assert json.loads((run / "metrics.json").read_text())["status"] == "finished"


def test_learned_alpha_is_trained_logged_and_kept_at_most_one(tmp_path, tiny_corpus):
    """dropout.learn_alpha: log alpha moves from its start, stays <= 0, and is logged per epoch and in metrics.json."""
    run_cli("train", *TINY, "dropout=gaussian", "dropout.learn_alpha=true", "dropout.input=0.3",
            "dropout.recurrent=0.5", "dropout.output=0.3", f"data.root={tiny_corpus}", "hydra.run.dir=run", cwd=tmp_path)
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    noise = metrics["noise"]
    assert {"alpha_input0", "alpha_recurrent1", "alpha_output", "p_recurrent0", "kl"} <= set(noise)
    state = torch.load(run / "best.pt", weights_only=True)["model"]
    log_alpha = {k: v for k, v in state.items() if k.startswith("rnn.noise.log_alpha.")}
    assert len(log_alpha) == 5 and all(v.max() <= 0 for v in log_alpha.values())
    learned = log_alpha["rnn.noise.log_alpha.input0"]
    assert not torch.allclose(learned, torch.full_like(learned, math.log(0.3 / 0.7)))  # moved from alpha = p / (1 - p)
    assert noise["alpha_input0"] == pytest.approx(log_alpha["rnn.noise.log_alpha.input0"].exp().mean().item())
    epochs = history(run)
    assert all("alpha_output" in record and "kl" in record for record in epochs)
    acc = events_of(run)
    assert {"noise/alpha_input0", "noise/p_output", "noise/kl"} <= set(acc.Tags()["scalars"])
    assert len(acc.Scalars("noise/kl")) == 2  # one point per epoch
    # `vdrnn eval` rebuilds the learned scales from the checkpoint's config and loads them with the weights.
    run_cli("eval", f"checkpoint={run / 'best.pt'}", f"data.root={tiny_corpus}", "hydra.run.dir=eval", cwd=tmp_path)
    evaluated = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert evaluated["test_ppl"] == pytest.approx(metrics["test_ppl"], rel=1e-6)


def test_concrete_rates_are_trained_logged_per_site_and_reported(tmp_path, tiny_corpus):
    """dropout=concrete: each site's p moves from its start, is logged per epoch to TensorBoard and metrics.json with
    the regularizer, and the report's dropout column says where the p's ended."""
    run_cli("train", *TINY, "dropout=concrete", "dropout.embedding=0", f"data.root={tiny_corpus}", "hydra.run.dir=run",
            cwd=tmp_path)
    run = tmp_path / "run"
    noise = json.loads((run / "metrics.json").read_text())["noise"]
    assert {"p_input0", "p_recurrent0", "p_input1", "p_recurrent1", "p_output", "regularizer"} == set(noise)
    assert noise["p_input0"] != pytest.approx(0.1, abs=1e-6)  # learned, not left at the start
    state = torch.load(run / "best.pt", weights_only=True)["model"]
    assert torch.sigmoid(state["rnn.noise.p_logit.output"]).item() == pytest.approx(noise["p_output"])
    assert all("p_output" in record and "regularizer" in record for record in history(run))
    acc = events_of(run)
    assert {"noise/p_input0", "noise/p_recurrent1", "noise/regularizer"} <= set(acc.Tags()["scalars"])
    report = run_cli("report", str(run), "--out", str(tmp_path / "report"), cwd=tmp_path).stdout
    assert f"learned p: in {noise['p_input0']:.2f}/{noise['p_input1']:.2f}" in report


def test_eval_command_reproduces_the_weight_scaling_numbers(ptb_run, ptb_dir):
    run, _ = ptb_run
    result = run_cli("eval", f"checkpoint={run / 'best.pt'}", f"data.root={ptb_dir}", "data.eval_max_tokens=1500",
                     "eval=scale", "hydra.run.dir=eval", cwd=run.parent)  # the run tested with eval=mc as well
    evaluated = json.loads((run.parent / "eval" / "eval.json").read_text())
    trained = json.loads((run / "metrics.json").read_text())
    # The same weights and data in another process, with the same TF32 setting on CUDA (without it, 1.5e-5 apart).
    assert evaluated["test_ppl"] == pytest.approx(trained["test_ppl"], rel=1e-6)
    assert "test_ppl_mc" not in evaluated and '"valid_ppl"' in result.stdout
    assert f"written to {run.parent / 'eval' / 'eval.json'}" in result.stdout and '"config"' not in result.stdout
    assert result.stdout.splitlines()[-1].startswith(f"test ppl {evaluated['test_ppl']:.2f} (valid ")
    # eval.json says what it ran: the run's settings with the command line's evaluation mode and data cap
    assert evaluated["config"]["eval"]["mode"] == "scale" and evaluated["config"]["data"]["eval_max_tokens"] == 1500
    assert evaluated["config"]["model"] == trained["config"]["model"] and evaluated["device"]
    assert evaluated["smoke"]  # capped validation and test data: not a result to report


def test_multirun_sweep_makes_one_named_run_per_job(tmp_path, tiny_corpus):
    run_cli("train", "-m", *TINY, f"data.root={tiny_corpus}", "trainer.epochs=1", "dropout=none,zaremba",
            "seed=7", "hydra.sweep.dir=sweep", cwd=tmp_path)
    jobs = sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert len(jobs) == 2 and jobs[0].startswith("0_") and jobs[1].startswith("1_")
    assert "dropout=none" in jobs[0] and "dropout=zaremba" in jobs[1] and all("seed=7" in j for j in jobs)
    assert not any("data.root" in j or "progress" in j for j in jobs)  # paths and cosmetics stay out
    for job in jobs:
        assert json.loads((tmp_path / "sweep" / job / "metrics.json").read_text())["epochs"] == 1
        assert list((tmp_path / "sweep" / job).glob("events.out.tfevents.*"))
    # A job's checkpoint evaluates with its path as the folder names it, `=` and `,` and all (quote_paths).
    run_cli("eval", f"checkpoint=sweep/{jobs[1]}/best.pt", f"data.root={tiny_corpus}", "hydra.run.dir=eval", cwd=tmp_path)
    evaluated = json.loads((tmp_path / "eval" / "eval.json").read_text())
    trained = json.loads((tmp_path / "sweep" / jobs[1] / "metrics.json").read_text())
    assert evaluated["config"]["dropout"]["scheme"] == "zaremba"
    assert evaluated["test_ppl"] == pytest.approx(trained["test_ppl"], rel=1e-6)
    # An eval sweep over both (Hydra's quotes keep each path's `=` and `,`) names each job by the checkpoint it
    # scores, beside its overrides.
    checkpoints = ",".join(f"'sweep/{job}/best.pt'" for job in jobs)
    run_cli("eval", "-m", f"checkpoint={checkpoints}", f"data.root={tiny_corpus}", "data.eval_max_tokens=200,300",
            "hydra.sweep.dir=evals", cwd=tmp_path)
    evals = sorted(p.name for p in (tmp_path / "evals").iterdir() if p.is_dir())
    assert evals == [f"{n}_" + cli.within_name_limit(f"data.eval_max_tokens={tokens}@{job}-best")
                     for n, (job, tokens) in enumerate((j, t) for j in jobs for t in (200, 300))]
    for name in evals:
        evaluated = json.loads((tmp_path / "evals" / name / "eval.json").read_text())
        assert evaluated["config"]["dropout"]["scheme"] in name
        assert "data.eval_max_tokens=" in (tmp_path / "evals" / name / ".hydra" / "overrides.yaml").read_text()


@pytest.mark.parametrize("path", ["multirun/d/t/1_dropout=zaremba,seed=2/best.pt", r"C:\runs\1_seed=2\best.pt",
                                  "o'brien/1_seed=2/best.pt", "odd\\'/seed=2\\"])
@pytest.mark.parametrize("key", ["checkpoint", "resume", "init_from", "++checkpoint"])
def test_path_overrides_reach_hydra_as_written(key, path):
    """Hydra's parser gets back exactly the path a path option was given, though `=` is syntax in an override."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from vdrnn.cli import quote_paths

    (override,) = OverridesParser.create().parse_overrides(quote_paths([f"{key}={path}"]))
    assert override.value() == path


def test_only_path_values_that_hydra_cannot_read_are_quoted():
    """A sweep over plain paths, a quoted path and other options reach Hydra untouched."""
    from vdrnn.cli import quote_paths

    untouched = ["checkpoint=a/best.pt,b/best.pt", "checkpoint='x=1/best.pt'", "dropout.input=0.5", "+x=a=b", "-m"]
    assert quote_paths(untouched) == untouched


def test_a_failing_sweep_job_fails_alone_and_the_next_job_still_runs(tmp_path, tiny_corpus):
    result = run_cli("train", "-m", *TINY, f"data.root={tiny_corpus}", "trainer.epochs=1", "dropout.input=1.2,0.2",
                     "hydra.sweep.dir=sweep", cwd=tmp_path, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "dropout.input=1.2 is not a probability in [0, 1)" in result.stderr
    (failed,) = (tmp_path / "sweep").glob("0_*")
    (succeeded,) = (tmp_path / "sweep").glob("1_*")
    assert not (failed / "metrics.json").exists()
    assert json.loads((succeeded / "metrics.json").read_text())["epochs"] == 1


def test_help_lists_every_group(tmp_path):
    out = run_cli("train", "--help", cwd=tmp_path).stdout
    groups = out.split("== Configuration groups ==\n")[1].split("\n\n")[0].replace("\n  ", " ")  # unwrapped
    lines = {line.split(":")[0]: line for line in groups.splitlines()}
    expected = {"dataset": ["ptb"], "model": ["small", "medium", "large", "awd"], "cell": ["lstm"],
                "dropout": ["none", "zaremba", "moon", "moon_emb", "variational", "variational_untied", "gaussian",
                            "gaussian_untied", "awd"],
                "eval": ["scale", "mc"], "experiment": ["medium_variational", "large_zaremba", "medium_gaussian", "awd_ptb"]}
    for group, options in expected.items():
        listed = lines[group].split(": ", 1)[1].split(", ")
        assert set(options) <= set(listed), group


def test_help_explains_each_key_of_the_config_the_command_line_composes(tmp_path):
    """`vdrnn train dataset=imdb experiment=... --help`: the values that run would get, each with the comment of the
    first file composed that explains it (eval/mc.yaml's for eval.samples, not the experiment's remark on 50)."""
    out = run_cli("train", "experiment=imdb_lstm_variational", "trainer.epochs=7", "--help", cwd=tmp_path).stdout
    lines = [line.split("#")[0].strip() + " # " + line.split("#", 1)[1].strip() for line in out.splitlines()
             if ": " in line and "#" in line]
    assert "max_length: 200 # tokens kept per review, its last 200 (Gal's maxlen; Keras keeps the end)" in lines
    assert "samples: 50 # stochastic passes averaged (Gal's T; 50 in the sentiment presets)" in lines
    assert "epochs: 7 # passes over the training data (fewer under max_steps or max_minutes)" in lines
    assert "# composed from dataset=imdb, model=sentiment, cell=lstm, dropout=variational, eval=mc, " \
           "experiment=imdb_lstm_variational" in out.replace("\n#   ", " ")
    assert max(len(line) for line in out.splitlines()) <= 118


@pytest.mark.parametrize("args,message", [
    (["dataset=nope", "--help"], "Could not find 'dataset/nope'"),
    (["-m", "dropout=none,zaremba", "--help"], "--help shows the config of one run: drop -m"),
])
def test_help_refuses_what_composes_no_run(tmp_path, args, message):
    result = run_cli("train", *args, cwd=tmp_path, check=False)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert "Config search path" not in result.stderr


@pytest.mark.parametrize("args,message,run_made", [
    (["dropout=gal"], "Could not find 'dropout/gal'", False),
    (["trainer.epochs_total=3"], "Key 'epochs_total' is not in struct", False),
    # A bad value is refused before Hydra makes a run's folder: no folder is left holding only the error.
    (["dropout.input=1.2"], r"dropout.input=1.2 is not a probability in [0, 1)", False),
    # relative to the test's own empty cwd, so that it cannot exist (a /nonexistent can, on a shared machine)
    (["data.root=no/such/folder"], "no/such/folder does not exist; point it at a folder holding ptb.train.txt", True),
])
def test_bad_input_gets_a_clear_error(tmp_path, args, message, run_made):
    """Once on the terminal, no traceback; and where the run's folder was made, in its vdrnn.log too."""
    result = run_cli("train", *args, "trainer.progress=false", cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert (result.stderr + result.stdout).count(message) == 1
    assert "Traceback" not in result.stderr
    logs = list(tmp_path.glob("outputs/*/*/vdrnn.log"))
    if run_made:
        [log_file] = logs
        [error] = [line for line in log_file.read_text().splitlines() if "[ERROR]" in line]
        assert message in error
    else:  # refused before the run's folder was made
        assert logs == []


def test_unreadable_checkpoint_is_refused_and_kept(tmp_path, tiny_corpus):
    run = tmp_path / "run"
    run.mkdir()
    (run / "last.pt").write_bytes(b"not a checkpoint")
    result = run_cli("train", *TINY, f"data.root={tiny_corpus}", "hydra.run.dir=run", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "last.pt is unreadable" in result.stderr and "move it aside" in result.stderr
    assert (run / "last.pt").read_bytes() == b"not a checkpoint"  # nothing was overwritten


def test_unknown_command_is_refused(tmp_path):
    result = run_cli("fit", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "unknown command 'fit'" in result.stderr


def test_help_as_a_command_prints_the_usage(capsys):
    """`vdrnn help` is the usage, as `vdrnn --help`, not an unknown command."""
    from vdrnn import cli

    cli.main(["help"])
    assert capsys.readouterr().out.strip() == cli.USAGE.strip()


def test_help_read_in_part_ends_quietly(tmp_path):
    """`vdrnn eval --help | head -1`: the first line, and no BrokenPipeError traceback when head stops reading."""
    import shutil
    import subprocess

    result = subprocess.run(f"{shutil.which('vdrnn')} eval --help | head -1", shell=True, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith("vdrnn eval: evaluate a checkpoint") and result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, tiny_corpus):
    """best.pt of a one-epoch run on the tiny corpus with no step or data cap: not a smoke run."""
    run = tmp_path_factory.mktemp("in_process") / "run"
    overrides = [*TINY, f"data.root={tiny_corpus}", "trainer.epochs=1", "data.batch_size=20", "dropout=zaremba"]
    with pytest.MonkeyPatch.context() as monkeypatch:
        cli_in_process(monkeypatch, run, overrides).train_command(composed(*overrides))
    assert json.loads((run / "metrics.json").read_text())["smoke"] is False
    return run / "best.pt"


def evaluate_in_process(monkeypatch, run_dir, *overrides) -> dict:
    cli_in_process(monkeypatch, run_dir, overrides).eval_command(composed(*overrides))
    return json.loads((run_dir / "eval.json").read_text())


def test_eval_on_capped_data_is_a_smoke_eval_even_of_a_full_run(tmp_path, tiny_corpus, tiny_checkpoint, monkeypatch):
    """eval.json's smoke flag follows what the evaluation ran (data.eval_max_tokens from the command line), not only
    the checkpoint's training settings: numbers on a few tokens must not pass for a result."""
    common = [f"checkpoint={tiny_checkpoint}", f"data.root={tiny_corpus}"]
    assert evaluate_in_process(monkeypatch, tmp_path / "full", *common)["smoke"] is False
    capped = evaluate_in_process(monkeypatch, tmp_path / "capped", *common, "data.eval_max_tokens=60")
    assert capped["smoke"] is True and capped["config"]["data"]["eval_max_tokens"] == 60


def test_report_gives_a_line_per_evaluation_beside_the_runs_table(tmp_path, tiny_corpus, tiny_checkpoint, monkeypatch,
                                                                   capsys):
    """`vdrnn report` over a run and the `vdrnn eval`s of its checkpoint: the run's table, and a line per evaluation
    with its eval.json's numbers and how it scored; an eval.json without its config is left out, named."""
    from vdrnn import report

    common = [f"checkpoint={tiny_checkpoint}", f"data.root={tiny_corpus}"]
    evals = tmp_path / "evals"
    scaled = evaluate_in_process(monkeypatch, evals / "scale", *common)
    mc = evaluate_in_process(monkeypatch, evals / "mc", *common, "eval=mc", "eval.samples=3", "eval.mc_masks=minibatch")
    (evals / "old").mkdir()
    (evals / "old" / "eval.json").write_text(json.dumps({"test_ppl": 1.0}))
    report.main([str(tiny_checkpoint.parent), str(evals), "--out", str(tmp_path / "report")])
    assert "leaving out " + str(evals / "old" / "eval.json") in capsys.readouterr().err
    assert (tmp_path / "report" / "ptb_table.md").exists()  # the run's own row, as before
    with open(tmp_path / "report" / "ptb_evaluations.csv") as f:
        lines = list(csv.DictReader(f))
    # Each named from the folder reported, as it lies under it: the same table wherever the folders are.
    assert [line["evaluation"] for line in lines] == ["evals/mc", "evals/scale"]
    for line, evaluated in zip(lines, (mc, scaled), strict=True):
        assert (line["model"], line["dropout"], line["checkpoint"], line["epoch"]) == \
            ("zaremba, 16 units", "in 0.5, out 0.5", "run/best.pt", "1")  # its run folder, not this machine's path
        assert (line["valid"], line["test"]) == (f"{evaluated['valid_ppl']:.1f}", f"{evaluated['test_ppl']:.1f}")
    assert (lines[0]["mode"], lines[0]["MC test"]) == ("MC, 3 passes, masks per minibatch", f"{mc['test_ppl_mc']:.1f}")
    assert (lines[1]["mode"], lines[1]["MC test"]) == ("weight scaling", "–")
    # Evaluations alone make a report too.
    report.main([str(evals / "scale"), "--out", str(tmp_path / "alone")])
    assert sorted(path.name for path in (tmp_path / "alone").iterdir()) == ["ptb_evaluations.csv",
                                                                            "ptb_evaluations.md"]


def test_eval_takes_an_evaluation_setting_given_with_hydras_force_prefix(tmp_path, tiny_corpus, tiny_checkpoint,
                                                                        monkeypatch):
    """`++eval.samples=3` sets eval.samples as `eval.samples=3` does; it is not refused as a key eval would ignore."""
    evaluated = evaluate_in_process(monkeypatch, tmp_path / "eval", f"checkpoint={tiny_checkpoint}",
                                    f"data.root={tiny_corpus}", "eval=mc", "++eval.samples=3")
    assert evaluated["config"]["eval"]["samples"] == 3 and evaluated["mc_samples"] == 3


def test_ctrl_c_says_what_the_run_keeps_and_the_advised_rerun_continues_from_it(tmp_path, tiny_corpus, monkeypatch,
                                                                                 caplog):
    """Ctrl-C in epoch 2 saves the step and ends the command with 130 and a line, not a traceback; rerunning in the
    folder, as the line says, finishes the run. A second Ctrl-C (stopping at once) says what is kept: the last saved
    step, or nothing before one was saved."""
    import os
    import signal

    from vdrnn.training import checkpoint
    from vdrnn.training.optim import Optimization

    run = tmp_path / "run"
    overrides = [*TINY, f"data.root={tiny_corpus}", "data.batch_size=20"]
    real, steps = Optimization.after_step, {"n": 0}

    def ctrl_c_at(step: int, times: int = 1):
        def after_step(self):
            real(self)
            steps["n"] += 1
            if steps["n"] == step:
                for _ in range(times):
                    os.kill(os.getpid(), signal.SIGINT)
        return after_step

    with monkeypatch.context() as patched:
        patched.setattr(Optimization, "after_step", ctrl_c_at(30))  # epoch 2 (26 steps an epoch)
        with pytest.raises(SystemExit) as stopped:
            cli_in_process(patched, run, overrides).train_command(composed(*overrides))
    assert stopped.value.code == 130
    assert f"stopped by SIGINT at step 30 (epoch 2, batch 4 of 26), which {run / 'last.pt'} holds; to continue, run " \
           f"the same command with hydra.run.dir={run}" in caplog.text
    assert checkpoint.load(run / "last.pt")["epoch_in_progress"]["sums"]["batches"] == 4

    cli_in_process(monkeypatch, run, overrides).train_command(composed(*overrides))
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 2

    steps["n"] = 0
    monkeypatch.setattr(Optimization, "after_step", ctrl_c_at(2, times=2))
    with pytest.raises(SystemExit) as stopped:
        cli_in_process(monkeypatch, tmp_path / "early", overrides).train_command(composed(*overrides))
    assert stopped.value.code == 130
    assert f"interrupted; no step was saved, so {tmp_path / 'early'} holds nothing to continue from" in caplog.text


def test_ctrl_c_in_eval_ends_it_with_a_line_and_no_eval_json(tmp_path, tiny_corpus, tiny_checkpoint, monkeypatch,
                                                            caplog):
    from vdrnn.training import evaluation

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluation, "evaluate_checkpoint", interrupted)
    with pytest.raises(SystemExit) as stopped:
        evaluate_in_process(monkeypatch, tmp_path / "eval", f"checkpoint={tiny_checkpoint}", f"data.root={tiny_corpus}")
    assert stopped.value.code == 130 and "interrupted; no eval.json was written" in caplog.text
    assert not (tmp_path / "eval" / "eval.json").exists()


def test_eval_imports_no_reader_a_checkpoint_names(tmp_path, tiny_corpus, tiny_checkpoint, monkeypatch):
    """A checkpoint's data.reader would choose code to import: a module beside an unpacked archive of runs, found
    on the path, runs on import. eval asks for the reader on its command line, in a line, and reads the data with
    the one given there (the dataset's own here)."""
    from tests.helpers import run_in_process
    from vdrnn.training import checkpoint

    (tmp_path / "planted_reader.py").write_text("import pathlib\npathlib.Path('imported').write_text('ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    payload = checkpoint.load(tiny_checkpoint)
    payload["config"]["data"]["reader"] = "planted_reader"
    checkpoint.save(payload, tmp_path / "best.pt")
    refused = run_in_process("eval", f"checkpoint={tmp_path / 'best.pt'}", f"data.root={tiny_corpus}",
                             "hydra.run.dir=refused", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "give data.reader=planted_reader" in refused.stderr
    own = "vdrnn.tasks.lm.datasets.ptb"
    evaluated = evaluate_in_process(monkeypatch, tmp_path / "eval", f"checkpoint={tmp_path / 'best.pt'}",
                                    f"data.root={tiny_corpus}", f"data.reader={own}")
    assert not (tmp_path / "imported").exists() and not (tmp_path / "eval" / "imported").exists()
    assert evaluated["config"]["data"]["reader"] == own and evaluated["test_ppl"] > 1


def test_train_refuses_the_checkpoint_eval_scores(tmp_path):
    from tests.helpers import run_in_process

    result = run_in_process("train", "checkpoint=runs/best.pt", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "checkpoint=runs/best.pt is what `vdrnn eval` scores" in result.stderr
    assert "resume=PATH" in result.stderr and "Traceback" not in result.stderr


def test_a_crash_marks_the_run_failed_and_ends_in_a_line_with_status_1(tmp_path, tiny_corpus, monkeypatch):
    """A bug (here a ZeroDivisionError in validation) is no input's fault: metrics.json says failed and why, the
    traceback goes to vdrnn.log, and the terminal gets one line saying where it is."""
    from tests.helpers import run_in_process
    from vdrnn.report.found import failed_runs, find_runs
    from vdrnn.tasks.lm.train import LanguageModelTrainer

    monkeypatch.setattr(LanguageModelTrainer, "validate", lambda self: 1 / 0)
    result = run_in_process("train", *TINY, f"data.root={tiny_corpus}", "hydra.run.dir=run", cwd=tmp_path,
                            check=False)
    run = tmp_path / "run"
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert line == (f"error: crashed with ZeroDivisionError: division by zero; the traceback is in {run / 'vdrnn.log'}: "
                    f"please report it, with that file, to vdrnn's maintainers")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["reason"] == "crashed with ZeroDivisionError: division by zero"
    assert "Traceback" in (run / "vdrnn.log").read_text() and session_ends(run) == ["STATUS_FAILURE"]
    assert failed_runs(find_runs([run])) == [(run, metrics["reason"])]  # the report counts it as failed


def test_eval_json_is_written_whole_or_not_at_all(tmp_path, tiny_corpus, tiny_checkpoint, monkeypatch):
    """A disk that fills as eval.json is written ends the evaluation with status 4, leaving no empty file."""
    import errno
    import os

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(SystemExit) as stopped:
        evaluate_in_process(monkeypatch, tmp_path / "eval", f"checkpoint={tiny_checkpoint}", f"data.root={tiny_corpus}")
    assert stopped.value.code == 4 and not (tmp_path / "eval" / "eval.json").exists()
    assert not list((tmp_path / "eval").glob(".*.tmp"))


def test_a_refused_second_start_writes_nothing_into_the_live_runs_log(tmp_path, tiny_corpus):
    from tests.helpers import run_in_process
    from vdrnn.training.lock import RunLock

    run = tmp_path / "run"
    with RunLock(run):
        (run / "vdrnn.log").write_text("the live run's line\n")
        result = run_in_process("train", *TINY, f"data.root={tiny_corpus}", "hydra.run.dir=run", cwd=tmp_path,
                                check=False)
        assert result.returncode == 2 and "is in use by another run" in result.stderr
        assert (run / "vdrnn.log").read_text() == "the live run's line\n"


def test_a_ctrl_c_before_the_run_starts_ends_in_a_line_with_status_130(monkeypatch, capsys):
    """While Python imports Hydra and torch, or Hydra composes the config: before the run's handlers exist."""
    from vdrnn import __main__ as entry

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "main", interrupted)
    with pytest.raises(SystemExit) as stopped:
        entry.main()
    assert stopped.value.code == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C); no run had started, so there is nothing to continue\n"
