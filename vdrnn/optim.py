"""How the weights move: the optimizer, what follows each of its steps, and a moving average of the weights.

Shared by the eager training step (:class:`vdrnn.runner.EpochTrainer`) and the graphed one
(:class:`vdrnn.graphed.GraphedTrainStep`), so that both update the same way.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import torch

from vdrnn.config import TrainerConfig
from vdrnn.dropout import NoiseScales, weights_of


def make_optimizer(model: torch.nn.Module, trainer: TrainerConfig, averaging: bool = False) -> torch.optim.Optimizer:
    """SGD, Adam, averaged SGD (asgd), or (ntasgd) SGD until ``averaging`` is asked for; weight_decay_mode=l2
    puts the decay in the optimizer."""
    l2 = trainer.weight_decay if trainer.weight_decay_mode == "l2" else 0.0
    params = model.parameters()
    noise = getattr(model, "noise_scales", None)
    if l2 > 0 and noise is not None:  # log alpha is no weight: no decay on it
        params = [{"params": weights_of(model)}, {"params": list(noise.parameters()), "weight_decay": 0.0}]
    if trainer.optimizer == "adam":
        return torch.optim.Adam(params, lr=trainer.lr, weight_decay=l2)
    if averaging or trainer.optimizer == "asgd":  # Merity et al.'s ASGD: averages from its start (t0=0), lambd=0
        return torch.optim.ASGD(params, lr=trainer.lr, t0=0, lambd=0.0, weight_decay=l2)
    return torch.optim.SGD(params, lr=trainer.lr, weight_decay=l2)


@torch.no_grad()
def finish_update(weights: list[torch.nn.Parameter], decay: float, noise_scales: NoiseScales | None) -> None:
    """What follows every optimizer step, eager (EpochTrainer.optimizer_step) or graphed (GraphedTrainStep): Gal's
    decay w <- w - decay * w, independent of the learning rate, on ``weights`` (``weights_of``: log alpha is no
    weight), then learned dropout variances projected back onto alpha <= 1."""
    if decay > 0:
        torch._foreach_mul_(weights, 1.0 - decay)  # p.mul_(1 - decay) for all, one launch
    if noise_scales is not None:
        noise_scales.clamp_()


def require_plain_sgd(optimizer: torch.optim.Optimizer) -> None:
    """Refuse SGD with momentum or maximize: ``clipped_sgd_step`` folds the clip into plain SGD's update only."""
    if any(group.get("momentum") or group.get("maximize") for group in optimizer.param_groups):
        raise ValueError("the clip is folded into plain SGD's update: SGD with no momentum, no maximize")


@torch.no_grad()
def clipped_sgd_step(optimizer: torch.optim.SGD, params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """``clip_grad_norm_(params, max_norm)`` then ``optimizer.step()`` for SGD without momentum, in one pass: the
    graphed step's update (:class:`vdrnn.graphed.GraphedTrainStep`).

    Why: clipping scales every gradient in place, a read and a write of all of them, before SGD reads them again.
    Folding the factor into the update, p <- p (1 - lr wd) - lr min(1, max_norm / (|g| + 1e-6)) g, leaves that
    pass out: 0.19 ms of the 1500-unit model's step on an H100 (results/bench/NOTES.md). The factor stays on the
    device (no host sync), so a CUDA graph holds it. Returns the norm before clipping, as clip_grad_norm_ does; the
    gradients are left unclipped.
    """
    require_plain_sgd(optimizer)
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm([p.grad for p in params if p.grad is not None])))
    factor = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for group in optimizer.param_groups:
        lr, decay = group["lr"], group["weight_decay"]
        for p in group["params"]:
            if p.grad is None:
                continue
            if decay:
                p.mul_(1.0 - lr * decay)  # SGD's L2 term, lr * decay * p, taken from p before the step
            p.addcmul_(p.grad, factor, value=-lr)
    return norm


class WeightAverage:
    """An exponential moving average of the parameters, updated after every optimizer step (Polyak
    averaging over a window of about 1 / (1 - decay) steps). With Adam and heavy dropout the weights jitter
    from step to step; the average is a smoother point to validate, keep and test, as AWD's averaged SGD is
    for SGD.

    The running sums start at zero and are divided by 1 - decay**steps when read (Adam's bias correction),
    so after n steps the average is sum_i decay**(n-i) w_i / sum_i decay**(n-i) over the n iterates seen,
    with no pull towards the initial weights. Every optimizer step counts, also one that fp16 loss scaling
    skipped (its unchanged weights enter again): telling them apart would cost a host sync per step.
    """

    def __init__(self, params: list[torch.nn.Parameter], decay: float):
        self.params, self.decay = params, decay
        self.sums = [torch.zeros_like(p) for p in params]
        self.steps = 0

    @torch.no_grad()
    def update(self) -> None:
        # sums <- decay * sums + (1 - decay) * w
        torch._foreach_lerp_(self.sums, self.params, 1.0 - self.decay)
        self.steps += 1

    def averages(self) -> list[torch.Tensor]:
        if self.steps == 0:
            return [p.detach() for p in self.params]
        correction = 1.0 - self.decay ** self.steps
        return [s / correction for s in self.sums]

    def state_dict(self) -> dict[str, Any]:
        return {"sums": self.sums, "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = state["steps"]
        with torch.no_grad():
            for mine, saved in zip(self.sums, state["sums"], strict=True):
                mine.copy_(saved)


@contextmanager
def swapped_weights(params: list[torch.nn.Parameter], values: list[torch.Tensor]):
    """Temporarily copy ``values`` into ``params`` (in place, so the parameters keep their identity)."""
    saved = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p, v in zip(params, values, strict=True):
            p.copy_(v)
    try:
        yield
    finally:
        with torch.no_grad():
            for p, v in zip(params, saved, strict=True):
                p.copy_(v)
