"""Moon et al. (2015), "RNNDrop": drop units of the memory cell c_t.

    c_t = m * (f*c_{t-1} + i*g),   h_t = o * tanh(c_t) / (1-p),   m ~ Bernoulli(1-p)

- tensor: c_t of every layer (``cell``);
- shape: m is [B, H], **one mask per sequence, fixed over all time steps** of the call, shared by nothing else;
- scaling: the 1/(1-p) sits on h_t, not on c_t. c_t is a running sum, so scaling it inside the recurrence would
  compound as (1/(1-p))^t; a dropped unit is zero for the whole sequence (so is its h_t), and scaling the kept
  units' h_t preserves E[h_t], what the next layer and the recurrence see. Evaluation with m = 1 and no scale is
  then weight scaling;
- MC: each sample keeps its m across calls inside ``vdrnn.nn.fixed_masks``.

``scale="c"`` puts the 1/(1-p) on c_t instead, c_t = (m/(1-p)) * (f*c_{t-1} + i*g) and h_t = o*tanh(c_t), what a
stock inverted-dropout module on the cell state does: the obvious other reading of the paper. With the mask fixed
over time a kept cell is scaled by 1/(1-p) at every step, so once the forget gate passes (1-p) the cell state grows
geometrically (the medium PTB model diverges within a few dozen steps).

The paper's "+ emb dropout" row adds Gal's word-type dropout (``vdrnn.nn.Embedding(dropout=...)``). The LSTM only:
the GRU and the tanh RNN have no cell state.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdrnn.dropout.masks import LayerMasks, bernoulli_mask, keep_mask
from vdrnn.dropout.scheme import Scheme, check_choice

SCALES = ("h", "c")  # where the 1/(1-p) goes


@dataclass(frozen=True, kw_only=True)
class Moon(Scheme):
    cell: float = 0.0
    scale: str = "h"

    probabilities = ("cell",)
    cells = ("lstm",)
    cells_why = "it drops the LSTM's cell state c_t, which the {cell} cell does not have"

    def __post_init__(self):
        super().__post_init__()
        check_choice(self, "scale", self.scale, SCALES)

    def layer_masks(self, x, hidden_size, gates, layer=0, noise=None):
        p = self.cell
        if p == 0:
            return LayerMasks()
        shape = (x.shape[1], hidden_size)  # always one mask per sequence
        if self.scale == "c":  # the layers compute c_t *= mask, then h_t *= c_scale
            return LayerMasks(c=bernoulli_mask(shape, p, x), c_scale=1.0)
        return LayerMasks(c=keep_mask(shape, p, x), c_scale=1.0 / (1.0 - p))
