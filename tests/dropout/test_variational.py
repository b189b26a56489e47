"""Gal's variational scheme: masks per sequence fixed over time, shared by the gates (tied) or one per gate."""

from __future__ import annotations

import pytest
import torch

from tests.cells.common import Layer
from tests.dropout.common import B, D, H, T, V, word_mask, x_input
from vdrnn.cells.common import masked_linear
from vdrnn.dropout import GATES, LayerMasks, Variational, bernoulli_mask

G = GATES["lstm"]


def test_variational_tied_masks_fixed_over_time_per_sample_shared_by_gates():
    torch.manual_seed(0)
    masks = Variational(input=0.5, recurrent=0.3).layer_masks(x_input(), H, G)
    assert masks.x.shape == (B, D) and masks.h.shape == (B, H) and not masks.per_gate
    assert not torch.equal(masks.x[0], masks.x[1]) and not torch.equal(masks.h[0], masks.h[1])
    # Fixed over time: the masks have no time axis ([B, D], [B, H]), so every step reuses them.
    x = torch.randn(T, B, D)
    # Shared by gates: a zeroed input feature contributes to no gate at all.
    sample, feature = (masks.x == 0).nonzero()[0].tolist()
    w_probe = torch.zeros(G * H, D)
    w_probe[:, feature] = 1.0
    assert torch.all(masked_linear(x, w_probe, torch.zeros(G * H), masks.x, False)[:, sample] == 0)


def test_variational_untied_masks_differ_per_gate():
    torch.manual_seed(0)
    masks = Variational(input=0.5, recurrent=0.5, gates="untied").layer_masks(x_input(), H, G)
    assert masks.per_gate and masks.x.shape == (B, G, D) and masks.h.shape == (B, G, H)
    assert not torch.equal(masks.x[:, 0], masks.x[:, 1]) and not torch.equal(masks.h[:, 2], masks.h[:, 3])
    # Gate k of the projection sees x * z_x^k: compare with a per-gate loop.
    x = torch.randn(T, B, D)
    w, b = torch.randn(G * H, D), torch.randn(G * H)
    proj = masked_linear(x, w, b, masks.x, per_gate=True)
    for k in range(G):
        expected = (x * masks.x[:, k]) @ w[k * H : (k + 1) * H].t() + b[k * H : (k + 1) * H]
        assert torch.allclose(proj[..., k * H : (k + 1) * H], expected, atol=1e-5)


def test_untied_with_equal_gate_masks_equals_tied():
    """The per-gate path reduces to the tied one. (Equal masks cannot tell which gate gets which mask; that
    mapping is pinned above and by tests/cells/test_cells.py::test_lstm_per_gate_masks_follow_gals_equation_5.)"""
    torch.manual_seed(0)
    layer = Layer("lstm", D, H)
    x, state = x_input(), (torch.randn(B, H), torch.randn(B, H))
    zx, zh = bernoulli_mask((B, D), 0.4, x), bernoulli_mask((B, H), 0.4, x)
    tied = layer(x, state, LayerMasks(x=zx, h=zh))[0]
    untied = layer(x, state, LayerMasks(x=zx.unsqueeze(1).expand(B, G, D),
                                        h=zh.unsqueeze(1).expand(B, G, H), per_gate=True))[0]
    assert torch.allclose(tied, untied, atol=1e-5)


def test_word_type_dropout_drops_every_occurrence_of_a_word_in_a_sequence():
    torch.manual_seed(0)
    tokens = torch.randint(0, 4, (50, B))  # 4 word types: every type repeats many times per column
    mask = word_mask(tokens, V, dropout=0.5)
    assert mask.shape == (50, B, 1)
    for b in range(B):
        for word in tokens[:, b].unique():
            assert mask[tokens[:, b] == word, b].unique().numel() == 1  # all occurrences share one draw
    # Different sequences draw independently: some word is kept in one column and dropped in another.
    per_column = torch.stack([torch.stack([mask[tokens[:, b] == w, b][0, 0] for w in range(4)]) for b in range(B)])
    assert (per_column == 0).any() and (per_column != 0).any()
    assert not all(torch.equal(per_column[0], per_column[b]) for b in range(1, B))


def test_each_variational_probability_drives_its_own_mask_and_the_output_mask_is_fixed_over_time():
    torch.manual_seed(0)
    big = torch.randn(T, 4000, D)
    s = Variational(input=0.5, between=0.2, recurrent=0.1, output=0.3)
    first, second = s.layer_masks(big, H, G, layer=0), s.layer_masks(big, H, G, layer=1)
    zero = {name: (m == 0).float().mean().item()
            for name, m in (("x", first.x), ("h", first.h), ("x2", second.x), ("out", s.output_mask(big)))}
    assert zero == pytest.approx({"x": 0.5, "h": 0.1, "x2": 0.2, "out": 0.3}, abs=0.02)
    assert s.output_mask(big).shape == (1, 4000, D)  # one [B, H] mask broadcast over every step


@pytest.mark.parametrize("kwargs, message", [
    ({"input": 1.0}, r"Variational\(input=1.0\): a probability must be a number in \[0, 1\)"),
    ({"recurrent": -0.1}, r"Variational\(recurrent=-0.1\)"),
    ({"output": "0.3"}, r"Variational\(output='0.3'\)"),
    ({"gates": "per-gate"}, r"Variational\(gates='per-gate'\): choose one of 'tied', 'untied'"),
    ({"per": "sample"}, r"Variational\(per='sample'\): choose one of 'sequence', 'batch'"),
])
def test_a_bad_argument_is_a_value_error_naming_it_and_its_range(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Variational(**kwargs)


def test_arguments_are_keywords_with_the_papers_names():
    scheme = Variational(input=0.3, recurrent=0.2, output=0.3, gates="untied")
    assert (scheme.input, scheme.recurrent, scheme.output, scheme.gates, scheme.per) == (0.3, 0.2, 0.3, "untied",
                                                                                        "sequence")
    with pytest.raises(TypeError):
        Variational(0.3, 0.2)  # keywords only: which p is which is never a guess
