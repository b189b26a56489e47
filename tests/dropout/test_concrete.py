"""Concrete dropout: Gal's variational masks relaxed, one p per site and layer learned through them and through the
regularizer over N."""

from __future__ import annotations

import math

import pytest
import torch

from tests.dropout.common import B, D, H, V, x_input
from vdrnn.cells.lstm import LSTM_GATES as GATES
from vdrnn.config import ModelConfig
from vdrnn.dropout import DropoutConfig, make_dropout
from vdrnn.dropout.concrete import negative_entropy
from vdrnn.errors import ConfigError
from vdrnn.tasks.lm.model import LanguageModel
from vdrnn.training.optim import weights_of


def concrete_model(**p):
    torch.manual_seed(0)
    cfg = DropoutConfig(scheme="concrete", **{"input": 0.1, "recurrent": 0.2, "output": 0.3, **p})
    return LanguageModel(V, ModelConfig(num_layers=2, hidden_size=H, embedding_size=D, impl="reference"),
                         make_dropout(cfg))


def test_one_p_per_site_and_layer_starting_at_the_configs():
    rates = concrete_model().noise_scales
    assert sorted(rates.p_logit) == ["input0", "input1", "output", "recurrent0", "recurrent1"]
    assert all(p.shape == () for p in rates.p_logit.values())
    summary = rates.summary()
    assert summary["p_input0"] == pytest.approx(0.1) and summary["p_recurrent1"] == pytest.approx(0.2)
    assert summary["p_output"] == pytest.approx(0.3)


def test_masks_are_the_relaxed_bernoulli_per_sample_fixed_over_time():
    model = concrete_model(input=0.5)
    x = x_input()
    torch.manual_seed(1)
    masks = model.dropout.layer_masks(x, H, GATES)
    assert masks.x.shape == (B, D) and masks.h.shape == (B, H) and not masks.per_gate
    # The formula at the draws' u: re-drawn with the same seed.
    torch.manual_seed(1)
    u = torch.rand(B, D)
    p = 0.5
    drop = torch.sigmoid((math.log(p + 1e-7) - math.log(1 - p + 1e-7) + torch.log(u + 1e-7)
                          - torch.log(1 - u + 1e-7)) / 0.1)
    torch.testing.assert_close(masks.x, (1 - drop) / (1 - p))
    # At t = 0.1 most entries sit near 0 or 1/(1-p), and the mean is about one.
    big = model.noise_scales.mask("input0", 20000, x_input())
    near = ((big < 0.1) | ((big - 2).abs() < 0.1)).float().mean().item()
    assert near > 0.8 and big.mean().item() == pytest.approx(1.0, abs=0.02)


def test_regularizer_is_the_weight_term_and_the_negative_entropy_per_site():
    model = concrete_model()
    rates = model.noise_scales
    layer = model.layers[0].lstm
    l2 = 1e-4**2
    total = 0.0
    for key, weight, size in (("input0", layer.weight_ih_l0, D), ("recurrent0", layer.weight_hh_l0, H),
                              ("input1", model.layers[1].lstm.weight_ih_l0, H),
                              ("recurrent1", model.layers[1].lstm.weight_hh_l0, H), ("output", model.decoder.weight, H)):
        p = rates.p(key)
        total += l2 * weight.pow(2).sum() / (1 - p) + size * (p * p.log() + (1 - p) * (1 - p).log())
    torch.testing.assert_close(rates.kl(), total)
    assert negative_entropy(torch.tensor(0.0)).item() == pytest.approx(-math.log(2))  # p = 0.5
    # A p rounded to 0 in float32 (logit -110): the term is 0, and so is its gradient, not nan.
    logit = torch.tensor(-110.0, requires_grad=True)
    negative_entropy(logit).backward()
    assert negative_entropy(logit).item() == 0.0 and logit.grad.item() == 0.0


def test_the_likelihood_and_the_regularizer_both_reach_p_and_weight_decay_leaves_it_alone():
    model = concrete_model().train()
    tokens = torch.randint(0, V, (4, B))
    logits, _ = model(tokens, model.initial_state(B, "cpu"))
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
    grads = torch.autograd.grad(nll, list(model.noise_scales.p_logit.values()))
    assert all(g.abs() > 0 for g in grads)
    # The negative entropy pulls p up towards 0.5 (its gradient in the logit is negative below 0.5).
    [g_reg] = torch.autograd.grad(model.noise_scales.kl(), [model.noise_scales.p_logit["input0"]])
    assert g_reg < 0
    skipped = {id(p) for p in model.noise_scales.parameters()}
    assert skipped and not skipped & {id(p) for p in weights_of(model)}
    # The weights the regularizer reads stay the model's own parameters, not the rates' (no double decay).
    assert len(list(model.noise_scales.parameters())) == 5


def test_concrete_takes_tied_gates_and_needs_a_site_to_learn():
    with pytest.raises(ConfigError, match="cell.gates=untied"):
        DropoutConfig(scheme="concrete", input=0.1, per_gate=True)
    with pytest.raises(ConfigError, match="dropout=concrete learns the noise"):
        DropoutConfig(scheme="concrete", embedding=0.2)
    with pytest.raises(ConfigError, match="dropout.temperature=0.5 is Concrete dropout's"):
        DropoutConfig(scheme="variational", input=0.1, temperature=0.5)
    DropoutConfig(scheme="concrete", input=0.1, kl_weight=0.5, temperature=0.2)
