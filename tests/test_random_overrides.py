"""Any command line is either run or refused with one of vdrnn's own errors (a line naming the problem and the fix),
never a traceback: a property test over random overrides of every config group and key (values of every type,
out-of-range numbers, words, null, interpolations, deletions), each composed as `vdrnn train` composes it, checked,
and run for one training step on tiny data."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from tests.helpers import composed, train
from vdrnn.cli import checked_config
from vdrnn.errors import VdrnnError
from vdrnn.help import groups

DATASETS = ("ptb", "imdb", "scale")


def leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# Every key any dataset's config has, with its default (a key of another dataset's is refused: also a case).
KEYS = {key: value for dataset in DATASETS
        for key, value in leaves(OmegaConf.to_container(composed(f"dataset={dataset}"))).items()
        if key != "data.root"}
# Values as a command line gives them: every type, the edges of the ranges, words, null. Sizes stay tiny (at most 3)
# so that what runs, runs in a fraction of a second.
NUMBERS = ["-1", "0", "1", "2", "3", "0.3", "0.5", "0.99", "1.5", "nan", "inf", "-0.5"]
WORDS = ["null", "true", "false", "auto", "off", "x", "''", "sgd", "adam", "ntasgd", "bf16", "mc", "last", "tied",
         "untied", "lstm", "gru", "sample", "gaussian", "h", "c", "mean", "keras", "l2", "stream", "lm", "sentiment",
         "ptb", "imdb", "scale", "os", "json", "99999999999999999999", "100000000", "[1,2]", "{a: 1}"]
# Interpolations, resolvable or not: another key's value, an environment variable's, Hydra's own resolvers.
INTERPOLATIONS = ["${nope}", "${oc.env:VDRNN_UNSET_VARIABLE}", "${oc.env:VDRNN_UNSET_VARIABLE,3}", "${trainer.lr}",
                  "${seed}", "${model.hidden_size}", "${oc.decode:'[1'}", "${now:%Y}"]


def plausible(default: object) -> list[str]:
    """Values of the default's type, so that many command lines get past the checks to the training step."""
    if isinstance(default, bool):
        return ["true", "false"]
    if isinstance(default, int):
        return ["1", "2", "3"]
    if isinstance(default, float):
        return ["0", "0.1", "0.5"]
    return ["null"] if default is None else [str(default)]


def override(key: str) -> st.SearchStrategy[str]:
    likely = st.sampled_from(plausible(KEYS[key]))
    return st.one_of(likely, likely, st.sampled_from(NUMBERS + WORDS + INTERPOLATIONS)).map(lambda v: f"{key}={v}") | \
        st.just(f"~{key}")


GROUP_OPTIONS = {group: options for group, options in groups().items() if group != "dataset"}
group_choice = st.sampled_from(sorted(GROUP_OPTIONS)).flatmap(
    lambda group: st.sampled_from([*GROUP_OPTIONS[group], "nope"]).map(lambda option: f"{group}={option}"))


def frame(dataset: str, roots: dict[str, str], chosen: set[str]) -> list[str]:
    """What keeps a run tiny and on the fixtures' data, for the keys the random overrides leave alone."""
    tiny = {"data.root": roots.get(dataset, roots["ptb"]), "model.hidden_size": "4", "data.batch_size": "4",
            "data.eval_batch_size": "4", "trainer.max_steps": "1", "trainer.epochs": "1", "trainer.progress": "false",
            "eval.samples": "2", "eval.batch": "4"}
    if dataset in ("imdb", "scale"):
        tiny |= {"data.max_length": "20", "data.vocab_size": "60"}
    else:
        tiny |= {"data.bptt": "3", "data.allow_custom_corpus": "true", "data.eval_max_tokens": "40",
                 "data.test_batch_size": "4", "model.impl": "reference"}
    return [f"{key}={value}" for key, value in tiny.items() if key not in chosen]


@pytest.fixture
def roots(tiny_corpus, fake_imdb, fake_scale) -> dict[str, str]:
    return {"ptb": str(tiny_corpus), "imdb": str(fake_imdb), "scale": str(fake_scale)}


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(dataset=st.sampled_from([*DATASETS, "nope"]),
       keys=st.lists(st.sampled_from(sorted(KEYS)).flatmap(override), max_size=4, unique_by=lambda o: o.split("=")[0]),
       options=st.lists(group_choice, max_size=2, unique_by=lambda o: o.split("=")[0]))
def test_every_command_line_runs_or_is_refused_with_a_vdrnn_error(roots, tmp_path_factory, dataset, keys, options):
    chosen = {o.lstrip("~").split("=")[0] for o in keys}
    overrides = [f"dataset={dataset}", *options, *keys, *frame(dataset, roots, chosen)]
    try:
        raw = checked_config(overrides)
        train(raw, tmp_path_factory.mktemp("run"))
    except VdrnnError as err:
        message = str(err)
        assert message and "Traceback" not in message and len(message.splitlines()) <= 3, (overrides, message)
