"""`vdrnn report` on small real runs: seeds grouped, paper numbers beside ours, table files and a plot; and on
made-up PTB runs: the overrides and epochs of every seed."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.helpers import TINY, report_rows, run_in_process
from vdrnn import report
from vdrnn.errors import RecordError, VdrnnError
from vdrnn.report.found import find_runs
from vdrnn.report.lm import collect_ptb, plot_ptb
from vdrnn.report.plots import reliability_panel, save_curves
from vdrnn.report.rows import base_settings, mean_std, scheme_name, scheme_rank, settings


@pytest.mark.slow
def test_report_groups_seeds_and_sets_paper_numbers_beside_ours(tmp_path, tiny_corpus):
    tiny = [a for a in TINY if not a.startswith("model=")]
    run_in_process("train", "-m", "experiment=medium_zaremba,medium_variational", "seed=1,2", *tiny,
            f"data.root={tiny_corpus}", "eval.samples=2", "hydra.sweep.dir=sweep", cwd=tmp_path)
    result = run_in_process("report", "sweep", "--out", "report", cwd=tmp_path)
    # The smoke runs' 16 units show beside the preset's size; the paper's numbers are the preset's.
    assert "| Zaremba et al. 2014 | medium (16 units) | in 0.5, out 0.5 | 2 |" in result.stdout
    assert "| Variational (tied weights) | medium (16 units) | emb 0.2, in 0.3, h 0.2, out 0.3 | 2 |" in result.stdout
    with open(tmp_path / "report" / "ptb_table.csv") as f:
        rows = {r["row"]: r for r in csv.DictReader(f)}
    zaremba, variational = rows["Zaremba et al. 2014"], rows["Variational (tied weights)"]
    assert (zaremba["paper valid"], zaremba["paper test"], zaremba["paper MC test"]) == ("86.2", "82.7", "–")
    assert variational["paper MC test"] == "79.0" and " ± " in variational["MC test"]  # 2 seeds: mean ± std
    assert zaremba["MC test"] == "–" and " ± " in zaremba["test"]
    assert list(rows) == ["Zaremba et al. 2014", "Variational (tied weights)"]  # Table 1's order
    # Hydra's record of each job's command line: the smoke settings show, the preset and seed do not.
    assert "eval.samples=2" in variational["overrides"]
    assert not any(word in variational["overrides"] for word in ("experiment=", "seed=", "data.root="))
    png = (tmp_path / "report" / "ptb_valid_ppl.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    # What MC buys beyond perplexity: each row's calibration by weight scaling and MC, and reliability diagrams.
    with open(tmp_path / "report" / "ptb_calibration.csv") as f:
        calibration = {r["row"]: r for r in csv.DictReader(f)}
    assert list(calibration) == list(rows)
    assert " ± " in calibration["Variational (tied weights)"]["MC ECE"] and calibration["Zaremba et al. 2014"]["MC ECE"] == "–"
    assert calibration["Variational (tied weights)"]["MC samples"] == "2"
    assert (tmp_path / "report" / "ptb_reliability.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_report_without_runs_says_so(tmp_path):
    result = run_in_process("report", str(tmp_path), cwd=tmp_path, check=False)
    assert result.returncode != 0 and "no metrics.json or eval.json under" in result.stderr


@pytest.mark.slow
def test_report_keeps_the_points_of_a_dropout_grid_apart(tmp_path, tiny_corpus):
    tiny = [a for a in TINY if not a.startswith("model=")]
    run_in_process("train", "-m", "experiment=medium_variational", "dropout.input=0.3,0.4", "dropout.output=0.4", *tiny,
            f"data.root={tiny_corpus}", "eval.samples=2", "hydra.sweep.dir=sweep", cwd=tmp_path)
    run_in_process("report", "sweep", "--out", "report", cwd=tmp_path)
    with open(tmp_path / "report" / "ptb_table.csv") as f:
        rows = [(r["row"], r["dropout"], r["seeds"]) for r in csv.DictReader(f)]
    assert rows == [("Variational (tied weights)", "emb 0.2, in 0.3, h 0.2, out 0.4", "1"),
                    ("Variational (tied weights)", "emb 0.2, in 0.4, h 0.2, out 0.4", "1")]


@pytest.mark.slow
def test_a_refused_rerun_in_a_finished_runs_folder_leaves_its_record_as_it_was(tmp_path, tiny_corpus):
    """Hydra's record (.hydra/) is written once vdrnn accepts a start, so a rerun it refuses leaves the record of the
    run the folder holds, and the report names that run's overrides; a refused start in a fresh folder records its
    own."""
    common = [*TINY, f"data.root={tiny_corpus}", "trainer.epochs=1", "hydra.run.dir=runs/a"]
    run_in_process("train", *common, "trainer.clip=4", cwd=tmp_path)
    record = tmp_path / "runs" / "a" / ".hydra"
    written = {path.name: path.read_text() for path in record.iterdir()}
    assert sorted(written) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    assert "trainer.clip=4" in written["overrides.yaml"] and "hidden_size: 16" in written["config.yaml"]
    assert "run:\n    dir: runs/a" in written["hydra.yaml"]
    refused = run_in_process("train", *common, "trainer.clip=4", "model.hidden_size=8", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and "model.hidden_size: 16 -> 8" in refused.stderr
    assert {path.name: path.read_text() for path in record.iterdir()} == written
    [row] = ptb_rows(tmp_path)
    assert "trainer.clip=4" in row["overrides"] and "hidden_size=8" not in row["overrides"]
    # A sweep's job refused in its fresh folder leaves its own record beside the error; a single run's bad value is
    # refused before any folder is made.
    fresh = run_in_process("train", "-m", *common[:-1], "hydra.sweep.dir=runs", "hydra.sweep.subdir=b",
                    "dropout.embedding=1.5", cwd=tmp_path, check=False)
    assert fresh.returncode != 0 and "dropout.embedding" in fresh.stderr
    assert "dropout.embedding=1.5" in (tmp_path / "runs" / "b" / ".hydra" / "overrides.yaml").read_text()
    assert "dropout.embedding" in (tmp_path / "runs" / "b" / "vdrnn.log").read_text()
    single = run_in_process("train", *common[:-1], "hydra.run.dir=runs/c", "dropout.embedding=1.5", cwd=tmp_path, check=False)
    assert single.returncode == 2 and "dropout.embedding" in single.stderr and not (tmp_path / "runs" / "c").exists()


MEDIUM_VARIATIONAL = {"scheme": "variational", "embedding": 0.2, "input": 0.5, "recurrent": 0.2, "output": 0.5}


def fake_ptb_run(folder, seed, overrides, epochs=39, time_limited=False, dropout=MEDIUM_VARIATIONAL, noise=None,
                 hidden=650, init_from=None, paper=None, wps=50_000, eval_seconds=None, start_epoch=None):
    """A finished PTB run (medium unless ``hidden`` says otherwise), with Hydra's record of its command line (a list
    of strings); ``paper``: its preset's Table 1 entry, as metrics.json keeps it."""
    folder.mkdir(parents=True)
    config = {"data": {"name": "ptb"}, "model": {"hidden_size": hidden}, "dropout": dropout, "seed": seed,
              "init_from": init_from, "trainer": {"epochs": 39, "max_minutes": 30 if time_limited else None}}
    metrics = {"valid_ppl": 82.0 + seed, "test_ppl": 79.0 + seed, "epochs": epochs, "time_limited": time_limited,
               "train_seconds": 600, "wps": wps, "config": config, **({"noise": noise} if noise else {}),
               **({"paper": paper} if paper else {}), **({"eval_seconds": eval_seconds} if eval_seconds else {}),
               **({"start_epoch": start_epoch} if start_epoch else {})}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))


