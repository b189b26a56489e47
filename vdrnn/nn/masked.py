"""What every module of :mod:`vdrnn.nn` that draws masks shares: drawing them, and keeping them across calls.

A module draws its masks at each forward call in training mode and none in evaluation mode (weight scaling).
:func:`vdrnn.nn.fixed_masks` makes the masks that are fixed over time (one per sequence, as Gal's) outlive the call
that drew them: every later call inside it reuses them, so that a stream read in many minibatches keeps one mask per
sequence, as one long sequence would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn


class MaskedModule(nn.Module):
    """A module whose forward call draws dropout masks."""

    # The masks kept across calls, by site, with the batch they were drawn for; None outside ``fixed_masks``.
    _kept: dict[Any, tuple[int, Any]] | None = None

    def keeps_masks(self) -> bool:
        """Are this module's masks fixed over time, so that ``fixed_masks`` can keep them across calls?"""
        return True

    def shares_draws_across_batch(self) -> bool:
        """Does one draw serve every sequence of a call? Then the sequences of one batch are not independent samples
        (MC dropout runs its samples one per call)."""
        raise NotImplementedError

    def draw(self, key: Any, batch: int, fn: Callable[..., Any], *args) -> Any:
        """``fn(*args)``, the masks of site ``key`` for a batch of ``batch`` sequences; inside ``fixed_masks`` those
        of the first call, kept."""
        if self._kept is None or not self.keeps_masks():
            return fn(*args)
        if key not in self._kept:
            self._kept[key] = (batch, fn(*args))
        kept_batch, masks = self._kept[key]
        if kept_batch != batch:
            raise ValueError(f"{type(self).__name__}: inside vdrnn.nn.fixed_masks every call must have the batch of "
                             f"the first ({kept_batch} sequences, each keeping its masks), not {batch}")
        return masks
