"""GRU and tanh-RNN layers: the reference loops against torch.nn.GRU / nn.RNN, and per-gate mask semantics."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.cells.common import Layer
from vdrnn.cells.common import masked_linear
from vdrnn.cells.gru import GRU_GATES, gru_reference
from vdrnn.cells.lstm import lstm_reference
from vdrnn.cells.rnn import rnn_reference
from vdrnn.dropout import GATES, LayerMasks, bernoulli_mask, weight_mask

RNN_GATES = GATES["rnn"]
T, B, D, H = 7, 3, 5, 6
LAYERS = [("gru", gru_reference, GRU_GATES), ("rnn", rnn_reference, RNN_GATES)]


def ones_masks(gates: int, per_gate: bool) -> LayerMasks:
    """All-ones masks: the reference loop runs (a masked recurrence) but nothing is dropped (p = 0)."""
    if per_gate:
        return LayerMasks(x=torch.ones(B, gates, D), h=torch.ones(B, gates, H), per_gate=True)
    return LayerMasks(x=torch.ones(B, D), h=torch.ones(B, H))


@pytest.mark.parametrize("cell,reference,gates", LAYERS)
def test_reference_loop_equals_the_stock_module_at_p0(cell, reference, gates):
    torch.manual_seed(0)
    layer = Layer(cell, D, H)
    x, h0 = torch.randn(T, B, D), torch.randn(B, H)
    expected, h_expected = layer.module(x, h0[None])
    for per_gate in (False, True):
        y, h = reference(x, h0, layer.params(), ones_masks(gates, per_gate))
        assert torch.allclose(y, expected, atol=1e-6) and torch.allclose(h, h_expected[0], atol=1e-6)


@pytest.mark.parametrize("cell,reference,gates", LAYERS)
def test_reference_gradients_equal_the_stock_module_at_p0(cell, reference, gates):
    torch.manual_seed(0)
    layer = Layer(cell, D, H)
    x = torch.randn(T, B, D, requires_grad=True)
    reference(x, torch.zeros(B, H), layer.params(), ones_masks(gates, True))[0].square().sum().backward()
    ours = [x.grad.clone()] + [p.grad.clone() for p in layer.parameters()]
    x.grad = None
    layer.zero_grad()
    layer.module(x)[0].square().sum().backward()
    for a, b in zip(ours, [x.grad] + [p.grad for p in layer.parameters()], strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_gru_per_gate_masks_follow_gals_equations():
    """Untied masks: gate k's input and recurrent products see x * z_x^k and h * z_h^k; z * h_{t-1} is undropped."""
    torch.manual_seed(0)
    layer = Layer("gru", D, H)
    w_ih, w_hh, b_ih, b_hh = layer.params()
    x, h = torch.randn(T, B, D), torch.randn(B, H)
    zx, zh = bernoulli_mask((B, 3, D), 0.5, x), bernoulli_mask((B, 3, H), 0.5, x)
    y, _ = gru_reference(x, h, layer.params(), LayerMasks(x=zx, h=zh, per_gate=True))

    def gate(k, t, h):  # (input part, recurrent part) of gate k with its own masks
        rows = slice(k * H, (k + 1) * H)
        return (F.linear(x[t] * zx[:, k], w_ih[rows], b_ih[rows]), F.linear(h * zh[:, k], w_hh[rows], b_hh[rows]))

    for t in range(T):
        r = torch.sigmoid(sum(gate(0, t, h)))
        z = torch.sigmoid(sum(gate(1, t, h)))
        xn, hn = gate(2, t, h)
        h = (1 - z) * torch.tanh(xn + r * hn) + z * h
        assert torch.allclose(y[t], h, atol=1e-5)


@pytest.mark.parametrize("reference,gates", [(gru_reference, GRU_GATES), (rnn_reference, RNN_GATES)])
def test_untied_with_equal_gate_masks_equals_tied(reference, gates):
    torch.manual_seed(0)
    layer = Layer("gru" if gates == GRU_GATES else "rnn", D, H)
    x, h0 = torch.randn(T, B, D), torch.randn(B, H)
    zx, zh = bernoulli_mask((B, D), 0.5, x), bernoulli_mask((B, H), 0.5, x)
    tied = reference(x, h0, layer.params(), LayerMasks(x=zx, h=zh))
    untied = reference(x, h0, layer.params(),
                       LayerMasks(x=zx[:, None].expand(B, gates, D), h=zh[:, None].expand(B, gates, H), per_gate=True))
    assert torch.allclose(tied[0], untied[0], atol=1e-6)


