"""The published docs stay true to the code: every config key a run can get is documented in
docs/configuration.md (and every documented key exists), every relative link in the README and docs/ leads to a
file, and the README's set-up commands are the ones CI runs."""
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from tests.helpers import composed

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DATASETS = ["ptb", "imdb", "scale"]
# Hydra's own node is Hydra's to document.
NOT_KEYS = {"hydra"}


def leaf_keys(cfg, prefix: str = "") -> set[str]:
    """Dotted names of every leaf of a config (a dict-valued key such as `paper` counts as one leaf when null)."""
    keys = set()
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and key != "paper":
            keys |= leaf_keys(value, f"{name}.")
        else:
            keys.add(name)
    return keys


def documented_keys() -> set[str]:
    """The keys in docs/configuration.md's tables: a row's first cell in backticks."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    return set(re.findall(r"^\| `([a-z_][a-z0-9_.]*)` \|", text, flags=re.M))


@pytest.mark.parametrize("dataset", DATASETS)
def test_every_key_a_run_gets_is_documented(dataset):
    cfg = OmegaConf.to_container(composed(f"dataset={dataset}"), resolve=False)
    keys = {k for k in leaf_keys(cfg) if k.split(".")[0] not in NOT_KEYS}
    missing = sorted(keys - documented_keys())
    assert not missing, f"dataset={dataset}: keys missing from docs/configuration.md: {missing}"


def test_every_documented_key_exists():
    known = set()
    for dataset in DATASETS:
        known |= leaf_keys(OmegaConf.to_container(composed(f"dataset={dataset}"), resolve=False))
    # Group names in the groups table (`dataset`, `model`, ...) are not keys; the rest must be.
    groups = {"dataset", "model", "cell", "dropout", "eval", "experiment", "search", "hydra/launcher"}
    stale = sorted(documented_keys() - known - groups)
    assert not stale, f"docs/configuration.md documents keys no config has: {stale}"


def relative_links(page: Path) -> list[str]:
    """Markdown link targets that are paths in the repository (not URLs or in-page anchors)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    return [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:|#", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    links = relative_links(page)
    assert links or page.name != "README.md", "the README links nothing: the pattern no longer matches"
    broken = [t for t in links if not (page.parent / t).exists()]
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"


def test_ci_runs_the_readme_setup_commands():
    readme = (ROOT / "README.md").read_text()
    setup = re.search(r"## Set up\s+```bash\n(.*?)```", readme, flags=re.S)
    assert setup, "README has no '## Set up' bash block"
    commands = [line.split("#")[0].strip() for line in setup.group(1).splitlines() if line.split("#")[0].strip()]
    assert commands == ["make install", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    for command in commands:
        assert re.search(rf"^{re.escape(command)}\b", ci, flags=re.M), f".ci/run does not run `{command}`"


def test_the_corpus_reader_of_docs_extending_reads_its_folder_and_says_how_to_give_one(tmp_path, monkeypatch):
    import importlib.util
    import textwrap

    from vdrnn.errors import DataError

    text = (ROOT / "docs" / "extending.md").read_text()
    code = textwrap.dedent(re.search(r"```python\n(.*?)```", text, flags=re.S).group(1))
    (tmp_path / "wikitext2.py").write_text(code)
    spec = importlib.util.spec_from_file_location("wikitext2", tmp_path / "wikitext2.py")
    reader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reader)
    monkeypatch.delenv("VDRNN_DATA_DIR", raising=False)
    with pytest.raises(DataError, match=r"no data.root given and \$VDRNN_DATA_DIR is not set"):
        reader.read(SimpleNamespace(root=None))
    (tmp_path / "wikitext-2").mkdir()
    for split in ("train", "valid", "test"):
        (tmp_path / "wikitext-2" / f"wiki.{split}.tokens").write_text(" = Title = \n a b c \n")
    monkeypatch.setenv("VDRNN_DATA_DIR", str(tmp_path))
    corpus = reader.read(SimpleNamespace(root=None))
    assert corpus.vocab[:3] == ["=", "Title", "<eos>"] and len(corpus.test) == 8


def test_the_scheme_of_docs_extending_passes_the_example_test_beside_it(monkeypatch):
    import sys
    import textwrap
    import types

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "extending.md").read_text(), flags=re.S)
    scheme = next(block for block in blocks if "class InputsOnly" in block)
    example = next(block for block in blocks if "def test_inputs_only" in block)
    module = types.ModuleType("vdrnn.dropout.schemes.inputs_only")
    exec(textwrap.dedent(scheme), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    test = {}
    exec(textwrap.dedent(example), test)
    test["test_inputs_only_keeps_one_mask_per_sequence_over_time"]()
