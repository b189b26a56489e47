"""Semeniuta's recurrent dropout without memory loss: only the candidate update is dropped, per step or per sequence;
the LSTM's g_t and the GRU's n_t."""

from __future__ import annotations

import pytest
import torch

from tests.cells.common import Layer
from tests.dropout.common import B, D, H, T, lm, x_input
from vdrnn.config import ModelConfig, dropout_from
from vdrnn.dropout import GATES, LayerMasks, Semeniuta
from vdrnn.dropout.config import DropoutConfig
from vdrnn.errors import ConfigError

G = GATES["lstm"]


@pytest.mark.parametrize("granularity,shape", [("step", (T, B, H)), ("sequence", (B, H))])
def test_candidate_masks_are_inverted_bernoulli_per_step_or_per_sequence(granularity, shape):
    torch.manual_seed(0)
    masks = Semeniuta(candidate=0.25, per=granularity).layer_masks(x_input(), H, G)
    assert masks.g.shape == shape and masks.recurrent and masks.h is None and masks.c is None
    assert masks.g.unique().tolist() == pytest.approx([0.0, 4 / 3])
    big = Semeniuta(candidate=0.25, per=granularity).layer_masks(torch.zeros(100, 100, 1), 100, 4)
    assert (big.g == 0).float().mean().item() == pytest.approx(0.25, abs=0.01)


def test_only_the_candidate_is_dropped_so_a_dropped_unit_keeps_its_memory():
    """c_t = f c_{t-1} + i d(g_t): where m = 0 the cell only decays (f c_{t-1}), it is never reset to zero (Moon)."""
    torch.manual_seed(0)
    layer = Layer("lstm", D, H)
    state = (torch.randn(B, H), torch.randn(B, H))
    x = x_input()[:1]
    masks = LayerMasks(g=torch.zeros(B, H))  # every candidate dropped
    _, (_, c) = layer(x, state, masks)
    w_ih, w_hh, b_ih, b_hh = layer.params()
    f = torch.sigmoid((x[0] @ w_ih.T + b_ih + state[0] @ w_hh.T + b_hh).chunk(4, 1)[1])
    torch.testing.assert_close(c, f * state[1])
    # And with m = 1 the cell is the plain LSTM's.
    _, (_, c_ones) = layer(x, state, LayerMasks(g=torch.ones(B, H)))
    _, (_, c_plain) = layer(x, state)
    torch.testing.assert_close(c_ones, c_plain)


def test_gru_candidate_dropout_scales_n_only():
    torch.manual_seed(0)
    layer = Layer("gru", D, H)
    h0 = torch.randn(B, H)
    x = x_input()[:1]
    _, h = layer(x, h0, LayerMasks(g=torch.zeros(B, H)))
    w_ih, w_hh, b_ih, b_hh = layer.params()
    z = torch.sigmoid((x[0] @ w_ih.T + b_ih + h0 @ w_hh.T + b_hh).chunk(3, 1)[1])
    torch.testing.assert_close(h, z * h0)  # h = (1 - z) * 0 + z * h_{t-1}


def test_semeniuta_evaluates_by_weight_scaling():
    model = lm(Semeniuta(candidate=0.5, input=0.3)).eval()
    assert model.rnn.dropout.expected_masks(torch.zeros(T, B, D), H) is None
    plain = lm(None)
    plain.load_state_dict(model.state_dict())
    tokens = torch.randint(0, 13, (T, B))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[0], plain.eval()(tokens)[0])


def test_semeniuta_runs_on_the_lstm_and_the_gru_and_takes_step_or_sequence():
    assert Semeniuta(candidate=0.5).refuses("gru") is None
    assert "the LSTM and the GRU" in Semeniuta(candidate=0.5).refuses("rnn")
    with pytest.raises(ValueError, match="Semeniuta\\(per='time'\\): choose one of 'step', 'sequence'"):
        Semeniuta(candidate=0.5, per="time")


def test_candidate_options_are_semeniutas_only():
    with pytest.raises(ConfigError, match="candidate_mask=sequence draws the candidate's masks"):
        DropoutConfig(scheme="variational", input=0.5, candidate_mask="sequence")
    with pytest.raises(ConfigError, match="candidate_mask='time'; choose `step`"):
        DropoutConfig(scheme="semeniuta", candidate=0.5, candidate_mask="time")
    with pytest.raises(ConfigError, match="dropout=semeniuta cannot run on cell=rnn"):
        dropout_from({"dropout": {"scheme": "semeniuta", "candidate": 0.5}}, ModelConfig(cell="rnn"))
