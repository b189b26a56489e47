"""`vdrnn eval` for any task: a checkpoint's model with the weights its run tested, scored by its task."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import vdrnn.nn as vnn
from vdrnn.errors import CheckpointError
from vdrnn.training import checkpoint
from vdrnn.training.device import built_model, device_name, prepare_device
from vdrnn.training.optim import WeightAverage, has_average

if TYPE_CHECKING:
    from vdrnn.tasks.base import Task
    from vdrnn.tasks.model import RecurrentModel

log = logging.getLogger("vdrnn")


def load_evaluation_weights(model: torch.nn.Module, payload: dict[str, Any], path: Path) -> None:
    """Put the weights a run validates and tests into ``model``: the checkpoint's model state, or, for a ``last.pt``
    whose model state is the raw weights training continues from, the average it carries: ``trainer.ema``'s moving
    average, or averaged SGD's running means (the optimizer's ``ax``). A ``best.pt`` holds that average as its model
    state already, so both checkpoints give the same model."""
    checkpoint.load_model_state(model, payload, path, "it was saved by another vdrnn version, whose model this "
                                "one no longer builds from its config")
    params = list(model.parameters())
    try:
        if "weight_average" in payload:
            average = WeightAverage(params, payload["config"]["trainer"]["ema"])
            average.load_state_dict(payload["weight_average"])
            values = dict(enumerate(average.averages()))
        elif payload.get("averaging"):  # the optimizer state is keyed by the parameters' order
            values = {i: s["ax"] for i, s in payload["optimizer"]["state"].items() if has_average(s)}
        else:
            return
        with torch.no_grad():
            for i, value in values.items():
                params[i].copy_(value)
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as err:
        raise CheckpointError(f"checkpoint {path} holds no weight average of this model ({type(err).__name__}: "
                              f"{(str(err).splitlines() or [''])[0][:200]}); it is damaged or not vdrnn's: use the "
                              f"run's other checkpoint") from err


def evaluate_checkpoint(task: Task, cfg, path: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """The task's test metrics of checkpoint ``path`` (read already: ``payload``) on its data, which must have the
    checkpoint's vocabulary. ``cfg``: the checkpoint's config with the command line's evaluation settings
    (:func:`vdrnn.config.eval_config`)."""
    device = prepare_device(cfg.device, cfg.trainer.amp)
    torch.manual_seed(cfg.seed)
    data = task.load_data(cfg)
    checkpoint.check_vocab(payload, data.vocab, path, "evaluate it on the data it was trained on (data.root)")
    model = built_model(task, cfg, data, device)
    load_evaluation_weights(model, payload, path)
    return {**task.evaluate_model(model, data, cfg), "checkpoint": str(path), "epoch": payload["epoch"],
            "device": device_name(device)}


def mc_model(model: RecurrentModel, cfg) -> RecurrentModel:
    """The model MC dropout samples: ``model``, or under ``eval.dropout_scale`` its twin with every dropout
    probability scaled (weight scaling does not depend on them)."""
    scale = cfg.eval.dropout_scale
    return model if scale == 1 else model.with_dropout(cfg.dropout.scaled(scale))


def samples_side_by_side(model, batch: int, word_dropout: bool) -> int:
    """How many MC samples may share one forward pass: ``batch``, or 1 where the scheme draws one mask for the
    whole batch (the columns would then all be the same sample)."""
    if batch > 1 and vnn.shares_draws_across_batch(model, embedding=word_dropout):
        log.warning("MC dropout: the model draws masks shared by the whole batch (weight drop, or masks drawn per "
                    "batch), so its samples run one per pass (eval.batch=%d does not apply)", batch)
        return 1
    return batch
