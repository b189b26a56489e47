"""IMDB runs evaluated both ways: which of MC dropout and weight scaling is the better calibrated, per run and across
seeds, and the reliability diagrams."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from vdrnn.report.plots import reliability_figure
from vdrnn.report.rows import Row

CALIBRATION_COLUMNS = ["run", "row", "accuracy (%)", "ECE", "ECE floor", "MC ECE", "MC ECE floor",
                       "MC - WS ECE (95% interval)", "better calibrated"]


def calibrated_runs(rows: list[Row]) -> list[tuple[Row, Path, dict[str, Any]]]:
    """(row, folder, metrics) of each run that compared MC's calibration with weight scaling's."""
    return [(row, folder, run) for row in rows for folder, run in zip(row.dirs, row.runs, strict=True)
            if "test_ece_mc_minus_ws" in run]


# Student's t, 97.5% quantile, for 1-30 degrees of freedom; more take the last one, at most 0.08 above their own
# (the limit is the normal's 1.96), so their interval is a little wider than it need be, never narrower.
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """The mean of ``values`` (two or more) with its 95% Student-t interval: (mean, low, high)."""
    mean = statistics.mean(values)
    half = T_975[min(len(values) - 1, len(T_975)) - 1] * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def better_calibrated(low: float, high: float) -> str:
    """Which evaluation a 95% interval of ECE(MC) - ECE(weight scaling) says is the better calibrated."""
    return "MC" if high < 0 else "weight scaling" if low > 0 else "neither (interval holds 0)"


def calibration_line(name: str, label: str, runs: list[dict[str, Any]], difference: float, low: float, high: float,
                     verdict: str) -> list[str]:
    """A calibration table line: ``runs``' mean accuracy, ECEs and floors, and the MC - weight scaling difference."""
    def mean(key: str) -> float:
        return statistics.mean(run[key] for run in runs)

    return [name, label, f"{100 * mean('test_accuracy'):.2f}", f"{mean('test_ece'):.4f}", f"{mean('test_ece_floor'):.4f}",
            f"{mean('test_ece_mc'):.4f}", f"{mean('test_ece_floor_mc'):.4f}",
            f"{difference:+.4f} ({low:+.4f} to {high:+.4f})", verdict]


def calibration_table(rows: list[Row]) -> list[list[str]]:
    """A line per run: both ECEs beside the floor a calibrated predictor would score, and which is the better
    calibrated beyond chance (the difference's 95% interval excludes zero; see vdrnn.calibration.ece_difference).

    After a row's runs, where it has two seeds or more, a line of their means, which says which is the better
    calibrated across seeds: the mean difference with a 95% Student-t interval over the seeds (a run's own interval
    covers only the test set's sampling; the seeds' spread is the training's), and how many runs had each verdict.
    """
    lines = []
    for row in rows:
        runs, verdicts = [], []
        for _, folder, run in calibrated_runs([row]):
            low, high = run["test_ece_mc_minus_ws_ci"]
            runs.append(run)
            verdicts.append(better_calibrated(low, high))
            lines.append(calibration_line(folder.name, row.label, [run], run["test_ece_mc_minus_ws"], low, high,
                                          verdicts[-1]))
        if len(runs) >= 2:
            counts = ", ".join(f"{name} {sum(v.startswith(name) for v in verdicts)}"
                               for name in ("MC", "weight scaling", "neither"))
            difference, low, high = mean_interval([run["test_ece_mc_minus_ws"] for run in runs])
            lines.append(calibration_line(f"mean of {len(runs)} seeds", row.label, runs, difference, low, high,
                                          f"{better_calibrated(low, high)} across seeds; per run: {counts}"))
    return lines


def plot_reliability(rows: list[Row], path: Path) -> None:
    """Reliability diagrams of the rows whose runs were scored by MC dropout too (:func:`reliability_figure`)."""
    reliability_figure([row for row in rows if any("test_reliability_mc" in run for run in row.runs)], path)
