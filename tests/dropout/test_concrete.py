"""Concrete dropout: Gal's variational masks relaxed, one p per site and layer learned through them and through the
regularizer over N."""

from __future__ import annotations

import math

import pytest
import torch

from tests.dropout.common import B, D, H, V, lm, x_input
from vdrnn.dropout import GATES, Concrete
from vdrnn.dropout.concrete import negative_entropy
from vdrnn.dropout.config import DropoutConfig
from vdrnn.errors import ConfigError
from vdrnn.training.optim import weights_of

G = GATES["lstm"]


def concrete_model(**p):
    return lm(Concrete(**{"input": 0.1, "recurrent": 0.2, "output": 0.3, **p}))


def test_one_p_per_site_and_layer_starting_at_the_schemes():
    model = concrete_model()
    rates = model.rnn.noise
    assert sorted(rates.p_logit) == ["input0", "input1", "output", "recurrent0", "recurrent1"]
    assert all(p.shape == () for p in rates.p_logit.values())
    summary = model.rnn.noise_summary(model.decoder.weight)
    assert summary["p_input0"] == pytest.approx(0.1) and summary["p_recurrent1"] == pytest.approx(0.2)
    assert summary["p_output"] == pytest.approx(0.3)


def test_masks_are_the_relaxed_bernoulli_per_sample_fixed_over_time():
    model = concrete_model(input=0.5)
    x = x_input()
    torch.manual_seed(1)
    masks = model.rnn.dropout.layer_masks(x, H, G, noise=model.rnn.noise)
    assert masks.x.shape == (B, D) and masks.h.shape == (B, H) and not masks.per_gate
    # The formula at the draws' u: re-drawn with the same seed.
    torch.manual_seed(1)
    u = torch.rand(B, D)
    p = 0.5
    drop = torch.sigmoid((math.log(p + 1e-7) - math.log(1 - p + 1e-7) + torch.log(u + 1e-7)
                          - torch.log(1 - u + 1e-7)) / 0.1)
    torch.testing.assert_close(masks.x, (1 - drop) / (1 - p))
    # At t = 0.1 most entries sit near 0 or 1/(1-p), and the mean is about one.
    big = model.rnn.noise.mask("input0", 20000, x_input())
    near = ((big < 0.1) | ((big - 2).abs() < 0.1)).float().mean().item()
    assert near > 0.8 and big.mean().item() == pytest.approx(1.0, abs=0.02)


def test_regularizer_is_the_weight_term_and_the_negative_entropy_per_site():
    model = concrete_model()
    rates, lstm = model.rnn.noise, model.rnn
    l2 = 1e-4**2
    total = 0.0
    for key, weight, size in (("input0", lstm.weight_ih_l0, D), ("recurrent0", lstm.weight_hh_l0, H),
                              ("input1", lstm.weight_ih_l1, H), ("recurrent1", lstm.weight_hh_l1, H),
                              ("output", model.decoder.weight, H)):
        p = rates.p(key)
        total += l2 * weight.pow(2).sum() / (1 - p) + size * (p * p.log() + (1 - p) * (1 - p).log())
    torch.testing.assert_close(lstm.regularizer(1, model.decoder.weight), total)
    torch.testing.assert_close(lstm.regularizer(100, model.decoder.weight), total / 100)
    assert negative_entropy(torch.tensor(0.0)).item() == pytest.approx(-math.log(2))  # p = 0.5
    # A p rounded to 0 in float32 (logit -110): the term is 0, and so is its gradient, not nan.
    logit = torch.tensor(-110.0, requires_grad=True)
    negative_entropy(logit).backward()
    assert negative_entropy(logit).item() == 0.0 and logit.grad.item() == 0.0


def test_the_likelihood_and_the_regularizer_both_reach_p_and_weight_decay_leaves_it_alone():
    model = concrete_model().train()
    tokens = torch.randint(0, V, (4, B))
    logits, _ = model(tokens)
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
    rates = model.rnn.noise
    grads = torch.autograd.grad(nll, list(rates.p_logit.values()))
    assert all(g.abs() > 0 for g in grads)
    # The negative entropy pulls p up towards 0.5 (its gradient in the logit is negative below 0.5).
    [g_reg] = torch.autograd.grad(model.rnn.regularizer(1, model.decoder.weight), [rates.p_logit["input0"]])
    assert g_reg < 0
    skipped = {id(p) for p in rates.parameters()}
    assert skipped and not skipped & {id(p) for p in weights_of(model)}
    # The weights the regularizer reads stay the model's own parameters, not the rates' (no double decay).
    assert len(list(rates.parameters())) == 5


def test_concrete_takes_tied_gates_and_needs_a_site_to_learn():
    with pytest.raises(ConfigError, match="cell.gates=untied"):
        DropoutConfig(scheme="concrete", input=0.1, per_gate=True)
    with pytest.raises(ConfigError, match="dropout=concrete learns the noise"):
        DropoutConfig(scheme="concrete", embedding=0.2)
    with pytest.raises(ConfigError, match="dropout.temperature=0.5 is Concrete dropout's"):
        DropoutConfig(scheme="variational", input=0.1, temperature=0.5)
    DropoutConfig(scheme="concrete", input=0.1, kl_weight=0.5, temperature=0.2)
    with pytest.raises(ValueError, match="Concrete dropout learns one p per site, shared by the gates"):
        Concrete(input=0.1, gates="untied")
    with pytest.raises(ValueError, match="no noise to learn"):
        Concrete()
    with pytest.raises(ValueError, match=r"Concrete\(temperature=0\): must be a number > 0"):
        Concrete(input=0.1, temperature=0)
