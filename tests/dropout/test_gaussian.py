"""Kingma's Gaussian scheme on Gal's sites, and its learned variances (NoiseScales, the KL term)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.cells.common import Layer
from tests.dropout.common import B, D, H, T, V, lm, word_mask, x_input
from vdrnn.dropout import GATES, Gaussian, LayerMasks, Moon, Variational
from vdrnn.dropout.config import DropoutConfig
from vdrnn.dropout.learned import NoiseScales
from vdrnn.errors import ConfigError

G = GATES["lstm"]


def learned_model(gates="tied", embedding=0.0, **p):
    """A 2-layer language model learning its Gaussian masks' variance."""
    return lm(Gaussian(learn=True, gates=gates, **p), embedding)


def test_gaussian_masks_sit_where_gals_do_per_sample_fixed_over_time_with_each_sites_variance():
    torch.manual_seed(0)
    big = torch.randn(T, 20000, D)
    s = Gaussian(input=0.5, between=0.3, recurrent=0.2, output=0.4)
    first, second = s.layer_masks(big, H, G, layer=0), s.layer_masks(big, H, G, layer=1)
    assert first.x.shape == (20000, D) and first.h.shape == (20000, H) and not first.per_gate  # [B, D]: no T
    out = s.output_mask(big)
    assert out.shape == (1, 20000, D)  # one draw per sample, broadcast over every step
    tokens = torch.randint(0, 50, (T, 20000))
    words = word_mask(tokens, 50, dropout=0.2, noise="gaussian")  # the word types of the Gaussian scheme's preset
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
    masks = Gaussian(input=0.5, recurrent=0.5, gates="untied").layer_masks(x_input(), H, G)
    assert masks.per_gate and masks.x.shape == (B, G, D) and masks.h.shape == (B, G, H)
    assert not torch.equal(masks.h[:, 0], masks.h[:, 1])
    assert masks.x.unique().numel() == masks.x.numel() and masks.h.unique().numel() == masks.h.numel()  # Gaussian
    # The layer only multiplies by what the scheme draws: all-ones per-gate masks leave the plain LSTM, and the
    # Gaussian draws (real-valued, unlike Bernoulli's two values) perturb it.
    layer = Layer("lstm", D, H)
    x, state = x_input(), (torch.randn(B, H), torch.randn(B, H))
    noise_free = layer(x, state, LayerMasks(x=torch.ones(B, G, D), h=torch.ones(B, G, H), per_gate=True))[0]
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
    config = DropoutConfig(scheme=name, embedding=0.3, embedding_noise=noise, **layer_sites,
                           **({"cell": 0.5} if name == "moon" else {}))
    words = word_mask(tokens, 50, **config.word_dropout())
    assert all(words[tokens[:, b] == w, b].unique().numel() == 1 for b in range(3) for w in tokens[:, b].unique())
    table = torch.stack([words[tokens[:, b] == w, b][0, 0] for b in range(4000) for w in tokens[:1, b]])
    assert table.mean().item() == pytest.approx(1.0, abs=0.02)
    assert table.var().item() == pytest.approx(0.3 / 0.7, rel=0.05)
    if words_are_bernoulli:
        assert table.unique().tolist() == pytest.approx([0.0, 1 / 0.7])
    else:
        assert table.unique().numel() > 1000
    if layer_sites:
        x_mask = config.scheme_object().layer_masks(x_input(), H, G).x
        assert (x_mask.unique().numel() > 2) == (name == "gaussian")  # the scheme's own noise, as without the option


def test_learned_alpha_starts_at_each_sites_p_per_unit_capped_at_one():
    scales = learned_model(embedding=0.3, input=0.2, between=0.4, recurrent=0.5, output=0.65).rnn.noise
    start = {key: value.detach() for key, value in scales.log_alpha.items()}
    assert set(start) == {"input0", "recurrent0", "input1", "recurrent1", "output"}  # word types: not learned
    assert start["input0"].shape == (D,) and start["input1"].shape == (H,) and start["output"].shape == (H,)
    assert torch.allclose(start["input0"], torch.full((D,), math.log(0.2 / 0.8)))
    assert torch.allclose(start["input1"], torch.full((H,), math.log(0.4 / 0.6)))  # `between` for layer 2
    assert torch.equal(start["recurrent0"], torch.zeros(H))  # p = 0.5: alpha = 1
    assert torch.equal(start["output"], torch.zeros(H))  # p = 0.65 > 0.5: capped at alpha = 1
    untied = learned_model(gates="untied", input=0.2, recurrent=0.3).rnn.noise.log_alpha
    assert set(untied) == {"input0", "recurrent0", "input1", "recurrent1"}  # output p = 0: no noise, no alpha
    assert untied["input0"].shape == (G, D) and untied["recurrent1"].shape == (G, H)


def test_learned_masks_are_one_plus_sqrt_alpha_noise_per_sample_fixed_over_time():
    torch.manual_seed(0)
    model = learned_model(input=0.2, recurrent=0.5)
    noise = model.rnn.noise
    with torch.no_grad():
        noise.log_alpha["input0"][:2] = math.log(0.05)  # two units nearly noise-free
    x = torch.randn(T, 4000, D)
    masks = model.rnn.dropout.layer_masks(x, H, G, 0, noise)
    assert masks.x.shape == (4000, D) and masks.h.shape == (4000, H) and not masks.per_gate
    assert masks.x.mean().item() == pytest.approx(1.0, abs=0.02)
    variance = masks.x.var(0)
    assert variance[:2].tolist() == pytest.approx([0.05, 0.05], rel=0.1)
    assert variance[2:].tolist() == pytest.approx([0.25] * (D - 2), rel=0.1)
    assert masks.h.var(0).mean().item() == pytest.approx(1.0, rel=0.05)
    untied_model = learned_model(gates="untied", input=0.2, recurrent=0.5)
    untied = untied_model.rnn.dropout.layer_masks(x, H, G, 0, untied_model.rnn.noise)
    assert untied.x.shape == (4000, G, D) and untied.h.shape == (4000, G, H) and untied.per_gate


