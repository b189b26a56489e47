"""How a recurrent module's inputs and states are laid out: as torch shapes them at the module's edge, and as its
layers take them (time-major [T, B, D] inputs; a tuple of [B, H] tensors per layer and direction)."""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import PackedSequence, pad_packed_sequence

from vdrnn.cells.common import Lengths, state_dtype


class Layout:
    """The shapes of one module: its input size and layout, and its state, [num_layers * directions, B, H] (a tuple
    (h, c) of those for the LSTM; a tuple of one [B, H_l] per layer where the layers' sizes differ)."""

    def __init__(self, owner: str, input_size: int, batch_first: bool, states: int, sizes: list[int],
                 uniform: int | None):
        self.owner = owner  # the module's class name, for the errors
        self.input_size, self.batch_first = input_size, batch_first
        self.states = states  # tensors in a layer's state: (h, c) for the LSTM, h for the others
        self.sizes = sizes  # each (layer, direction)'s hidden size
        self.uniform = uniform  # the one hidden size, or None where the layers' differ

    # ------------------------------------------------------------------ inputs
    def time_major(self, input, weight: torch.Tensor) -> tuple[torch.Tensor, Lengths | None, bool]:
        """The input as [T, B, D], with the lengths of a packed batch, and whether it was one unbatched sequence;
        ``weight`` (the first W_ih) for the dtype the input must have."""
        if isinstance(input, PackedSequence):
            x, lengths = pad_packed_sequence(input)
            order = torch.arange(len(lengths))
            sort = input.sorted_indices if input.sorted_indices is not None else order
            unsort = input.unsorted_indices if input.unsorted_indices is not None else order
            self.check_features(x, weight)
            return x, Lengths(lengths, sort.cpu(), unsort.cpu()), False
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"{self.owner} takes a tensor or a PackedSequence, not {type(input).__name__}")
        if input.dim() not in (2, 3):
            raise ValueError(f"{self.owner}: expected the input to be 2-D (one sequence) or 3-D (a batch), got "
                             f"{input.dim()}-D of shape {tuple(input.shape)}")
        self.check_features(input, weight)
        if input.dim() == 2:
            return input.unsqueeze(1), None, True
        return (input.transpose(0, 1) if self.batch_first else input), None, False

    def check_features(self, x: torch.Tensor, weight: torch.Tensor) -> None:
        if x.shape[-1] != self.input_size:
            raise ValueError(f"{self.owner}: input.size(-1) must be equal to input_size. Expected "
                             f"{self.input_size}, got {x.shape[-1]}")
        if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
            raise ValueError(f"{self.owner}: the input is {x.dtype} and the weights {weight.dtype}; convert one to "
                             f"the other (module.to(dtype)) or run under torch.autocast")

    # ------------------------------------------------------------------ states
    def zeros(self, batch: int, device, dtype) -> list[tuple[torch.Tensor, ...]]:
        """Each (layer, direction)'s state at zero."""
        return [tuple(torch.zeros(batch, size, device=device, dtype=dtype) for _ in range(self.states))
                for size in self.sizes]

    def split(self, hx, x: torch.Tensor, unbatched: bool) -> list[tuple[torch.Tensor, ...]]:
        """The initial state of each (layer, direction) as a tuple of [B, H] tensors (zeros where ``hx`` is None)."""
        batch = x.shape[1]
        if hx is None:
            return self.zeros(batch, x.device, state_dtype(x))
        if self.states > 1 and not (isinstance(hx, (tuple, list)) and len(hx) == self.states):
            raise ValueError(f"{self.owner}: hx must be a tuple (h_0, c_0), not {type(hx).__name__}")
        parts = hx if self.states > 1 else (hx,)
        per_part = [self._split_part(part, i, batch, unbatched) for i, part in enumerate(parts)]
        return [tuple(part[k] for part in per_part) for k in range(len(self.sizes))]

    def _split_part(self, part, index: int, batch: int, unbatched: bool) -> list[torch.Tensor]:
        """One part of hx (h_0, or the LSTM's c_0) as each (layer, direction)'s [B, H], checking its shape."""
        count = len(self.sizes)
        if self.uniform is not None:
            want = (count, self.uniform) if unbatched else (count, batch, self.uniform)
            if not isinstance(part, torch.Tensor) or tuple(part.shape) != want:
                got = tuple(part.shape) if isinstance(part, torch.Tensor) else type(part).__name__
                raise ValueError(f"{self.owner}: expected hidden[{index}] of size {want}, got {got}")
            return list(part.unsqueeze(1) if unbatched else part)
        wants = [(size,) if unbatched else (batch, size) for size in self.sizes]
        if (not isinstance(part, (tuple, list)) or len(part) != count
                or any(tuple(t.shape) != w for t, w in zip(part, wants, strict=True))):
            got = [tuple(t.shape) for t in part] if isinstance(part, (tuple, list)) else type(part).__name__
            raise ValueError(f"{self.owner}: the layers' sizes differ, so hidden[{index}] is a tuple of one tensor "
                             f"per layer, of sizes {wants}; got {got}")
        return [t.unsqueeze(0) if unbatched else t for t in part]

    def stacked(self, layers: list[tuple[torch.Tensor, ...]], unbatched: bool = False):
        """Each (layer, direction)'s state as torch returns it."""
        parts = []
        for i in range(self.states):
            tensors = [state[i].squeeze(0) if unbatched else state[i] for state in layers]
            parts.append(torch.stack(tensors) if self.uniform is not None else tuple(tensors))
        return tuple(parts) if self.states > 1 else parts[0]


def reversed_in_time(x: torch.Tensor, lengths: Lengths | None) -> torch.Tensor:
    """x [T, B, ...] with each sequence's steps in reverse order: the whole T steps, or each sequence's own first
    lengths[b] steps (its padding staying after them)."""
    if lengths is None:
        return x.flip(0)
    steps = x.shape[0]
    t = torch.arange(steps).unsqueeze(1)
    ends = lengths.lengths.unsqueeze(0)
    index = torch.where(t < ends, ends - 1 - t, t).to(x.device)  # [T, B]
    return x.gather(0, index.view(steps, -1, *([1] * (x.dim() - 2))).expand_as(x))
