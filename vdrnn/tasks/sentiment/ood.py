"""Out-of-domain detection for a review classifier (`vdrnn eval ood=NAME`): its test reviews against text that is no
review, a language-modelling corpus's (PTB's news sentences, WikiText-2's encyclopedia paragraphs) cut to the reviews'
lengths.

The other corpus's text, its training, validation and test splits in turn (the classifier saw none of it), its
headings and blank lines left out (:func:`vdrnn.tasks.lm.ood.sentences`), is read as one run of lowercase words
without its own <unk> tokens, and cut into consecutive pieces: the i-th as long as the classifier reads the i-th test
review (its last ``data.max_length`` tokens), until the text runs out or every test review has its counterpart. The
pieces are read with the classifier's vocabulary, as the reviews are, and scored as reviews: each score of
:data:`vdrnn.uncertainty.SCORES`, by weight scaling and under MC dropout.
"""

from __future__ import annotations

from typing import Any

import torch

from vdrnn.errors import DataError
from vdrnn.tasks.lm.datasets import SPLITS, UNK
from vdrnn.tasks.lm.ood import corpus_sentences
from vdrnn.tasks.sentiment.config import SentimentRunConfig
from vdrnn.tasks.sentiment.data import SentimentData, Split
from vdrnn.tasks.sentiment.model import SentimentModel
from vdrnn.tasks.sentiment.predict import Predictions, predictions, split_outputs
from vdrnn.tasks.sentiment.text import pad, to_ids
from vdrnn.uncertainty import detection


def cut_to_lengths(words: list[str], lengths: list[int]) -> list[list[str]]:
    """Consecutive pieces of ``words``, the i-th ``lengths[i]`` long, as many as the words fill."""
    pieces, start = [], 0
    for length in lengths:
        if start + length > len(words):
            break
        pieces.append(words[start : start + length])
        start += length
    return pieces


def ood_reviews(name: str, root: str | None, vocab: list[str], lengths: list[int], max_length: int) -> Split:
    """Corpus ``name``'s text as reviews of the given ``lengths`` (see the module's docstring)."""
    words = [word.lower() for sentence in corpus_sentences(name, root, SPLITS) for word in sentence if word != UNK]
    pieces = cut_to_lengths(words, lengths)
    if not pieces:
        raise DataError(f"ood={name}: its text holds {len(words)} words, too few for one piece as long as the "
                        f"first test review ({lengths[0]} tokens)")
    return Split(*pad(to_ids(pieces, vocab), max_length), torch.zeros(len(pieces), dtype=torch.long))


def ood_split(data: SentimentData, cfg: SentimentRunConfig) -> Split:
    """The ``ood=`` corpus's text cut to the test reviews' lengths: read before anything is scored, so that missing
    text is refused at once."""
    return ood_reviews(cfg.ood, cfg.ood_root, data.vocab, data.test.lengths.tolist(), cfg.data.max_length)


def ood_metrics(model: SentimentModel, sampled: SentimentModel | None, outside: Split, cfg: SentimentRunConfig,
                tested: dict[str, Predictions], temperatures: dict[str, float]) -> dict[str, Any]:
    """``ood_auroc_<score>`` and ``ood_aupr_<score>`` of weight scaling (``tested[""]``, the test reviews'
    predictions) and, where MC dropout samples ``sampled``, of MC (``"_mc"``) against the ``outside`` pieces, with
    the reviews counted: the test's (``ood_in_count``) and the other text's."""
    metrics: dict[str, Any] = {"ood": cfg.ood, "ood_in_count": len(tested[""].probs), "ood_out_count": len(outside)}
    for suffix, scoring in (("", model), ("_mc", sampled)):
        if scoring is None:
            continue
        mc = suffix == "_mc"
        scored = predictions(split_outputs(scoring, outside, cfg, mc), mc, cfg.eval.average if mc else "arithmetic",
                             temperatures[suffix])
        metrics.update({f"ood_{key}{suffix}": value for key, value in
                        detection(tested[suffix].scores, scored.scores).items()})
    return metrics