def ptb_rows(tmp_path) -> list[dict[str, str]]:
    return report_rows(tmp_path, "ptb_table.csv")


def test_the_overrides_column_lists_every_seeds_overrides_and_names_those_only_some_made(tmp_path):
    runs = tmp_path / "runs"
    fake_ptb_run(runs / "s1", 1, ["experiment=medium_variational", "seed=1", "eval.samples=100", "trainer.clip=5",
                                  "trainer.max_minutes=13"])
    fake_ptb_run(runs / "s2", 2, ["experiment=medium_variational", "seed=2", "eval.samples=100",
                                  "trainer.max_minutes=14"])
    fake_ptb_run(runs / "s3", 3, ["experiment=medium_variational", "seed=3", "eval.samples=100", "trainer.clip=5",
                                  "trainer.max_minutes=14"])
    [row] = ptb_rows(tmp_path)
    assert row["seeds"] == "3"
    # Made by every seed: as is; by some: which (first-seen order, the seeds in the row's order).
    assert row["overrides"] == ("eval.samples=100, trainer.clip=5 (seeds 1 and 3), trainer.max_minutes=13 (seed 1), "
                                "trainer.max_minutes=14 (seeds 2 and 3)")


def test_the_overrides_column_says_which_seed_kept_no_record(tmp_path):
    runs = tmp_path / "runs"
    fake_ptb_run(runs / "s1", 1, ["trainer.clip=5"])
    fake_ptb_run(runs / "s2", 2, [])
    (runs / "s2" / "overrides.yaml").unlink()  # its command line is unknown, not empty
    [row] = ptb_rows(tmp_path)
    assert row["overrides"] == "trainer.clip=5 (seed 1), no record (seed 2)"


