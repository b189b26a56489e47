"""Tasks: what vdrnn trains and evaluates, one folder each.

A task (``vdrnn/tasks/<name>/``) is the whole of one kind of experiment: its config, how it reads its datasets
(``datasets/``, one module each), builds its model, trains and evaluates, behind one
:class:`~vdrnn.tasks.base.Task` object (`vdrnn report` tabulates its runs: :mod:`vdrnn.report`). A run's task
is its ``data.task``, which its dataset's YAML sets.

- :mod:`vdrnn.tasks.lm`: word-level language modelling (PTB, WikiText-2), Table 1 and AWD-LSTM;
- :mod:`vdrnn.tasks.sentiment`: review sentiment, IMDB classification and the Pang & Lee scale regression.
"""

from __future__ import annotations

from typing import Any

from vdrnn.errors import ConfigError
from vdrnn.tasks.base import Task
from vdrnn.tasks.lm import TASK as LANGUAGE_MODELLING
from vdrnn.tasks.sentiment import TASK as SENTIMENT

TASKS: dict[str, Task] = {task.name: task for task in (LANGUAGE_MODELLING, SENTIMENT)}


def task_named(name: Any) -> Task:
    if name not in TASKS:
        raise ConfigError(f"data.task={name!r}; choose one of {', '.join(TASKS)} (each dataset/ option sets it)")
    return TASKS[name]


def dataset_name(config: dict[str, Any]) -> str:
    """The dataset of a composed or stored run config: its ``data.name``, PTB for a run from before vdrnn recorded
    it (the only dataset vdrnn then had)."""
    return (config.get("data") or {}).get("name", "ptb")


def task_of(config: dict[str, Any]) -> Task:
    """The task of a composed or stored run config: its ``data.task``, or for a run from before vdrnn recorded it,
    the task with a dataset module of its name (:func:`dataset_name`)."""
    data = config.get("data") or {}
    if "task" in data:
        return task_named(data["task"])
    name = dataset_name(config)
    found = [task for task in TASKS.values() if task.has_dataset(name)]
    if not found:
        raise ConfigError(f"data.name={name!r} is no task's dataset and the config names no data.task")
    return found[0]
