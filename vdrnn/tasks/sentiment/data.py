"""A sentiment dataset as tensors: the train / validation / test splits, the vocabulary and the target scale.

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
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

import torch

from vdrnn.errors import ConfigError
from vdrnn.tasks.base import read_dataset
from vdrnn.tasks.sentiment.datasets import CLASSIFICATION, Review, Reviews
from vdrnn.tasks.sentiment.text import build_vocab, chunks, pad, to_ids, tokenize

log = logging.getLogger("vdrnn")


@dataclass
class Split:
    tokens: torch.Tensor  # [N, max_length] int64, <pad> after each sequence's end
    lengths: torch.Tensor  # [N], each at least 1
    targets: torch.Tensor  # [N]: class ids (int64) or standardised ratings (float32)

    def __len__(self) -> int:
        return self.tokens.shape[0]


@dataclass
class SentimentData:
    kind: str  # classification | regression
    vocab: list[str]
    train: Split
    valid: Split
    test: Split
    num_outputs: int  # logits (classification) or 1 (regression)
    target_mean: float = 0.0  # regression: rating = target_mean + target_std * target
    target_std: float = 1.0


def load_data(cfg, module: ModuleType) -> SentimentData:
    """The dataset that ``module`` (``read(data) -> Reviews``) reads for ``cfg.data``, split and tokenized."""
    started = time.perf_counter()
    data = _load(cfg.data, module)
    log.info("%s: %d train / %d valid / %d test sequences, vocabulary %d, loaded in %.1fs", cfg.data.name,
             len(data.train), len(data.valid), len(data.test), len(data.vocab), time.perf_counter() - started)
    return data


def _load(d, module: ModuleType) -> SentimentData:
    reviews = read_dataset(module, d, Reviews)
    train, test = _train_and_test(reviews, d)
    parts, words, vocab = _parts(train, test, d)
    sequences = {name: _sequences(items, to_ids(words[name], vocab), d.max_length, reviews.chunked)
                 for name, items in parts.items()}
    empty = [name for name in ("train", "test") if not sequences[name][0]]
    if empty:
        raise ConfigError(f"no {' and no '.join(empty)} reviews are left of {d.name} under data.limit={d.limit}, "
                          f"data.valid_fraction={d.valid_fraction} and data.test_fraction={d.test_fraction}: "
                          f"hold fewer out, or raise data.limit")
    if reviews.kind == CLASSIFICATION:
        def split(name: str) -> Split:
            pieces, labels = sequences[name]
            return Split(*pad(pieces, d.max_length), torch.tensor(labels, dtype=torch.long))

        return SentimentData(CLASSIFICATION, vocab, split("train"), split("valid"), split("test"),
                             num_outputs=reviews.classes)
    # Regression: targets standardised with the mean and std of the training sequences (as Gal's script).
    ratings = {name: torch.tensor(targets) for name, (_, targets) in sequences.items()}
    mean, std = ratings["train"].mean().item(), ratings["train"].std(correction=0).item()

    def split(name: str) -> Split:
        return Split(*pad(sequences[name][0], d.max_length), (ratings[name] - mean) / std)

    return SentimentData(reviews.kind, vocab, split("train"), split("valid"), split("test"), num_outputs=1,
                         target_mean=mean, target_std=std)


def shuffled(n: int) -> torch.Tensor:
    """An epoch's order of ``n`` training reviews, drawn from torch's global generator, whose state checkpoints keep
    (exact resume)."""
    return torch.randperm(n)


def minibatches(split: Split, batch_size: int, order: torch.Tensor | None = None,
                start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(tokens [T, B] time-major, lengths [B], targets [B]), T the longest sequence of the minibatch: the reviews in
    ``order`` (None: the split's own), from its ``start``-th (where a paused epoch goes on).

    Trimming to the minibatch's longest sequence only skips padding, which never reaches the output.
    """
    order = torch.arange(len(split)) if order is None else order
    for first in range(start, len(split), batch_size):
        index = order[first : first + batch_size]
        lengths = split.lengths[index]
        yield split.tokens[index, : int(lengths.max())].t(), lengths, split.targets[index]


def _train_and_test(reviews: Reviews, d) -> tuple[list[Review], list[Review]]:
    """The training reviews (shuffled with ``data.split_seed``, the first ``data.limit`` of them for a smoke run) and the
    test reviews: the dataset's own, in file order (a shuffled subset under ``data.limit``), or for a dataset without
    one the last ``data.test_fraction`` of the shuffled reviews, split by review."""
    if reviews.test is not None:
        if d.test_fraction is not None:
            raise ConfigError(f"data.test_fraction={d.test_fraction} splits a test set off a dataset that has none, and "
                              f"{d.name} has its own ({len(reviews.test):,} reviews): drop data.test_fraction")
        train = _shuffled(reviews.train, d.split_seed, d.limit)
        return train, _shuffled(reviews.test, d.split_seed, d.limit) if d.limit else reviews.test
    if d.test_fraction is None:
        raise ConfigError(f"{d.name} has no test split of its own: set data.test_fraction, the share of its reviews "
                          f"held out for the test (Gal: 0.2)")
    # Repeated texts go after the shuffle, so every other review keeps the place split_seed gives it.
    pool = _shuffled(reviews.train, d.split_seed, None)
    pool = (_first_copies(pool) if reviews.unique_texts else pool)[: d.limit]
    n_test = _held_out(len(pool), d.test_fraction)
    return pool[: len(pool) - n_test], pool[len(pool) - n_test :]


def _sequences(items: list[Review], ids: list[list[int]], length: int, chunked: bool) -> tuple[list, list]:
    """(token-id sequences, their targets) of ``items``: a review each, or with ``chunked`` each of its consecutive
    ``length``-token chunks, carrying its review's target."""
    pieces = [(piece, review.target) for review, seq in zip(items, ids, strict=True)
              for piece in (chunks(seq, length) if chunked else [seq])]
    return [p for p, _ in pieces], [t for _, t in pieces]


def _shuffled(items: list, seed: int, limit: int | None) -> list:
    items = list(items)
    random.Random(seed).shuffle(items)
    return items[:limit] if limit else items


def _held_out(count: int, fraction: float) -> int:
    """How many of ``count`` reviews a ``fraction`` holds out: at least one, or none for a fraction of 0."""
    return max(1, round(count * fraction)) if fraction else 0


def _first_copies(reviews: list[Review]) -> list[Review]:
    """``reviews`` without later copies of a text already seen, in order."""
    first = {}
    for review in reviews:
        first.setdefault(review.text, review)
    return list(first.values())  # dicts keep insertion order: each text where it first appeared


def _parts(train: list[Review], test: list[Review], d) -> tuple[dict, dict, list[str]]:
    """The train / valid / test reviews (valid: the first ``valid_fraction`` of ``train``), each review's tokens, and
    the vocabulary, built from the training part alone."""
    n_valid = _held_out(len(train), d.valid_fraction)
    parts = {"train": train[n_valid:], "valid": train[:n_valid], "test": test}
    words = {name: [tokenize(r.text) for r in items] for name, items in parts.items()}
    return parts, words, build_vocab(words["train"], d.vocab_size)
