"""PTB loading: the real corpus's statistics, batching, and refusing what is not PTB."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from vdrnn.errors import DataError
from vdrnn.tasks.lm.config import LMDataConfig
from vdrnn.tasks.lm.data import batchify, minibatches
from vdrnn.tasks.lm.datasets import ptb


def load(root: str, allow_custom_corpus: bool = False) -> SimpleNamespace:
    """The PTB reader on ``root``: the vocabulary and each split's token ids, as a tensor."""
    corpus = ptb.read(LMDataConfig(root=root, allow_custom_corpus=allow_custom_corpus))
    return SimpleNamespace(vocab=corpus.vocab, **{split: torch.tensor(getattr(corpus, split)) for split in ptb.SPLITS})


def test_real_ptb_statistics(ptb_dir):
    corpus = load(str(ptb_dir))
    assert len(corpus.vocab) == 10_000 and "<eos>" in corpus.vocab and "<unk>" in corpus.vocab
    assert (corpus.train.numel(), corpus.valid.numel(), corpus.test.numel()) == (929_589, 73_760, 82_430)
    eos = corpus.vocab.index("<eos>")
    assert (corpus.train == eos).sum().item() == 42_068  # one <eos> per line
    assert (corpus.valid == eos).sum().item() == 3_370 and (corpus.test == eos).sum().item() == 3_761
    # Vocabulary in order of first appearance in train (Zaremba's loader): the file starts "aer banknote".
    assert corpus.vocab[:2] == ["aer", "banknote"]
    assert corpus.train.max().item() == 9_999 and corpus.test.max().item() <= 9_999


def test_data_dir_from_environment(ptb_dir, monkeypatch):
    monkeypatch.setenv("VDRNN_DATA_DIR", str(ptb_dir.parent))
    assert ptb.resolve_dir(None) == ptb_dir


