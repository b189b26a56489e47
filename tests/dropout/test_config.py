"""The dropout group's checks: probabilities, the sites and options each scheme reads (from the registry), and the
vdrnn.nn objects a config builds."""

from __future__ import annotations

import pytest

from vdrnn.dropout import Concrete, Gaussian, Moon, Semeniuta, Variational, WeightDrop, Zaremba, Zoneout
from vdrnn.dropout.config import DropoutConfig
from vdrnn.errors import ConfigError


@pytest.mark.parametrize("config, built", [
    ({"scheme": "none"}, None),
    ({"scheme": "zaremba", "input": 0.5, "hidden": 0.4, "output": 0.3}, Zaremba(input=0.5, between=0.4, output=0.3)),
    ({"scheme": "moon", "cell": 0.5, "cell_scale": "c"}, Moon(cell=0.5, scale="c")),
    ({"scheme": "variational", "embedding": 0.2, "input": 0.3, "recurrent": 0.2, "output": 0.3, "per_gate": True},
     Variational(input=0.3, recurrent=0.2, output=0.3, gates="untied")),
    ({"scheme": "variational", "input": 0.3, "locked_mask": "batch"}, Variational(input=0.3, per="batch")),
    ({"scheme": "gaussian", "input": 0.3, "learn_alpha": True}, Gaussian(input=0.3, learn=True)),
    ({"scheme": "concrete", "input": 0.1, "temperature": 0.2}, Concrete(input=0.1, temperature=0.2)),
    ({"scheme": "awd", "embedding": 0.1, "input": 0.65, "hidden": 0.3, "output": 0.4, "weight": 0.5},
     WeightDrop(weight=0.5, input=0.65, between=0.3, output=0.4)),
    ({"scheme": "semeniuta", "candidate": 0.25, "candidate_mask": "sequence", "input": 0.5},
     Semeniuta(candidate=0.25, per="sequence", input=0.5)),
    ({"scheme": "zoneout", "zoneout_cell": 0.25, "zoneout_hidden": 0.05, "output": 0.5},
     Zoneout(cell=0.25, hidden=0.05, output=0.5)),
])
def test_a_config_builds_the_scheme_object_a_python_call_makes(config, built):
    assert DropoutConfig(**config).scheme_object() == built


@pytest.mark.parametrize("config, embedding", [
    ({"scheme": "variational", "embedding": 0.2}, {"dropout": 0.2, "per": "sequence", "noise": "bernoulli"}),
    ({"scheme": "awd", "embedding": 0.1, "embedding_mask": "batch"},
     {"dropout": 0.1, "per": "batch", "noise": "bernoulli"}),
    ({"scheme": "gaussian", "embedding": 0.2}, {"dropout": 0.2, "per": "sequence", "noise": "gaussian"}),
    ({"scheme": "gaussian", "embedding": 0.2, "embedding_noise": "bernoulli"},
     {"dropout": 0.2, "per": "sequence", "noise": "bernoulli"}),
    ({"scheme": "zaremba"}, {"dropout": 0.0, "per": "sequence", "noise": "bernoulli"}),
])
def test_word_types_are_the_embeddings_with_the_schemes_noise(config, embedding):
    assert DropoutConfig(**config).word_dropout() == embedding


@pytest.mark.parametrize("bad, message", [
    ({"scheme": "moon", "cell": 0.5, "cell_scale": "output"}, "choose `h`"),
    ({"scheme": "variational", "recurrent": 0.5, "cell_scale": "c"}, "only applies to `dropout=moon`"),
])
def test_cell_scale_is_checked(bad, message):
    with pytest.raises(ConfigError, match=message):
        DropoutConfig(**bad)


def test_embedding_noise_needs_word_types_and_a_known_distribution():
    with pytest.raises(ConfigError, match="embedding_noise='uniform'; choose `bernoulli`"):
        DropoutConfig(scheme="gaussian", embedding=0.5, embedding_noise="uniform")
    with pytest.raises(ConfigError, match="dropout.embedding=0 draws none"):
        DropoutConfig(scheme="gaussian", input=0.5, embedding_noise="bernoulli")
    # A scheme without word-type dropout is told so, not sent to set dropout.embedding, which it would refuse next.
    for embedding in (0.0, 0.5):
        with pytest.raises(ConfigError, match="which scheme 'zaremba' does not drop .*drop the override"):
            DropoutConfig(scheme="zaremba", embedding=embedding, embedding_noise="bernoulli")


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
                                          r"variational, gaussian, concrete, awd draw .* \(Moon's cell mask is always one per "
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


def test_learned_alpha_only_for_the_gaussian_scheme_and_kl_weight_only_with_it():
    with pytest.raises(ConfigError, match="learn_alpha.*dropout=gaussian"):
        DropoutConfig(scheme="variational", input=0.5, learn_alpha=True)
    with pytest.raises(ConfigError, match="kl_weight=0.3 weighs the regularizer of learned noise"):
        DropoutConfig(scheme="gaussian", input=0.5, kl_weight=0.3)
    with pytest.raises(ConfigError, match="kl_weight=-1"):
        DropoutConfig(scheme="gaussian", input=0.5, learn_alpha=True, kl_weight=-1)
    assert DropoutConfig(scheme="gaussian", input=0.2, learn_alpha=True).scheme_object().learns
    assert not DropoutConfig(scheme="gaussian", input=0.2).scheme_object().learns


def test_learned_alpha_with_no_noisy_site_is_refused():
    with pytest.raises(ConfigError, match="learn_alpha=true learns the noise of dropout.input, dropout.hidden, "
                                          "dropout.recurrent, dropout.output, and all are 0"):
        DropoutConfig(scheme="gaussian", embedding=0.3, learn_alpha=True)