def test_the_ptb_table_shows_the_epochs_so_a_seed_a_time_cap_stopped_early_stands_out(tmp_path):
    runs = tmp_path / "runs"
    fake_ptb_run(runs / "s1", 1, [], epochs=39)
    fake_ptb_run(runs / "s2", 2, [], epochs=29, time_limited=True)  # trainer.max_minutes stopped it
    fake_ptb_run(runs / "zaremba", 1, [], dropout={"scheme": "zaremba", "input": 0.5, "output": 0.5})
    rows = {r["dropout"]: r for r in ptb_rows(tmp_path)}
    assert rows["emb 0.2, in 0.5, h 0.2, out 0.5"]["seeds"] == "2"
    assert rows["emb 0.2, in 0.5, h 0.2, out 0.5"]["epochs"] == "34 ± 7"
    assert rows["in 0.5, out 0.5"]["epochs"] == "39"  # one seed: its value


def test_dropout_options_the_dropout_column_does_not_show_are_overrides(tmp_path):
    runs = tmp_path / "runs"
    moon = {"scheme": "moon", "cell": 0.6, "cell_scale": "c", "locked_mask": "batch"}
    fake_ptb_run(runs / "moon", 1, ["experiment=medium_moon", "dropout.cell=0.6", "dropout.cell_scale=c",
                                    "dropout.locked_mask=batch"], dropout=moon)
    [row] = ptb_rows(tmp_path)
    assert row["dropout"] == "c 0.6"  # the probability shows here, so not again among the overrides
    assert row["overrides"] == "dropout.cell_scale=c, dropout.locked_mask=batch"


@pytest.mark.parametrize("gates, learn_alpha, name", [
    ("tied", False, "gaussian"), ("untied", False, "gaussian (untied)"), ("tied", True, "gaussian (learned alpha)"),
    ("untied", True, "gaussian (untied, learned alpha)"),
])
def test_an_ad_hoc_runs_name_says_untied_gates_and_learned_noise(gates, learn_alpha, name):
    config = {"dropout": {"scheme": "gaussian", "learn_alpha": learn_alpha}, "cell": {"gates": gates}}
    assert scheme_name(config) == name and scheme_rank(name)[0] < float("inf")  # a scheme the tables order


@pytest.mark.slow
def test_learned_noise_rows_show_where_each_sites_p_ended_averaged_over_seeds(tmp_path):
    runs = tmp_path / "runs"
    learned = {**MEDIUM_VARIATIONAL, "scheme": "gaussian", "learn_alpha": True}
    for seed, p_in in ((1, 0.5), (2, 0.4)):
        noise = {"p_input0": p_in, "p_input1": 0.5, "p_recurrent0": 0.5, "p_recurrent1": 0.3, "p_output": 0.45,
                 "alpha_input0": p_in / (1 - p_in), "kl": 3.0}
        fake_ptb_run(runs / f"s{seed}", seed, ["experiment=medium_gaussian_learned", f"seed={seed}"], dropout=learned,
                     noise=noise)
    fake_ptb_run(runs / "fixed", 1, ["experiment=medium_variational", "seed=1"])
    rows = {row["row"]: row for row in ptb_rows(tmp_path)}
    learned_row = rows["gaussian (learned alpha)"]
    assert learned_row["seeds"] == "2"
    assert learned_row["dropout"].endswith("; learned p: in 0.45/0.50, h 0.50/0.30, out 0.45")
    assert rows["variational"]["dropout"] == "emb 0.2, in 0.5, h 0.2, out 0.5"  # fixed p: nothing learned to show


def test_ptb_rows_go_small_medium_large_then_other_sizes(tmp_path):
    for hidden in (1500, 1000, 300, 200, 650):
        fake_ptb_run(tmp_path / "runs" / f"h{hidden}", 1, [], hidden=hidden)
    assert [row["size"] for row in ptb_rows(tmp_path)] == ["small", "medium", "large", "300 units", "1000 units"]


def test_a_grids_rows_go_in_the_order_of_their_numbers(tmp_path):
    for weight in (1000, 30, 300, 1):
        fake_ptb_run(tmp_path / "runs" / f"kl{weight}", 1, [f"dropout.kl_weight={weight}"],
                     dropout={**MEDIUM_VARIATIONAL, "kl_weight": weight})
    assert [row["row"].split("=")[-1] for row in ptb_rows(tmp_path)] == ["1]", "30]", "300]", "1000]"]


