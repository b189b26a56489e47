"""WikiText-2 (Merity et al. 2016), the tokenized release, word level: 33,278 word types and 2,088,628 / 217,646 /
245,569 tokens, counting one <eos> per line with the blank lines between paragraphs (Merity et al.'s Table 1, and
pytorch/examples' reader).

Where the text comes from, in order: ``data.root`` if given; ``$VDRNN_DATA_DIR/wikitext-2``; Hugging Face's copy
(``datasets.load_dataset("wikitext", "wikitext-2-v1")``, the same text, cached where ``datasets`` caches; only for users
with internet or that cache). A folder may hold the splits under pytorch/examples' names, ``{train,valid,test}.txt``,
or the release's, ``wiki.{train,valid,test}.tokens``.

The corpus is checked on load, as Penn Treebank's: another text makes perplexities incomparable with the published
ones, so it is refused unless ``data.allow_custom_corpus=true``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from vdrnn.errors import DataError
from vdrnn.files import load_from_hub, read_utf8, require_files
from vdrnn.tasks.lm.datasets import SPLITS, Corpus, release_problems, tokenize, word_corpus

log = logging.getLogger("vdrnn")

EXPECTED_VOCAB = 33_278  # with <eos>; <unk> is one of the release's words
EXPECTED_TOKENS = {"train": 2_088_628, "valid": 217_646, "test": 245_569}
LAYOUTS = ({split: f"{split}.txt" for split in SPLITS}, {split: f"wiki.{split}.tokens" for split in SPLITS})
HUB = ("wikitext", "wikitext-2-v1")  # load_dataset's path and name
HUB_SPLITS = {"train": "train", "valid": "validation", "test": "test"}


def names_in(folder: Path) -> dict[str, str] | None:
    """The file name of each split in ``folder``, in whichever layout it holds whole, or None."""
    return next((names for names in LAYOUTS if all((folder / name).is_file() for name in names.values())), None)


def read_folder(folder: Path, origin: str) -> dict[str, list[str]]:
    """The three splits' lines from ``folder`` (named by ``origin``), refused with what is missing."""
    names = names_in(folder)
    if names is None:
        require_files(folder, list(LAYOUTS[0].values()), origin, "wikitext-2")  # says what is missing, and where
    fix = "WikiText-2's files are UTF-8: copy them again from the release"
    return {split: read_utf8(folder / name, fix).splitlines() for split, name in names.items()}


def lines_of(root: str | None) -> tuple[dict[str, list[str]], str]:
    """Each split's lines and where they were read from: data.root, $VDRNN_DATA_DIR/wikitext-2, or the hub."""
    if root:
        folder = Path(root).expanduser()
        return read_folder(folder, f"data.root={root}"), str(folder)
    env = os.environ.get("VDRNN_DATA_DIR")
    if env and (Path(env).expanduser() / "wikitext-2").is_dir():  # meant to be used: a missing file is an error
        folder = Path(env).expanduser() / "wikitext-2"
        return read_folder(folder, "$VDRNN_DATA_DIR/wikitext-2"), str(folder)
    put = ("put train.txt, valid.txt and test.txt (or wiki.{train,valid,test}.tokens) in $VDRNN_DATA_DIR/wikitext-2, "
           "or pass data.root=/path/to/folder")
    source = f"datasets.load_dataset{HUB}"
    return load_from_hub(from_hugging_face, "WikiText-2", source, put), source


def from_hugging_face() -> dict[str, list[str]]:
    """The splits from Hugging Face ``datasets``: one row per line of the release, blank lines as empty rows."""
    import datasets  # Hugging Face's, not this package (absolute imports)

    log.info("WikiText-2 is in neither data.root nor $VDRNN_DATA_DIR/wikitext-2: loading Hugging Face's copy through "
             "datasets.load_dataset%s, which needs internet or its cache", HUB)
    loaded = datasets.load_dataset(*HUB)
    return {split: list(loaded[HUB_SPLITS[split]]["text"]) for split in SPLITS}


def read(data) -> Corpus:
    """The corpus of ``data.root`` (or the defaults above), refused where it is not WikiText-2 unless
    ``data.allow_custom_corpus``: then its unseen validation and test words read as <unk>."""
    lines, origin = lines_of(data.root)
    tokens = {split: tokenize(split_lines, blank_lines=True) for split, split_lines in lines.items()}
    problems = release_problems(tokens, EXPECTED_VOCAB, EXPECTED_TOKENS, ", one <eos> a line, blank lines included")
    if problems and not data.allow_custom_corpus:
        raise DataError(
            f"{origin} is not WikiText-2's tokenized release: " + "; ".join(problems)
            + ". Perplexities on it are not comparable with the published ones; use the release's "
            "wiki.{train,valid,test}.tokens (not the raw wikitext-2-raw files), or pass data.allow_custom_corpus=true "
            "to train on it anyway.")
    return word_corpus(tokens)
