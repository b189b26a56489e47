"""Krueger's zoneout: units keep their previous values with probability z, fresh draws every step, the expectation
at evaluation; the LSTM (c and h) and the GRU (h)."""

from __future__ import annotations

import pytest
import torch

import vdrnn.nn as vnn
from tests.cells.common import Layer
from tests.dropout.common import B, D, H, T, lm, x_input
from vdrnn.config import ModelConfig, dropout_from
from vdrnn.dropout import GATES, LayerMasks, Zoneout
from vdrnn.errors import ConfigError

G = GATES["lstm"]


def test_zoneout_draws_are_bernoulli_z_fresh_per_step_and_sample_unscaled():
    torch.manual_seed(0)
    x = torch.randn(200, 50, D)
    masks = Zoneout(cell=0.5, hidden=0.1).layer_masks(x, 40, G)
    assert masks.zone_c.shape == masks.zone_h.shape == (200, 50, 40) and masks.recurrent
    assert set(masks.zone_c.unique().tolist()) == {0.0, 1.0}  # no 1/(1-z): a kept unit holds a real value
    assert masks.zone_c.mean().item() == pytest.approx(0.5, abs=0.01)
    assert masks.zone_h.mean().item() == pytest.approx(0.1, abs=0.005)
    assert not torch.equal(masks.zone_c[0], masks.zone_c[1]) and not torch.equal(masks.zone_c[:, 0], masks.zone_c[:, 1])
    assert masks.h is None and masks.c is None and masks.x is None  # input = 0: no Zaremba mask


def test_zoneout_lstm_step_is_krueger_eq_6_and_7():
    """c_t = d_c c_{t-1} + (1-d_c) c~_t and h_t = d_h h_{t-1} + (1-d_h) o tanh(c~_t), c~_t the plain LSTM's cell."""
    torch.manual_seed(0)
    layer = Layer("lstm", D, H)
    state = (torch.randn(B, H), torch.randn(B, H))
    x = x_input()[:1]
    masks = Zoneout(cell=0.5, hidden=0.5).layer_masks(x, H, G)
    y, (h, c) = layer(x, state, masks)
    y_plain, (h_plain, c_plain) = layer(x, state)
    d_c, d_h = masks.zone_c[0], masks.zone_h[0]
    torch.testing.assert_close(c, d_c * state[1] + (1 - d_c) * c_plain)
    torch.testing.assert_close(h, d_h * state[0] + (1 - d_h) * h_plain)  # h_plain = o tanh(c~), before zoneout
    assert torch.equal(y[0], h)


def test_zoneout_gru_mixes_the_previous_state_into_h():
    torch.manual_seed(0)
    layer = Layer("gru", D, H)
    h0 = torch.randn(B, H)
    x = x_input()[:1]
    masks = Zoneout(hidden=0.5).layer_masks(x, H, 3)
    _, h = layer(x, h0, masks)
    _, h_plain = layer(x, h0)
    torch.testing.assert_close(h, masks.zone_h[0] * h0 + (1 - masks.zone_h[0]) * h_plain)


def test_zoneout_evaluates_with_the_expectation_and_mc_draws_as_in_training():
    model = lm(Zoneout(cell=0.5, hidden=0.05)).eval()
    expected = model.rnn.dropout.expected_masks(torch.zeros(T, B, D), H)
    assert expected.zone_c.shape == (T, B, H) and expected.zone_c.stride() == (0, 0, 1)
    assert torch.all(expected.zone_c == 0.5) and torch.all(expected.zone_h == 0.05)
    tokens = torch.randint(0, 13, (T, B))
    with torch.no_grad():
        scaled, _ = model(tokens)
        again, _ = model(tokens)
        with vnn.mc_dropout(model):
            mc, _ = model(tokens)
        # The expectation is not the plain LSTM: with d = z, weight scaling still mixes in the previous state.
        plain = lm(None)
        plain.load_state_dict(model.state_dict())
        unzoned, _ = plain.eval()(tokens)
    assert torch.equal(scaled, again) and not torch.allclose(scaled, mc) and not torch.allclose(scaled, unzoned)
    assert not model.rnn.keeps_masks()  # MC keeps nothing across calls


def test_zoneout_takes_zarembas_dropout_beside_it():
    masks = Zoneout(hidden=0.1, input=0.5).layer_masks(x_input(), H, G)
    assert masks.x.shape == (T, B, D) and masks.zone_c is None  # fresh per step, as Zaremba's


def test_zoneout_of_the_cell_state_is_refused_on_a_gru_and_any_zoneout_on_the_tanh_rnn():
    assert "needs the LSTM's c_t, which the GRU cell does not have" in Zoneout(cell=0.5).refuses("gru")
    assert Zoneout(hidden=0.5).refuses("gru") is None
    assert "the LSTM and the GRU" in Zoneout(hidden=0.5).refuses("rnn")
    with pytest.raises(ValueError, match="Zoneout cannot run on the GRU"):
        vnn.GRU(D, H, dropout=Zoneout(cell=0.5))


def test_zoneout_on_c_needs_the_lstm_and_neither_runs_on_the_tanh_rnn():
    raw = {"dropout": {"scheme": "zoneout", "zoneout_cell": 0.5}}
    with pytest.raises(ConfigError, match="zones out the LSTM's cell state c_t, which the GRU cell does not have"):
        dropout_from(raw, ModelConfig(cell="gru"))
    dropout_from({"dropout": {"scheme": "zoneout", "zoneout_hidden": 0.5}}, ModelConfig(cell="gru"))
    with pytest.raises(ConfigError, match="dropout=zoneout cannot run on cell=rnn"):
        dropout_from({"dropout": {"scheme": "zoneout", "zoneout_hidden": 0.5}}, ModelConfig(cell="rnn"))
    with pytest.raises(ConfigError, match="dropout.zoneout_cell=0.5 is not used by scheme 'variational'"):
        dropout_from({"dropout": {"scheme": "variational", "zoneout_cell": 0.5}}, ModelConfig())


def test_layers_refuse_zoneout_masks_they_cannot_apply():
    x = x_input()
    with pytest.raises(ValueError, match="no cell state"):
        Layer("gru", D, H)(x, torch.zeros(B, H), LayerMasks(zone_c=torch.zeros(T, B, H)))
