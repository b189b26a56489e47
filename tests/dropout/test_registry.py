"""The one registry of the config's schemes (``vdrnn.dropout.config.SCHEMES``): every scheme module's class is built
by an entry, every list vdrnn keeps of schemes is read from it, and a new scheme on the existing sites is its module,
its entry and its YAML, nothing else."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import sys
import textwrap
from importlib import resources

import pytest
import torch
import yaml

from tests.helpers import composed, train
from vdrnn.config import to_container
from vdrnn.dropout.config import SCHEMES, DropoutConfig, in_table_order
from vdrnn.errors import ConfigError
from vdrnn.report.rows import scheme_rank
from vdrnn.tasks import task_of


def test_every_scheme_module_has_an_entry_and_every_entry_its_yaml():
    modules = {info.name for info in pkgutil.iter_modules(importlib.import_module("vdrnn.dropout.schemes").__path__)}
    built = {entry.cls.__module__.rsplit(".", 1)[1] for entry in SCHEMES.values() if entry.cls is not None}
    assert built == modules
    conf = resources.files("vdrnn.conf").joinpath("dropout")
    in_yaml = {(yaml.safe_load(p.read_text()) or {}).get("scheme") for p in conf.iterdir() if p.name.endswith(".yaml")}
    assert set(SCHEMES) <= in_yaml
    paper = ["none", "zaremba", "moon", "variational", "gaussian"]  # the paper's order; other schemes go between
    assert [name for name in in_table_order() if name in paper] == paper


# A scheme of a module, an entry and a YAML: it drops the layers' inputs with one mask per sequence shared by every
# gate, fresh for each minibatch, the embedding output included. In vdrnn its class would be a module of
# vdrnn/dropout/schemes/ and its entry a line of SCHEMES; here the module lives in a temporary folder and enters itself.
MODULE = '''
    """Throwaway: each layer's input dropped with one mask per sequence, fixed over time."""
    from dataclasses import dataclass

    from vdrnn.dropout.config import SCHEMES, SchemeEntry
    from vdrnn.dropout.masks import LayerMasks, locked_mask
    from vdrnn.dropout.scheme import Scheme


    @dataclass(frozen=True, kw_only=True)
    class InputOnly(Scheme):
        input: float = 0.0

        probabilities = ("input",)
        cells = ("lstm",)
        cells_why = "it is the LSTM's only"

        def layer_masks(self, x, hidden_size, gates, layer=0, noise=None):
            return LayerMasks(x=locked_mask(x, (x.shape[2],), self.input, "sequence"))


    def build(config):
        return InputOnly(input=config.input)


    SCHEMES["input_only"] = SchemeEntry(build, InputOnly, ("input",), table_order=35)
'''
YAML = '''
    # Throwaway: the layers' inputs dropped, one mask per sequence.
    scheme: input_only
    input: 0.5
'''


@pytest.fixture
def input_only(tmp_path, monkeypatch):
    """The throwaway scheme's module imported (so registered) and its YAML in a config folder; unregistered after."""
    (tmp_path / "input_only_scheme.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "conf" / "dropout").mkdir(parents=True)
    (tmp_path / "conf" / "dropout" / "input_only.yaml").write_text(textwrap.dedent(YAML))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("input_only_scheme")
    yield f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    SCHEMES.pop("input_only", None)  # forgotten after the test, module and registration
    sys.modules.pop("input_only_scheme", None)


def test_a_new_scheme_is_read_by_the_config_checks_the_report_and_the_cell_check(input_only):
    with pytest.raises(ConfigError, match=r"dropout.recurrent=0.2 is not used by scheme 'input_only' \(its sites: "
                                          r"input\)"):
        DropoutConfig(scheme="input_only", input=0.5, recurrent=0.2)
    with pytest.raises(ConfigError, match=re.escape(f"choose one of {', '.join(in_table_order())} (")):
        DropoutConfig(scheme="nope")
    named = in_table_order()
    assert named.index("variational") < named.index("input_only") < named.index("gaussian")  # its table_order, 35
    assert scheme_rank("variational") < scheme_rank("input_only") < scheme_rank("gaussian")
    raw = to_container(composed(input_only, "dropout=input_only", "dataset=imdb", "cell=gru"))
    with pytest.raises(ConfigError, match="dropout=input_only cannot run on cell=gru: it is the LSTM's only"):
        task_of(raw).parse(raw)


def test_a_new_scheme_trains(input_only, tmp_path, tiny_corpus):
    raw = to_container(composed(input_only, "dropout=input_only", "model=small", "model.hidden_size=8",
                                f"data.root={tiny_corpus}", "data.allow_custom_corpus=true", "data.batch_size=4",
                                "data.bptt=6", "data.eval_batch_size=4", "trainer.epochs=1", "trainer.progress=false",
                                "device=cpu"))
    torch.manual_seed(0)
    metrics = train(raw, tmp_path / "run")
    assert metrics["config"]["dropout"]["scheme"] == "input_only" and metrics["test_ppl"] > 1


@pytest.mark.slow
def test_a_scheme_kept_outside_vdrnn_enters_through_its_distribution_s_entry_point(tmp_path, tiny_corpus, monkeypatch):
    """The throwaway scheme as another distribution would add it: its module, an entry point of the group
    vdrnn.schemes naming its SchemeEntry, and its YAML in a config folder of its own; `vdrnn train` then runs it."""
    from tests.helpers import TINY, run_cli
    from vdrnn.dropout.config import plugin_schemes

    (tmp_path / "input_only_scheme.py").write_text(textwrap.dedent(MODULE).replace(
        'SCHEMES["input_only"] = SchemeEntry(', "ENTRY = SchemeEntry("))
    info = tmp_path / "input_only_scheme-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: input-only-scheme\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[vdrnn.schemes]\ninput_only = input_only_scheme:ENTRY\n")
    (tmp_path / "conf" / "dropout").mkdir(parents=True)
    (tmp_path / "conf" / "dropout" / "input_only.yaml").write_text(textwrap.dedent(YAML))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert plugin_schemes()["input_only"].cls.__name__ == "InputOnly"
    sys.modules.pop("input_only_scheme", None)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    run_cli("train", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "dropout=input_only", *TINY,
            f"data.root={tiny_corpus}", "trainer.epochs=1", "trainer.max_steps=2", "hydra.run.dir=run", cwd=tmp_path)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["config"]["dropout"]["scheme"] == "input_only"
