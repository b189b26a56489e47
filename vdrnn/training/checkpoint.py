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
    return payload


def load_model_state(model: torch.nn.Module, payload: dict[str, Any], path: str | Path, fix: str) -> None:
    """Load the checkpoint's weights into ``model``, or say which model the checkpoint holds and ``fix``."""
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as err:
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
