"""Zaremba's scheme: fresh masks every step and sample, on the non-recurrent connections only."""

from __future__ import annotations

import torch

from tests.dropout.common import B, D, H, T, scheme, x_input
from vdrnn.cells.lstm import LSTM_GATES as GATES


def test_zaremba_masks_are_fresh_per_step_and_sample_and_never_touch_h():
    torch.manual_seed(0)
    masks = scheme("zaremba", input=0.5, output=0.5).layer_masks(x_input(), H, GATES)
    assert masks.h is None and masks.c is None and not masks.recurrent
    assert masks.x.shape == (T, B, D)
    assert not torch.equal(masks.x[0], masks.x[1])  # differs over time
    assert not torch.equal(masks.x[:, 0], masks.x[:, 1])  # differs over samples
    out = scheme("zaremba", output=0.5).output_mask(torch.randn(T, B, H))
    assert out.shape == (T, B, H) and not torch.equal(out[0], out[1])
