"""Mask semantics of every scheme: which tensor, shape, per sample, over time, per gate, scaling, modes."""

from __future__ import annotations

import math

import pytest
import torch

from vdrnn.cells.common import masked_linear
from vdrnn.cells.lstm import LSTM_GATES as GATES
from vdrnn.cells.lstm import LSTMLayer
from vdrnn.config import ModelConfig
from vdrnn.dropout import (
    DropoutConfig,
    LayerMasks,
    bernoulli_mask,
    gaussian_mask,
    make_dropout,
    words_of,
)
from vdrnn.dropout.learned import NoiseScales
from vdrnn.errors import ConfigError
from vdrnn.tasks.lm.model import LanguageModel

T, B, D, H, V = 7, 6, 5, 9, 13


def scheme(name, **p):
    return make_dropout(DropoutConfig(scheme=name, **p))


def x_input():
    return torch.randn(T, B, D)


def word_mask(dropout, tokens, vocab_size):
    """The [T, B, 1] word-type mask of ``tokens`` from a fresh table of ``dropout``."""
    return words_of(dropout.word_type_table(tokens.shape[1], vocab_size, tokens), tokens)


def test_bernoulli_mask_is_inverted_dropout():
    torch.manual_seed(0)
    mask = bernoulli_mask((400, 500), 0.3, torch.empty(0))
    values = mask.unique()
    assert values.numel() == 2 and values[0] == 0 and values[1].item() == pytest.approx(1 / 0.7)
    assert (mask == 0).float().mean().item() == pytest.approx(0.3, abs=0.01)
    assert mask.mean().item() == pytest.approx(1.0, abs=0.01)  # expectation preserved


# ---------------------------------------------------------------------------- Zaremba
def test_zaremba_masks_are_fresh_per_step_and_sample_and_never_touch_h():
    torch.manual_seed(0)
    masks = scheme("zaremba", input=0.5, output=0.5).layer_masks(x_input(), H, GATES)
    assert masks.h is None and masks.c is None and not masks.recurrent
    assert masks.x.shape == (T, B, D)
    assert not torch.equal(masks.x[0], masks.x[1])  # differs over time
    assert not torch.equal(masks.x[:, 0], masks.x[:, 1])  # differs over samples
    out = scheme("zaremba", output=0.5).output_mask(torch.randn(T, B, H))
    assert out.shape == (T, B, H) and not torch.equal(out[0], out[1])


# ---------------------------------------------------------------------------- Moon
def test_moon_drops_cell_units_fixed_over_time_per_sample():
    torch.manual_seed(0)
    masks = scheme("moon", cell=0.5).layer_masks(x_input(), H, GATES)
    assert masks.c.shape == (B, H) and masks.h is None and masks.x is None and masks.recurrent
    assert set(masks.c.unique().tolist()) <= {0.0, 1.0}
    assert masks.c_scale == pytest.approx(2.0)
    assert not torch.equal(masks.c[0], masks.c[1])
    # In the layer: a dropped unit has c_t = h_t = 0 at every step; kept units are scaled by 1/(1-p).
    layer = LSTMLayer(D, H, impl="reference")
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


def test_moon_cell_scale_c_puts_the_inverted_dropout_scale_on_the_cell_state():
    torch.manual_seed(0)
    masks = scheme("moon", cell=0.5, cell_scale="c").layer_masks(x_input(), H, GATES)
    assert set(masks.c.unique().tolist()) == {0.0, 2.0} and masks.c_scale == 1.0
    # One step from c_0 = 0 with the same weights: c_1 doubles where kept (the scale sits on c, not on h),
    # and h_1 = o * tanh(c_1) carries no extra factor.
    layer = LSTMLayer(D, H, impl="reference")
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


@pytest.mark.parametrize("bad, message", [
    ({"scheme": "moon", "cell": 0.5, "cell_scale": "output"}, "choose `h`"),
    ({"scheme": "variational", "recurrent": 0.5, "cell_scale": "c"}, "only applies to `dropout=moon`"),
])
def test_cell_scale_is_checked(bad, message):
    with pytest.raises(ConfigError, match=message):
        DropoutConfig(**bad)


