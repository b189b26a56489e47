"""Every scheme's mask semantics seen through the public modules: which tensor, per sequence or shared, fixed over
time or fresh, per gate, inverted scaling, evaluation; and gradcheck in float64 through every scheme."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

import vdrnn.nn as vnn

T, D, H = 5, 4, 6


def input_zeros(scheme, batch: int = 400, cell=vnn.LSTM) -> torch.Tensor:
    """Where a training call's gradient to its input is exactly zero, [T, B, D]: the entries its input mask dropped
    (a dropped entry reaches no gate; a kept one, through random weights and a random initial state, always some:
    from c_0 = 0 the forget gate's would be zero at the first step)."""
    torch.manual_seed(0)
    module = cell(D, H, dropout=scheme).train()
    x = torch.randn(T, batch, D, requires_grad=True)
    state = torch.randn(1, batch, H)
    module(x, (state, torch.randn(1, batch, H)) if cell is vnn.LSTM else state)[0].sum().backward()
    return x.grad == 0


@pytest.mark.parametrize("scheme", [vnn.Variational(input=0.5), vnn.Gaussian(input=0.5, learn=True),
                                    vnn.WeightDrop(input=0.5), vnn.Concrete(input=0.5)])
def test_a_fixed_over_time_input_mask_is_one_per_sequence_for_every_step(scheme):
    zeros = input_zeros(scheme)
    assert all(torch.equal(zeros[t], zeros[0]) for t in range(T))  # fixed over time
    if not isinstance(scheme, (vnn.Gaussian, vnn.Concrete)):  # real-valued draws are never exactly 0
        assert zeros[0].float().mean().item() == pytest.approx(0.5, abs=0.05)
        assert not all(torch.equal(zeros[0, b], zeros[0, 0]) for b in range(1, 10))  # per sequence


def test_an_untied_input_mask_drops_an_entry_only_where_every_gate_drops_it():
    zeros = input_zeros(vnn.Variational(input=0.5, gates="untied"), batch=2000)
    assert all(torch.equal(zeros[t], zeros[0]) for t in range(T))
    assert zeros[0].float().mean().item() == pytest.approx(0.5**4, abs=0.015)  # four gates, each its own mask
    gru = input_zeros(vnn.Variational(input=0.5, gates="untied"), batch=2000, cell=vnn.GRU)
    assert gru[0].float().mean().item() == pytest.approx(0.5**3, abs=0.02)


@pytest.mark.parametrize("scheme", [vnn.Zaremba(input=0.5), vnn.Zoneout(input=0.5, hidden=0.1),
                                    vnn.Semeniuta(input=0.5, candidate=0.2)])
def test_zarembas_input_mask_is_fresh_at_every_step(scheme):
    zeros = input_zeros(scheme)
    assert zeros.float().mean().item() == pytest.approx(0.5, abs=0.03)
    assert not torch.equal(zeros[0], zeros[1])


def test_the_per_batch_mask_is_shared_by_every_sequence():
    zeros = input_zeros(vnn.Variational(input=0.5, per="batch"))
    assert all(torch.equal(zeros[0, b], zeros[0, 0]) for b in range(zeros.shape[1]))


def test_a_recurrent_mask_is_per_sequence_and_a_dropped_unit_is_read_at_no_step():
    """h_0 reaches an LSTM only through W_hh (h_0 * z_h): its gradient is zero exactly where z_h dropped the unit.
    With the same draws, a change to W_hh's column of such a unit changes none of that sequence's outputs."""
    torch.manual_seed(0)
    lstm = vnn.LSTM(D, H, dropout=vnn.Variational(recurrent=0.5)).train()
    x, h0 = torch.randn(T, 300, D), torch.zeros(1, 300, H, requires_grad=True)
    torch.manual_seed(1)
    y, _ = lstm(x, (h0, torch.zeros(1, 300, H)))
    y.sum().backward()
    dropped = h0.grad[0] == 0  # [B, H]
    assert dropped.float().mean().item() == pytest.approx(0.5, abs=0.05)
    with torch.no_grad():
        lstm.weight_hh_l0[:, 2] += 3.0
        torch.manual_seed(1)
        changed, _ = lstm(x, (h0, torch.zeros(1, 300, H)))
    same = (changed == y).all(dim=(0, 2))  # [B]: every step and unit unchanged
    assert torch.equal(same, dropped[:, 2])


@pytest.mark.parametrize("scheme, fixed", [(vnn.Variational(output=0.5), True), (vnn.Zaremba(output=0.5), False),
                                           (vnn.Moon(cell=0.5), True)])
def test_the_output_and_moons_cell_masks_zero_whole_units_fixed_over_time_or_fresh(scheme, fixed):
    torch.manual_seed(0)
    y, _ = vnn.LSTM(D, H, dropout=scheme).train()(torch.randn(T, 400, D))
    zeros = y == 0
    assert zeros.float().mean().item() == pytest.approx(0.5, abs=0.03)
    assert all(torch.equal(zeros[t], zeros[0]) for t in range(T)) == fixed


def test_weight_drop_drops_entries_of_w_hh_once_per_call():
    torch.manual_seed(0)
    lstm = vnn.LSTM(D, H, dropout=vnn.WeightDrop(weight=0.5)).train()
    grads = []
    for _ in range(2):
        lstm.zero_grad()
        lstm(torch.randn(T, 50, D))[0].sum().backward()
        grads.append(lstm.weight_hh_l0.grad == 0)
    assert grads[0].float().mean().item() == pytest.approx(0.5, abs=0.1) and not torch.equal(*grads)


@pytest.mark.parametrize("scheme", [vnn.Variational(input=0.4, recurrent=0.3, output=0.5), vnn.Zaremba(output=0.5),
                                    vnn.Gaussian(output=0.5)])
def test_masks_are_inverted_so_the_training_mean_is_the_evaluation_output(scheme):
    """E[z] = 1: the output mask's average over many sequences is weight scaling's output (the input and recurrent
    masks pass through the nonlinear cell, so only the output's expectation is exact)."""
    torch.manual_seed(0)
    lstm = vnn.LSTM(D, H, dropout=scheme)
    x = torch.randn(T, 1, D).expand(T, 40000, D)
    with torch.no_grad():
        undropped, _ = lstm.train()(x, drop_output=False)
        dropped = lstm.drop_output(undropped)
        evaluated, _ = lstm.eval()(x[:, :1])
    torch.testing.assert_close(dropped.mean(1), undropped.mean(1), atol=0.02, rtol=0)
    if isinstance(scheme, vnn.Zaremba):  # no recurrent mask: the undropped training output is evaluation's
        torch.testing.assert_close(undropped[:, 0], evaluated[:, 0])


@pytest.mark.parametrize("scheme", [vnn.Variational(input=0.3, recurrent=0.3, output=0.3), vnn.Moon(cell=0.5),
                                    vnn.Semeniuta(candidate=0.5, input=0.3)])
def test_evaluation_is_deterministic_weight_scaling(scheme):
    torch.manual_seed(0)
    lstm = vnn.LSTM(D, H, num_layers=2, dropout=scheme).eval()
    plain = vnn.LSTM(D, H, num_layers=2).eval()
    plain.load_state_dict(lstm.state_dict())
    x = torch.randn(T, 3, D)
    torch.testing.assert_close(lstm(x), plain(x))  # no scheme draws in evaluation: the stock module's numbers


def test_zoneouts_evaluation_is_its_expectation_not_the_plain_cell():
    torch.manual_seed(0)
    lstm = vnn.LSTM(D, H, dropout=vnn.Zoneout(cell=0.5, hidden=0.5)).eval()
    plain = vnn.LSTM(D, H).eval()
    plain.load_state_dict(lstm.state_dict())
    x = torch.randn(T, 3, D)
    assert torch.equal(lstm(x)[0], lstm(x)[0]) and not torch.allclose(lstm(x)[0], plain(x)[0])


GRADCHECK = [
    (vnn.LSTM, vnn.Variational(input=0.3, recurrent=0.3, output=0.3)),
    (vnn.LSTM, vnn.Variational(input=0.3, recurrent=0.3, gates="untied")),
    (vnn.LSTM, vnn.Zaremba(input=0.3, output=0.3)),
    (vnn.LSTM, vnn.Moon(cell=0.3)),
    (vnn.LSTM, vnn.WeightDrop(weight=0.3, input=0.3)),
    (vnn.LSTM, vnn.Zoneout(cell=0.3, hidden=0.3)),
    (vnn.LSTM, vnn.Semeniuta(candidate=0.3, per="sequence")),
    (vnn.LSTM, vnn.Gaussian(input=0.3, recurrent=0.3, output=0.3, learn=True)),
    (vnn.LSTM, vnn.Concrete(input=0.3, recurrent=0.3)),
    (vnn.GRU, vnn.Variational(input=0.3, recurrent=0.3, gates="untied")),
    (vnn.GRU, vnn.Zoneout(hidden=0.3)),
    (vnn.GRU, vnn.Semeniuta(candidate=0.3)),
    (vnn.RNN, vnn.Variational(input=0.3, recurrent=0.3)),
]


@pytest.mark.parametrize("cell, scheme", GRADCHECK, ids=[f"{c.__name__}-{type(s).__name__}" for c, s in GRADCHECK])
def test_gradcheck_in_float64_through_every_scheme(cell, scheme):
    """The gradients of the output and final state in the input, the initial state, the weights and a learning
    scheme's own parameters, against finite differences, the masks redrawn alike at every evaluation."""
    torch.manual_seed(0)
    module = cell(3, 4, num_layers=2, dropout=scheme).double().train()
    names = [name for name, _ in module.named_parameters()]
    x = torch.randn(3, 2, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_(True) for p in module.parameters()]

    def run(x, h0, *params):
        torch.manual_seed(1)  # the same masks at every evaluation
        state = (h0, h0 * 0.5) if cell is vnn.LSTM else h0
        y, final = functional_call(module, dict(zip(names, params, strict=True)), (x, state))
        return y, *(final if isinstance(final, tuple) else (final,))

    assert torch.autograd.gradcheck(run, (x, h0, *params), eps=1e-6, atol=1e-5)
