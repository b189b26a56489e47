"""Text to token ids for the sentiment tasks: tokenizer, vocabulary, padding and chunking.

Tokenization (:func:`tokenize`), one rule for IMDB and the Pang & Lee scale data:
1. lowercase;
2. HTML tags (IMDB's ``<br />`` line breaks, the odd ``<i>``) become a space, so that
   ``"end.<br /><br />The"`` gives ``end . the`` and never a token ``br``; a ``<`` that opens no tag stays text;
3. split into words (runs of letters, digits and underscores, keeping inner apostrophes: ``don't``, ``it's``)
   and single punctuation characters (``!``, ``?``, ``,``, ``.`` each a token of their own).

Gal's Keras scripts split the (already tokenized, lowercase) scale data on whitespace; on that text
the rule above gives nearly the same tokens, and on raw IMDB it does not leave ``br`` and
``movie.<br`` in the vocabulary.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

import torch

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1

# A tag opens with a letter right after "<" (or "</"): "<br />", "<i>", "</spoiler>". A bare "<" is text ("<3",
# "costs < $600 ... >"): matching "<[^>]*>" would delete everything up to the next ">", whole sentences at times.
_TAG = re.compile(r"</?[a-z][^<>]{0,80}>")  # on lowercased text
_TOKEN = re.compile(r"\w+(?:'\w+)*|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Lowercase words and punctuation of ``text``, HTML tags removed (see the module docstring)."""
    return _TOKEN.findall(_TAG.sub(" ", text.lower()))


def build_vocab(documents: Iterable[Sequence[str]], size: int) -> list[str]:
    """Index -> word: <pad>, <unk>, then the ``size - 2`` most frequent words (ties: first seen first).

    Pass only training documents: a vocabulary built on the test set leaks which words it holds.
    """
    counts = Counter(word for doc in documents for word in doc)
    return [PAD, UNK] + [word for word, _ in counts.most_common(size - 2)]


def to_ids(documents: Iterable[Sequence[str]], vocab: Sequence[str]) -> list[list[int]]:
    """Words -> ids, out-of-vocabulary words -> <unk>. An empty document becomes [<unk>], so it has a last step."""
    index = {word: i for i, word in enumerate(vocab)}
    return [[index.get(word, UNK_ID) for word in doc] or [UNK_ID] for doc in documents]


def chunks(ids: Sequence[int], length: int) -> list[list[int]]:
    """Consecutive pieces of at most ``length`` ids (Gal's scale set-up: every piece keeps the review's rating)."""
    return [list(ids[i : i + length]) for i in range(0, len(ids), length)]


def pad(sequences: Sequence[Sequence[int]], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [N, max_length] padded with <pad> at the end, and lengths [N].

    A longer sequence keeps its *last* ``max_length`` ids (Keras' ``pad_sequences`` default, which
    Gal's scripts use): a review's verdict tends to come at its end, and the classifier reads the last step.
    """
    tokens = torch.full((len(sequences), max_length), PAD_ID, dtype=torch.long)
    lengths = torch.empty(len(sequences), dtype=torch.long)
    for row, seq in enumerate(sequences):
        kept = seq[-max_length:]
        tokens[row, : len(kept)] = torch.as_tensor(kept, dtype=torch.long)
        lengths[row] = len(kept)
    return tokens, lengths
