"""How the weights move: the optimizer and its step (:class:`Optimization`), what follows each step, and a moving
average of the weights.

Shared by the eager training step and the graphed ones (:class:`vdrnn.kernels.graph.GraphedTrainStep`, AWD's steps
recorded by :mod:`vdrnn.training.graphs`), so that both follow the same rules; the graphed ones fold the clip into
the update (:func:`vdrnn.kernels.update.clipped_update`).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import torch

from vdrnn.dropout.learned import LearnedNoise
from vdrnn.kernels.update import clipped_update

if TYPE_CHECKING:
    from vdrnn.config import TrainerConfig


def learned_noise(model: torch.nn.Module) -> list[LearnedNoise]:
    """The model's learned dropout noise (Kingma's log alphas, Concrete dropout's p logits), module by module."""
    return [m for m in model.modules() if isinstance(m, LearnedNoise)]


def noise_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for noise in learned_noise(model) for p in noise.parameters()]


def weights_of(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The model's parameters less its learned dropout noise, which weight decay must not touch: shrinking log alpha
    towards 0 would push every alpha to 1, a prior of its own on top of Kingma's KL term."""
    skip = {id(p) for p in noise_parameters(model)}
    return [p for p in model.parameters() if id(p) not in skip]


def make_optimizer(model: torch.nn.Module, trainer: TrainerConfig, averaging: bool = False,
                   capturable: bool = False) -> torch.optim.Optimizer:
    """SGD, Adam, averaged SGD (asgd), or (ntasgd) SGD until ``averaging`` is asked for; weight_decay_mode=l2
    puts the decay in the optimizer. ``capturable`` (CUDA): averaged SGD keeps its step counters on the device and
    its state made up front (:func:`start_averaging_state`), so that its step reads nothing back to the host and a
    CUDA graph can hold it."""
    l2 = trainer.weight_decay if trainer.weight_decay_mode == "l2" else 0.0
    params = model.parameters()
    noise = noise_parameters(model)
    if l2 > 0 and noise:  # log alpha is no weight: no decay on it
        params = [{"params": weights_of(model)}, {"params": noise, "weight_decay": 0.0}]
    if trainer.optimizer == "adam":
        return torch.optim.Adam(params, lr=trainer.lr, weight_decay=l2)
    if averaging or trainer.optimizer == "asgd":  # Merity et al.'s ASGD: averages from its start (t0=0), lambd=0
        optimizer = torch.optim.ASGD(params, lr=trainer.lr, t0=0, lambd=0.0, weight_decay=l2, capturable=capturable)
        if capturable:
            start_averaging_state(optimizer)
        return optimizer
    return torch.optim.SGD(params, lr=trainer.lr, weight_decay=l2)


def has_average(state: dict[str, Any]) -> bool:
    """Does a parameter's averaged-SGD state hold a running mean yet? Its ``ax`` is made with the state, as zeros
    where the state is made up front (:func:`start_averaging_state`), and is the mean from the first step on."""
    return "ax" in state and float(state["step"]) > 0


@torch.no_grad()
def start_averaging_state(optimizer: torch.optim.ASGD) -> None:
    """The state ASGD makes for each parameter at its first step, made now: a CUDA graph must find it in place (a
    state made under capture would be made afresh at every replay), and every graph recorded later must step the
    same tensors. The values are torch's own first ones: step 0, eta = lr, mu = 1, ax = 0."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state[p]
            if not state:
                state["step"] = torch.zeros((), device=p.device)
                state["eta"] = torch.tensor(float(group["lr"]), device=p.device)
                state["mu"] = torch.ones((), device=p.device)
                state["ax"] = torch.zeros_like(p, memory_format=torch.preserve_format)


@torch.no_grad()
def finish_update(weights: list[torch.nn.Parameter], decay: float, noise: list[LearnedNoise]) -> None:
    """What follows every optimizer step, eager (Optimization.step) or graphed (GraphedTrainStep): Gal's
    decay w <- w - decay * w, independent of the learning rate, on ``weights`` (``weights_of``: log alpha is no
    weight), then learned dropout noise projected back onto its allowed set (alpha <= 1), so that every weight a
    checkpoint keeps is one the model may use (the layers project again before they draw, for models trained
    elsewhere)."""
    if decay > 0:
        torch._foreach_mul_(weights, 1.0 - decay)  # p.mul_(1 - decay) for all, one launch
    for module in noise:
        module.constrain_()


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


class Optimization:
    """A run's optimizer and what comes with each of its steps: fp16 loss scaling, global-norm clipping, Gal's weight
    decay, and the weights' moving average (``trainer.ema``).

    Also which weights a run validates, keeps and tests (:meth:`evaluation_weights`): the moving average where there
    is one, averaged SGD's running means once it averages (``trainer.optimizer=asgd``, or ``ntasgd`` after its
    switch, :meth:`switch_to_averaging`), else the weights as they are.
    """

    def __init__(self, model: torch.nn.Module, trainer: TrainerConfig, device: torch.device):
        self.model, self.trainer = model, trainer
        # The graphed step's update (set by the trainer that records it): the clip folded into SGD's or averaged
        # SGD's update, one pass over each parameter (vdrnn.kernels.update). Eagerly, torch's clip and optimizer.
        self.fold_clip = False
        self.averaging = trainer.optimizer == "asgd"
        self.capturable = device.type == "cuda"  # averaged SGD without host syncs, graphed or not
        self.optimizer = make_optimizer(model, trainer, averaging=self.averaging, capturable=self.capturable)
        self.average = WeightAverage(list(model.parameters()), trainer.ema) if trainer.ema else None
        self.scaler = torch.amp.GradScaler(device.type, enabled=trainer.amp == "fp16")

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self, loss: torch.Tensor) -> torch.Tensor:
        """Backward, global-norm clipping, the update and Gal's weight decay; returns the gradient norm (before
        clipping)."""
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.fold_clip:
            grad_norm = clipped_update(self.optimizer, self.trainer.clip)
        else:
            self.scaler.unscale_(self.optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.trainer.clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        finish_update(weights_of(self.model), self.trainer.gal_decay, learned_noise(self.model))
        return grad_norm

    def after_step(self) -> None:
        """After every step, eager or graphed (which bypasses :meth:`step`): the moving average's update."""
        if self.average is not None:
            self.average.update()

    def switch_to_averaging(self) -> None:
        """NT-ASGD's switch: averaged SGD from here on, its running means the weights validated."""
        self.optimizer = make_optimizer(self.model, self.trainer, averaging=True, capturable=self.capturable)
        self.averaging = True

    def evaluation_weights(self):
        """Context in which the model holds the weights to validate and keep (see the class docstring)."""
        if self.averaging:
            params = [p for p in self.model.parameters() if has_average(self.optimizer.state[p])]
            return swapped_weights(params, [self.optimizer.state[p]["ax"] for p in params])
        if self.average is not None:
            return swapped_weights(self.average.params, self.average.averages())
        return nullcontext()

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of it."""
        return {"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict(),
                "averaging": self.averaging,
                **({"weight_average": self.average.state_dict()} if self.average is not None else {})}

    def load(self, payload: dict[str, Any]) -> None:
        """Continue from a checkpoint's :meth:`state`; raises KeyError, ValueError or RuntimeError where it holds
        another optimizer's."""
        if payload.get("averaging", False) and not self.averaging:  # NT-ASGD switched before the checkpoint
            self.switch_to_averaging()
        self.optimizer.load_state_dict(payload["optimizer"])
        if isinstance(self.optimizer, torch.optim.ASGD):  # saved on another device kind: this one's way of stepping
            for group in self.optimizer.param_groups:
                group["capturable"] = self.capturable
            for p, state in self.optimizer.state.items():
                state.update({k: v.to(p.device) for k, v in state.items() if isinstance(v, torch.Tensor)})
        if self.average is not None:
            self.average.load_state_dict(payload["weight_average"])
        # A run saved without fp16 loss scaling has an empty scaler state, which an enabled GradScaler refuses to
        # load; switching to trainer.amp=fp16 on resume then starts loss scaling afresh, as a new run would.
        if payload["scaler"]:
            self.scaler.load_state_dict(payload["scaler"])
