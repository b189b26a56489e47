"""Pang & Lee's scale dataset v1.0: 5,006 subjective review extracts by four critics, ratings in [0, 1].

This is Gal & Ghahramani's sentiment-regression data. Files, in the original layout:
``<root>/scaledata/<author>/{subj,rating}.<author>``, one review per line, lines aligned. ``root``
is ``data.root``, else ``$VDRNN_DATA_DIR/scale_data``; there is no download.
"""

from __future__ import annotations

import os
from pathlib import Path

from vdrnn.errors import DataError
from vdrnn.files import read_utf8
from vdrnn.tasks.sentiment.datasets import REGRESSION, Review, Reviews, check_count

AUTHORS = ("Dennis+Schwartz", "James+Berardinelli", "Scott+Renshaw", "Steve+Rhodes")  # Gal's order
EXPECTED_REVIEWS = 5_006


def resolve_dir(root: str | None) -> Path:
    if root:
        return Path(root).expanduser()
    env = os.environ.get("VDRNN_DATA_DIR")
    if not env:
        raise DataError("the scale dataset was not found: pass data.root=/path/to/scale_data (the folder holding "
                        "scaledata/<author>/) or set VDRNN_DATA_DIR to a folder holding scale_data/")
    return Path(env).expanduser() / "scale_data"


def read(data) -> Reviews:
    """Every review, rated in [0, 1]: regression, split by review (no test split of its own), cut into chunks (Gal's
    set-up). 46 texts appear more than once in the files (47 extra copies; same critic, same rating, adjacent lines):
    each is kept once."""
    reviews = load(data.root)
    check_count("the scale data", len(reviews), EXPECTED_REVIEWS)
    return Reviews(REGRESSION, reviews, None, chunked=True, unique_texts=True)


def load(root: str | None) -> list[Review]:
    """Every review of the four authors, in Gal's order (author by author, file order)."""
    folder = resolve_dir(root)
    reviews = []
    for author in AUTHORS:
        subj, rating = (folder / "scaledata" / author / f"{kind}.{author}" for kind in ("subj", "rating"))
        if not subj.is_file() or not rating.is_file():
            raise DataError(f"{folder} lacks scaledata/{author}/subj.{author} or rating.{author}: point data.root "
                            f"(or $VDRNN_DATA_DIR/scale_data) at the scale_data folder of Pang & Lee's "
                            f"scale_data.tar.gz")
        texts = subj.read_text(encoding="latin-1").splitlines()  # ASCII in v1.0; latin-1 never fails
        lines = read_utf8(rating, "the ratings are plain numbers: copy the file again").splitlines()
        ratings = [_rating(text.strip(), rating, line) for line, text in enumerate(lines, 1)
                   if text.strip()]
        if len(texts) != len(ratings):
            raise DataError(f"{subj} has {len(texts)} reviews but {rating} {len(ratings)} ratings: the files are "
                            f"damaged; restore them from Pang & Lee's scale_data.tar.gz")
        reviews += [Review(text, r) for text, r in zip(texts, ratings, strict=True)]
    return reviews


def _rating(text: str, path: Path, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 1:
        raise DataError(f"{path}, line {line}: {text!r} is not a rating in [0, 1]; the file is damaged, copy it again")
    return value
