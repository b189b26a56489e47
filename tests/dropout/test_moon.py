"""Moon's RNNDrop: cell units dropped, one mask per sequence fixed over time, and where 1/(1-p) goes."""

from __future__ import annotations

import pytest
import torch

from tests.cells.common import Layer
from tests.dropout.common import B, D, H, x_input
from vdrnn.dropout import GATES, LayerMasks, Moon

G = GATES["lstm"]


def test_moon_drops_cell_units_fixed_over_time_per_sample():
    torch.manual_seed(0)
    masks = Moon(cell=0.5).layer_masks(x_input(), H, G)
    assert masks.c.shape == (B, H) and masks.h is None and masks.x is None and masks.recurrent
    assert set(masks.c.unique().tolist()) <= {0.0, 1.0}
    assert masks.c_scale == pytest.approx(2.0)
    assert not torch.equal(masks.c[0], masks.c[1])
    # In the layer: a dropped unit has c_t = h_t = 0 at every step; kept units are scaled by 1/(1-p).
    layer = Layer("lstm", D, H)
    state = (torch.randn(B, H), torch.randn(B, H))
    y, (h, c) = layer(x_input(), state, masks)
    dropped = masks.c == 0
    assert torch.all(y[:, dropped] == 0) and torch.all(c[dropped] == 0)
    assert torch.all(c[~dropped] != 0)
    # One step from the same state: a kept unit's c_1 is the plain LSTM's, and its h_1 is twice the plain h_1.
    x1 = x_input()[:1]
    y_moon, (_, c_moon) = layer(x1, state, masks)
    y_plain, (_, c_plain) = layer(x1, state)
    torch.testing.assert_close(c_moon[~dropped], c_plain[~dropped])
    torch.testing.assert_close(y_moon[0][~dropped], 2 * y_plain[0][~dropped])


def test_moon_scale_c_puts_the_inverted_dropout_scale_on_the_cell_state():
    torch.manual_seed(0)
    masks = Moon(cell=0.5, scale="c").layer_masks(x_input(), H, G)
    assert set(masks.c.unique().tolist()) == {0.0, 2.0} and masks.c_scale == 1.0
    # One step from c_0 = 0 with the same weights: c_1 doubles where kept (the scale sits on c, not on h),
    # and h_1 = o * tanh(c_1) carries no extra factor.
    layer = Layer("lstm", D, H)
    zero = (torch.zeros(B, H), torch.zeros(B, H))
    x = x_input()[:1]
    on_h = LayerMasks(c=(masks.c > 0).float(), c_scale=2.0)
    y_h, (_, c_h) = layer(x, zero, on_h)
    y_c, (_, c_c) = layer(x, zero, masks)
    kept = masks.c > 0
    torch.testing.assert_close(c_c[kept], 2 * c_h[kept])
    o = y_h[0][kept] / 2 / torch.tanh(c_h[kept])  # h = 2 * o * tanh(c) under the default
    torch.testing.assert_close(y_c[0][kept], o * torch.tanh(c_c[kept]))
    assert torch.all(c_c[~kept] == 0) and torch.all(y_c[0][~kept] == 0)


def test_moon_runs_on_the_lstm_only():
    assert Moon(cell=0.5).refuses("lstm") is None
    assert "cell state c_t, which the GRU cell does not have" in Moon(cell=0.5).refuses("gru")
    with pytest.raises(ValueError, match="Moon\\(scale='x'\\): choose one of 'h', 'c'"):
        Moon(cell=0.5, scale="x")
