"""`vdrnn report` on sentiment runs: a table per dataset (cell x scheme, mean ± std over seeds) and test curves."""

from __future__ import annotations

import csv
import json
import re

import pytest

from tests.helpers import report_rows
from vdrnn import report
from vdrnn.report.found import find_runs
from vdrnn.report.plots import line_label, plot_mean_curve, reliability_panel
from vdrnn.report.rows import QUIET_OVERRIDES, base_settings, run_overrides, run_settings
from vdrnn.report.sentiment import collect


def fake_run(folder, dataset, cell, scheme, gates, seed, accuracy, p=None, trainer=None, data=None, units=128):
    folder.mkdir(parents=True)
    dropout = {"scheme": scheme, **({"input": p, "recurrent": p} if p else {})}
    config = {"data": {"name": dataset, **(data or {})}, "cell": {"type": cell, "gates": gates}, "dropout": dropout, "seed": seed,
              "model": {"hidden_size": units}, **({"trainer": trainer} if trainer else {})}
    if dataset == "imdb":
        final = {"test_accuracy": accuracy, "test_nll": 0.3, "test_ece": 0.02, "test_entropy": 0.25,
                 "test_accuracy_mc": accuracy + 0.01, "test_nll_mc": 0.29, "test_ece_mc": 0.01, "test_entropy_mc": 0.3}
        epochs = [{"epoch": e, "test_accuracy": accuracy - 0.01 * (3 - e)} for e in (1, 2, 3)]
    else:
        final = {"test_rmse": 0.15, "test_rmse_mc": 0.14}
        epochs = [{"epoch": e, "test_rmse": 0.2 - 0.01 * e} for e in (1, 2, 3)]
    (folder / "metrics.json").write_text(json.dumps({**final, "epochs": 3, "train_seconds": 60, "config": config}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in epochs))


def imdb_rows(tmp_path) -> list[dict[str, str]]:
    return report_rows(tmp_path, "imdb_table.csv")


