"""A sentiment task as tensors: the train / validation / test splits, the vocabulary and the target scale.

IMDB (classification): the 25,000 training reviews are shuffled with ``data.split_seed`` and the first
``valid_fraction`` of them (2,500 by default) are held out for validation; the 25,000 test reviews are
only read at the end (and for the per-epoch test curve). Each review keeps its last ``max_length`` tokens.
``valid_fraction=0`` (which needs ``trainer.select=last``) holds none out, as Gal's scripts, which train on every
training review for a fixed number of epochs.

Scale (regression, Gal's set-up): the 5,006 reviews are shuffled with ``data.split_seed``, repeated texts
kept once (4,959 remain), and split **by review**: the last ``test_fraction`` (20%) are the test set, ``valid_fraction`` of the rest is
held out for validation. Every review is then cut into consecutive ``max_length``-token chunks, each
carrying its review's rating. Gal's script shuffles reviews, chunks them and cuts the chunk list at
80%, so its split is also by review except for the one review straddling the cut; splitting by
review keeps every chunk of a test review out of training. Targets are standardised with the mean
and std of the training chunks (as Gal's script); RMSE is reported back in rating units.

The vocabulary comes from the training reviews only (Gal's script fits it on all reviews).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from vdrnn.data import imdb, scale
from vdrnn.data.text import build_vocab, chunks, pad, to_ids, tokenize
from vdrnn.sentiment.config import SentimentDataConfig

CLASSIFICATION, REGRESSION = "classification", "regression"

log = logging.getLogger("vdrnn")


@dataclass
class Split:
    tokens: torch.Tensor  # [N, max_length] int64, <pad> after each sequence's end
    lengths: torch.Tensor  # [N], each at least 1
    targets: torch.Tensor  # [N]: class ids (int64) or standardised ratings (float32)

    def __len__(self) -> int:
        return self.tokens.shape[0]


@dataclass
class TaskData:
    kind: str  # classification | regression
    vocab: list[str]
    train: Split
    valid: Split
    test: Split
    num_outputs: int  # logits (classification) or 1 (regression)
    target_mean: float = 0.0  # regression: rating = target_mean + target_std * target
    target_std: float = 1.0


def load_task(cfg: SentimentDataConfig) -> TaskData:
    return _load_imdb(cfg) if cfg.name == "imdb" else _load_scale(cfg)


def minibatches(split: Split, batch_size: int, shuffle: bool) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(tokens [T, B] time-major, lengths [B], targets [B]), T the longest sequence of the minibatch.

    Shuffling draws from torch's global generator, whose state checkpoints keep (exact resume).
    Trimming to the minibatch's longest sequence only skips padding, which never reaches the output.
    """
    order = torch.randperm(len(split)) if shuffle else torch.arange(len(split))
    for start in range(0, len(split), batch_size):
        index = order[start : start + batch_size]
        lengths = split.lengths[index]
        yield split.tokens[index, : int(lengths.max())].t(), lengths, split.targets[index]


def _shuffled(items: list, seed: int, limit: int | None) -> list:
    items = list(items)
    random.Random(seed).shuffle(items)
    return items[:limit] if limit else items


def _held_out(count: int, fraction: float) -> int:
    """How many of ``count`` reviews a ``fraction`` holds out: at least one, or none for a fraction of 0."""
    return max(1, round(count * fraction)) if fraction else 0


def _check_count(name: str, found: int, expected: int) -> None:
    """A warning where the files hold another number of reviews than the published dataset: a copy cut short, or
    other data. Not an error, so that other data of the same layout can be studied; but its numbers are not the
    paper's."""
    if found != expected:
        log.warning("%s holds %d reviews, not the %d of the published dataset: a damaged or partial copy, or other "
                    "data; its results will not compare with the paper's (restore the files to reproduce them)",
                    name, found, expected)


def _parts(train: list, test: list, cfg: SentimentDataConfig) -> tuple[dict, dict, list[str]]:
    """The train / valid / test reviews (valid: the first ``valid_fraction`` of ``train``), each review's
    tokens, and the vocabulary, built from the training part alone."""
    n_valid = _held_out(len(train), cfg.valid_fraction)
    parts = {"train": train[n_valid:], "valid": train[:n_valid], "test": test}
    words = {name: [tokenize(r.text) for r in items] for name, items in parts.items()}
    return parts, words, build_vocab(words["train"], cfg.vocab_size)


def _load_imdb(cfg: SentimentDataConfig) -> TaskData:
    reviews = imdb.load(cfg.root)
    for name in imdb.SPLITS:
        _check_count(f"the IMDB {name} split", len(reviews[name]), imdb.EXPECTED_REVIEWS)
    train = _shuffled(reviews["train"], cfg.split_seed, cfg.limit)
    # The test set is read whole and in file order, unless a smoke run takes a (shuffled, so balanced) subset.
    test = _shuffled(reviews["test"], cfg.split_seed, cfg.limit) if cfg.limit else reviews["test"]
    parts, words, vocab = _parts(train, test, cfg)

    def split(name: str) -> Split:
        labels = torch.tensor([r.label for r in parts[name]], dtype=torch.long)
        return Split(*pad(to_ids(words[name], vocab), cfg.max_length), labels)

    return TaskData(CLASSIFICATION, vocab, split("train"), split("valid"), split("test"), num_outputs=2)


def _first_copies(reviews: list) -> list:
    """``reviews`` without later copies of a text already seen, in order."""
    first = {}
    for review in reviews:
        first.setdefault(review.text, review)
    return list(first.values())  # dicts keep insertion order: each text where it first appeared


def _load_scale(cfg: SentimentDataConfig) -> TaskData:
    # 46 texts appear more than once in the files (47 extra copies; same critic, same rating, adjacent lines), and a
    # split by review would put copies on both sides of the cut. The later copies go after the shuffle, so every
    # other review keeps the place split_seed gives it.
    everything = scale.load(cfg.root)
    _check_count("the scale data", len(everything), scale.EXPECTED_REVIEWS)
    reviews = _first_copies(_shuffled(everything, cfg.split_seed, None))[: cfg.limit]
    n_test = _held_out(len(reviews), cfg.test_fraction)
    train, test = reviews[: len(reviews) - n_test], reviews[len(reviews) - n_test :]
    parts, words, vocab = _parts(train, test, cfg)
    chunked = {}  # name -> (chunks of token ids, the rating of each chunk's review)
    for name, items in parts.items():
        pieces = [(piece, review.rating) for review, ids in zip(items, to_ids(words[name], vocab), strict=True)
                  for piece in chunks(ids, cfg.max_length)]
        chunked[name] = [p for p, _ in pieces], torch.tensor([r for _, r in pieces])
    mean, std = chunked["train"][1].mean().item(), chunked["train"][1].std(correction=0).item()

    def split(name: str) -> Split:
        pieces, ratings = chunked[name]
        return Split(*pad(pieces, cfg.max_length), (ratings - mean) / std)

    return TaskData(REGRESSION, vocab, split("train"), split("valid"), split("test"), num_outputs=1,
                    target_mean=mean, target_std=std)
