"""Drawing masks, and the masks one recurrent layer receives for one forward call (:class:`LayerMasks`).

Every draw is made on the device with torch's default generator, which keeps it valid inside a CUDA graph (each
replay draws new masks). torch is imported by the draws, not with this module, so that code that only reads the
schemes (a config check) does not wait for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def keep_mask(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """Unscaled dropout mask: 0 with probability p, else 1; fp32 on ``like``'s device."""
    import torch

    return torch.empty(shape, device=like.device, dtype=torch.float32).bernoulli_(1.0 - p)


def bernoulli_mask(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """Inverted-dropout mask: 0 with probability p, else 1/(1-p)."""
    return keep_mask(shape, p, like).div_(1.0 - p)


@dataclass(frozen=True)
class WeightMask:
    """AWD's weight-drop mask on a weight W [G*H, H]: the dropped weight is W * keep * scale, ``keep`` [G*H, H] bool
    (True with probability 1-p), ``scale`` 1/(1-p) (inverted, as F.dropout on the weight).

    The mask is kept one byte an entry, not as the float mask keep * scale: it is drawn, read as W is dropped, and
    read again as W's gradient is masked at every step, and at AWD's 4 x 1150 x 1150 weights each float pass is 21 MB.
    """

    keep: torch.Tensor
    scale: float
    zero: torch.Tensor  # 0.0 on keep's device, the term addcmul adds to: made once with the draw, not at each use

    def apply(self, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """w * keep * scale in one pass, written to ``out`` (any float dtype, any strides) where given; ``w`` may be
        viewed in another shape of the same entries ([G, H, H] for [G*H, H])."""
        import torch

        return torch.addcmul(self.zero, w, self.keep.view(w.shape), value=self.scale, out=out)


def weight_mask(shape: tuple[int, ...], p: float, like: torch.Tensor) -> WeightMask:
    """A weight-drop mask for a weight of ``shape``, each entry dropped with probability p."""
    import torch

    keep = torch.empty(shape, device=like.device, dtype=torch.bool).bernoulli_(1.0 - p)
    return WeightMask(keep, 1.0 / (1.0 - p), torch.zeros((), device=like.device))


def gaussian_mask(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """Multiplicative Gaussian noise N(1, alpha), alpha = p / (1 - p): the mean and variance of the inverted
    Bernoulli mask of the same p (Srivastava et al. 2014, sec. 10)."""
    import torch

    return torch.empty(shape, device=like.device, dtype=torch.float32).normal_(1.0, math.sqrt(p / (1.0 - p)))


def zoneout_draws(shape: tuple[int, ...], z: float, like: torch.Tensor) -> torch.Tensor:
    """Zoneout's d_t: 1 (keep the previous value) with probability z, else 0; fp32, unscaled."""
    import torch

    return torch.empty(shape, device=like.device, dtype=torch.float32).bernoulli_(z)


def constant_over(like: torch.Tensor, hidden_size: int, value: float) -> torch.Tensor:
    """``value`` at every step, sample and unit of ``like`` [T, B, ...]: a [T, B, H] view of one [H] row."""
    import torch

    row = torch.full((1, 1, hidden_size), value, device=like.device, dtype=torch.float32)
    return row.expand(like.shape[0], like.shape[1], hidden_size)


Noise = Callable[[tuple[int, ...], float, "torch.Tensor"], "torch.Tensor"]
NOISES: dict[str, Noise] = {"bernoulli": bernoulli_mask, "gaussian": gaussian_mask}  # what a mask entry is drawn from
PER = ("sequence", "batch")  # one fixed-over-time mask per sequence, or one shared by the batch


def locked_rows(like: torch.Tensor, per: str) -> int:
    """The leading size of a fixed-over-time mask for ``like`` [T, B, ...]: B, one row per sequence
    (``per="sequence"``), or 1, one row shared by the batch (``per="batch"``)."""
    return like.shape[1] if per == "sequence" else 1


def locked_mask(like: torch.Tensor, shape: tuple[int, ...], p: float, per: str,
                noise: Noise = bernoulli_mask) -> torch.Tensor | None:
    """A mask fixed over time for ``like`` [T, B, ...]: [B, *shape] per sequence, or [1, *shape] shared by the
    batch; None if p = 0."""
    return noise((locked_rows(like, per), *shape), p, like) if p > 0 else None


def step_mask(like: torch.Tensor, hidden_size: int, p: float, fresh: bool, noise: Noise = bernoulli_mask
              ) -> torch.Tensor | None:
    """A mask on a layer's hidden units for ``like`` [T, B, ...]: [T, B, H], fresh at every step (``fresh``), or
    [B, H], one per sequence; None if p = 0."""
    if p == 0:
        return None
    steps, batch = like.shape[:2]
    return noise((steps, batch, hidden_size) if fresh else (batch, hidden_size), p, like)


def words_of(table: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The word-type mask [T, B, 1] of ``tokens`` [T, B]: each token's entry in its sequence's row of ``table``
    ([B, V], or [1, V] shared by the batch)."""
    return table.expand(tokens.shape[1], -1).gather(1, tokens.t()).t().unsqueeze(-1)


@dataclass
class LayerMasks:
    """Masks for one recurrent layer during one forward call; ``None`` means "not dropped".

    G is the cell's number of gates (4 LSTM, 3 GRU, 1 RNN); B is 1 for fixed-over-time masks drawn ``per="batch"``
    (one mask shared by the batch).

    ``x``: applied to the layer input. Shape [T, B, D] (fresh per step), [B, D] (fixed over time),
      or [B, G, D] with ``per_gate`` (one mask per gate, fixed over time).
    ``h``: applied to h_{t-1} before the recurrent product. [B, H] or [B, G, H] with ``per_gate``.
    ``c``: Moon's cell mask, [B, H], values in {0, 1} ({0, 1/(1-p)} with ``Moon(scale="c")``).
    ``c_scale``: applied to h_t: 1/(1-p_cell) so that E[h_t] is preserved (1 with ``Moon(scale="c")``).
    ``w_hh``: AWD's weight-drop mask on the recurrent weight (:class:`WeightMask`, [G*H, H]), one for the whole
      forward call. It leaves the recurrence a plain LSTM (with other weights), so cuDNN still runs it.
    ``g``: Semeniuta's mask on the candidate update (the LSTM's g_t, the GRU's n_t), values {0, 1/(1-p)}: [T, B, H]
      fresh per step or [B, H] fixed over the sequence.
    ``zone_c``, ``zone_h``: zoneout's chance of keeping c_{t-1} / h_{t-1} for each unit at each step, [T, B, H]: the
      draws d_t in {0, 1} in training and MC, or the expectation z (a [T, B, H] view of one [H] row) in
      evaluation. ``zone_c`` is the LSTM's only.
    """

    x: torch.Tensor | None = None
    h: torch.Tensor | None = None
    c: torch.Tensor | None = None
    c_scale: float = 1.0
    w_hh: WeightMask | None = None
    per_gate: bool = False
    g: torch.Tensor | None = None
    zone_c: torch.Tensor | None = None
    zone_h: torch.Tensor | None = None

    @property
    def recurrent(self) -> bool:
        """True when the layer cannot run on the stock kernel (cuDNN on CUDA) and must take a masked recurrence
        (the reference loop, or the fused kernels).

        That is when an h, c, candidate or zoneout mask acts inside the recurrence, or with per-gate masks even on x
        alone: the stock kernel multiplies one [x_t; h_{t-1}] by all gates' weights, so it cannot give each gate its
        own masked input. AWD's ``w_hh`` mask does not count: the dropped W_hh goes to the stock kernel as ordinary
        weights.
        """
        return any(m is not None for m in (self.h, self.c, self.g, self.zone_c, self.zone_h)) or self.per_gate
