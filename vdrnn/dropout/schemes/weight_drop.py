"""Merity, Keskar & Socher (2017), AWD-LSTM: locked dropout plus weight drop, no mask on h_{t-1}.

    W_hh' = W_hh * M / (1-p),   M ~ Bernoulli(1-p)   (DropConnect on the recurrent weights)

- weight drop (``weight``, the reference's 0.5): M [4H, H] drawn **once per forward call**, shared by all sequences
  and steps (a per-sequence W_hh would be a [B, 4H, H] tensor), kept as M itself (one byte an entry) and 1/(1-p)
  (:class:`~vdrnn.dropout.masks.WeightMask`). The raw W_hh is the parameter: it receives the gradients and is never
  overwritten; evaluation uses it as it is;
- locked dropout (Gal's fixed-over-time masks) on the first layer's input (``input``, the reference's dropouti
  0.65), between layers (``between``, dropouth 0.3) and on the output (``output``, 0.4): [B, D] per sequence, the
  same at every step ([1, D] shared by the batch with ``per="batch"``); word types (dropoute 0.1) are
  :class:`vdrnn.nn.Embedding`'s, one draw per word type for the whole call (``per="batch"``) as ``embedded_dropout``;
- scaling: inverted everywhere; MC: one W_hh mask is one sample, so MC runs its samples one per call.

The LSTM only, as the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdrnn.dropout.masks import LayerMasks, locked_mask, weight_mask
from vdrnn.dropout.scheme import Scheme, check_per, input_p


@dataclass(frozen=True, kw_only=True)
class WeightDrop(Scheme):
    weight: float = 0.0
    input: float = 0.0
    output: float = 0.0
    between: float | None = None
    per: str = "sequence"

    probabilities = ("weight", "input", "output", "between")
    cells = ("lstm",)
    cells_why = "it is implemented for the LSTM only"

    def __post_init__(self):
        super().__post_init__()
        check_per(self)

    def layer_masks(self, x, hidden_size, gates, layer=0, noise=None):
        w = self.weight
        return LayerMasks(x=locked_mask(x, (x.shape[2],), input_p(self, layer), self.per),
                          w_hh=weight_mask((gates * hidden_size, hidden_size), w, x) if w > 0 else None)

    def output_mask(self, y, noise=None):
        mask = locked_mask(y, (y.shape[2],), self.output, self.per)
        return None if mask is None else mask.unsqueeze(0)

    def shares_draws_across_batch(self):
        return self.weight > 0 or super().shares_draws_across_batch()
