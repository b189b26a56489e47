"""Shared fixtures: the real data ($VDRNN_DATA_DIR) and a tiny synthetic corpus; the helpers are in tests/helpers.py."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import pytest

from tests.helpers import real_data


def pytest_configure(config):
    """Under pytest-xdist (`make test` runs one worker per core), one thread per worker, and per training run it starts:
    torch's default of a thread per core in every worker oversubscribes the cores, and its OpenMP threads then spin
    against each other (on 2 cores, a tiny training run took 5 times as long as it does alone)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"  # the subprocesses' torch reads it at start
        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """The slow tests first (each otherwise in its file's order): with a worker per core, the suite then ends on
    short tests on every worker, not on one worker's minute-long one."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def ptb_dir() -> Path:
    return real_data("ptb", "ptb.train.txt")


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """A 40-word-type corpus in PTB's file layout: epochs take a fraction of a second."""
    folder = tmp_path_factory.mktemp("tiny_ptb")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]

    def lines(n):
        # Some structure to learn: each line counts up from a random start.
        out = []
        for _ in range(n):
            start, length = rng.randrange(40), rng.randrange(3, 12)
            out.append(" " + " ".join(words[(start + k) % 40] for k in range(length)) + " ")
        return "\n".join(out) + "\n"

    (folder / "ptb.train.txt").write_text(lines(400))
    (folder / "ptb.valid.txt").write_text(lines(40))
    (folder / "ptb.test.txt").write_text(lines(40))
    return folder


@pytest.fixture
def fake_imdb(tmp_path):
    """An IMDB folder in the real file format; the word `testonly` appears only in the test set."""
    for split in ("train", "test"):
        with gzip.open(tmp_path / f"{split}.jsonl.gz", "wt", encoding="utf-8") as f:
            for i in range(40):
                word = "testonly" if split == "test" else "trainword"
                text = f"Review {i}.<br /><br />{'good' if i % 2 else 'bad'} {word}"
                f.write(json.dumps({"id": i, "rating": 8 if i % 2 else 2, "label": i % 2, "file": "", "text": text})
                        + "\n")
    return tmp_path


@pytest.fixture
def fake_scale(tmp_path):
    """Pang & Lee's layout, four critics of 10 reviews each, every text with a rating of its own; critic 0's
    first text appears three times (as the real files repeat 46 texts, on adjacent lines)."""
    from vdrnn.tasks.sentiment.datasets.scale import AUTHORS

    for a, author in enumerate(AUTHORS):
        texts = [f"critic {a} review {i} " + "word " * (3 + i) for i in range(10)]
        ratings = [(10 * a + i) / 100 for i in range(10)]
        if a == 0:
            texts[1:1], ratings[1:1] = [texts[0]] * 2, [ratings[0]] * 2
        folder = tmp_path / "scaledata" / author
        folder.mkdir(parents=True)
        (folder / f"subj.{author}").write_text("\n".join(texts) + "\n")
        (folder / f"rating.{author}").write_text("\n".join(map(str, ratings)) + "\n")
    return tmp_path


@pytest.fixture(params=["default", "split"])
def block_plan(request, monkeypatch):
    """Default block shapes, and narrow K slices with the reduction split over two programs, the second's chunk
    running past H (exercises the split-K partial sums, the masked tail of k and the last-arriver cell at these small
    sizes). The LSTM's and the GRU's kernels read the same knobs."""
    from vdrnn.kernels import launch

    if request.param == "split":
        monkeypatch.setattr(launch, "BLOCK_K", 16)
        monkeypatch.setattr(launch, "FORCE_SPLIT", (2, 2))
    return request.param