# ---------------------------------------------------------------------------- Gal, tied and untied
def test_variational_tied_masks_fixed_over_time_per_sample_shared_by_gates():
    torch.manual_seed(0)
    masks = scheme("variational", input=0.5, recurrent=0.3).layer_masks(x_input(), H, GATES)
    assert masks.x.shape == (B, D) and masks.h.shape == (B, H) and not masks.per_gate
    assert not torch.equal(masks.x[0], masks.x[1]) and not torch.equal(masks.h[0], masks.h[1])
    # Fixed over time: the masks have no time axis ([B, D], [B, H]), so every step reuses them.
    x = torch.randn(T, B, D)
    # Shared by gates: a zeroed input feature contributes to no gate at all.
    sample, feature = (masks.x == 0).nonzero()[0].tolist()
    w_probe = torch.zeros(GATES * H, D)
    w_probe[:, feature] = 1.0
    assert torch.all(masked_linear(x, w_probe, torch.zeros(GATES * H), masks.x, False)[:, sample] == 0)


def test_variational_untied_masks_differ_per_gate():
    torch.manual_seed(0)
    masks = scheme("variational", input=0.5, recurrent=0.5, per_gate=True).layer_masks(x_input(), H, GATES)
    assert masks.per_gate and masks.x.shape == (B, GATES, D) and masks.h.shape == (B, GATES, H)
    assert not torch.equal(masks.x[:, 0], masks.x[:, 1]) and not torch.equal(masks.h[:, 2], masks.h[:, 3])
    # Gate k of the projection sees x * z_x^k: compare with a per-gate loop.
    x = torch.randn(T, B, D)
    w, b = torch.randn(GATES * H, D), torch.randn(GATES * H)
    proj = masked_linear(x, w, b, masks.x, per_gate=True)
    for k in range(GATES):
        expected = (x * masks.x[:, k]) @ w[k * H : (k + 1) * H].t() + b[k * H : (k + 1) * H]
        assert torch.allclose(proj[..., k * H : (k + 1) * H], expected, atol=1e-5)


def test_untied_with_equal_gate_masks_equals_tied():
    """The per-gate path reduces to the tied one. (Equal masks cannot tell which gate gets which mask; that
    mapping is pinned above and by tests/test_cells.py::test_lstm_per_gate_masks_follow_gals_equation_5.)"""
    torch.manual_seed(0)
    layer = LSTMLayer(D, H, impl="reference")
    x, state = x_input(), (torch.randn(B, H), torch.randn(B, H))
    zx, zh = bernoulli_mask((B, D), 0.4, x), bernoulli_mask((B, H), 0.4, x)
    tied = layer(x, state, LayerMasks(x=zx, h=zh))[0]
    untied = layer(x, state, LayerMasks(x=zx.unsqueeze(1).expand(B, GATES, D),
                                        h=zh.unsqueeze(1).expand(B, GATES, H), per_gate=True))[0]
    assert torch.allclose(tied, untied, atol=1e-5)


def test_word_type_dropout_drops_every_occurrence_of_a_word_in_a_sequence():
    torch.manual_seed(0)
    tokens = torch.randint(0, 4, (50, B))  # 4 word types: every type repeats many times per column
    mask = word_mask(scheme("variational", embedding=0.5), tokens, V)
    assert mask.shape == (50, B, 1)
    for b in range(B):
        for word in tokens[:, b].unique():
            assert mask[tokens[:, b] == word, b].unique().numel() == 1  # all occurrences share one draw
    # Different sequences draw independently: some word is kept in one column and dropped in another.
    per_column = torch.stack([torch.stack([mask[tokens[:, b] == w, b][0, 0] for w in range(4)]) for b in range(B)])
    assert (per_column == 0).any() and (per_column != 0).any()
    assert not all(torch.equal(per_column[0], per_column[b]) for b in range(1, B))