def test_a_grids_probabilities_go_in_the_order_of_their_values(tmp_path):
    for p in (0.5, 0.25, 0.05, 0.025):
        fake_ptb_run(tmp_path / "runs" / f"h{p}", 1, [], dropout={**MEDIUM_VARIATIONAL, "recurrent": p})
    assert [row["dropout"] for row in ptb_rows(tmp_path)] == [
        f"emb 0.2, in 0.5, h {p}, out 0.5" for p in ("0.025", "0.05", "0.25", "0.5")]


def test_overlapping_folders_count_each_run_once(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    fake_ptb_run(runs / "s1", 1, [])
    fake_ptb_run(runs / "s2", 2, [])
    monkeypatch.chdir(tmp_path)
    report.write_report([Path("runs"), runs / "s2"], tmp_path / "out")  # `vdrnn report runs $PWD/runs/s2`
    with open(tmp_path / "out" / "ptb_table.csv") as f:
        [row] = csv.DictReader(f)
    assert row["seeds"] == "2"


def test_a_folder_that_does_not_exist_is_an_error_even_beside_one_with_runs(tmp_path, capsys):
    fake_ptb_run(tmp_path / "runs" / "s1", 1, [])
    typo = tmp_path / "rusn"
    with pytest.raises(SystemExit) as exit_:
        report.main([str(tmp_path / "runs"), str(typo), "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2 and f"no such folder: {typo}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def unfinished_run(folder):
    """A run stopped before its final test: epochs in metrics.jsonl, no metrics.json."""
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "valid_ppl": 120.0}) + "\n")


def test_unfinished_runs_are_left_out_with_a_warning_that_names_them(tmp_path, capsys):
    runs = tmp_path / "runs"
    fake_ptb_run(runs / "s1", 1, [])
    unfinished_run(runs / "s2")
    [row] = ptb_rows(tmp_path)
    assert row["seeds"] == "1"
    err = capsys.readouterr().err
    assert "warning: leaving out unfinished runs" in err and str(runs / "s2") in err and "hydra.run.dir=" in err
    assert str(runs / "s1") not in err


def end_run(folder, status, reason=""):
    """Give a fake run's metrics.json the way it ended: failed (no results), stopped or running."""
    metrics = json.loads((folder / "metrics.json").read_text())
    kept = {k: metrics[k] for k in ("config", "epochs")}
    (folder / "metrics.json").write_text(json.dumps({"status": status, "reason": reason, "steps": 10, **kept}))


def test_failed_runs_are_counted_in_their_row_and_their_reasons_listed_and_unfinished_ones_left_out(tmp_path,
                                                                                                     capsys):
    """Gal discarded unstable runs; the table says how many there were, and its numbers are over the others."""
    runs = tmp_path / "runs"
    for seed in (1, 2, 3, 4, 5):
        fake_ptb_run(runs / f"s{seed}", seed, [])
    (runs / "s2" / "metrics.json").write_text(
        (runs / "s2" / "metrics.json").read_text().replace('"valid_ppl"', '"status": "finished", "valid_ppl"'))
    end_run(runs / "s3", "failed", "training diverged in epoch 2: training loss is nan at step 70")
    end_run(runs / "s4", "stopped", "stopped by SIGTERM at step 70")
    end_run(runs / "s5", "running")
    [row] = ptb_rows(tmp_path)
    assert row["seeds"] == "2 + 1 failed"
    assert row["valid"] == mean_std([83.0, 84.0], runs=3) == "83.5 ± 0.7 (n=2)"  # over the two that finished
    err = capsys.readouterr().err
    assert "warning: 1 failed run, counted in the tables' seeds column" in err
    assert f"{runs / 's3'}: training diverged in epoch 2: training loss is nan at step 70" in err
    assert "warning: leaving out unfinished runs" in err and str(runs / "s4") in err and str(runs / "s5") in err


def test_folders_of_only_unfinished_runs_say_so_and_how_to_resume(tmp_path):
    unfinished_run(tmp_path / "runs" / "s1")
    with pytest.raises(VdrnnError, match="only unfinished ones") as exit_:
        report.write_report([tmp_path / "runs"], tmp_path / "out")
    assert str(tmp_path / "runs" / "s1") in str(exit_.value) and "hydra.run.dir=<run>" in str(exit_.value)