def test_truncated_corpus_is_refused_with_the_fix(tmp_path, ptb_dir):
    for split in ptb.SPLITS:
        lines = (ptb_dir / f"ptb.{split}.txt").read_text().splitlines(keepends=True)
        (tmp_path / f"ptb.{split}.txt").write_text("".join(lines[: len(lines) // 2]))
    with pytest.raises(DataError, match=r"not Mikolov's Penn Treebank: .*train has .* tokens \(expected 929,589\)"
                                         r".*data.allow_custom_corpus=true"):
        load(str(tmp_path))
    corpus = load(str(tmp_path), allow_custom_corpus=True)  # the explicit override
    assert corpus.train.numel() < 929_589


def test_custom_corpus_maps_unseen_words_to_unk(tmp_path):
    (tmp_path / "ptb.train.txt").write_text(" a b c \n b c \n")
    (tmp_path / "ptb.valid.txt").write_text(" a z \n")
    (tmp_path / "ptb.test.txt").write_text(" c \n")
    with pytest.raises(DataError, match="missing from train"):
        load(str(tmp_path))
    corpus = load(str(tmp_path), allow_custom_corpus=True)
    assert corpus.vocab == ["a", "b", "c", "<eos>", "<unk>"]
    assert corpus.valid.tolist() == [0, 4, 3]


def test_missing_files_name_the_folder_and_the_files(tmp_path):
    with pytest.raises(DataError, match=r"holds none of ptb.train.txt, ptb.valid.txt, ptb.test.txt$"):
        load(str(tmp_path))
    (tmp_path / "ptb.train.txt").write_text("a b\n")
    with pytest.raises(DataError, match=r"lacks ptb.valid.txt, ptb.test.txt$"):
        load(str(tmp_path))
    with pytest.raises(DataError, match=rf"{tmp_path / 'no'} does not exist; point it at a folder holding"):
        load(str(tmp_path / "no"))
    # One of the files given for their folder:
    with pytest.raises(DataError, match=r"ptb.train.txt is a file, not a folder; point it at a folder holding"):
        load(str(tmp_path / "ptb.train.txt"))


def test_a_data_folder_given_for_the_ptb_folder_inside_it_says_which_to_pass(tmp_path):
    (tmp_path / "ptb").mkdir()  # $VDRNN_DATA_DIR's layout, passed as data.root
    with pytest.raises(DataError, match=rf"but holds a ptb/ folder: pass data.root={tmp_path / 'ptb'}"):
        load(str(tmp_path))


def test_offline_without_data_says_where_to_put_the_files(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("VDRNN_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(ptb, "DOWNLOAD_URL", "http://127.0.0.1:9/ptb.{split}.txt")  # nothing listens there
    caplog.set_level("INFO", logger="vdrnn")
    with pytest.raises(DataError, match=r"Put ptb.train.txt, ptb.valid.txt, ptb.test.txt in \$VDRNN_DATA_DIR/ptb"):
        ptb.resolve_dir(None)
    assert "Penn Treebank is in neither data.root nor $VDRNN_DATA_DIR/ptb: downloading it to" in caplog.text


def test_imdb_without_its_files_says_it_asks_the_hub_and_then_where_to_put_them(tmp_path, monkeypatch, caplog):
    """The hub's client retries for half a minute offline: the log says what the run waits for first."""
    import sys
    from types import SimpleNamespace

    from vdrnn.tasks.sentiment.datasets import imdb

    def offline(name):
        raise ConnectionError(f"no network for {name}")

    monkeypatch.setenv("VDRNN_DATA_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "datasets", SimpleNamespace(load_dataset=offline))
    caplog.set_level("INFO", logger="vdrnn")
    with pytest.raises(DataError, match=r"datasets.load_dataset\('imdb'\) failed \(ConnectionError: no network for "
                                        r"imdb\)\. Put train.jsonl.gz, test.jsonl.gz .* in \$VDRNN_DATA_DIR/imdb"):
        imdb.load(None)
    assert "IMDB is in neither data.root nor $VDRNN_DATA_DIR/imdb: loading Hugging Face's copy" in caplog.text


def test_imdb_without_its_files_or_the_hub_extra_says_where_to_put_them_and_how_to_install_it(tmp_path,
                                                                                                monkeypatch):
    import sys

    from vdrnn.distribution import install_line
    from vdrnn.tasks.sentiment.datasets import imdb

    monkeypatch.setenv("VDRNN_DATA_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "datasets", None)  # Hugging Face's datasets not installed
    with pytest.raises(DataError, match=r"IMDB not found: put train.jsonl.gz, test.jsonl.gz .* in \$VDRNN_DATA_DIR/imdb "
                                        r".*or pass data.root=/path/to/folder; or, with internet, install") as err:
        imdb.load(None)
    assert str(err.value).endswith(install_line("hub"))


def test_a_file_that_is_not_utf8_names_the_byte_its_line_and_the_fix(tmp_path):
    (tmp_path / "ptb.train.txt").write_text(" a b c \n b c \n")
    (tmp_path / "ptb.valid.txt").write_bytes(" a b \n b caf\xe9 \n".encode("latin-1"))
    (tmp_path / "ptb.test.txt").write_text(" c \n")
    with pytest.raises(DataError, match=r"ptb.valid.txt is not UTF-8 text: byte 0xe9 at line 2, column 7; PTB's "
                                        r"files are plain text: .*iconv -f latin1 -t utf-8"):
        load(str(tmp_path), allow_custom_corpus=True)


def test_minibatches_from_a_row_are_the_tail_of_the_epoch():
    """A paused epoch goes on from the row its next minibatch starts at: the same minibatches as the whole epoch's."""
    data = batchify(torch.arange(40), 2)
    whole = list(minibatches(data, 6))
    tail = list(minibatches(data, 6, start=12))
    assert len(tail) == len(whole) - 2
    for (x, y), (x2, y2) in zip(whole[2:], tail, strict=True):
        assert torch.equal(x, x2) and torch.equal(y, y2)


def test_batchify_streams_are_contiguous_columns():
    data = batchify(torch.arange(11), 3)
    assert data.tolist() == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]  # 11 mod 3 = 2 tokens dropped


def test_minibatches_shift_targets_by_one_and_cover_the_stream():
    data = batchify(torch.arange(20), 2)  # columns 0..9 and 10..19
    batches = list(minibatches(data, 4))
    assert [x.shape[0] for x, _ in batches] == [4, 4, 1]
    for x, y in batches:
        assert torch.equal(y, x + 1)
    assert torch.cat([y for _, y in batches])[:, 0].tolist() == list(range(1, 10))


def test_a_partly_filled_data_dir_names_the_missing_file(tmp_path, monkeypatch):
    (tmp_path / "ptb").mkdir()
    (tmp_path / "ptb" / "ptb.train.txt").write_text("a b\n")
    monkeypatch.setenv("VDRNN_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=r"\$VDRNN_DATA_DIR/ptb: .* lacks ptb.valid.txt, ptb.test.txt"):
        ptb.resolve_dir(None)


def test_blank_lines_add_no_eos():
    """One <eos> per sentence line: a blank line (say, a trailing one in an edited file) is not an empty sentence."""
    assert ptb.tokenize([" a b ", "", "   ", " c "]) == ["a", "b", "<eos>", "c", "<eos>"]


def test_a_word_unseen_in_train_that_only_the_test_split_has_is_refused_or_mapped_to_unk(tmp_path):
    """The test split is checked as validation is: unseen test words refuse the corpus, or, with the override, map to
    <unk> (an id the model has), never to some other word's id."""
    (tmp_path / "ptb.train.txt").write_text(" a b c \n")
    (tmp_path / "ptb.valid.txt").write_text(" a b \n")
    (tmp_path / "ptb.test.txt").write_text(" c y \n")
    with pytest.raises(DataError, match=r"missing from train, e.g. \['y'\]"):
        load(str(tmp_path))
    corpus = load(str(tmp_path), allow_custom_corpus=True)
    assert corpus.vocab == ["a", "b", "c", "<eos>", "<unk>"] and corpus.test.tolist() == [2, 4, 3]


def test_every_splits_token_count_and_the_vocabulary_size_are_checked(tmp_path, monkeypatch):
    """A truncated validation or test file alone also makes perplexities incomparable with the paper's: each split's
    count is checked, and the vocabulary's size, not only train's count."""
    for split, text in (("train", " a b c \n b c \n"), ("valid", " a b \n"), ("test", " c \n")):
        (tmp_path / f"ptb.{split}.txt").write_text(text)
    counts = {"train": 7, "valid": 3, "test": 2}  # with one <eos> per line; vocabulary a b c <eos>
    monkeypatch.setattr(ptb, "EXPECTED_VOCAB", 4)
    monkeypatch.setattr(ptb, "EXPECTED_TOKENS", counts)
    assert load(str(tmp_path)).vocab == ["a", "b", "c", "<eos>"]  # as expected: accepted
    for split in ptb.SPLITS:
        monkeypatch.setattr(ptb, "EXPECTED_TOKENS", {**counts, split: counts[split] + 1})
        with pytest.raises(DataError, match=rf"{split} has {counts[split]} tokens \(expected {counts[split] + 1}\)"):
            load(str(tmp_path))
    monkeypatch.setattr(ptb, "EXPECTED_TOKENS", counts)
    monkeypatch.setattr(ptb, "EXPECTED_VOCAB", 5)
    with pytest.raises(DataError, match=r"vocabulary has 4 words \(expected 5"):
        load(str(tmp_path))


def test_minibatches_yield_no_empty_batch_when_the_inputs_fill_whole_minibatches():
    """9 rows: 8 inputs in two minibatches of 4, the last row only a target. An empty third minibatch would add a
    0/0 (NaN) mean loss to training."""
    data = batchify(torch.arange(18), 2)
    assert [(x.shape[0], y.shape[0]) for x, y in minibatches(data, 4)] == [(4, 4), (4, 4)]