def test_expectation_preserved_for_every_site():
    torch.manual_seed(0)
    big = torch.randn(2, 20000, 4)
    s = scheme("variational", embedding=0.3, input=0.4, recurrent=0.2, output=0.5)
    m = s.layer_masks(big, 4, GATES)
    for mask in (m.x, m.h, s.output_mask(big)):
        assert mask.mean().item() == pytest.approx(1.0, abs=0.02)
    tokens = torch.randint(0, 100, (3, 20000))
    assert word_mask(s, tokens, 100).mean().item() == pytest.approx(1.0, abs=0.03)


# ---------------------------------------------------------------------------- Kingma, Gaussian
@pytest.mark.parametrize("p", [0.2, 0.5, 0.65])
def test_gaussian_mask_has_the_mean_and_variance_of_the_inverted_bernoulli_mask(p):
    torch.manual_seed(0)
    gauss, bern = gaussian_mask((400, 500), p, torch.empty(0)), bernoulli_mask((400, 500), p, torch.empty(0))
    alpha = p / (1 - p)
    assert gauss.mean().item() == pytest.approx(1.0, abs=0.01) == bern.mean().item()
    assert gauss.var().item() == pytest.approx(alpha, rel=0.02)
    assert bern.var().item() == pytest.approx(alpha, rel=0.02)  # the moment Kingma's alpha = p / (1-p) matches
    # Gaussian, not two-valued: about 68% of the draws within one standard deviation of 1.
    assert gauss.unique().numel() > 1000
    assert ((gauss - 1).abs() < alpha**0.5).float().mean().item() == pytest.approx(0.6827, abs=0.01)


def test_gaussian_masks_sit_where_gals_do_per_sample_fixed_over_time_with_each_sites_variance():
    torch.manual_seed(0)
    big = torch.randn(T, 20000, D)
    s = scheme("gaussian", embedding=0.2, input=0.5, hidden=0.3, recurrent=0.2, output=0.4)
    first, second = s.layer_masks(big, H, GATES, layer=0), s.layer_masks(big, H, GATES, layer=1)
    assert first.x.shape == (20000, D) and first.h.shape == (20000, H) and not first.per_gate  # [B, D]: no T
    out = s.output_mask(big)
    assert out.shape == (1, 20000, D)  # one draw per sample, broadcast over every step
    tokens = torch.randint(0, 50, (T, 20000))
    words = word_mask(s, tokens, 50)
    assert all(words[tokens[:, b] == w, b].unique().numel() == 1 for b in range(3) for w in tokens[:, b].unique())
    variance = {name: m.var().item() for name, m in
                (("x", first.x), ("h", first.h), ("x2", second.x), ("out", out), ("words", words[0]))}
    assert variance == pytest.approx({"x": 1.0, "h": 0.25, "x2": 0.3 / 0.7, "out": 0.4 / 0.6, "words": 0.25}, rel=0.05)
    # The same variances as Bernoulli masks of these p, so what makes them Kingma's is the values: real-valued,
    # some negative (2% of the draws at p 0.2), never the two values {0, 1/(1-p)}.
    for name, m in (("x", first.x), ("h", first.h), ("x2", second.x), ("out", out), ("words", words)):
        assert m.unique().numel() > 1000 and (m < 0).any(), name
    assert not torch.equal(first.h[0], first.h[1])  # per sample


def test_gaussian_untied_draws_a_mask_per_gate_and_the_layer_applies_it_like_gals():
    torch.manual_seed(0)
    masks = scheme("gaussian", input=0.5, recurrent=0.5, per_gate=True).layer_masks(x_input(), H, GATES)
    assert masks.per_gate and masks.x.shape == (B, GATES, D) and masks.h.shape == (B, GATES, H)
    assert not torch.equal(masks.h[:, 0], masks.h[:, 1])
    assert masks.x.unique().numel() == masks.x.numel() and masks.h.unique().numel() == masks.h.numel()  # Gaussian
    # The layer only multiplies by what the scheme draws: all-ones per-gate masks leave the plain LSTM, and the
    # Gaussian draws (real-valued, unlike Bernoulli's two values) perturb it.
    layer = LSTMLayer(D, H, impl="reference")
    x, state = x_input(), (torch.randn(B, H), torch.randn(B, H))
    noise_free = layer(x, state, LayerMasks(x=torch.ones(B, GATES, D), h=torch.ones(B, GATES, H), per_gate=True))[0]
    assert torch.allclose(noise_free, layer(x, state, LayerMasks())[0], atol=1e-6)
    assert not torch.allclose(layer(x, state, masks)[0], noise_free)


