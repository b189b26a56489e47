"""One whole training step of a language model (:class:`~vdrnn.tasks.lm.model.LanguageModel`) as a replayed CUDA graph.

A step of the 2-layer LM launches several hundred small kernels (two per time step and layer in
the fused recurrence alone). Launched one by one from Python, the GPU waits on the CPU between
them; a CUDA graph records the step once and replays it with one call, so the GPU runs the kernels
back to back. The step is: forward (dropout masks drawn on the device, inside the graph, so every
replay draws new ones), cross-entropy, backward, gradient-norm clipping folded into the SGD update
(:func:`vdrnn.kernels.update.clipped_update`), Gal's weight decay ``w <- w * (1 - wd)`` (and, with learned
dropout noise, its regularizer). Nothing in it reads a value back to the host.

Usage (inputs are copied into the graph's own buffers; the outputs are the graph's buffers too,
overwritten by the next call, so copy anything you want to keep past it):

    step = GraphedTrainStep(model, optimizer, clip=5.0, batch_size=20, bptt=35)
    state = model.initial_state(20, "cuda")
    for inputs, targets in minibatches(data, 35):
        loss, grad_norm, state = step(inputs, targets, state)

A minibatch shorter than ``bptt`` (the epoch's last) runs the same step eagerly. A change of the
optimizer's learning rate (once per epoch) re-records the graph, because the graph holds the
learning rate as a constant.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F

from vdrnn.kernels.update import clipped_update, require_foldable
from vdrnn.training.graphs import detach_state, tensors_of
from vdrnn.training.optim import finish_update, learned_noise, weights_of

WARMUP_STEPS = 3  # eager steps before the first capture (see _capture)


class GraphedTrainStep:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, clip: float,
                 batch_size: int, bptt: int, weight_decay: float = 0.0, amp: str = "off",
                 sum_over_time: bool = False, regularizer: Callable[[], torch.Tensor | None] = lambda: None):
        if amp not in ("off", "bf16"):
            raise ValueError(f"amp={amp!r}: a graphed step supports 'off' and 'bf16' (fp16 needs a GradScaler)")
        if type(optimizer) is not torch.optim.SGD:  # Adam/ASGD built without capturable=True raise under capture
            raise ValueError(f"a graphed step takes plain SGD, not {type(optimizer).__name__}")
        require_foldable(optimizer)
        self.model, self.optimizer = model, optimizer
        self.clip = clip
        self.weight_decay = weight_decay
        self.amp = amp
        self.sum_over_time = sum_over_time  # the objective is the NLL summed over steps (Zaremba, Gal)
        self.regularizer = regularizer  # learned dropout noise's term per token, or None
        self.weights = [p for p in weights_of(model) if p.requires_grad]  # what weight decay shrinks
        self.noise = learned_noise(model)
        device = next(model.parameters()).device
        if device.type != "cuda":
            raise ValueError("GraphedTrainStep needs the model on a CUDA device")
        self.tokens = torch.zeros(bptt, batch_size, dtype=torch.long, device=device)
        self.targets = torch.zeros_like(self.tokens)
        # The graph reads the carried state from these buffers; callers copy theirs in before a replay.
        self.state = model.initial_state(batch_size, device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs = None
        self.lrs: tuple[float, ...] | None = None

    # ------------------------------------------------------------------------------- the step
    def _autocast(self):
        # cache_enabled=False: autocast's cache of bf16 weight copies must not outlive the capture.
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.amp == "bf16", cache_enabled=False)

    def _step(self, tokens: torch.Tensor, targets: torch.Tensor, state: list):
        """Everything after zero_grad; the same code runs eagerly, in warm-up and under capture."""
        with self._autocast():
            logits, new_state = self.model(tokens, state)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        regularizer = self.regularizer()
        objective = loss if regularizer is None else loss + regularizer
        (objective * tokens.shape[0] if self.sum_over_time else objective).backward()
        grad_norm = clipped_update(self.optimizer, self.clip)
        finish_update(self.weights, self.weight_decay, self.noise)
        return loss.detach(), grad_norm, detach_state(new_state)

    def eager_step(self, tokens: torch.Tensor, targets: torch.Tensor, state: list):
        """The same step without a graph: (loss, grad_norm, new_state)."""
        # Zero rather than drop the gradients: after a capture they are the graph's own buffers.
        self.optimizer.zero_grad(set_to_none=False)
        return self._step(tokens, targets, detach_state(state))

    # ------------------------------------------------------------------------------- the graph
    def _capture(self) -> None:
        model, optimizer = self.model, self.optimizer
        self.graph, self.outputs = None, None  # release an earlier graph's memory first
        if self.lrs is None:
            # Warm-up on a side stream (PyTorch's recipe): compiles the Triton kernels, creates the
            # cuBLAS/cuDNN handles and settles the allocator, none of which may happen in a capture.
            # These steps really train, so the weights, optimizer state and RNG are put back after.
            weights = {k: v.clone() for k, v in model.state_dict().items()}
            opt_state = copy.deepcopy(optimizer.state_dict())
            rng = torch.cuda.get_rng_state()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(WARMUP_STEPS):
                    optimizer.zero_grad(set_to_none=True)
                    self._step(self.tokens, self.targets, self.state)
            torch.cuda.current_stream().wait_stream(side)
            with torch.no_grad():
                model.load_state_dict(weights)  # copies in place: the parameters keep their addresses
            optimizer.load_state_dict(opt_state)
            torch.cuda.set_rng_state(rng)
        # Gradients set to None now are allocated inside the graph's memory pool, and every replay
        # writes them afresh: that is the graph's zero_grad.
        optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.outputs = self._step(self.tokens, self.targets, self.state)
        self.graph = graph
        self.lrs = tuple(group["lr"] for group in optimizer.param_groups)

    def __call__(self, tokens: torch.Tensor, targets: torch.Tensor, state: list):
        """One training step: (loss, grad_norm, new_state), all device tensors; no host sync."""
        if tokens.shape != self.tokens.shape or not self.model.training:
            return self.eager_step(tokens, targets, state)
        if self.graph is None or self.lrs != tuple(group["lr"] for group in self.optimizer.param_groups):
            self._capture()
        self.tokens.copy_(tokens)
        self.targets.copy_(targets)
        for buffer, value in zip(tensors_of(self.state), tensors_of(state), strict=True):
            buffer.copy_(value)
        self.graph.replay()
        return self.outputs