def test_masked_linear_per_gate_is_one_product_per_gate():
    torch.manual_seed(0)
    v, w, b = torch.randn(T, B, D), torch.randn(3 * H, D), torch.randn(3 * H)
    mask = bernoulli_mask((B, 3, D), 0.5, v)
    expected = torch.cat([F.linear(v * mask[:, k], w[k * H:(k + 1) * H], b[k * H:(k + 1) * H]) for k in range(3)], -1)
    assert torch.allclose(masked_linear(v, w, b, mask, per_gate=True), expected, atol=1e-5)
    # Under autocast both give the product's dtype, as F.linear does: the fp32 bias does not promote the untied one.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert masked_linear(v, w, b, mask, per_gate=True).dtype == torch.bfloat16
        assert masked_linear(v, w, b, mask[:, 0], per_gate=False).dtype == torch.bfloat16


@pytest.mark.parametrize("cell", ["gru", "rnn"])
def test_input_only_masks_run_the_stock_kernel_and_agree_with_the_loop(cell):
    """Zaremba's fresh-per-step input mask leaves the recurrence plain: the stock kernel gives the loop's numbers."""
    torch.manual_seed(0)
    layer = Layer(cell, D, H)
    x, h0 = torch.randn(T, B, D), torch.randn(B, H)
    masks = LayerMasks(x=bernoulli_mask((T, B, D), 0.5, x))
    assert not masks.recurrent
    fused, _ = layer(x, h0, masks)
    loop, _ = layer.loop(x, h0, masks)
    assert torch.allclose(fused, loop, atol=1e-5)


def test_cell_mask_on_a_gru_is_refused():
    with pytest.raises(ValueError, match="no cell state"):
        Layer("gru", D, H)(torch.randn(T, B, D), torch.zeros(B, H), LayerMasks(c=torch.ones(B, H)))


@pytest.mark.parametrize("cell", ["gru", "rnn"])
def test_weight_drop_on_a_single_state_layer_is_refused_not_ignored(cell):
    layer = Layer(cell, D, H)
    mask = weight_mask((layer.gates * H, H), 0.5, torch.empty(0))
    with pytest.raises(ValueError, match="weight-drop mask"):
        layer(torch.randn(T, B, D), torch.zeros(B, H), LayerMasks(w_hh=mask))


def test_lstm_per_gate_masks_follow_gals_equation_5():
    """Untied LSTM (Gal eq. 5): gate k's products see x * z_x^k and h_{t-1} * z_h^k, at every step."""
    torch.manual_seed(0)
    layer = Layer("lstm", D, H)
    w_ih, w_hh, b_ih, b_hh = layer.params()
    x, h, c = torch.randn(T, B, D), torch.randn(B, H), torch.randn(B, H)
    zx, zh = bernoulli_mask((B, 4, D), 0.5, x), bernoulli_mask((B, 4, H), 0.5, x)
    y, _ = lstm_reference(x, (h, c), layer.params(), LayerMasks(x=zx, h=zh, per_gate=True))

    def gate(k, t, h):  # gate k (i, f, g, o) with its own masks
        rows = slice(k * H, (k + 1) * H)
        return F.linear(x[t] * zx[:, k], w_ih[rows], b_ih[rows]) + F.linear(h * zh[:, k], w_hh[rows], b_hh[rows])

    for t in range(T):
        i, f, o = (torch.sigmoid(gate(k, t, h)) for k in (0, 1, 3))
        c = f * c + i * torch.tanh(gate(2, t, h))
        h = o * torch.tanh(c)
        assert torch.allclose(y[t], h, atol=1e-5)


@pytest.mark.parametrize("cell", ["lstm", "lstm_untied", "gru", "rnn"])
def test_a_unit_dropped_from_h_has_no_influence_at_any_step(cell):
    """z_h is fixed over time: the recurrent weights that read a dropped unit j of h_{t-1} (column j of W_hh,
    for the gate whose mask drops it) never matter, at any step, while those of a kept unit do."""
    torch.manual_seed(0)
    layer = Layer(cell.removesuffix("_untied"), D, H)
    gates, per_gate = {"lstm": (4, False), "lstm_untied": (4, True), "gru": (3, False), "rnn": (1, False)}[cell]
    x = torch.randn(T, B, D)
    z_h = torch.ones((B, gates, H) if per_gate else (B, H))
    if per_gate:
        z_h[:, 1, 2] = 0  # unit 2 dropped for gate 1 only
        rows = slice(H, 2 * H)
    else:
        z_h[:, 2] = 0  # unit 2 dropped for every gate
        rows = slice(None)
    masks = LayerMasks(h=z_h, per_gate=per_gate)
    state = (torch.randn(B, H), torch.randn(B, H)) if cell.startswith("lstm") else torch.randn(B, H)

    def outputs(column: int, change: float):
        params = [p.detach().clone() for p in layer.params()]
        params[1][rows, column] += change
        return layer.loop(x, state, masks, tuple(params))[0]

    base = outputs(2, 0.0)
    assert torch.equal(outputs(2, 5.0), base)  # the dropped unit's column: no effect at any step
    assert not torch.allclose(outputs(3, 5.0)[1:], base[1:])  # a kept unit's column changes steps 1..T-1