def test_gaussian_scheme_takes_the_variational_sites_only():
    with pytest.raises(ConfigError, match="not used by scheme 'gaussian'"):
        DropoutConfig(scheme="gaussian", cell=0.5)
    with pytest.raises(ConfigError, match="not used by scheme 'gaussian'"):
        DropoutConfig(scheme="gaussian", weight=0.5)
    assert DropoutConfig(scheme="gaussian", locked_mask="batch").locked_mask == "batch"


@pytest.mark.parametrize("name, noise, words_are_bernoulli", [
    ("gaussian", "bernoulli", True), ("variational", "gaussian", False), ("moon", "gaussian", False)])
def test_embedding_noise_changes_the_word_type_masks_only(name, noise, words_are_bernoulli):
    # dropout.embedding_noise draws the word types from the other distribution: one draw per (sequence, word
    # type) as before, with p's mean 1 and variance p/(1-p); the layer masks keep the scheme's own noise.
    torch.manual_seed(0)
    tokens = torch.randint(0, 50, (T, 4000))
    layer_sites = {} if name == "moon" else {"input": 0.5, "recurrent": 0.5}
    s = scheme(name, embedding=0.3, embedding_noise=noise, **layer_sites)
    words = word_mask(s, tokens, 50)
    assert all(words[tokens[:, b] == w, b].unique().numel() == 1 for b in range(3) for w in tokens[:, b].unique())
    table = s.word_type_table(4000, 50, tokens)
    assert table.mean().item() == pytest.approx(1.0, abs=0.02)
    assert table.var().item() == pytest.approx(0.3 / 0.7, rel=0.05)
    if words_are_bernoulli:
        assert table.unique().tolist() == pytest.approx([0.0, 1 / 0.7])
    else:
        assert table.unique().numel() > 1000
    if layer_sites:
        x_mask = s.layer_masks(x_input(), H, GATES).x
        assert (x_mask.unique().numel() > 2) == (name == "gaussian")  # the scheme's own noise, as without the option


def test_embedding_noise_needs_word_types_and_a_known_distribution():
    with pytest.raises(ConfigError, match="embedding_noise='uniform'; choose `bernoulli`"):
        DropoutConfig(scheme="gaussian", embedding=0.5, embedding_noise="uniform")
    with pytest.raises(ConfigError, match="dropout.embedding=0 draws none"):
        DropoutConfig(scheme="gaussian", input=0.5, embedding_noise="bernoulli")
    # A scheme without word-type dropout is told so, not sent to set dropout.embedding, which it would refuse next.
    for embedding in (0.0, 0.5):
        with pytest.raises(ConfigError, match="which scheme 'zaremba' does not drop .*drop the override"):
            DropoutConfig(scheme="zaremba", embedding=embedding, embedding_noise="bernoulli")


# ---------------------------------------------------------------------------- modes
def lm(name="variational", **p):
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=2, hidden_size=H, impl="reference")
    return LanguageModel(V, cfg, scheme(name, **p))


@pytest.mark.parametrize("name,p", [
    ("zaremba", {"input": 0.5, "output": 0.5}),
    ("moon", {"cell": 0.5, "embedding": 0.3}),
    ("variational", {"embedding": 0.3, "input": 0.5, "recurrent": 0.3, "output": 0.5}),
    ("variational", {"input": 0.5, "recurrent": 0.3, "per_gate": True}),
    ("gaussian", {"embedding": 0.3, "input": 0.5, "recurrent": 0.3, "output": 0.5}),
])
def test_eval_is_deterministic_and_training_and_mc_are_stochastic(name, p):
    model = lm(name, **p)
    tokens = torch.randint(0, V, (T, B))
    state = model.initial_state(B, "cpu")
    model.eval()
    a, _ = model(tokens, state)
    b, _ = model(tokens, state)
    assert torch.equal(a, b)
    mc1, _ = model(tokens, state, stochastic=True)
    mc2, _ = model(tokens, state, stochastic=True)
    assert not torch.allclose(mc1, mc2)  # MC draws new masks each pass
    model.train()
    t1, _ = model(tokens, state)
    t2, _ = model(tokens, state)
    assert not torch.allclose(t1, t2)  # masks are redrawn for every minibatch


