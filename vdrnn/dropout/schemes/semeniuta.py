"""Semeniuta, Severyn & Barth (2016), "Recurrent dropout without memory loss": dropout on the candidate update only.

    c_t = f_t * c_{t-1} + i_t * d(g_t)                   (LSTM)
    h_t = (1 - z_t) * d(n_t) + z_t * h_{t-1}             (GRU, in torch's gate convention)

with d(v) = v * m, m ~ Bernoulli(1-p) / (1-p). Dropping g_t (n_t) rather than c_{t-1} or h_{t-1} never erases the
memory: what the cell held is carried on whole, only the new information written into it is noisy.

- tensors: the candidate g_t of every LSTM layer (n_t of every GRU layer) (``candidate``); optionally Zaremba's
  dropout on the non-recurrent connections (``input``, ``between``, ``output``: fresh per step,
  :class:`~vdrnn.dropout.schemes.zaremba.Zaremba`), as the paper's PTB runs;
- shapes: m [T, B, H], **per sequence, fresh at every step** (``per="step"``), or [B, H], one per sequence, fixed over
  its steps (``per="sequence"``): the paper studies both; shared by nothing else;
- scaling: inverted, so evaluation with m = 1 is weight scaling (the authors' code leaves m unscaled and multiplies
  the update by 1-p at test time: the same expectation). Because only g_t is dropped, the scaling does not compound
  through the recurrence as it does on c_t (Moon's problem);
- MC: masks drawn as in training, per-sequence ones afresh for every call (they share a draw with the fresh-per-step
  input masks, which nothing could keep across calls).

The LSTM and the GRU; both run on the reference loop and the fused kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdrnn.dropout.masks import step_mask
from vdrnn.dropout.scheme import check_choice
from vdrnn.dropout.schemes.zaremba import Zaremba

CANDIDATE_MASKS = ("step", "sequence")  # a fresh mask every step, or one per sequence


@dataclass(frozen=True, kw_only=True)
class Semeniuta(Zaremba):
    candidate: float = 0.0
    per: str = "step"

    probabilities = ("input", "output", "between", "candidate")
    cells = ("lstm", "gru")
    cells_why = "Semeniuta et al. define it for the LSTM and the GRU, whose candidate update it drops"

    def __post_init__(self):
        super().__post_init__()
        check_choice(self, "per", self.per, CANDIDATE_MASKS)

    def layer_masks(self, x, hidden_size, gates, layer=0, noise=None):
        masks = super().layer_masks(x, hidden_size, gates, layer)
        masks.g = step_mask(x, hidden_size, self.candidate, self.per == "step")
        return masks
