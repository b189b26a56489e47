"""WikiText-2 loading: the real corpus's counts, both file layouts, Hugging Face's copy through datasets' own loading
code, and refusing what is not the release."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import real_data
from vdrnn.errors import DataError
from vdrnn.tasks.lm.config import LMDataConfig
from vdrnn.tasks.lm.datasets import EOS, SPLITS, wikitext2

# Two paragraphs of WikiText's shape: a heading, blank lines between paragraphs (each an <eos> of its own).
FIXTURE = {
    "train": " \n = Title = \n \n the cat sat on the mat . \n \n the dog sat . \n",
    "valid": " \n the cat sat . \n",
    "test": " \n = Title = \n \n the dog . \n",
}


def write(folder, names: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, name in names.items():
        (folder / name).write_text(FIXTURE[split])


def read(root=None, allow=True):
    return wikitext2.read(LMDataConfig(name="wikitext2", root=root, allow_custom_corpus=allow))


def test_the_real_corpus_has_merity_et_als_counts(monkeypatch):
    folder = real_data("wikitext-2", "train.txt")
    monkeypatch.setenv("VDRNN_DATA_DIR", str(folder.parent))
    corpus = read(allow=False)  # refused, were any count off
    assert len(corpus.vocab) == 33_278 and "<unk>" in corpus.vocab
    assert (len(corpus.train), len(corpus.valid), len(corpus.test)) == (2_088_628, 217_646, 245_569)
    eos = corpus.vocab.index(EOS)
    assert corpus.train.count(eos) == 36_718  # one <eos> a line, the blank lines between paragraphs included


@pytest.mark.parametrize("layout", wikitext2.LAYOUTS, ids=["pytorch-examples", "release"])
def test_either_layout_is_read_and_blank_lines_count_an_eos_each(tmp_path, layout):
    write(tmp_path, layout)
    corpus = read(str(tmp_path))
    words = [corpus.vocab[i] for i in corpus.train]
    assert words[:6] == [EOS, "=", "Title", "=", EOS, EOS]  # blank, heading, blank
    assert len(corpus.train) == 1 + 4 + 1 + 8 + 1 + 5  # six lines, 3 of them blank: an <eos> each, and 14 words


def test_a_corpus_that_is_not_the_release_is_refused_with_what_differs(tmp_path):
    write(tmp_path, wikitext2.LAYOUTS[0])
    with pytest.raises(DataError, match=r"is not WikiText-2's tokenized release: vocabulary has 10 words \(expected "
                                         r"33,278 incl. <eos>\); train has 20 tokens .*data.allow_custom_corpus=true"):
        read(str(tmp_path), allow=False)


def test_a_folder_missing_a_split_names_it(tmp_path):
    write(tmp_path, {"train": "train.txt", "valid": "valid.txt"})
    with pytest.raises(DataError, match="lacks test.txt"):
        read(str(tmp_path))


def test_without_files_the_hub_copy_is_loaded_through_datasets(tmp_path, monkeypatch):
    """Hugging Face's wikitext/wikitext-2-v1 is one row per line of the release: read through datasets' own loading
    and caching code (its text builder stands in for the hub, which these tests cannot reach)."""
    import datasets

    write(tmp_path / "hub", wikitext2.LAYOUTS[1])
    real = datasets.load_dataset
    asked = []

    def hub(path, name=None, **kwargs):
        asked.append((path, name))
        files = {hub_split: str(tmp_path / "hub" / f"wiki.{split}.tokens")
                 for split, hub_split in wikitext2.HUB_SPLITS.items()}
        return real("text", data_files=files, cache_dir=str(tmp_path / "cache"))

    monkeypatch.setattr(datasets, "load_dataset", hub)
    monkeypatch.setenv("VDRNN_DATA_DIR", str(tmp_path / "empty"))
    corpus = read()
    assert asked == [wikitext2.HUB]
    write(tmp_path / "files", wikitext2.LAYOUTS[0])
    from_files = read(str(tmp_path / "files"))
    assert (corpus.vocab, corpus.train, corpus.valid, corpus.test) == (
        from_files.vocab, from_files.train, from_files.valid, from_files.test)
    assert all(len(getattr(corpus, split)) for split in SPLITS)


def test_offline_without_files_says_where_to_put_them(tmp_path, monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setenv("VDRNN_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=r"WikiText-2 not found and datasets.load_dataset\('wikitext', 'wikitext-2-v1'"
                                         r"\) failed \(ConnectionError: no network\). Put train.txt"):
        read()


def test_without_files_or_datasets_says_how_to_install_the_hub_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    monkeypatch.setenv("VDRNN_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=r"WikiText-2 not found: put train.txt.*install Hugging Face's datasets to load "
                                         r"its copy: pip install .*\[hub\]"):
        read()


PRESETS = ["wt2_medium_zaremba", "wt2_medium_variational", "wt2_medium_variational_untied", "wt2_large_variational",
           "awd_wt2", "awd_wt2_finetune"]


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_wikitext2_preset_trains_and_tests_on_the_real_corpus(preset, tmp_path, monkeypatch):
    """A smoke run of each preset on the CPU: the real corpus, the preset's scheme and schedule, two steps and a few
    hundred test tokens (the model shrunk); its paper row travels to metrics.json for the report."""
    from tests.helpers import composed, train
    from vdrnn.config import to_container

    folder = real_data("wikitext-2", "train.txt")
    monkeypatch.setenv("VDRNN_DATA_DIR", str(folder.parent))
    small = ["model.hidden_size=8", "trainer.max_steps=2", "trainer.epochs=1", "data.eval_max_tokens=300",
             "data.bptt=5", "trainer.progress=false", "device=cpu", "eval.samples=2", "model.impl=reference"]
    if preset.startswith("awd"):
        small += ["model.embedding_size=8", "data.batch_size=4"]
    raw = to_container(composed(f"experiment={preset}", *small))
    metrics = train(raw, tmp_path / "run")
    assert metrics["status"] == "finished" and metrics["smoke"] and metrics["config"]["data"]["name"] == "wikitext2"
    assert 1 < metrics["test_ppl"] < float("inf") and metrics["paper"]["table"] == "WT2"