def test_none_scheme_is_deterministic_in_training():
    model = lm("none")
    tokens = torch.randint(0, V, (T, B))
    state = model.initial_state(B, "cpu")
    assert torch.equal(model(tokens, state)[0], model(tokens, state)[0])


def test_mc_can_turn_word_dropout_off():
    model = lm("variational", embedding=0.5)
    tokens = torch.randint(0, V, (T, B))
    state = model.initial_state(B, "cpu")
    with_wd, _ = model(tokens, state, stochastic=True, word_dropout=True)
    without, _ = model(tokens, state, stochastic=False)
    off, _ = model(tokens, state, stochastic=True, word_dropout=False)
    # Only word dropout is on, so turning it off in a stochastic pass gives the deterministic output.
    assert torch.equal(off, without) and not torch.allclose(with_wd, without)


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize("site,p", [("input", 1.0), ("recurrent", -0.1), ("embedding", 1.5)])
def test_probability_outside_unit_interval_is_refused(site, p):
    with pytest.raises(ConfigError, match=rf"dropout.{site}=.* not a probability in \[0, 1\)"):
        DropoutConfig(scheme="variational", **{site: p})


def test_site_not_used_by_scheme_is_refused():
    with pytest.raises(ConfigError, match="dropout.recurrent=0.3 is not used by scheme 'zaremba'"):
        DropoutConfig(scheme="zaremba", recurrent=0.3)
    with pytest.raises(ConfigError, match="unknown dropout scheme 'gal'"):
        DropoutConfig(scheme="gal")


@pytest.mark.parametrize("name, key", [
    ("none", "locked_mask"), ("zaremba", "locked_mask"), ("moon", "locked_mask"),
    ("none", "embedding_mask"), ("zaremba", "embedding_mask"),
])
def test_mask_granularity_of_masks_a_scheme_never_draws_is_refused(name, key):
    # Zaremba's masks are fresh per step and Moon's cell mask is always per sample: `batch` would do nothing.
    with pytest.raises(ConfigError, match=rf"dropout.{key}=batch does nothing with scheme '{name}'.*"
                                          r"drop the override"):
        DropoutConfig(scheme=name, **{key: "batch"})


def test_locked_mask_batch_with_moon_says_its_cell_mask_is_always_per_sample():
    with pytest.raises(ConfigError, match=r"locked_mask=batch does nothing with scheme 'moon': it sets how schemes "
                                          r"variational, gaussian, awd draw .* \(Moon's cell mask is always one per "
                                          r"sample, Zaremba's masks are fresh every step\)"):
        DropoutConfig(scheme="moon", cell=0.5, locked_mask="batch")


@pytest.mark.parametrize("name, p", [("none", {}), ("zaremba", {"input": 0.5}), ("moon", {"cell": 0.5}),
                                     ("awd", {"weight": 0.5})])
def test_per_gate_masks_are_refused_where_the_scheme_draws_none(name, p):
    with pytest.raises(ConfigError, match=f"cell.gates=untied .* scheme '{name}' would ignore it. Use cell.gates=tied"):
        DropoutConfig(scheme=name, per_gate=True, **p)


@pytest.mark.parametrize("scheme", ["variational", "gaussian"])
def test_untied_gates_without_a_gate_mask_are_refused(scheme):
    """Untied gates differ from tied ones only in the input and h_{t-1} masks; word types and the output are not
    per gate."""
    with pytest.raises(ConfigError, match="dropout.input, dropout.hidden and dropout.recurrent are all 0"):
        DropoutConfig(scheme=scheme, per_gate=True, embedding=0.2, output=0.5)
    DropoutConfig(scheme=scheme, per_gate=True, recurrent=0.2)  # one gate mask is enough


