"""`vdrnn eval`s (their eval.json): a table per dataset, a line per checkpoint scored and how."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from vdrnn.report.found import dataset_of, files_named, read_metrics
from vdrnn.report.ptb import ptb_identity
from vdrnn.report.sentiment import SENTIMENT_METRICS, sentiment_identity


def find_evaluations(folders: list[Path]) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """dataset -> (folder, eval.json) of every `vdrnn eval` under ``folders``, in path order. An eval.json from
    before it recorded its config is left out with a warning: without it, which model it scored is unknown."""
    found: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path in files_named("eval.json", folders):
        evaluation = read_metrics(path)
        if not evaluation.get("config"):
            print(f"warning: leaving out {path}: it records no config (an older vdrnn eval's), so which model it "
                  f"scored is unknown; run that vdrnn eval again for a line of the table", file=sys.stderr)
            continue
        found.setdefault(dataset_of(evaluation), []).append((path.parent, evaluation))
    return dict(sorted(found.items()))


def evaluation_mode(config: dict[str, Any]) -> str:
    """How `vdrnn eval` scored: ``weight scaling``, or ``MC, 1000 passes`` and what departs from Gal's MC test
    (word-type dropout kept on; PTB masks redrawn every minibatch instead of kept for the stream)."""
    eval_settings = config.get("eval", {})
    if eval_settings.get("mode") != "mc":
        return "weight scaling"
    notes = [note for note, on in (("word-type dropout on", eval_settings.get("word_dropout")),
                                   ("masks per minibatch", eval_settings.get("mc_masks") == "minibatch")) if on]
    return f"MC, {eval_settings.get('samples')} passes" + "".join(f", {note}" for note in notes)


def evaluation_metrics(dataset: str) -> list[tuple[str, str, int, bool]]:
    """(eval.json key, column title, digits, x100) of a dataset's evaluation table: PTB's perplexities, or a sentiment
    dataset's test metrics with weight scaling and then with MC, as its training table has them."""
    if dataset == "ptb":
        return [("valid_ppl", "valid", 1, False), ("test_ppl", "test", 1, False), ("test_ppl_mc", "MC test", 1, False)]
    return [(f"test_{key}{suffix}", prefix + title, digits, percent)
            for suffix, prefix in (("", ""), ("_mc", "MC ")) for key, title, digits, percent in SENTIMENT_METRICS[dataset]]


def evaluation_columns(dataset: str) -> list[str]:
    return ["evaluation", "model", "dropout", "checkpoint", "epoch", "mode",
            *(title for _, title, _, _ in evaluation_metrics(dataset))]


def evaluation_table(dataset: str, evaluations: list[tuple[Path, dict[str, Any]]]) -> list[list[str]]:
    """A line per `vdrnn eval`: its folder, the model it scored named as the training tables name it (``(smoke)``
    where its numbers are a smoke run's), the checkpoint and its epoch, the mode, and the numbers."""
    lines = []
    for folder, evaluation in evaluations:
        if dataset == "ptb":
            name, size, dropout = ptb_identity(evaluation)
            model = f"{name}, {size}"
        else:
            cell, scheme, dropout = sentiment_identity(evaluation)
            model = f"{cell.upper()} · {scheme}"
        numbers = [f"{evaluation[key] * (100 if percent else 1):.{digits}f}" if evaluation.get(key) is not None
                   else "–" for key, _, digits, percent in evaluation_metrics(dataset)]
        lines.append([str(folder), model + (" (smoke)" if evaluation.get("smoke") else ""), dropout,
                      evaluation.get("checkpoint", "–"), str(evaluation.get("epoch", "–")),
                      evaluation_mode(evaluation["config"]), *numbers])
    return lines
