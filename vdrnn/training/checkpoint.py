"""Checkpoints: written atomically, read with ``weights_only=True``.

A checkpoint is a plain dict of tensors and Python containers (model and optimizer state, RNG
states, progress, the resolved config), so it loads without unpickling code. Writing goes to a
temporary file in the same folder, then ``os.replace``: a crash mid-write leaves the previous
checkpoint intact, so no run ever loses its last good checkpoint.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import torch

from vdrnn.errors import CheckpointError
from vdrnn.files import replaced_atomically

LAST = "last.pt"
BEST = "best.pt"


def save(payload: dict[str, Any], path: Path) -> None:
    with replaced_atomically(path) as f:
        torch.save(payload, f)


def copy(src: Path, dst: Path) -> None:
    """Copy a checkpoint file as ``save`` writes one: a crash leaves no half-written ``dst``."""
    with open(src, "rb") as source, replaced_atomically(dst) as f:
        shutil.copyfileobj(source, f)


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path).expanduser()
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise CheckpointError(f"checkpoint {path} {what}; pass the path of a last.pt or best.pt")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for truncated or foreign files
        # An empty file (what a full disk can leave) raises an EOFError without a message. Of torch's message only
        # the first sentence: the rest is advice for other cases (load with weights_only=False, "your file is ...").
        reason = (str(err).splitlines() or ["the file ends early" if path.stat().st_size else "the file is empty"])[0]
        reason = re.split(r"(?<=\.)\s", reason, maxsplit=1)[0][:200]
        raise CheckpointError(
            f"checkpoint {path} is unreadable ({type(err).__name__}: {reason}); "
            f"it is truncated or not a vdrnn checkpoint. To evaluate, use the run's other checkpoint "
            f"(checkpoint=<run>/best.pt or last.pt). Training continues only from a readable last.pt: if this is "
            f"a run's last.pt, move it aside and the run starts afresh in its folder, or start a new run in a new "
            f"output dir (for a language model, init_from=<run>/best.pt starts from its best weights)"
        ) from err
    if not isinstance(payload, dict) or "model" not in payload or "config" not in payload:
        raise CheckpointError(f"checkpoint {path} is not a vdrnn checkpoint (no model state or config in it)")
    problem = entry_problem(payload)
    if problem:
        raise CheckpointError(f"checkpoint {path} is damaged or not vdrnn's: {problem}. Use the run's other checkpoint "
                              f"(its best.pt or last.pt), or one that vdrnn wrote")
    return payload


# The entries of a checkpoint and their types, checked as it loads: one made by hand or by another program is refused
# there, in a line, rather than failing where an entry is used. The first four are in every checkpoint; the others in
# those that continue training (last.pt), some only under some settings.
REQUIRED = ("model", "config", "vocab", "epoch")
ENTRIES: dict[str, tuple[type, ...]] = {
    "model": (dict,), "config": (dict,), "vocab": (list,), "epoch": (int,), "step": (int,),
    "best_valid": (int, float), "train_seconds": (int, float), "run_seconds": (int, float), "start_epoch": (int,),
    "optimizer": (dict,), "scaler": (dict,), "rng": (dict,), "weight_average": (dict,), "averaging": (bool,),
    "resumable": (bool,), "epoch_in_progress": (dict,), "valid_history": (list,), "stopped": (bool,),
}
# The config's sections: a mapping each, where present.
CONFIG_SECTIONS = ("data", "model", "cell", "dropout", "trainer", "eval")


def entry_problem(payload: dict[str, Any]) -> str | None:
    """What makes ``payload`` no vdrnn checkpoint (an entry missing or of another type), or None."""
    for key in REQUIRED:
        if key not in payload:
            return f"it has no {key!r} entry"
    for key, types in ENTRIES.items():
        value = payload.get(key)
        if key in payload and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            return f"its {key!r} entry is a {type(value).__name__}, not a {' or '.join(t.__name__ for t in types)}"
    if not all(isinstance(name, str) for name in payload["vocab"]):
        return "its vocabulary holds entries that are not words"
    if not all(is_number(score) for score in payload.get("valid_history", [])):
        return "its validation history holds entries that are not numbers"
    if not all(isinstance(name, str) and isinstance(value, torch.Tensor) for name, value in payload["model"].items()):
        return "its model state holds entries that are not named tensors"
    for name in CONFIG_SECTIONS:
        if not isinstance(payload["config"].get(name, {}), dict):
            return f"the {name} section of its config is not a mapping"
    return None


def load_model_state(model: torch.nn.Module, payload: dict[str, Any], path: str | Path, fix: str) -> None:
    """Load the checkpoint's weights into ``model``, or say which model the checkpoint holds and ``fix``."""
    try:
        model.load_state_dict(payload["model"])
    except (RuntimeError, TypeError, ValueError) as err:
        # torch's first line only names the model class; the next ones say which weight differs, and how.
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        raise CheckpointError(
            f"checkpoint {path} does not fit this model: it holds {describe_model(payload['config'])} "
            f"({(lines[1:] or lines)[0][:200]}); {fix}"
        ) from err


def describe_model(config: dict[str, Any]) -> str:
    """``a 2 x 200 lstm (tied gates)``: the model a run's config builds, as an error names a checkpoint's."""
    model, cell = config.get("model", {}), config.get("cell", {})
    return (f"a {model.get('num_layers', '?')} x {model.get('hidden_size', '?')} {cell.get('type', 'lstm')} "
            f"({cell.get('gates', 'tied')} gates)")


def check_vocab(payload: dict[str, Any], vocab: list[str], path: str | Path, fix: str) -> None:
    """Refuse a checkpoint trained on another vocabulary (its embedding rows would stand for other words)."""
    if payload["vocab"] != vocab:
        raise CheckpointError(f"checkpoint {path} was trained on another vocabulary than the data found now (other "
                              f"files, other data.* settings, or a vdrnn version that reads the data differently); {fix}")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
