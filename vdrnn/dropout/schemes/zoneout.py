"""Krueger et al. (2016), zoneout: each unit keeps its previous value with probability z, a fresh draw every step.

    c_t = d^c_t * c_{t-1} + (1 - d^c_t) * (f_t * c_{t-1} + i_t * g_t)              (LSTM, sec. 3.2)
    h_t = d^h_t * h_{t-1} + (1 - d^h_t) * (o_t * tanh(f_t * c_{t-1} + i_t * g_t))  (LSTM, sec. 3.2)
    h_t = d^h_t * h_{t-1} + (1 - d^h_t) * GRU(x_t, h_{t-1})                         (the GRU, as the authors' code)

with d ~ Bernoulli(z) (1: the unit "zones out" and keeps its value). In the LSTM, h_t's update reads the cell's new
value before zoneout, as the paper's equation and the authors' code: zoneout acts on the stored state, not inside the
step.

- tensors: c_t (``cell``, z_c; the LSTM only) and h_t (``hidden``, z_h) of every layer; beside them Zaremba's
  dropout on the non-recurrent connections, which the paper's PTB model keeps (``input``, ``between``, ``output``:
  fresh per step, :class:`~vdrnn.dropout.schemes.zaremba.Zaremba`);
- shapes: d^c, d^h [T, B, H], **per sequence and unit, fresh at every step**;
- scaling: none; a zoned-out unit holds a real value (its previous one), not a zero to make up for;
- evaluation (``module.eval()``): the expectation, d replaced by z: h_t = z_h h_{t-1} + (1 - z_h) h~_t, and likewise
  c_t ("as in dropout, we use the expectation of the random noise at test time");
- MC: fresh draws every step, as in training (nothing fixed to keep across calls).

The LSTM and the GRU (z_c needs the LSTM's cell state); both run on the reference loop and the fused kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdrnn.dropout.masks import LayerMasks, constant_over, zoneout_draws
from vdrnn.dropout.schemes.zaremba import Zaremba


@dataclass(frozen=True, kw_only=True)
class Zoneout(Zaremba):
    cell: float = 0.0
    hidden: float = 0.0

    probabilities = ("input", "output", "between", "cell", "hidden")
    cells = ("lstm", "gru")
    cells_why = "Krueger et al.'s zoneout is implemented for the LSTM and the GRU"

    def refuses(self, cell):
        if cell != "lstm" and self.cell > 0:
            return (f"zoning out the cell state (cell={self.cell}) needs the LSTM's c_t, which the {cell.upper()} cell "
                    f"does not have; set cell=0 and zone out h_t (hidden=...)")
        return super().refuses(cell)

    def layer_masks(self, x, hidden_size, gates, layer=0, noise=None):
        masks = super().layer_masks(x, hidden_size, gates, layer)
        shape = (x.shape[0], x.shape[1], hidden_size)
        for field, z in (("zone_c", self.cell), ("zone_h", self.hidden)):
            if z > 0:
                setattr(masks, field, zoneout_draws(shape, z, x))
        return masks

    def expected_masks(self, x, hidden_size, layer=0):
        c, h = self.cell, self.hidden
        if c == 0 and h == 0:
            return None
        return LayerMasks(zone_c=constant_over(x, hidden_size, c) if c > 0 else None,
                          zone_h=constant_over(x, hidden_size, h) if h > 0 else None)
