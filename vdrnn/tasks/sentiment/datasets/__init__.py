"""Sentiment datasets, one module each: ``read(data) -> Reviews``.

A dataset module finds its files (``data.root``, ``$VDRNN_DATA_DIR/<name>``, or a download), reads and checks them,
and says how the paper's protocol treats them (:class:`Reviews`): classification or regression, whether it has a test
split of its own, whether long reviews are cut into chunks. :mod:`vdrnn.tasks.sentiment.data` does the rest for every
dataset alike (splits, tokens, vocabulary, padding). A new dataset is a module here and its YAML in conf/dataset/
(docs/extending.md); ``data.reader`` names a module kept elsewhere.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("vdrnn")

CLASSIFICATION, REGRESSION = "classification", "regression"


@dataclass(frozen=True)
class Review:
    text: str  # raw, as the files hold it (IMDB's HTML line breaks included)
    target: float  # the class id (classification) or the rating (regression)


@dataclass
class Reviews:
    """A dataset's reviews and how the protocol reads them."""

    kind: str  # CLASSIFICATION (targets are class ids 0..classes-1) or REGRESSION (targets are ratings)
    train: list[Review]
    test: list[Review] | None  # None: no test split of its own; the last data.test_fraction of the shuffled reviews
    classes: int = 2  # classification: how many
    # Long texts cut into data.max_length-token chunks, each carrying its review's target (Gal's scale set-up);
    # otherwise a review keeps its last data.max_length tokens (Keras' pad_sequences, as Gal's IMDB script).
    chunked: bool = False
    # Keep each text once, at its first place after the shuffle: a split by review must not put copies of one text on
    # both sides of the cut.
    unique_texts: bool = False


def check_count(name: str, found: int, expected: int) -> None:
    """A warning where the files hold another number of reviews than the published dataset: a copy cut short, or other
    data. Not an error, so that other data of the same layout can be studied; but its numbers are not the paper's."""
    if found != expected:
        log.warning("%s holds %d reviews, not the %d of the published dataset: a damaged or partial copy, or other "
                    "data; its results will not compare with the paper's (restore the files to reproduce them)",
                    name, found, expected)
