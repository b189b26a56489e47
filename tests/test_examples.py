"""The examples/ scripts run as a user runs them, on real data, shortened: they train, evaluate and print what their
docstrings promise."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import real_data

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str) -> str:
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.slow
def test_the_language_model_example_trains_and_scores_by_weight_scaling_and_mc(tmp_path):
    ptb = real_data("ptb", "ptb.train.txt")
    out = run_example("word_language_model.py", "--data", str(ptb), "--steps", "30", "--size", "64",
                      "--eval-tokens", "700", "--samples", "3")
    train = [float(p) for p in re.findall(r"train ppl\s+([\d.]+)", out)]
    found = re.search(r"valid ppl ([\d.]+) \(weight scaling\), ([\d.]+) \(MC dropout, 3 samples\)", out)
    assert train and found, out
    scaled, mc = float(found[1]), float(found[2])
    assert 1 < scaled < 10_000 and 1 < mc < 10_000  # PTB's 10,000 words: below uniform after 30 steps
    assert scaled != mc


@pytest.mark.slow
def test_the_classifier_example_reports_mc_accuracy_and_the_uncertainty_of_its_least_sure_predictions():
    data = real_data("rt-polarity", "rt-polarity.pos")
    out = run_example("sentiment_uncertainty.py", "--data", str(data), "--epochs", "1", "--limit", "2000",
                      "--samples", "8")
    accuracy = re.search(r"test accuracy ([\d.]+) \(weight scaling\), ([\d.]+) \(MC dropout, 8 samples\)", out)
    assert accuracy and all(0.3 < float(a) < 1 for a in accuracy.groups()), out
    rows = re.findall(r"^\s+([\d.]+) = ([\d.]+) \+ ([\d.]+)\s+p\(positive\)", out, flags=re.M)
    assert len(rows) == 5, out
    for total, aleatoric, epistemic in rows:  # total = the data's + the model's, each in [0, log 2]
        assert float(total) == pytest.approx(float(aleatoric) + float(epistemic), abs=2e-3)
        assert 0 <= float(epistemic) <= float(total) <= 0.694


@pytest.mark.parametrize("name", ["word_language_model.py", "sentiment_uncertainty.py"])
def test_an_example_without_its_data_says_where_to_point_it(name, tmp_path):
    result = subprocess.run([sys.executable, str(EXAMPLES / name), "--data", str(tmp_path)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 2 and "pass --data, or set VDRNN_DATA_DIR" in result.stderr
    assert "Traceback" not in result.stderr