def test_the_likelihood_and_the_kl_term_both_reach_log_alpha():
    torch.manual_seed(0)
    model = learned_model(input=0.2, recurrent=0.2, output=0.2).train()
    tokens = torch.randint(0, V, (T, B))
    logits, _ = model(tokens)
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
    noise = list(model.rnn.noise.parameters())
    grads = torch.autograd.grad(nll, noise)
    assert all(g.abs().sum() > 0 for g in grads)  # through the masks, reference recurrence included
    kl_grads = torch.autograd.grad(model.rnn.regularizer(1000, model.decoder.weight), noise)
    assert all((g < 0).all() for g in kl_grads)  # the KL falls as alpha grows: it pulls alpha up


def test_kl_is_kingmas_fit_weighted_by_the_weights_each_noise_variable_scales():
    model = learned_model(input=0.2, recurrent=0.3, output=0.4)
    scales = model.rnn.noise

    def kl(p):  # -KL(alpha) = 0.5 log alpha + c1 alpha + c2 alpha^2 + c3 alpha^3, taken relative to alpha = 1
        a = p / (1 - p)
        neg = 0.5 * math.log(a) + 1.16145124 * a - 1.50204118 * a**2 + 0.58629921 * a**3
        return (1.16145124 - 1.50204118 + 0.58629921) - neg

    # A unit of a layer's input or h_{t-1} scales a column of its [4H, .] matrix; an output unit a decoder column.
    expected = D * 4 * H * kl(0.2) + H * 4 * H * kl(0.3) + H * 4 * H * kl(0.2) + H * 4 * H * kl(0.3) + H * V * kl(0.4)
    weights = model.rnn.site_weights(model.decoder.weight)
    assert scales.kl(weights).item() == pytest.approx(expected, rel=1e-5)
    assert model.rnn.regularizer(1000, model.decoder.weight).item() == pytest.approx(expected / 1000, rel=1e-5)
    with pytest.raises(ValueError, match="pass output_weight=<the next layer>.weight"):
        model.rnn.regularizer(1000)  # the output's fan-out is the decoder's rows, which the LSTM cannot know
    untied = learned_model(gates="untied", input=0.2).rnn
    assert untied.regularizer(1).item() == pytest.approx(G * D * H * kl(0.2) + G * H * H * kl(0.2), rel=1e-5)
    with torch.no_grad():
        for log_alpha in scales.log_alpha.values():
            log_alpha.fill_(0.0)
    assert scales.kl(weights).item() == pytest.approx(0.0, abs=1e-3)  # zero at alpha = 1


def test_alpha_is_kept_at_most_one_before_every_draw_and_weight_decay_leaves_it_alone():
    from vdrnn.config import TrainerConfig
    from vdrnn.training.optim import finish_update, make_optimizer, weights_of

    model = learned_model(input=0.2, recurrent=0.3)
    scales = model.rnn.noise
    with torch.no_grad():
        scales.log_alpha["input0"].fill_(0.7)  # as an optimizer step may leave it
    model.eval()(torch.randint(0, V, (T, B)))
    assert scales.log_alpha["input0"].max().item() == pytest.approx(0.7)  # no draw in evaluation: untouched
    model.train()(torch.randint(0, V, (T, B)))  # a training call projects alpha back onto alpha <= 1, then draws
    assert scales.log_alpha["input0"].max().item() == 0.0
    before = {k: v.detach().clone() for k, v in scales.log_alpha.items()}
    with torch.no_grad():
        scales.log_alpha["input0"].fill_(0.7)
    finish_update(weights_of(model), 0.0, [scales])  # and every optimizer step of vdrnn's trainer does so too
    assert scales.log_alpha["input0"].max().item() == 0.0
    finish_update(weights_of(model), TrainerConfig(weight_decay=0.5, weight_decay_mode="gal").gal_decay, [scales])
    assert all(torch.equal(before[k], v) for k, v in scales.log_alpha.items())
    groups = make_optimizer(model, TrainerConfig(optimizer="adam", weight_decay=0.1, weight_decay_mode="l2")).param_groups
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in scales.parameters()}


def test_kl_without_learned_sites_is_a_zero_tensor():
    # between alone on a one-layer model (refused by the CLI's config, not by NoiseScales) learns nothing.
    scales = NoiseScales(Gaussian(between=0.3, learn=True).noise_sites([(D, H, G)], H))
    assert not scales.log_alpha
    kl = scales.kl({})
    assert isinstance(kl, torch.Tensor) and kl.item() == 0.0


def test_one_scheme_serves_many_models_each_learning_its_own_noise():
    """A scheme is a description; the learned noise is a parameter of each module built on it."""
    scheme = Gaussian(input=0.5, learn=True)
    first, second = lm(scheme), lm(scheme)
    assert first.rnn.noise is not second.rnn.noise
    with torch.no_grad():
        first.rnn.noise.log_alpha["input0"].fill_(-3.0)
    assert torch.all(second.rnn.noise.log_alpha["input0"] == 0.0)  # p 0.5: alpha 1
    assert {id(p) for p in first.rnn.noise.parameters()} <= {id(p) for p in first.parameters()}  # trained with it


def test_learning_alpha_needs_a_site_to_start_from():
    with pytest.raises(ValueError, match="no noise to learn"):
        Gaussian(learn=True)
    assert Variational().learned_noise([(D, H, G)], H) is None and not Moon().learns
