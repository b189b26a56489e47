"""The device a run trains or evaluates on, its random state, and mixed precision."""

from __future__ import annotations

import logging
from typing import Any

import torch

from vdrnn.errors import ConfigError

log = logging.getLogger("vdrnn")


def resolve_device(name: str) -> torch.device:
    """``device=auto|cpu|cuda|cuda:N`` as a torch device; auto is CUDA where there is one."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        # torch's threads: the cores this process may run on (its allocation on a cluster); OMP_NUM_THREADS sets others
        log.warning("CUDA is not available: running on the CPU (%d threads), which is slow for all but the smallest "
                    "models", torch.get_num_threads())
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:  # e.g. device=gpu
        raise ConfigError(f"device={name!r} is not a device: choose auto, cpu or cuda (cuda:N for one GPU of several)") \
            from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name} but CUDA is not available here; use device=auto or device=cpu")
    return device


def device_name(device: torch.device) -> str:
    """What metrics.json and eval.json record as the device: the GPU's name, or cpu."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def prepare_device(name: str, amp: str) -> torch.device:
    """The run's device, set up as training and `vdrnn eval` both use it: TF32 products on CUDA (so that evaluating a
    checkpoint repeats its run's own test numbers), and fp16 refused where it cannot run."""
    device = resolve_device(name)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if amp == "fp16" and device.type != "cuda":
        raise ConfigError("trainer.amp=fp16 needs CUDA; use trainer.amp=bf16 or off on the CPU")
    return device


def autocast(device: torch.device, amp: str):
    """Autocast context for ``trainer.amp``: off, bf16 or fp16 products (pointwise math stays fp32)."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def rng_state(device: torch.device) -> dict[str, Any]:
    """The random state a checkpoint keeps: the CPU generator's, and the GPU's on CUDA."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