@pytest.mark.parametrize("p", [{"input": False}, {"recurrent": False}, {"hidden": False}])
def test_bools_are_not_probabilities(p):
    (site, value), = p.items()
    with pytest.raises(ConfigError, match=rf"dropout.{site}={value} is not a probability"):
        DropoutConfig(scheme="variational", **p)


def test_bool_kl_weight_is_refused():
    with pytest.raises(ConfigError, match="dropout.kl_weight=True must be a number >= 0"):
        DropoutConfig(scheme="gaussian", input=0.5, learn_alpha=True, kl_weight=True)


@pytest.mark.parametrize("name, p, key", [
    ("variational", {"input": 0.5, "recurrent": 0.3}, "locked_mask"), ("awd", {"input": 0.5}, "locked_mask"),
    ("variational", {"embedding": 0.5}, "embedding_mask"), ("awd", {"embedding": 0.5}, "embedding_mask"),
    ("moon", {"embedding": 0.5}, "embedding_mask"),
])
def test_mask_granularity_batch_is_accepted_and_used_by_the_schemes_that_draw_those_masks(name, p, key):
    torch.manual_seed(0)
    dropout = scheme(name, **p, **{key: "batch"})
    if key == "locked_mask":  # one fixed-over-time mask shared by the batch
        assert dropout.layer_masks(x_input(), H, GATES).x.shape == (1, D)
    else:  # one draw per word type, shared by every sequence of the batch
        tokens = torch.randint(V, (T, B))
        mask = word_mask(dropout, tokens, V)
        assert all(mask[tokens == w].unique().numel() == 1 for w in tokens.unique())


@pytest.mark.parametrize("name, per_gate, learn_alpha", [
    ("variational", False, False), ("variational", True, False), ("gaussian", False, False),
    ("gaussian", True, True), ("gaussian", False, True),
])
def test_locked_mask_batch_shares_every_fixed_over_time_mask_with_the_batch(name, per_gate, learn_alpha):
    """``locked_mask=batch``: x, h_{t-1} and the output each get one row for the whole batch, per gate when untied,
    learned noise too."""
    torch.manual_seed(0)
    cfg = DropoutConfig(scheme=name, input=0.5, recurrent=0.3, output=0.4, locked_mask="batch", per_gate=per_gate,
                        learn_alpha=learn_alpha)
    dropout = make_dropout(cfg)
    dropout.noise_scales([(D, H, GATES)], V)
    masks = dropout.layer_masks(x_input(), H, GATES)
    gate = (GATES,) if per_gate else ()
    assert masks.x.shape == (1, *gate, D) and masks.h.shape == (1, *gate, H)
    assert dropout.output_mask(torch.randn(T, B, H)).shape == (1, 1, H)
    assert dropout.shares_draws_across_batch(word_dropout=False)  # so MC runs its samples one per pass


def test_each_variational_probability_drives_its_own_mask_and_the_output_mask_is_fixed_over_time():
    torch.manual_seed(0)
    big = torch.randn(T, 4000, D)
    s = scheme("variational", input=0.5, hidden=0.2, recurrent=0.1, output=0.3)
    first, second = s.layer_masks(big, H, GATES, layer=0), s.layer_masks(big, H, GATES, layer=1)
    zero = {name: (m == 0).float().mean().item()
            for name, m in (("x", first.x), ("h", first.h), ("x2", second.x), ("out", s.output_mask(big)))}
    assert zero == pytest.approx({"x": 0.5, "h": 0.1, "x2": 0.2, "out": 0.3}, abs=0.02)
    assert s.output_mask(big).shape == (1, 4000, D)  # one [B, H] mask broadcast over every step


def test_the_language_models_output_mask_drops_decoder_inputs():
    """With only the output site on, a dropped unit of the last layer gives no gradient to its decoder column."""
    model = lm("variational", output=0.5).train()
    tokens = torch.randint(0, V, (T, 1))
    logits, _ = model(tokens, model.initial_state(1, "cpu"))
    logits.sum().backward()
    dead = (model.decoder.weight.grad == 0).all(dim=0)
    assert 0 < dead.sum() < H  # about half the units, the same ones at every step