def test_a_corrupt_metrics_json_is_an_error_that_names_it(tmp_path):
    fake_ptb_run(tmp_path / "runs" / "s1", 1, [])
    path = tmp_path / "runs" / "s1" / "metrics.json"
    path.write_text(path.read_text()[:40])  # cut short
    with pytest.raises(RecordError, match="not valid JSON") as exit_:
        report.write_report([tmp_path / "runs"], tmp_path / "out")
    assert str(path) in str(exit_.value)


def test_a_warm_started_run_is_not_a_seed_of_fresh_ones_wherever_its_weights_came_from(tmp_path):
    runs = tmp_path / "runs"
    fake_ptb_run(runs / "fresh1", 1, [])
    fake_ptb_run(runs / "fresh2", 2, [])
    fake_ptb_run(runs / "warm1", 1, [], init_from="/a/best.pt")
    fake_ptb_run(runs / "warm2", 2, [], init_from="/b/best.pt")  # the same kind of start from another folder
    rows = ptb_rows(tmp_path)
    assert sorted((r["row"], r["seeds"]) for r in rows) == [("variational [init_from=false]", "2"),
                                                             ("variational [init_from=true]", "2")]


def test_a_cell_says_over_how_many_runs_when_some_did_not_log_its_metric(tmp_path):
    runs = tmp_path / "runs"
    for seed in (1, 2, 3):
        fake_ptb_run(runs / f"s{seed}", seed, [])
    metrics = json.loads((runs / "s3" / "metrics.json").read_text())
    metrics["test_ppl_mc"] = 80.0
    (runs / "s3" / "metrics.json").write_text(json.dumps(metrics))
    [row] = ptb_rows(tmp_path)
    assert row["MC test"] == "80.0 (n=1)" and row["test"] == "81.0 ± 1.0"


def test_a_row_with_a_smoke_run_says_so(tmp_path):
    runs = tmp_path / "runs"
    fake_ptb_run(runs / "s1", 1, [])
    metrics = json.loads((runs / "s1" / "metrics.json").read_text())
    (runs / "s1" / "metrics.json").write_text(json.dumps({**metrics, "smoke": True}))
    [row] = ptb_rows(tmp_path)
    assert row["row"] == "variational (smoke)"


def test_a_row_is_a_smoke_row_when_any_one_of_its_seeds_is(tmp_path):
    runs = tmp_path / "runs"
    for seed in (1, 2, 3):
        fake_ptb_run(runs / f"s{seed}", seed, [])
    metrics = json.loads((runs / "s2" / "metrics.json").read_text())
    (runs / "s2" / "metrics.json").write_text(json.dumps({**metrics, "smoke": True}))
    [row] = ptb_rows(tmp_path)
    assert row["row"] == "variational (smoke)" and row["seeds"] == "3"


def test_a_rerun_of_a_seed_is_named_in_a_warning(tmp_path, capsys):
    runs = tmp_path / "runs"
    fake_ptb_run(runs / "first", 1, [])
    fake_ptb_run(runs / "again", 1, [])
    fake_ptb_run(runs / "other", 2, [])
    [row] = ptb_rows(tmp_path)
    assert row["seeds"] == "3"
    assert "holds seed 1 more than once" in capsys.readouterr().err


def test_mean_std_is_the_sample_std_and_an_infinite_value_leaves_the_mean_alone():
    assert mean_std([30.0, 40.0]) == "35.0 ± 7.1"  # sqrt(50), n - 1 in the denominator; population: 5.0
    assert mean_std([float("inf"), 80.0]) == "inf"
    assert mean_std([80.0, 82.0], runs=3) == "81.0 ± 1.4 (n=2)"


def test_settings_leave_out_what_does_not_make_another_experiment_and_read_5_as_5_0():
    config = {"seed": 2, "paper": {"row": "Zaremba et al. 2014", "test": 82.7},
              "data": {"name": "ptb", "root": "/data"}, "trainer": {"clip": 5.0, "max_minutes": None}}
    assert settings(config) == {"data.name": '"ptb"', "trainer.clip": "5"}


# Table 1's rows as the presets' ``paper`` entries give them (conf/experiment/medium_*.yaml).
PAPER = {"none": {"table": 1, "row": "Non-regularized (early stopping)", "size": "medium", "valid": 121.1,
                  "test": 121.7, "test_mc": None},
         "zaremba": {"table": 1, "row": "Zaremba et al. 2014", "size": "medium", "valid": 86.2, "test": 82.7,
                     "test_mc": None},
         "variational": {"table": 1, "row": "Variational (tied weights)", "size": "medium", "valid": 81.8,
                         "test": 79.7, "test_mc": 79.0}}