def test_sentiment_tables_group_cells_schemes_and_seeds(tmp_path):
    runs = tmp_path / "runs"
    for seed, acc in ((1, 0.85), (2, 0.87)):
        fake_run(runs / f"gv{seed}", "imdb", "gru", "variational", "tied", seed, acc)
        fake_run(runs / f"ln{seed}", "imdb", "lstm", "none", "tied", seed, acc - 0.02)
    fake_run(runs / "lu", "imdb", "lstm", "variational", "untied", 1, 0.88, units=512)
    fake_run(runs / "scale", "scale", "lstm", "zaremba", "tied", 1, None)
    text, written = report.write_report([runs], tmp_path / "out")
    with open(tmp_path / "out" / "imdb_table.csv") as f:
        rows = {r["row"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["LSTM · none", "LSTM · variational (untied)", "GRU · variational"]
    assert rows["GRU · variational"]["accuracy (%)"] == "86.00 ± 1.41" and rows["GRU · variational"]["seeds"] == "2"
    assert rows["GRU · variational"]["MC accuracy (%)"] == "87.00 ± 1.41" and rows["LSTM · none"]["ECE"] == "0.0200 ± 0.0000"
    assert (rows["GRU · variational"]["units"], rows["LSTM · variational (untied)"]["units"]) == ("128", "512")
    assert "| LSTM · zaremba | 128 | – | 1 | 0.1500 | 0.1400 |" in text  # the fake runs have no probabilities
    assert not (tmp_path / "out" / "ptb_table.md").exists()  # no PTB runs, no PTB table
    for name in ("imdb_test_curves.png", "scale_test_curves.png"):
        assert (tmp_path / "out" / name).read_bytes().startswith(b"\x89PNG") and tmp_path / "out" / name in written


def calibrated_run(folder, seed, ece, ece_mc, interval):
    """An IMDB run with the calibration report of sentiment.trainer.evaluate_all: 1,000 reviews in two bins."""
    fake_run(folder, "imdb", "lstm", "variational", "tied", seed, 0.89)
    metrics = json.loads((folder / "metrics.json").read_text())
    bins = {"count": [0, 400, 600], "right": [0, 240, 570], "confidence": [0, 244, 560]}
    metrics.update({"test_ece": ece, "test_ece_mc": ece_mc, "test_ece_floor": 0.004, "test_ece_floor_mc": 0.0045,
                    "test_ece_mc_minus_ws": ece_mc - ece, "test_ece_mc_minus_ws_ci": interval,
                    "test_reliability": bins, "test_reliability_mc": bins})
    (folder / "metrics.json").write_text(json.dumps(metrics))


def test_calibration_table_says_per_run_which_evaluation_is_the_better_calibrated(tmp_path):
    runs = tmp_path / "runs"
    calibrated_run(runs / "a", 1, 0.019, 0.007, [-0.017, -0.008])
    calibrated_run(runs / "b", 2, 0.006, 0.017, [0.009, 0.016])
    calibrated_run(runs / "c", 3, 0.007, 0.011, [-0.001, 0.009])
    fake_run(runs / "old", "imdb", "gru", "variational", "tied", 1, 0.88)  # from before the report: no line
    text, written = report.write_report([runs], tmp_path / "out")
    with open(tmp_path / "out" / "imdb_calibration.csv") as f:
        lines = {r["run"]: r for r in csv.DictReader(f)}
    assert {run: line["better calibrated"] for run, line in lines.items()} == {
        "a": "MC", "b": "weight scaling", "c": "neither (interval holds 0)",
        "mean of 3 seeds": "neither (interval holds 0) across seeds; per run: MC 1, weight scaling 1, neither 1"}
    assert lines["a"]["MC - WS ECE (95% interval)"] == "-0.0120 (-0.0170 to -0.0080)"
    # Differences -0.012, +0.011, +0.004: mean +0.001, sd 0.01179, so +-4.303 x 0.01179 / sqrt(3) over the seeds.
    assert lines["mean of 3 seeds"]["MC - WS ECE (95% interval)"] == "+0.0010 (-0.0283 to +0.0303)"
    assert lines["mean of 3 seeds"]["ECE"] == "0.0107" and lines["mean of 3 seeds"]["MC ECE"] == "0.0117"
    assert lines["a"]["ECE floor"] == "0.0040" and lines["a"]["row"] == "LSTM · variational"
    assert tmp_path / "out" / "imdb_reliability.png" in written and (tmp_path / "out" / "imdb_reliability.png").stat().st_size
    assert "calibration, MC dropout against weight scaling" in text


def test_seeds_that_agree_make_one_evaluation_the_better_calibrated_across_seeds_and_one_seed_makes_no_mean(tmp_path):
    runs = tmp_path / "runs"
    for seed, ece_mc in ((1, 0.008), (2, 0.009), (3, 0.010)):  # MC 0.010-0.012 below weight scaling's 0.020
        calibrated_run(runs / f"lstm{seed}", seed, 0.020, ece_mc, [-0.015, -0.005])
    fake_run(runs / "gru", "imdb", "gru", "variational", "tied", 1, 0.89)
    metrics = json.loads((runs / "gru" / "metrics.json").read_text())
    metrics.update({"test_ece_floor": 0.004, "test_ece_floor_mc": 0.004, "test_ece_mc_minus_ws": -0.01,
                    "test_ece_mc_minus_ws_ci": [-0.02, 0.001]})
    (runs / "gru" / "metrics.json").write_text(json.dumps(metrics))
    report.write_report([runs], tmp_path / "out")
    with open(tmp_path / "out" / "imdb_calibration.csv") as f:
        lines = [(r["run"], r["MC - WS ECE (95% interval)"], r["better calibrated"]) for r in csv.DictReader(f)]
    # Mean -0.011, sd 0.001: +-4.303 x 0.001 / sqrt(3) = +-0.0025.
    assert lines[3:] == [
        ("mean of 3 seeds", "-0.0110 (-0.0135 to -0.0085)", "MC across seeds; per run: MC 3, weight scaling 0, neither 0"),
        ("gru", "-0.0100 (-0.0200 to +0.0010)", "neither (interval holds 0)")]


def test_the_mc_ece_floor_column_is_the_mc_predictions_floor(tmp_path):
    calibrated_run(tmp_path / "runs" / "a", 1, 0.019, 0.007, [-0.017, -0.008])  # floors 0.004, MC 0.0045
    report.write_report([tmp_path / "runs"], tmp_path / "out")
    with open(tmp_path / "out" / "imdb_calibration.csv") as f:
        [line] = csv.DictReader(f)
    assert (line["ECE floor"], line["MC ECE floor"]) == ("0.0040", "0.0045")


def test_sentiment_rows_that_differ_in_dropout_stay_apart(tmp_path):
    runs = tmp_path / "runs"
    fake_run(runs / "a", "imdb", "lstm", "variational", "tied", 1, 0.85, p=0.5)
    fake_run(runs / "b", "imdb", "lstm", "variational", "tied", 1, 0.88, p=0.25)
    rows = [(r["dropout"], r["accuracy (%)"]) for r in imdb_rows(tmp_path)]
    assert rows == [("in 0.25, h 0.25", "88.00"), ("in 0.5, h 0.5", "85.00")]


def test_runs_that_differ_in_another_setting_are_rows_named_by_it(tmp_path):
    runs = tmp_path / "runs"
    for seed in (1, 2):  # seeds of one experiment, whatever else they log (progress bar, time cap)
        fake_run(runs / f"long{seed}", "imdb", "lstm", "variational", "tied", seed, 0.86,
                 trainer={"epochs": 40, "amp": "off", "progress": seed == 1, "max_minutes": 19 if seed == 1 else None})
    fake_run(runs / "short", "imdb", "lstm", "variational", "tied", 1, 0.85, trainer={"epochs": 20, "amp": "off"})
    # An option that older runs did not have yet is not a difference, also where conf/config.yaml has no default
    # to fill it in with (data.* comes from the dataset group).
    fake_run(runs / "old", "imdb", "gru", "variational", "tied", 1, 0.85, trainer={"epochs": 20})
    fake_run(runs / "new", "imdb", "gru", "variational", "tied", 2, 0.87, trainer={"epochs": 20},
             data={"max_length": 200})
    assert "data.max_length" not in base_settings()  # else this would not test what it says
    # A number given on the command line (clip=5) and the same number from a preset (clip: 5.0) are one setting.
    fake_run(runs / "cli", "imdb", "gru", "variational", "tied", 3, 0.86, trainer={"epochs": 20.0})
    rows = [(r["row"], r["seeds"]) for r in imdb_rows(tmp_path)]
    assert rows == [("LSTM · variational [trainer.epochs=20]", "1"), ("LSTM · variational [trainer.epochs=40]", "2"),
                    ("GRU · variational", "3")]


def test_the_overrides_column_names_what_the_command_line_changed_beyond_the_preset(tmp_path):
    runs = tmp_path / "runs"
    fake_run(runs / "a", "imdb", "lstm", "variational", "tied", 1, 0.85)
    # Seed, preset, probabilities (the dropout column) and cosmetics are not departures from the preset.
    (runs / "a" / "overrides.yaml").write_text(
        "- experiment=imdb_lstm_variational\n- seed=2\n- trainer.epochs=40\n- dropout.input=0.25\n"
        "- trainer.progress=false\n- data.max_length=400\n")
    fake_run(runs / "b", "imdb", "gru", "variational", "tied", 1, 0.85)  # no record of its command line
    rows = [(r["row"], r["overrides"]) for r in imdb_rows(tmp_path)]
    assert rows == [("LSTM · variational", "trainer.epochs=40, data.max_length=400"), ("GRU · variational", "–")]


def test_the_overrides_column_lists_the_overrides_of_every_seed(tmp_path):
    runs = tmp_path / "runs"
    for seed, minutes in ((1, 13), (2, 14)):
        fake_run(runs / f"s{seed}", "imdb", "gru", "variational", "tied", seed, 0.88)
        (runs / f"s{seed}" / "overrides.yaml").write_text(
            f"- experiment=imdb_gru_variational\n- trainer.epochs=40\n- trainer.max_minutes={minutes}\n- seed={seed}\n")
    [row] = imdb_rows(tmp_path)
    assert row["seeds"] == "2"
    assert row["overrides"] == "trainer.epochs=40, trainer.max_minutes=13 (seed 1), trainer.max_minutes=14 (seed 2)"


def test_a_rows_seeds_go_in_the_order_of_their_numbers_not_of_their_names(tmp_path):
    runs = tmp_path / "runs"
    for seed in (10, 2, 1):
        fake_run(runs / f"seed{seed}", "imdb", "gru", "variational", "tied", seed, 0.88)
        (runs / f"seed{seed}" / "overrides.yaml").write_text(f"- trainer.max_minutes={seed}\n- seed={seed}\n")
    [row] = imdb_rows(tmp_path)
    assert row["overrides"] == ("trainer.max_minutes=1 (seed 1), trainer.max_minutes=2 (seed 2), "
                                "trainer.max_minutes=10 (seed 10)")


def test_curve_labels_name_the_probabilities_and_the_setting_that_tell_lines_apart():
    grid = {"in 0.5", "in 0.25"}  # the probabilities the panel holds the scheme at
    assert line_label("variational", "in 0.5", "data.max_length=400", grid) == \
        "variational [in 0.5; data.max_length=400]"
    assert line_label("variational", "in 0.25", "data.max_length=400", grid) == \
        "variational [in 0.25; data.max_length=400]"
    assert line_label("variational", "in 0.25", "", grid) == "variational [in 0.25]"
    assert line_label("variational", "in 0.5", "trainer.epochs=40", {"in 0.5"}) == \
        "variational [trainer.epochs=40]"
    assert line_label("none", "–", "", {"–"}) == "none"


def test_a_run_from_before_an_option_existed_counts_as_run_with_its_default(tmp_path):
    runs = tmp_path / "runs"
    moon = {"scheme": "moon", "cell": 0.5}
    for name, dropout in (("old", moon), ("new", {**moon, "cell_scale": "h"}), ("c", {**moon, "cell_scale": "c"})):
        fake_run(runs / name, "imdb", "lstm", "moon", "tied", 1, 0.85)
        path = runs / name / "metrics.json"
        metrics = json.loads(path.read_text())
        metrics["config"]["dropout"] = dropout  # "old" logged no cell_scale: it ran with the default, h
        path.write_text(json.dumps(metrics))
    rows = [(r["row"], r["seeds"]) for r in imdb_rows(tmp_path)]
    assert sorted(rows) == [("LSTM · moon [dropout.cell_scale=c]", "1"), ("LSTM · moon [dropout.cell_scale=h]", "2")]


def test_sentiment_runs_that_differ_only_in_evaluation_batch_size_are_seeds_of_one_row(tmp_path):
    runs = tmp_path / "runs"
    fake_run(runs / "a", "imdb", "lstm", "variational", "tied", 1, 0.86, data={"eval_batch_size": 1000})
    fake_run(runs / "b", "imdb", "lstm", "variational", "tied", 2, 0.88, data={"eval_batch_size": 500})
    rows = [(r["seeds"], r["accuracy (%)"]) for r in imdb_rows(tmp_path)]
    assert rows == [("2", "87.00 ± 1.41")]
    # A language model's evaluation batch cuts the text into other streams: there it is a setting.
    lm = {"data": {"name": "ptb", "eval_batch_size": 10}}
    assert "data.eval_batch_size" in run_settings(lm)
    assert "data.eval_batch_size" not in run_settings({"data": {"name": "imdb", "eval_batch_size": 10}})


def test_every_curve_of_a_crowded_panel_looks_different():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    for i in range(12):
        plot_mean_curve(ax, [[1.0 + i, 2.0 + i]], f"line {i}")
    looks = [(line.get_color(), line.get_linestyle()) for line in ax.get_lines()]
    plt.close(fig)
    assert len(set(looks)) == 12


def test_a_mean_curve_averages_the_epochs_every_seed_reached():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    plot_mean_curve(ax, [[1.0, 2.0, 3.0], [3.0, 4.0]], "line")
    [line] = ax.get_lines()
    plt.close(fig)
    assert list(line.get_xdata()) == [1, 2] and list(line.get_ydata()) == [2.0, 3.0]
    assert line.get_label() == "line (n=2)"


def test_a_run_joins_a_row_only_if_it_is_the_same_experiment_as_every_run_there(tmp_path):
    runs = tmp_path / "runs"
    # The old run logged no data.max_length, so it matches either of the others; they must still stay apart.
    fake_run(runs / "a_old", "imdb", "lstm", "variational", "tied", 1, 0.85)
    fake_run(runs / "b_200", "imdb", "lstm", "variational", "tied", 2, 0.86, data={"max_length": 200})
    fake_run(runs / "c_400", "imdb", "lstm", "variational", "tied", 3, 0.88, data={"max_length": 400})
    assert "data.max_length" not in base_settings()  # else the old run would have it at its default
    rows = [(r["row"], r["seeds"]) for r in imdb_rows(tmp_path)]
    # Each row is named by the max_length of its runs, the old run's row too (it holds the 200 run).
    assert rows == [("LSTM · variational [data.max_length=200]", "2"), ("LSTM · variational [data.max_length=400]", "1")]


def test_a_sentiment_rows_overrides_leave_out_the_evaluation_batch_size_a_language_models_keep(tmp_path):
    runs = tmp_path / "runs"
    fake_run(runs / "a", "imdb", "lstm", "variational", "tied", 1, 0.85)
    (runs / "a" / "overrides.yaml").write_text("- data.eval_batch_size=500\n- trainer.epochs=40\n")
    [row] = imdb_rows(tmp_path)
    assert row["overrides"] == "trainer.epochs=40"  # it changes no number of a sentiment run: not a setting there
    # A language model's evaluation batch is a setting (it cuts the text into other streams): it shows.
    assert run_overrides(runs / "a", QUIET_OVERRIDES) == ["data.eval_batch_size=500", "trainer.epochs=40"]


def test_the_reliability_legend_gives_the_mean_of_the_seeds_eces(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = tmp_path / "runs"
    calibrated_run(runs / "a", 1, 0.019, 0.007, [-0.017, -0.008])
    calibrated_run(runs / "b", 2, 0.007, 0.017, [0.009, 0.016])
    [row] = collect(find_runs([runs]))["imdb"]
    fig, ax = plt.subplots()
    reliability_panel(ax, row)
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    plt.close(fig)
    # The curve pools the seeds' bins, so the number beside it is not its own ECE but the seeds' mean: say so.
    assert labels == ["weight scaling (mean ECE 0.0130)", "MC dropout (mean ECE 0.0120)", "calibrated"]


def test_sentiment_rows_follow_the_schemes_order_not_their_names(tmp_path):
    """Within a cell, none, zaremba, moon, variational (the papers' order), where by name moon and none would lead."""
    for scheme in ("variational", "moon", "none", "zaremba"):
        fake_run(tmp_path / "runs" / scheme, "imdb", "lstm", scheme, "tied", 1, 0.85)
    assert [r["row"] for r in imdb_rows(tmp_path)] == [f"LSTM · {s}" for s in ("none", "zaremba", "moon", "variational")]


def test_rows_named_alike_go_in_the_order_of_the_numbers_that_tell_them_apart(tmp_path):
    """trainer.epochs=40 before 100, as the numbers go, where the text would put 100 first."""
    for epochs in (100, 40):
        fake_run(tmp_path / "runs" / f"e{epochs}", "imdb", "lstm", "variational", "tied", 1, 0.85,
                 trainer={"epochs": epochs})
    assert [r["row"] for r in imdb_rows(tmp_path)] == [f"LSTM · variational [trainer.epochs={e}]" for e in (40, 100)]


def test_rows_named_alike_are_named_by_every_setting_that_differs(tmp_path):
    """Two settings apart (epochs and clip): naming one alone would hide that the other changed too."""
    fake_run(tmp_path / "runs" / "a", "imdb", "lstm", "variational", "tied", 1, 0.85, trainer={"epochs": 20, "clip": 5})
    fake_run(tmp_path / "runs" / "b", "imdb", "lstm", "variational", "tied", 1, 0.86, trainer={"epochs": 40, "clip": 1})
    assert sorted(r["row"] for r in imdb_rows(tmp_path)) == [
        "LSTM · variational [trainer.clip=1, trainer.epochs=40]", "LSTM · variational [trainer.clip=5, trainer.epochs=20]"]


def test_the_reliability_diagram_pools_the_seeds_bins(tmp_path):
    """A row's diagram sums its seeds' counts, right answers and confidences per bin before dividing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = tmp_path / "runs"
    calibrated_run(runs / "a", 1, 0.019, 0.007, [-0.017, -0.008])
    calibrated_run(runs / "b", 2, 0.007, 0.017, [0.009, 0.016])
    other = {"count": [0, 100, 900], "right": [0, 90, 700], "confidence": [0, 65, 820]}  # b's bins differ from a's
    metrics = json.loads((runs / "b" / "metrics.json").read_text())
    metrics.update({"test_reliability": other, "test_reliability_mc": other})
    (runs / "b" / "metrics.json").write_text(json.dumps(metrics))
    a = json.loads((runs / "a" / "metrics.json").read_text())["test_reliability"]
    [row] = collect(find_runs([runs]))["imdb"]
    fig, ax = plt.subplots()
    reliability_panel(ax, row)
    ws = ax.get_lines()[0]
    plt.close(fig)
    pooled = {k: [x + y for x, y in zip(a[k], other[k], strict=True)] for k in a}
    filled = [i for i, n in enumerate(pooled["count"]) if n]
    assert list(ws.get_xdata()) == pytest.approx([pooled["confidence"][i] / pooled["count"][i] for i in filled])
    assert list(ws.get_ydata()) == pytest.approx([pooled["right"][i] / pooled["count"][i] for i in filled])


def test_pool_makes_runs_that_differ_only_in_that_setting_seeds_of_one_row_which_names_its_values(tmp_path):
    """`vdrnn report --pool trainer.epochs`: seeds run to 42 and to 30 epochs are one row (a setting that differs
    besides, here the clip, still makes its own row), and the row's name says which values it pools."""
    runs = tmp_path / "runs"
    for seed, epochs in ((1, 42), (2, 30), (3, 30)):
        fake_run(runs / f"s{seed}", "imdb", "lstm", "variational", "tied", seed, 0.88 + seed / 100,
                 trainer={"epochs": epochs, "clip": 5})
    fake_run(runs / "clip1", "imdb", "lstm", "variational", "tied", 4, 0.80, trainer={"epochs": 30, "clip": 1})
    assert sorted(r["seeds"] for r in imdb_rows(tmp_path)) == ["1", "1", "2"]  # not pooled: 42 and 30 epochs apart

    report.main([str(runs), "--out", str(tmp_path / "pooled"), "--pool", "trainer.epochs"])
    with open(tmp_path / "pooled" / "imdb_table.csv") as f:
        rows = {r["row"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"LSTM · variational [trainer.clip=5, trainer.epochs=30/42 pooled]",
                         "LSTM · variational [trainer.clip=1]"}
    pooled = rows["LSTM · variational [trainer.clip=5, trainer.epochs=30/42 pooled]"]
    assert (pooled["seeds"], pooled["accuracy (%)"]) == ("3", "90.00 ± 1.00")


@pytest.mark.parametrize("key,why", [
    ("trainer.epoch", r"no run under .* has that setting"),  # a typo
    ("dropout.input", "name a row"),  # the dropout column: rows apart there stay apart
    ("model", "name a row"),  # holds model.hidden_size, a PTB row's size
    ("seed", "one row already")])
def test_pool_refuses_a_key_it_would_pool_nothing_by(tmp_path, key, why, capsys):
    fake_run(tmp_path / "runs" / "a", "imdb", "lstm", "variational", "tied", 1, 0.85, p=0.3, trainer={"epochs": 30})
    with pytest.raises(SystemExit) as exit_:
        report.main([str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--pool", key])
    assert exit_.value.code == 2 and re.search(rf"error: --pool {key}: .*{why}", capsys.readouterr().err)


def test_report_refuses_an_out_that_is_a_file(tmp_path, capsys):
    fake_run(tmp_path / "runs" / "a", "imdb", "lstm", "variational", "tied", 1, 0.85)
    (tmp_path / "afile").write_text("")
    with pytest.raises(SystemExit):
        report.main([str(tmp_path / "runs"), "--out", str(tmp_path / "afile")])
    assert "afile is a file; give a folder" in capsys.readouterr().err
