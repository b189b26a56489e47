"""Corpora for language modelling, one module each: ``read(data) -> Corpus``.

A corpus module finds its files (``data.root``, ``$VDRNN_DATA_DIR/<name>``, or a download), reads them and checks
them; :func:`word_corpus` turns the word-level text of the usual layout (one sentence per line, tokens split by
whitespace, as Mikolov's PTB and WikiText) into a :class:`Corpus`. A new corpus is a module here and its YAML in
conf/dataset/ (docs/extending.md); ``data.reader`` names a module kept elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

# The corpora whose text `vdrnn eval ood=NAME` scores as out-of-domain inputs, of either task (docs/uncertainty.md).
OOD_TEXTS = ("ptb", "wikitext2")

EOS = "<eos>"
UNK = "<unk>"
SPLITS = ("train", "valid", "test")


@dataclass
class Corpus:
    """A corpus as token ids: the vocabulary (index -> word) and each split as one long stream."""

    vocab: list[str]
    train: list[int]
    valid: list[int]
    test: list[int]


def tokenize(lines: list[str], blank_lines: bool = False) -> list[str]:
    """Whitespace tokens, plus one <eos> per line: per line with words (Mikolov's files have no empty line), or per
    line of any kind with ``blank_lines`` (WikiText's paragraphs are separated by blank lines, which its published
    counts read as an <eos> each)."""
    return [word for line in lines if blank_lines or line.strip() for word in line.split() + [EOS]]


def unseen_words(tokens: dict[str, list[str]]) -> set[str]:
    """The validation and test words that the training split never has."""
    known = set(tokens["train"])
    return {word for split in ("valid", "test") for word in tokens[split] if word not in known}


def release_problems(tokens: dict[str, list[str]], vocab: int, counts: dict[str, int], count_note: str = "") -> list[str]:
    """How ``tokens`` (split -> words) differ from a published release of ``vocab`` words (with <eos>) and
    ``counts`` tokens per split; empty for the release itself. ``count_note`` says how the counts are made."""
    problems = []
    found = len(set(tokens["train"]))
    if found != vocab:
        problems.append(f"vocabulary has {found:,} words (expected {vocab:,} incl. <eos>)")
    problems += [f"{split} has {len(tokens[split]):,} tokens (expected {expected:,}{count_note})"
                 for split, expected in counts.items() if len(tokens[split]) != expected]
    unknown = unseen_words(tokens)
    if unknown:
        problems.append(f"valid/test contain {len(unknown)} words missing from train, e.g. {sorted(unknown)[:3]}")
    return problems


def word_corpus(tokens: dict[str, list[str]]) -> Corpus:
    """The corpus of ``tokens`` (split -> words): the vocabulary in order of first appearance in the training split
    (as Zaremba's loader), validation and test words it lacks read as <unk> (added to it where it has none)."""
    vocab = list(dict.fromkeys(tokens["train"]))
    index = {word: i for i, word in enumerate(vocab)}
    if unseen_words(tokens) and UNK not in index:
        index[UNK] = len(vocab)
        vocab.append(UNK)
    unk = index.get(UNK)
    return Corpus(vocab, *([index.get(word, unk) for word in tokens[split]] for split in SPLITS))