def test_ptb_rows_follow_table_1_and_each_paper_number_sits_in_its_column(tmp_path):
    """Rows in Table 1's order (not by name: Variational before Zaremba would be alphabetical), and the paper's
    valid, test and MC test beside ours: the fast counterpart of the real sweep test."""
    for scheme in ("variational", "zaremba", "none"):  # found in folder order, which is none of the two orders
        dropout = MEDIUM_VARIATIONAL if scheme == "variational" else {"scheme": scheme}
        fake_ptb_run(tmp_path / "runs" / scheme, 1, [], dropout=dropout, paper=PAPER[scheme])
    rows = ptb_rows(tmp_path)
    assert [row["row"] for row in rows] == [PAPER[s]["row"] for s in ("none", "zaremba", "variational")]
    for row in rows:
        paper = next(p for p in PAPER.values() if p["row"] == row["row"])
        cells = [row["paper valid"], row["paper test"], row["paper MC test"]]
        assert cells == ["–" if paper[k] is None else f"{paper[k]:.1f}" for k in ("valid", "test", "test_mc")]


def test_a_preset_run_at_other_units_says_so_in_its_size(tmp_path):
    """`experiment=medium_variational model.hidden_size=1024` is not the paper's medium model: its own row, whose size
    names its units beside the preset's paper size (and the paper's numbers, the preset's target)."""
    fake_ptb_run(tmp_path / "runs" / "medium", 1, [], paper=PAPER["variational"])
    fake_ptb_run(tmp_path / "runs" / "wider", 1, ["model.hidden_size=1024"], hidden=1024, paper=PAPER["variational"])
    medium, wider = ptb_rows(tmp_path)
    assert (medium["size"], medium["paper test"]) == ("medium", "79.7")
    assert (wider["row"], wider["size"], wider["paper test"]) == ("Variational (tied weights)", "medium (1024 units)",
                                                                  "79.7")


def test_the_cost_columns_average_the_seeds_and_count_the_final_test(tmp_path):
    """words/s is the seeds' mean, and the minutes are the training steps' plus the final test's (eval_seconds)."""
    fake_ptb_run(tmp_path / "runs" / "s1", 1, [], wps=40_000, eval_seconds=120)
    fake_ptb_run(tmp_path / "runs" / "s2", 2, [], wps=50_000, eval_seconds=240)
    [row] = ptb_rows(tmp_path)
    assert row["words/s"] == f"{(40_000 + 50_000) / 2:,.0f}"
    assert row["train + test (min)"] == f"{((600 + 120) + (600 + 240)) / 2 / 60:.1f}"


def test_the_overrides_column_names_reruns_of_one_seed_by_their_folders(tmp_path):
    """Two runs of seed 1 in a row: ``(seed 1)`` would not say which of them made an override, so folders do."""
    fake_ptb_run(tmp_path / "runs" / "first", 1, ["trainer.clip=5"])
    fake_ptb_run(tmp_path / "runs" / "again", 1, [])
    [row] = ptb_rows(tmp_path)
    assert row["overrides"] == "trainer.clip=5 (first)"


def test_curve_panels_go_small_medium_large_then_other_sizes(tmp_path, monkeypatch):
    """The plot's panels in the table's size order, whatever order a set of sizes happens to have."""
    for hidden in (1500, 1000, 300, 200, 650):
        fake_ptb_run(tmp_path / "runs" / f"h{hidden}", 1, [], hidden=hidden)
        (tmp_path / "runs" / f"h{hidden}" / "metrics.jsonl").write_text(json.dumps({"valid_ppl": 100.0}) + "\n")
    titles = []

    def save_curves(fig, axes, path):
        import matplotlib.pyplot as plt

        titles.extend(ax.get_title() for ax in axes)
        plt.close(fig)

    monkeypatch.setattr("vdrnn.report.lm.save_curves", save_curves)  # where plot_ptb finds it
    plot_ptb(collect_ptb(find_runs([tmp_path / "runs"])), tmp_path / "plot.png")
    assert titles == [f"PTB {size}: validation perplexity"
                      for size in ("small", "medium", "large", "300 units", "1000 units")]


