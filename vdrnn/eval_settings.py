"""What `vdrnn eval` takes from its command line, and what from the checkpoint it evaluates.

Nothing a checkpoint carries chooses code or files: which module reads the data (``data.reader``) and where the data
lies (``data.root``) are the command line's, as are the device and the seed. (Where the command line neither gives
``data.root`` nor composes the checkpoint's dataset, the root is the one the checkpoint's dataset YAML names.)"""

from __future__ import annotations

from typing import Any

from vdrnn.config import drop_them, key_among
from vdrnn.errors import CheckpointError, ConfigError
from vdrnn.tasks import TASKS, Task, task_of

# `vdrnn eval` runs a checkpoint under the config it was trained with, except for what its own command line
# gives: always the device, seed, where the data is and the module that reads it (a checkpoint's own would choose
# code to import), and the out-of-domain text it scores besides the test data; and, when given, the evaluation
# settings and the settings that change speed, memory or what the terminal shows but not the model (batch sizes,
# precision, implementation, progress bars).
EVAL_ALWAYS = ("device", "seed", "checkpoint", "data.root", "data.reader", "ood", "ood_root")
EVAL_WHEN_GIVEN = ("eval", "data.eval_batch_size", "trainer.amp", "model.impl", "trainer.progress")
MC_ONLY = ("eval.samples", "eval.batch", "eval.word_dropout", "eval.mc_masks", "eval.average", "eval.dropout_scale")


def eval_changes(task: Task) -> tuple[str, ...]:
    """The keys `vdrnn eval` takes when given, for a checkpoint of ``task``: the shared ones and the task's own."""
    return EVAL_WHEN_GIVEN + task.eval_keys


def task_eval_keys() -> tuple[str, ...]:
    """Every task's own keys that `vdrnn eval` takes (for its --help)."""
    return tuple(key for task in TASKS.values() for key in task.eval_keys)


def eval_config(raw: dict[str, Any], trained: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """The config `vdrnn eval` runs: ``trained`` (the checkpoint's) with what ``raw`` (the command line's composed
    config) may change: device, seed, data location (the checkpoint's where the command line gives none and composes
    another dataset), and where given the evaluation settings, batch sizes, precision, implementation and progress
    bars. ``given``: the keys the command line set. Any other key given would be silently ignored, so it is refused,
    as are MC dropout's keys for a weight-scaling evaluation."""
    task = task_of(trained)
    changes = eval_changes(task)
    ignored = sorted(k for k in given if not key_among(k, (*EVAL_ALWAYS, *changes, "hydra")))
    if ignored:
        others = [(k, other) for k in ignored for other in TASKS.values() if other is not task
                  and key_among(k, other.eval_keys)]
        raise ConfigError(
            f"vdrnn eval runs the checkpoint under the settings it was trained with (model, data, dropout, training), "
            f"so {', '.join(ignored)} would be ignored: {drop_them(ignored)}"
            + "".join(f" ({k}: {other.title} only, and this checkpoint was trained on {trained['data']['name']})"
                      for k, other in others)
            + f". It takes {', '.join(EVAL_ALWAYS)}, and where given {', '.join(changes)}")
    merged = {key: dict(value) if isinstance(value, dict) else value for key, value in trained.items()}
    # The run's own evaluation settings (its preset's MC samples, word-type dropout, ...) unless the command line
    # gives them: `vdrnn eval checkpoint=...` alone reproduces the run's test numbers. A group choice (eval=mc) sets
    # the mode; eval.KEY sets that key. The command line's defaults fill what an older checkpoint lacks.
    merged["eval"] = {**raw["eval"], **trained.get("eval", {})}
    if "eval" in given:
        merged["eval"]["mode"] = raw["eval"]["mode"]
    for key in [*EVAL_ALWAYS, *(k for k in given if key_among(k, changes) and k != "eval")]:
        if key == "data.root" and key not in given and raw["data"].get("name") != trained["data"].get("name"):
            continue  # the command line composed another dataset's: the checkpoint's dataset YAML gave its own
        group, _, leaf = key.partition(".")
        if not leaf:
            merged[group] = raw.get(group)
        elif leaf in raw.get(group, {}):
            merged.setdefault(group, {})[leaf] = raw[group][leaf]
    mc_only = sorted(k for k in given if key_among(k, MC_ONLY))
    if mc_only and merged["eval"]["mode"] != "mc":
        whose = "given" if "eval" in given else "the checkpoint's"
        raise ConfigError(f"{', '.join(mc_only)} {'are' if len(mc_only) > 1 else 'is'} for MC dropout, and this "
                          f"evaluation is weight scaling (eval=scale, {whose}): add eval=mc, or "
                          f"{drop_them(mc_only)}")
    return merged


def eval_run(raw: dict[str, Any], trained: dict[str, Any], given: set[str], path) -> tuple[Task, Any, dict[str, Any]]:
    """The task, the typed config and the plain config `vdrnn eval` of checkpoint ``path`` runs (eval_config), each
    refusal blamed where it lies: on the command line's own values, on the checkpoint's settings (a CheckpointError:
    saved by another vdrnn version, or not by vdrnn), or on the two together."""
    task_of(raw).parse(raw)
    reader = trained.get("data", {}).get("reader")
    if reader and "data.reader" not in given and raw["data"].get("reader") != reader:
        # A checkpoint chooses no code to import: the reader its run used must come from this command line.
        raise ConfigError(f"checkpoint {path} was trained on dataset {trained['data'].get('name')!r}, read by "
                          f"data.reader={reader}, and a checkpoint does not choose the code vdrnn imports: give "
                          f"data.reader={reader} (from the folder that run was launched from) to use that reader")
    try:
        task = task_of(trained)
        task.parse(eval_config(raw, trained, set()))
    except ConfigError as err:
        raise CheckpointError(f"checkpoint {path} holds settings this vdrnn cannot run ({err}); it was saved by "
                              f"another vdrnn version or not by vdrnn: evaluate it with the version that trained it, "
                              f"or use a checkpoint of a run of this one") from None
    run_raw = eval_config(raw, trained, given)
    cfg = task.parse(run_raw)
    task.check_ood(cfg)  # the checkpoint's task and data decide which text is out of its domain
    return task, cfg, run_raw
