"""A function of device tensors replayed from CUDA graphs, one recorded per input shape: the eager code itself, captured.

Why: an eager AWD-LSTM step launches a few hundred small kernels (three cuDNN layers forward and back, the locked and
weight-drop masks, AR/TAR, the clip, the optimizer's per-tensor updates), and the GPU waits on Python between them.
Recorded once, a step replays with one call and the GPU runs its kernels back to back. AWD draws a new BPTT length
for nearly every minibatch, so a graph is recorded for each length the first time it comes (a few dozen), all of
them in one memory pool: they never run at the same time, so one replay's scratch memory can be another's. Evaluation
uses the same class for its forward passes (one graph per minibatch shape).

What ``fn`` must be: device work only (no host sync, no allocation whose size depends on the data) and its
randomness from torch's CUDA generator (masks drawn inside a graph are fresh on every replay, the same stream as
eager). A graph holds the host values it was recorded with as constants: those among the arguments (a float) pick
the graph as the shapes do; those ``fn`` reads elsewhere (which optimizer it steps) go in the call's ``key``, whose
change drops every graph. Outputs are cloned after each replay: another graph's replay may reuse their memory.

A recurrent state that each call returns and the next takes (``carry``) lives in one set of buffers that every graph
reads and, as its last work, overwrites with the state it returns: passed back as it came, the state is neither
copied in nor cloned out (six small copies each way a step for AWD's three layers).

    graphs = ShapeGraphs(train_step, keep=snapshot, carry=(2, 2))  # snapshot() -> restore(): warm-up must not train
    loss, grad_norm, state = graphs(inputs, targets, state, lr, key=optimizer)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

WARMUP_CALLS = 3  # eager calls before the first capture (see _warm_up); one before each later shape's


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def tensors_of(value) -> list[torch.Tensor]:
    """The tensors of nested lists and tuples (a recurrent state), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_of(v)]
    return []


def map_tensors(fn: Callable[[torch.Tensor], torch.Tensor], value):
    """``value`` (tensors in nested tuples and lists, a recurrent state) with ``fn`` applied to every tensor."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    return type(value)(map_tensors(fn, v) for v in value)


def detach_state(value):
    """A recurrent state cut from the graph that made it: truncated BPTT."""
    return map_tensors(torch.Tensor.detach, value)


def _rebuild(value, buffers):
    """``value``'s structure with its tensors taken in order from ``buffers`` (host values as they are)."""
    if isinstance(value, torch.Tensor):
        return next(buffers)
    if isinstance(value, (list, tuple)):
        return type(value)(_rebuild(v, buffers) for v in value)
    return value


def _shape_of(value):
    """What picks a call's graph: its tensors' shapes and dtypes, and its host values (a float, as it is)."""
    if isinstance(value, torch.Tensor):
        return tuple(value.shape), value.dtype
    if isinstance(value, (list, tuple)):
        return tuple(_shape_of(v) for v in value)
    return value


class _Recorded:
    """One shape's graph: its input buffers (the call's arguments are copied in) and its outputs."""

    def __init__(self, graph: torch.cuda.CUDAGraph, inputs: list[torch.Tensor], outputs):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs


class ShapeGraphs:
    """``fn`` replayed from a CUDA graph per input shape (see the module's docstring)."""

    def __init__(self, fn: Callable[..., Any], keep: Callable[[], Callable[[], None]] | None = None,
                 carry: tuple[int, int] | None = None):
        """``fn(*args)``: nested lists/tuples of CUDA tensors in and out. ``keep()``, where ``fn`` has effects (a
        training step updates the weights), snapshots what it changes and returns the function that puts it back
        after the warm-up calls. ``carry=(i, j)``: ``fn``'s output i is the next call's argument j, of the same
        shapes at every call (a recurrent state); the output returned for it is valid until the next call."""
        self.fn, self.keep, self.carry = fn, keep, carry
        self.carried: list[torch.Tensor] | None = None  # argument j's buffers, shared by every graph
        self.pool = torch.cuda.graph_pool_handle()
        self.recorded: dict[Any, _Recorded] = {}
        self.key: Any = None
        self.warm = False

    def __len__(self) -> int:
        return len(self.recorded)

    def _warm_up(self, args, calls: int) -> None:
        # On a side stream, as PyTorch's recipe: compiles kernels and creates the cuBLAS / cuDNN handles and
        # workspaces, none of which may happen under capture.
        restore = self.keep() if self.keep is not None else None
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(calls):
                self.fn(*args)
        torch.cuda.current_stream().wait_stream(side)
        if restore is not None:
            restore()

    def _record(self, args) -> _Recorded:
        inputs = [t.clone() for t in tensors_of(args)]
        if self.carry is not None:  # the carried argument's tensors: the shared buffers, made at the first record
            first = len(tensors_of(args[:self.carry[1]]))
            carried = inputs[first:first + len(tensors_of(args[self.carry[1]]))]
            if self.carried is None:
                self.carried = carried
            inputs[first:first + len(carried)] = self.carried
        buffers = _rebuild(args, iter(inputs))
        self._warm_up(buffers, 1 if self.warm else WARMUP_CALLS)
        self.warm = True
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            outputs = self.fn(*buffers)
            if self.carry is not None:  # last: every read of the state this call took is before it
                i = self.carry[0]
                for buffer, value in zip(self.carried, tensors_of(outputs[i]), strict=True):
                    buffer.copy_(value)
                outputs = (*outputs[:i], _rebuild(outputs[i], iter(self.carried)), *outputs[i + 1:])
        return _Recorded(graph, inputs, outputs)

    def __call__(self, *args, key: Any = None):
        """``fn(*args)`` replayed from the graph of the arguments' shapes; ``key``: the host values ``fn`` bakes in
        (a change drops every graph: their memory goes back to the pool and each shape is recorded anew)."""
        if key != self.key:  # the old graphs go, and their pool with them (a pool outlives no graph of its own)
            self.recorded.clear()
            self.pool = torch.cuda.graph_pool_handle()
            self.key = key
        shape = _shape_of(args)
        recorded = self.recorded.get(shape)
        if recorded is None:
            recorded = self.recorded[shape] = self._record(args)
        for buffer, value in zip(recorded.inputs, tensors_of(args), strict=True):
            if value is not buffer:  # a carried state passed back as it was returned is in place already
                buffer.copy_(value)
        recorded.graph.replay()
        outputs = recorded.outputs
        if self.carry is None:
            return _clone(outputs)
        return type(outputs)(v if k == self.carry[0] else _clone(v) for k, v in enumerate(outputs))