def test_a_reliability_panel_names_the_model_size_of_its_row(tmp_path):
    """Table 1's rows recur at each size with the same name; over a panel, without the table's size column, the
    title says which model it shows, unless the name says it already (AWD-LSTM's size is "awd")."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bins = {"count": [10.0, 10.0], "right": [2.0, 7.0], "confidence": [3.0, 8.0]}
    for row, size, hidden in (("Variational (tied weights)", "medium", 650),
                              ("Variational (tied weights)", "large", 1500), ("AWD-LSTM (fine-tuned)", "awd", 1150)):
        folder = tmp_path / "runs" / size
        fake_ptb_run(folder, 1, [], hidden=hidden, paper={"table": 1, "row": row, "size": size})
        metrics = json.loads((folder / "metrics.json").read_text())
        (folder / "metrics.json").write_text(json.dumps({**metrics, "test_reliability": bins, "test_ece": 0.1}))
    titles = []
    for row in collect_ptb(find_runs([tmp_path / "runs"])):
        fig, ax = plt.subplots()
        reliability_panel(ax, row)
        titles.append(ax.get_title().splitlines()[0])
        plt.close(fig)
    assert sorted(titles) == ["AWD-LSTM (fine-tuned) (n=1)", "Variational (tied weights), large (n=1)",
                              "Variational (tied weights), medium (n=1)"]


def test_every_point_of_the_curves_is_inside_the_frame(tmp_path, monkeypatch):
    """A no-dropout run starts at several times the perplexity the dropout rows end at: no point is cut off."""
    for name, curve in (("none", [900.0, 300.0, 140.0, 125.0]), ("variational", [400.0, 120.0, 90.0, 80.0])):
        fake_ptb_run(tmp_path / "runs" / name, 1, [], dropout={"scheme": name})
        (tmp_path / "runs" / name / "metrics.jsonl").write_text("".join(json.dumps({"valid_ppl": v}) + "\n"
                                                                       for v in curve))
    frames = []

    def save_curves(fig, axes, path):
        import matplotlib.pyplot as plt

        frames.extend((ax.get_ylim(), [v for line in ax.get_lines() for v in line.get_ydata()]) for ax in axes)
        plt.close(fig)

    monkeypatch.setattr("vdrnn.report.lm.save_curves", save_curves)
    plot_ptb(collect_ptb(find_runs([tmp_path / "runs"])), tmp_path / "plot.png")
    [((low, high), points)] = frames
    assert sorted(points) == sorted([900.0, 300.0, 140.0, 125.0, 400.0, 120.0, 90.0, 80.0])
    assert all(low < point < high for point in points)


def test_a_fine_tuning_runs_curve_goes_on_after_the_epochs_of_the_weights_it_started_from(tmp_path, monkeypatch):
    """AWD's fine-tuning stage (init_from) draws after the run it fine-tunes, not over its first epochs, and its row
    follows that run's in the table."""
    runs = tmp_path / "runs"
    for name, row, curve, start in (("tuned", "AWD-LSTM (fine-tuned)", [61.0, 60.5], 3),
                                    ("trained", "AWD-LSTM (no fine-tuning)", [90.0, 70.0, 62.0], None)):
        fake_ptb_run(runs / name, 1, [], epochs=len(curve), hidden=1150, dropout={"scheme": "awd"},
                     init_from="/a/best.pt" if start else None, paper={"row": row, "size": "awd"}, start_epoch=start)
        (runs / name / "metrics.jsonl").write_text("".join(json.dumps({"valid_ppl": v}) + "\n" for v in curve))
    lines = {}

    def save_curves(fig, axes, path):
        import matplotlib.pyplot as plt

        lines.update((line.get_label(), list(line.get_xdata())) for ax in axes for line in ax.get_lines())
        plt.close(fig)

    monkeypatch.setattr("vdrnn.report.lm.save_curves", save_curves)
    plot_ptb(collect_ptb(find_runs([runs])), tmp_path / "plot.png")
    assert lines == {"AWD-LSTM (no fine-tuning) (n=1)": [1, 2, 3], "AWD-LSTM (fine-tuned) (n=1)": [4, 5]}
    assert [row["row"] for row in ptb_rows(tmp_path)] == ["AWD-LSTM (no fine-tuning)", "AWD-LSTM (fine-tuned)"]


def test_runs_that_finished_no_epoch_are_named_in_a_warning_and_evaluations_are_not(tmp_path, capsys):
    """A sweep's refused job holds only vdrnn.log: without a word the table would just lack a seed."""
    runs = tmp_path / "runs"
    fake_ptb_run(runs / "s1", 1, [])
    for folder in ("refused", "evaluated"):
        (runs / folder).mkdir()
        (runs / folder / "vdrnn.log").write_text("[ERROR] - dropout.input=1.2 is not a probability in [0, 1)\n")
    (runs / "evaluated" / "eval.json").write_text("{}")
    [row] = ptb_rows(tmp_path)
    [no_epoch] = [line for line in capsys.readouterr().err.splitlines() if "runs that finished no epoch" in line]
    assert str(runs / "refused") in no_epoch and str(runs / "evaluated") not in no_epoch
    (runs / "s1" / "metrics.json").unlink()
    with pytest.raises(VdrnnError, match=r"no metrics.json or eval.json under .*runs that finished no epoch: "
                                          r".*refused"):
        report.write_report([runs], tmp_path / "out")


