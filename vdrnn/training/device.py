"""The device a run trains or evaluates on, its random state, mixed precision, and whether a model fits it."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import torch

from vdrnn.errors import ConfigError

if TYPE_CHECKING:
    from vdrnn.tasks.base import Task

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


def built_model(task: Task, cfg, data, device: torch.device) -> torch.nn.Module:
    """``task``'s model of ``cfg`` on ``device``; refused in a line where its weights alone exceed the device's
    memory, which the allocator's own error would not tie to a setting. Its size is measured on the meta device,
    which allocates nothing."""
    with torch.device("meta"):
        shape = task.build_model(cfg, data, torch.device("meta"))
    count = sum(p.numel() for p in shape.parameters())
    weights = sum(p.numel() * p.element_size() for p in shape.parameters())
    memory = device_memory(device)
    if weights > memory:
        m = cfg.model
        raise ConfigError(f"model.hidden_size={m.hidden_size} and model.num_layers={m.num_layers} make a model of "
                          f"{count:,} parameters, whose weights alone need {weights / 2**30:,.1f} GB, more than the "
                          f"{memory / 2**30:,.1f} GB of {device_name(device)}'s memory: use a smaller model "
                          f"(model.hidden_size, model.num_layers, model.embedding_size)")
    return task.build_model(cfg, data, device)


def device_memory(device: torch.device) -> int:
    """Bytes of memory ``device`` has: the GPU's, or the machine's."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
