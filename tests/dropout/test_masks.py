"""Drawing masks, and what every scheme shares: inverted scaling, weight scaling at evaluation, MC, granularity."""

from __future__ import annotations

import pytest
import torch

import vdrnn.nn as vnn
from tests.dropout.common import B, D, H, T, V, lm, word_mask, x_input
from vdrnn.dropout import (
    GATES,
    Gaussian,
    Moon,
    Variational,
    WeightDrop,
    Zaremba,
    bernoulli_mask,
    gaussian_mask,
)

G = GATES["lstm"]


def test_bernoulli_mask_is_inverted_dropout():
    torch.manual_seed(0)
    mask = bernoulli_mask((400, 500), 0.3, torch.empty(0))
    values = mask.unique()
    assert values.numel() == 2 and values[0] == 0 and values[1].item() == pytest.approx(1 / 0.7)
    assert (mask == 0).float().mean().item() == pytest.approx(0.3, abs=0.01)
    assert mask.mean().item() == pytest.approx(1.0, abs=0.01)  # expectation preserved


def test_expectation_preserved_for_every_site():
    torch.manual_seed(0)
    big = torch.randn(2, 20000, 4)
    s = Variational(input=0.4, recurrent=0.2, output=0.5)
    m = s.layer_masks(big, 4, G)
    for mask in (m.x, m.h, s.output_mask(big)):
        assert mask.mean().item() == pytest.approx(1.0, abs=0.02)
    tokens = torch.randint(0, 100, (3, 20000))
    assert word_mask(tokens, 100, dropout=0.3).mean().item() == pytest.approx(1.0, abs=0.03)


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


@pytest.mark.parametrize("scheme, embedding", [
    (Zaremba(input=0.5, output=0.5), 0.0),
    (Moon(cell=0.5), 0.3),
    (Variational(input=0.5, recurrent=0.3, output=0.5), 0.3),
    (Variational(input=0.5, recurrent=0.3, gates="untied"), 0.0),
    (Gaussian(input=0.5, recurrent=0.3, output=0.5), 0.3),
])
def test_eval_is_deterministic_and_training_and_mc_are_stochastic(scheme, embedding):
    model = lm(scheme, embedding)
    tokens = torch.randint(0, V, (T, B))
    model.eval()
    a, _ = model(tokens)
    b, _ = model(tokens)
    assert torch.equal(a, b)
    with vnn.mc_dropout(model):
        mc1, _ = model(tokens)
        mc2, _ = model(tokens)
    assert not torch.allclose(mc1, mc2)  # MC draws new masks each pass
    assert not model.training and not model.rnn.training  # and leaves the model evaluating
    model.train()
    t1, _ = model(tokens)
    t2, _ = model(tokens)
    assert not torch.allclose(t1, t2)  # masks are redrawn for every call


def test_no_scheme_is_deterministic_in_training():
    model = lm(None).train()
    tokens = torch.randint(0, V, (T, B))
    assert torch.equal(model(tokens)[0], model(tokens)[0])


def test_mc_can_turn_word_dropout_off():
    model = lm(Variational(), embedding=0.5).eval()
    tokens = torch.randint(0, V, (T, B))
    without, _ = model(tokens)
    with vnn.mc_dropout(model):
        with_wd, _ = model(tokens)
    with vnn.mc_dropout(model, embedding=False):
        off, _ = model(tokens)
    # Only word dropout is on, so turning it off in a stochastic pass gives the deterministic output.
    assert torch.equal(off, without) and not torch.allclose(with_wd, without)


@pytest.mark.parametrize("scheme", [Variational(input=0.5, recurrent=0.3, per="batch"),
                                    WeightDrop(input=0.5, per="batch")])
def test_per_batch_shares_the_fixed_over_time_masks_with_the_batch(scheme):
    torch.manual_seed(0)
    assert scheme.layer_masks(x_input(), H, G).x.shape == (1, D)
    assert scheme.shares_draws_across_batch()  # so MC runs its samples one per pass


def test_word_types_per_batch_share_one_draw_with_every_sequence():
    torch.manual_seed(0)
    tokens = torch.randint(V, (T, B))
    mask = word_mask(tokens, V, dropout=0.5, per="batch")
    assert all(mask[tokens == w].unique().numel() == 1 for w in tokens.unique())
    assert vnn.Embedding(V, D, dropout=0.5, per="batch").shares_draws_across_batch()


@pytest.mark.parametrize("gates, learn", [("tied", False), ("untied", False), ("untied", True), ("tied", True)])
def test_per_batch_shares_every_fixed_over_time_mask_with_the_batch_learned_noise_too(gates, learn):
    """``per="batch"``: x, h_{t-1} and the output each get one row for the whole batch, per gate when untied,
    learned noise too."""
    torch.manual_seed(0)
    scheme = Gaussian(input=0.5, recurrent=0.3, output=0.4, per="batch", gates=gates, learn=learn)
    noise = scheme.learned_noise([(D, H, G)], H)
    masks = scheme.layer_masks(x_input(), H, G, noise=noise)
    gate = (G,) if gates == "untied" else ()
    assert masks.x.shape == (1, *gate, D) and masks.h.shape == (1, *gate, H)
    assert scheme.output_mask(torch.randn(T, B, H), noise).shape == (1, 1, H)
    assert scheme.shares_draws_across_batch()


def test_the_output_mask_drops_decoder_inputs():
    """With only the output site on, a dropped unit of the last layer gives no gradient to its decoder column."""
    model = lm(Variational(output=0.5)).train()
    tokens = torch.randint(0, V, (T, 1))
    logits, _ = model(tokens)
    logits.sum().backward()
    dead = (model.decoder.weight.grad == 0).all(dim=0)
    assert 0 < dead.sum() < H  # about half the units, the same ones at every step