# ---------------------------------------------------------------------------- Kingma's learned alpha
def learned_model(per_gate=False, **p):
    cfg = DropoutConfig(scheme="gaussian", learn_alpha=True, per_gate=per_gate, **p)
    config = ModelConfig(num_layers=2, hidden_size=H, embedding_size=D, gates="untied" if per_gate else "tied")
    return LanguageModel(V, config, make_dropout(cfg))


def test_learned_alpha_starts_at_each_sites_p_per_unit_capped_at_one():
    scales = learned_model(embedding=0.3, input=0.2, hidden=0.4, recurrent=0.5, output=0.65).noise_scales
    start = {key: value.detach() for key, value in scales.log_alpha.items()}
    assert set(start) == {"input0", "recurrent0", "input1", "recurrent1", "output"}  # word types: not learned
    assert start["input0"].shape == (D,) and start["input1"].shape == (H,) and start["output"].shape == (H,)
    assert torch.allclose(start["input0"], torch.full((D,), math.log(0.2 / 0.8)))
    assert torch.allclose(start["input1"], torch.full((H,), math.log(0.4 / 0.6)))  # `hidden` for layer 2
    assert torch.equal(start["recurrent0"], torch.zeros(H))  # p = 0.5: alpha = 1
    assert torch.equal(start["output"], torch.zeros(H))  # p = 0.65 > 0.5: capped at alpha = 1
    untied = learned_model(per_gate=True, input=0.2, recurrent=0.3).noise_scales.log_alpha
    assert set(untied) == {"input0", "recurrent0", "input1", "recurrent1"}  # output p = 0: no noise, no alpha
    assert untied["input0"].shape == (GATES, D) and untied["recurrent1"].shape == (GATES, H)


def test_learned_masks_are_one_plus_sqrt_alpha_noise_per_sample_fixed_over_time():
    torch.manual_seed(0)
    model = learned_model(input=0.2, recurrent=0.5)
    with torch.no_grad():
        model.noise_scales.log_alpha["input0"][:2] = math.log(0.05)  # two units nearly noise-free
    x = torch.randn(T, 4000, D)
    masks = model.dropout.layer_masks(x, H, GATES, 0)
    assert masks.x.shape == (4000, D) and masks.h.shape == (4000, H) and not masks.per_gate
    assert masks.x.mean().item() == pytest.approx(1.0, abs=0.02)
    variance = masks.x.var(0)
    assert variance[:2].tolist() == pytest.approx([0.05, 0.05], rel=0.1)
    assert variance[2:].tolist() == pytest.approx([0.25] * (D - 2), rel=0.1)
    assert masks.h.var(0).mean().item() == pytest.approx(1.0, rel=0.05)
    untied = learned_model(per_gate=True, input=0.2, recurrent=0.5).dropout.layer_masks(x, H, GATES, 0)
    assert untied.x.shape == (4000, GATES, D) and untied.h.shape == (4000, GATES, H) and untied.per_gate


def test_the_likelihood_and_the_kl_term_both_reach_log_alpha():
    torch.manual_seed(0)
    model = learned_model(input=0.2, recurrent=0.2, output=0.2).train()
    tokens = torch.randint(0, V, (T, B))
    logits, _ = model(tokens, model.initial_state(B, "cpu"))
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
    grads = torch.autograd.grad(nll, list(model.noise_scales.parameters()))
    assert all(g.abs().sum() > 0 for g in grads)  # through the masks, reference recurrence included
    kl_grads = torch.autograd.grad(model.noise_scales.kl(), list(model.noise_scales.parameters()))
    assert all((g < 0).all() for g in kl_grads)  # the KL falls as alpha grows: it pulls alpha up


