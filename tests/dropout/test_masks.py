"""Drawing masks, and what every scheme shares: inverted scaling, weight scaling at evaluation, MC, granularity."""

from __future__ import annotations

import pytest
import torch

from tests.dropout.common import B, D, H, T, V, lm, scheme, word_mask, x_input
from vdrnn.cells.lstm import LSTM_GATES as GATES
from vdrnn.dropout import (
    DropoutConfig,
    bernoulli_mask,
    gaussian_mask,
    make_dropout,
)


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
    s = scheme("variational", embedding=0.3, input=0.4, recurrent=0.2, output=0.5)
    m = s.layer_masks(big, 4, GATES)
    for mask in (m.x, m.h, s.output_mask(big)):
        assert mask.mean().item() == pytest.approx(1.0, abs=0.02)
    tokens = torch.randint(0, 100, (3, 20000))
    assert word_mask(s, tokens, 100).mean().item() == pytest.approx(1.0, abs=0.03)


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
    dropout.noise_scales([(D, H, GATES)], V, {})
    masks = dropout.layer_masks(x_input(), H, GATES)
    gate = (GATES,) if per_gate else ()
    assert masks.x.shape == (1, *gate, D) and masks.h.shape == (1, *gate, H)
    assert dropout.output_mask(torch.randn(T, B, H)).shape == (1, 1, H)
    assert dropout.shares_draws_across_batch(word_dropout=False)  # so MC runs its samples one per pass


def test_the_language_models_output_mask_drops_decoder_inputs():
    """With only the output site on, a dropped unit of the last layer gives no gradient to its decoder column."""
    model = lm("variational", output=0.5).train()
    tokens = torch.randint(0, V, (T, 1))
    logits, _ = model(tokens, model.initial_state(1, "cpu"))
    logits.sum().backward()
    dead = (model.decoder.weight.grad == 0).all(dim=0)
    assert 0 < dead.sum() < H  # about half the units, the same ones at every step