def test_curve_plots_tick_whole_epochs(tmp_path):
    """A one-epoch run's panel would otherwise be ticked 0.96, 0.98, ... 1.04."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1], [120.0], marker="o", label="a one-epoch run")
    save_curves(fig, [ax], tmp_path / "curves.png")
    assert (tmp_path / "curves.png").exists() and all(float(tick).is_integer() for tick in ax.get_xticks())


def test_mc_settings_of_weight_scaling_runs_do_not_set_them_apart(tmp_path):
    """eval.samples (or any MC key) changes nothing of an eval=scale run: such runs are seeds of one row; under
    eval=mc it is another experiment."""
    runs = tmp_path / "runs"
    for seed, mode, samples in ((1, "scale", 1000), (2, "scale", 50), (3, "mc", 1000), (4, "mc", 50)):
        fake_ptb_run(runs / f"s{seed}", seed, [])
        path = runs / f"s{seed}" / "metrics.json"
        metrics = json.loads(path.read_text())
        metrics["config"]["eval"] = {"mode": mode, "samples": samples}
        path.write_text(json.dumps(metrics))
    rows = ptb_rows(tmp_path)
    assert sorted((row["seeds"], "eval.mode=mc" in row["row"]) for row in rows) == [("1", True), ("1", True),
                                                                                     ("2", False)]
    assert "???" not in "".join(base_settings().values())  # config.yaml's keys set by a group option


@pytest.mark.slow
def test_an_eval_sweep_over_mc_samples_reports_what_the_samples_cost_and_buy(tmp_path, tiny_corpus):
    tiny = [a for a in TINY if not a.startswith("model=")]
    run_in_process("train", "experiment=medium_variational", *tiny, "trainer.epochs=1", "eval=scale",
                   f"data.root={tiny_corpus}", "hydra.run.dir=run", cwd=tmp_path)
    run_in_process("eval", "-m", "checkpoint=run/best.pt", f"data.root={tiny_corpus}", "eval=mc",
                   "eval.samples=1,4", "hydra.sweep.dir=evals", cwd=tmp_path)
    run_in_process("report", "evals", "--out", "report", cwd=tmp_path)
    with open(tmp_path / "report" / "ptb_evaluations.csv") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: r["mode"])
    assert [r["mode"] for r in rows] == ["MC, 1 passes", "MC, 4 passes"]
    for row in rows:  # per sample count: what it scored and what it cost
        assert all(row[column] not in ("", "–") for column in ("MC test", "MC ECE", "MC Brier", "ECE", "MC seconds"))
    assert rows[0]["ECE"] == rows[1]["ECE"]  # weight scaling does not depend on the samples
    png = (tmp_path / "report" / "ptb_mc_samples.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_ad_hoc_rows_follow_the_schemes_order_not_their_names(tmp_path):
    runs = tmp_path / "runs"
    for scheme in ("zoneout", "variational", "awd", "zaremba"):  # by name: awd, variational, zaremba, zoneout
        fake_ptb_run(runs / scheme, 1, [], dropout={**MEDIUM_VARIATIONAL, "scheme": scheme})
    assert [row["row"] for row in ptb_rows(tmp_path)] == ["zaremba", "variational", "awd", "zoneout"]


def test_an_evaluation_names_its_checkpoint_from_the_reported_folder_not_the_machine_it_ran_on(tmp_path):
    from vdrnn.report.evaluations import find_evaluations

    runs = tmp_path / "runs"
    (runs / "large").mkdir(parents=True)  # the run, copied in after it was evaluated in a temporary folder
    for folder, checkpoint in (("large_mc/samples_1", "/tmp/runs48/large/best.pt"),
                               ("inside", str(runs / "large" / "last.pt")), ("elsewhere", "/scratch/other/best.pt")):
        (runs / folder).mkdir(parents=True)
        (runs / folder / "eval.json").write_text(json.dumps({"config": {"data": {"name": "ptb"}},
                                                             "checkpoint": checkpoint}))
    shown = {str(folder): evaluation["checkpoint"] for folder, evaluation in find_evaluations([runs])}
    assert shown == {"runs/large_mc/samples_1": "runs/large/best.pt", "runs/inside": "runs/large/last.pt",
                     "runs/elsewhere": "other/best.pt"}
