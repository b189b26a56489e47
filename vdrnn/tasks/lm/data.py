"""A corpus as the language model reads it: token streams, cut into parallel columns and BPTT minibatches.

Training reads the training stream as ``batch_size`` parallel columns (:func:`batchify`) in minibatches of ``bptt``
steps (:func:`minibatches`), or of AWD's random lengths (:func:`variable_minibatches`); the hidden state is carried
from one minibatch to the next, so column b is read as one long text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

import torch

from vdrnn.errors import DataError
from vdrnn.tasks.base import read_dataset
from vdrnn.tasks.lm.datasets import Corpus


@dataclass
class TokenStreams:
    """A corpus's vocabulary (index -> word) and its splits as 1-D int64 token streams."""

    vocab: list[str]
    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor


def load_streams(cfg, module: ModuleType) -> TokenStreams:
    """The corpus that ``module`` (``read(data) -> Corpus``) reads for ``cfg.data``, as streams, checked to be long
    enough for the batch sizes."""
    corpus = read_dataset(module, cfg.data, Corpus)
    streams = TokenStreams(corpus.vocab, *(torch.tensor(ids, dtype=torch.long)
                                           for ids in (corpus.train, corpus.valid, corpus.test)))
    d = cfg.data
    if d.eval_max_tokens:  # smoke runs only; recorded in metrics.json
        streams.valid, streams.test = streams.valid[:d.eval_max_tokens], streams.test[:d.eval_max_tokens]
    # Each split is read as `batch` parallel streams; a stream needs two tokens (an input and its target).
    for split, stream, key, batch in (("training", streams.train, "batch_size", d.batch_size),
                                      ("validation", streams.valid, "eval_batch_size", d.eval_batch_size),
                                      ("test", streams.test, "test_batch_size", d.test_batch_size)):
        if len(stream) < 2 * batch:
            fix = f"lower data.{key}" + (" or raise data.eval_max_tokens" if d.eval_max_tokens and key != "batch_size"
                                         else "")
            raise DataError(f"the {split} split has {len(stream)} tokens, too few for data.{key}={batch} streams of "
                            f"at least 2 tokens: {fix}")
    return streams


def batchify(stream: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Cut one token stream into ``batch_size`` parallel streams: a [N // B, B] tensor.

    Column b holds the b-th contiguous slice of the corpus, so reading rows top to bottom continues every column's
    text, and the hidden state of column b can be carried from one minibatch to the next (truncated BPTT). The last
    N mod B tokens are dropped. E.g. the stream a b c d e f g with B = 2 becomes columns (a b c) and (d e f):

        a d
        b e
        c f
    """
    steps = stream.numel() // batch_size
    return stream[: steps * batch_size].view(batch_size, steps).t().contiguous()


def minibatches(data: torch.Tensor, bptt: int, start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (inputs, targets), each [T, B] with T <= bptt, the targets being inputs shifted by one, from row
    ``start`` (where a paused epoch goes on)."""
    for row in range(start, data.shape[0] - 1, bptt):
        length = min(bptt, data.shape[0] - 1 - row)
        yield data[row : row + length], data[row + 1 : row + 1 + length]


def variable_minibatches(data: torch.Tensor, bptt: int, start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """AWD-LSTM's random lengths (Merity et al.): mostly ``bptt``, sometimes ``bptt / 2``, jittered by N(0, 5), at
    least 5 steps, from row ``start``. The draws come from the CPU generator, whose state the checkpoints keep; each
    length is drawn as its minibatch is asked for, so an epoch paused after a step goes on with the draws an
    uninterrupted one makes."""
    while start < data.shape[0] - 1:
        base = bptt if torch.rand(()).item() < 0.95 else bptt / 2
        length = min(max(5, int(torch.normal(float(base), 5.0, ()).item())), data.shape[0] - 1 - start)
        yield data[start : start + length], data[start + 1 : start + 1 + length]
        start += length
