"""`vdrnn eval`s (their eval.json): which are under the folders, and their table, a line per checkpoint scored."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vdrnn.report.found import files_named, read_metrics

# (eval.json key, column title, digits, x100)
Metric = tuple[str, str, int, bool]


def find_evaluations(folders: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """(folder, eval.json) of every `vdrnn eval` under ``folders``, in path order, the folder named from the reported
    folder that holds it (``runs/a_mc/samples_10`` under ``results/ptb/x/runs``), as the tables show it, and so its
    checkpoint (shown_checkpoint): the same wherever the folders lie. An eval.json from before it recorded its config is left out with a warning: without it,
    which model it scored is unknown."""
    found, seen = [], set()
    for root in map(Path, folders):
        for path in files_named("eval.json", [root]):
            if path.resolve() in seen:  # under two of the folders (``runs runs/b``)
                continue
            seen.add(path.resolve())
            evaluation = read_metrics(path)
            if not evaluation.get("config"):
                print(f"warning: leaving out {path}: it records no config (an older vdrnn eval's), so which model it "
                      f"scored is unknown; run that vdrnn eval again for a line of the table", file=sys.stderr)
                continue
            if evaluation.get("checkpoint"):
                evaluation = {**evaluation, "checkpoint": shown_checkpoint(evaluation["checkpoint"], root)}
            found.append((Path(root.resolve().name) / path.parent.relative_to(root), evaluation))
    return found


def shown_checkpoint(checkpoint: str, root: Path) -> str:
    """The checkpoint an evaluation scored, as the table names it: from the reported folder ``root`` on
    (``runs/large_variational/best.pt``) where it lies there, or a run folder there has its run folder's name (runs
    copied in after their evaluations); else its run folder and file. An absolute path of the machine it ran on would
    name a folder that is nowhere else, and change with it."""
    path, base = Path(checkpoint), root.resolve()
    if path.is_absolute() and path.resolve().is_relative_to(base):
        return str(Path(base.name) / path.resolve().relative_to(base))
    if (base / path.parent.name).is_dir():
        return str(Path(base.name) / path.parent.name / path.name)
    return str(Path(path.parent.name) / path.name)


def evaluation_mode(config: dict[str, Any]) -> str:
    """How `vdrnn eval` scored: ``weight scaling``, or ``MC, 1000 passes`` and what departs from Gal's MC test
    (word-type dropout kept on; masks redrawn every minibatch instead of kept for the stream; the geometric average;
    the dropout probabilities scaled), and ``temperature fitted`` or given where not 1 (the temperature columns give
    its values)."""
    eval_settings = config.get("eval", {})
    temperature = eval_settings.get("temperature", 1)
    tempered = [] if temperature == 1 else ["temperature fitted" if temperature == "fit" else
                                            f"temperature {temperature:g}"]
    if eval_settings.get("mode") != "mc":
        return ", ".join(["weight scaling", *tempered])
    scale = eval_settings.get("dropout_scale", 1)
    notes = [note for note, on in (("word-type dropout on", eval_settings.get("word_dropout")),
                                   ("masks per minibatch", eval_settings.get("mc_masks") == "minibatch"),
                                   ("geometric average", eval_settings.get("average") == "geometric"),
                                   (f"dropout x{scale:g}", scale != 1)) if on]
    return ", ".join([f"MC, {eval_settings.get('samples')} passes", *notes, *tempered])


def evaluation_columns(metrics: list[Metric]) -> list[str]:
    return ["evaluation", "model", "dropout", "checkpoint", "epoch", "mode", *(title for _, title, _, _ in metrics)]


def evaluation_table(evaluations: list[tuple[Path, dict[str, Any]]], metrics: list[Metric],
                     identity: Callable[[dict[str, Any]], tuple[str, str]]) -> list[list[str]]:
    """A line per `vdrnn eval`: its folder, the model it scored (``identity(eval.json)``: its name as the training
    tables name it, and its dropout probabilities; ``(smoke)`` where its numbers are a smoke run's), the checkpoint and
    its epoch, the mode, and the numbers."""
    lines = []
    for folder, evaluation in evaluations:
        model, dropout = identity(evaluation)
        numbers = [f"{evaluation[key] * (100 if percent else 1):.{digits}f}" if evaluation.get(key) is not None
                   else "–" for key, _, digits, percent in metrics]
        lines.append([str(folder), model + (" (smoke)" if evaluation.get("smoke") else ""), dropout,
                      evaluation.get("checkpoint", "–"), str(evaluation.get("epoch", "–")),
                      evaluation_mode(evaluation["config"]), *numbers])
    return lines
