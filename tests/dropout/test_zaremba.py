"""Zaremba's scheme: fresh masks every step and sequence, on the non-recurrent connections only."""

from __future__ import annotations

import torch

from tests.dropout.common import B, D, H, T, x_input
from vdrnn.dropout import GATES, Zaremba

G = GATES["lstm"]


def test_zaremba_masks_are_fresh_per_step_and_sample_and_never_touch_h():
    torch.manual_seed(0)
    masks = Zaremba(input=0.5, output=0.5).layer_masks(x_input(), H, G)
    assert masks.h is None and masks.c is None and not masks.recurrent
    assert masks.x.shape == (T, B, D)
    assert not torch.equal(masks.x[0], masks.x[1])  # differs over time
    assert not torch.equal(masks.x[:, 0], masks.x[:, 1])  # differs over samples
    out = Zaremba(output=0.5).output_mask(torch.randn(T, B, H))
    assert out.shape == (T, B, H) and not torch.equal(out[0], out[1])
    assert not Zaremba.fixed_over_time  # nothing to keep across calls


def test_between_is_the_input_of_the_layers_above_the_first_as_torchs_dropout():
    torch.manual_seed(0)
    scheme = Zaremba(between=0.5)  # torch.nn.LSTM(dropout=0.5)'s site: the outputs of every layer but the last
    assert scheme.layer_masks(x_input(), H, G, layer=0).x is None
    assert scheme.layer_masks(x_input(), H, G, layer=1).x.shape == (T, B, D)