def test_kl_is_kingmas_fit_weighted_by_the_weights_each_noise_variable_scales():
    scales = learned_model(input=0.2, recurrent=0.3, output=0.4).noise_scales

    def kl(p):  # -KL(alpha) = 0.5 log alpha + c1 alpha + c2 alpha^2 + c3 alpha^3, taken relative to alpha = 1
        a = p / (1 - p)
        neg = 0.5 * math.log(a) + 1.16145124 * a - 1.50204118 * a**2 + 0.58629921 * a**3
        return (1.16145124 - 1.50204118 + 0.58629921) - neg

    # A unit of a layer's input or h_{t-1} scales a column of its [4H, .] matrix; an output unit a decoder column.
    expected = D * 4 * H * kl(0.2) + H * 4 * H * kl(0.3) + H * 4 * H * kl(0.2) + H * 4 * H * kl(0.3) + H * V * kl(0.4)
    assert scales.kl().item() == pytest.approx(expected, rel=1e-5)
    untied = learned_model(per_gate=True, input=0.2).noise_scales
    assert untied.kl().item() == pytest.approx(GATES * D * H * kl(0.2) + GATES * H * H * kl(0.2), rel=1e-5)
    with torch.no_grad():
        for log_alpha in scales.log_alpha.values():
            log_alpha.fill_(0.0)
    assert scales.kl().item() == pytest.approx(0.0, abs=1e-3)  # zero at alpha = 1


def test_clamp_keeps_alpha_at_most_one_and_weight_decay_leaves_alpha_alone():
    from vdrnn.config import TrainerConfig
    from vdrnn.training.optim import finish_update, make_optimizer, weights_of

    model = learned_model(input=0.2, recurrent=0.3)
    scales = model.noise_scales
    with torch.no_grad():
        scales.log_alpha["input0"].fill_(0.7)
    finish_update(weights_of(model), 0.0, scales)  # every optimizer step projects alpha back onto alpha <= 1
    assert scales.log_alpha["input0"].max().item() == 0.0
    before = {k: v.detach().clone() for k, v in scales.log_alpha.items()}
    finish_update(weights_of(model), TrainerConfig(weight_decay=0.5, weight_decay_mode="gal").gal_decay, scales)
    assert all(torch.equal(before[k], v) for k, v in scales.log_alpha.items())
    groups = make_optimizer(model, TrainerConfig(optimizer="adam", weight_decay=0.1, weight_decay_mode="l2")).param_groups
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in scales.parameters()}


def test_learned_alpha_only_for_the_gaussian_scheme_and_kl_weight_only_with_it():
    with pytest.raises(ConfigError, match="learn_alpha.*dropout=gaussian"):
        DropoutConfig(scheme="variational", input=0.5, learn_alpha=True)
    with pytest.raises(ConfigError, match="kl_weight=0.3 does nothing"):
        DropoutConfig(scheme="gaussian", input=0.5, kl_weight=0.3)
    with pytest.raises(ConfigError, match="kl_weight=-1"):
        DropoutConfig(scheme="gaussian", input=0.5, learn_alpha=True, kl_weight=-1)
    assert learned_model(input=0.2).noise_scales is not None
    assert LanguageModel(V, ModelConfig(hidden_size=H), scheme("gaussian", input=0.2)).noise_scales is None


def test_learned_alpha_with_no_noisy_site_is_refused():
    with pytest.raises(ConfigError, match="learn_alpha=true learns the noise of dropout.input, dropout.hidden, "
                                          "dropout.recurrent, dropout.output, and all are 0"):
        DropoutConfig(scheme="gaussian", embedding=0.3, learn_alpha=True)


def test_kl_without_learned_sites_is_a_zero_tensor():
    # dropout.hidden alone on a one-layer model (refused by the CLI's config, not by NoiseScales) learns nothing.
    scales = NoiseScales(DropoutConfig(scheme="gaussian", hidden=0.3, learn_alpha=True), [(D, H, GATES)], V)
    assert not scales.log_alpha
    kl = scales.kl()
    assert isinstance(kl, torch.Tensor) and kl.item() == 0.0


def test_a_learned_noise_scheme_serves_one_model():
    """The masks are drawn from the scheme's log alpha, so a second model on the same scheme would take over the
    first one's noise: refused."""
    dropout = make_dropout(DropoutConfig(scheme="gaussian", input=0.5, learn_alpha=True))
    LanguageModel(V, ModelConfig(num_layers=1, hidden_size=H), dropout)
    with pytest.raises(RuntimeError, match="make_dropout again"):
        LanguageModel(V, ModelConfig(num_layers=1, hidden_size=H), dropout)
