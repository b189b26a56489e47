"""IMDB Large Movie Review Dataset v1.0 (Maas et al. 2011): 25,000 train and 25,000 test reviews, balanced.

Where the reviews come from, in order: ``data.root`` (a folder holding ``train.jsonl.gz`` and
``test.jsonl.gz``, one JSON object per line with fields ``id, rating, label, file, text``, label
0 = negative, 1 = positive); ``$VDRNN_DATA_DIR/imdb``; ``datasets.load_dataset("imdb")`` for users
with internet and the ``hub`` extra (Hugging Face's copy of the same 50,000 reviews; should its order differ from the files', so would
the validation split, which ``data.split_seed`` draws by position). A ``$VDRNN_DATA_DIR/imdb`` folder that lacks a
file is an error, not a reason to download.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import zlib
from pathlib import Path

from vdrnn.errors import DataError
from vdrnn.files import load_from_hub, require_files
from vdrnn.tasks.sentiment.datasets import CLASSIFICATION, Review, Reviews, check_count

log = logging.getLogger("vdrnn")

SPLITS = ("train", "test")
EXPECTED_REVIEWS = 25_000  # per split, half of them positive


def file_names() -> list[str]:
    return [f"{split}.jsonl.gz" for split in SPLITS]


def read(data) -> Reviews:
    """The 25,000 training and 25,000 test reviews, each split in file order (sorted by label, then id); targets 0
    (negative) and 1 (positive)."""
    reviews = load(data.root)
    for name in SPLITS:
        check_count(f"the IMDB {name} split", len(reviews[name]), EXPECTED_REVIEWS)
    return Reviews(CLASSIFICATION, reviews["train"], reviews["test"], classes=2)


def load(root: str | None) -> dict[str, list[Review]]:
    """{"train": [...], "test": [...]} in file order (sorted by label, then id)."""
    if root:
        return _read_folder(Path(root).expanduser(), f"data.root={root}")
    env = os.environ.get("VDRNN_DATA_DIR")
    if env and (Path(env).expanduser() / "imdb").is_dir():  # a folder missing a file is an error, not a download
        return _read_folder(Path(env).expanduser() / "imdb", "$VDRNN_DATA_DIR/imdb")
    put = (f"put {', '.join(file_names())} (fields id, rating, label, file, text) in {_env_folder(env)}, or pass "
           f"data.root=/path/to/folder")
    return load_from_hub(_from_hugging_face, "IMDB", "datasets.load_dataset('imdb')", put)


def _env_folder(env: str | None) -> str:
    return f"$VDRNN_DATA_DIR/imdb (now {Path(env).expanduser() / 'imdb'})" if env else "$VDRNN_DATA_DIR/imdb"


def _read_folder(folder: Path, origin: str) -> dict[str, list[Review]]:
    require_files(folder, file_names(), origin, "imdb")
    splits = {}
    for split in SPLITS:
        path = folder / f"{split}.jsonl.gz"
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                splits[split] = [review_of(line, path, number) for number, line in enumerate(f, 1)]
        # EOFError: a truncated .gz; zlib.error: damaged compressed data
        except (OSError, EOFError, UnicodeDecodeError, zlib.error) as err:
            raise DataError(f"{path} is not a whole gzipped UTF-8 JSON Lines file ({type(err).__name__}: {err}); "
                            f"copy it again") from err
        if not splits[split]:
            raise DataError(f"{path} holds no reviews: it is empty or cut short; copy it again")
    return splits


def review_of(line: str, path: Path, number: int) -> Review:
    """One line of an IMDB file as a Review, or a DataError naming the file, the line and what is wrong there."""
    where = f"{path}, line {number}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataError(f"{where} is not JSON ({err.msg.removesuffix(' at')} at column {err.colno}); the file is damaged: copy it again") from None
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise DataError(f"{where} has no review text (a \"text\" string; found {str(line)[:80]!r}); every line is "
                        f"one review, with fields id, rating, label, file, text")
    label = record.get("label")
    if isinstance(label, bool) or label not in (0, 1):
        raise DataError(f"{where} has label {label!r}; IMDB's labels are 0 (negative) and 1 (positive)")
    return Review(record["text"], int(label))


def _from_hugging_face() -> dict[str, list[Review]]:
    import datasets  # Hugging Face's, not this package (absolute imports)

    # Offline, the hub's client retries for about half a minute before it fails: say what the wait is.
    log.info("IMDB is in neither data.root nor $VDRNN_DATA_DIR/imdb: loading Hugging Face's copy through "
             "datasets.load_dataset('imdb'), which needs internet or its cache")
    loaded = datasets.load_dataset("imdb")
    return {split: [Review(r["text"], int(r["label"])) for r in loaded[split]] for split in SPLITS}
