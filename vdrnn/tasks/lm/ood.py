"""Out-of-domain detection for a language model (`vdrnn eval ood=NAME`): its test sentences against another corpus's.

Both sides are cut into sentences alike (:func:`sentences`): a line of the corpus (up to an <eos>) ends one, and
within a line so does a ``.``, ``?`` or ``!`` token (WikiText's paragraphs; PTB has no punctuation, so its sentences
are its lines); WikiText's headings (`` = Title = `` lines) and blank lines are left out. The other corpus is its test
split, its words read with the model's vocabulary: a word it lacks is read lowercased where that form is in it (PTB's
vocabulary is lowercase, WikiText's is not), else as <unk>; only its first sentences are kept, as many as the model's
own test has at most.

Each sentence is read on its own from a zero state, its first word predicted after an <eos>, and each of its
next-token predictions gets the uncertainty scores of :data:`vdrnn.uncertainty.SCORES` (weight scaling's, and under
MC dropout the MC predictive distribution's and the mutual information); a sentence's score is their mean over its
words. AUROC and AUPR then say how well each score puts the other corpus's sentences above the model's own.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

import vdrnn.nn as vnn
from vdrnn.errors import DataError
from vdrnn.tasks.base import read_dataset
from vdrnn.tasks.lm import TASK
from vdrnn.tasks.lm.config import LMDataConfig
from vdrnn.tasks.lm.data import TokenStreams
from vdrnn.tasks.lm.datasets import EOS, UNK, Corpus
from vdrnn.tasks.lm.evaluate import ReplicaSums
from vdrnn.tasks.lm.model import LanguageModel
from vdrnn.training.device import autocast
from vdrnn.training.evaluation import samples_side_by_side
from vdrnn.uncertainty import decompose, detection, uncertainty_scores

ENDS = (".", "?", "!")  # tokens that end a sentence inside a line
HEADING = "="  # WikiText's heading lines start with it: " = Title = "


def sentences(stream: list[int] | torch.Tensor, vocab: list[str]) -> list[torch.Tensor]:
    """The sentences of a token stream (ids of ``vocab``, a line ending in <eos>), each its words' ids without an
    <eos> (see the module's docstring)."""
    eos, ends = vocab.index(EOS), {i for i, word in enumerate(vocab) if word in ENDS}
    heading = vocab.index(HEADING) if HEADING in vocab else None
    found, line = [], []
    for token in torch.as_tensor(stream).tolist() + [eos]:
        if token != eos:
            line.append(token)
            continue
        if line and line[0] != heading:
            found += split_after(line, ends)
        line = []
    return [torch.tensor(sentence) for sentence in found]


def split_after(line: list[int], ends: set[int]) -> list[list[int]]:
    """``line`` cut after each of its ``ends`` tokens."""
    pieces, piece = [], []
    for token in line:
        piece.append(token)
        if token in ends:
            pieces.append(piece)
            piece = []
    return pieces + ([piece] if piece else [])


def corpus_sentences(name: str, root: str | None, splits: tuple[str, ...] = ("test",)) -> list[list[str]]:
    """The sentences of corpus ``name``'s ``splits``, in turn, as words: read by its dataset module from ``root``, or
    from where that module looks by default. The out-of-domain text of both tasks."""
    data = LMDataConfig(name=name, root=root, allow_custom_corpus=True)
    try:
        corpus = read_dataset(TASK.reader(data), data, Corpus)
    except DataError as err:
        raise DataError(f"ood={name}: reading its text as dataset={name} does (ood_root as its data.root): {err}") \
            from None
    return [[corpus.vocab[i] for i in sentence.tolist()] for split in splits
            for sentence in sentences(getattr(corpus, split), corpus.vocab)]


def in_vocabulary(found: list[list[str]], vocab: list[str], name: str) -> list[torch.Tensor]:
    """Sentences of words as ids of ``vocab``: a word it lacks as its lowercase form where that is in it, else as
    <unk> (refused where the vocabulary has no <unk>)."""
    index = {word: i for i, word in enumerate(vocab)}
    ids = [[index.get(word, index.get(word.lower())) for word in sentence] for sentence in found]
    unknown = sorted({word for sentence, got in zip(found, ids, strict=True)
                      for word, i in zip(sentence, got, strict=True) if i is None})
    if unknown and UNK not in index:
        raise DataError(f"ood={name}: its text has words the model's vocabulary lacks (e.g. {unknown[:3]}) and the "
                        f"vocabulary has no {UNK} to read them as: score it with a model of a corpus with {UNK}")
    return [torch.tensor([index[UNK] if i is None else i for i in sentence]) for sentence in ids]


def ood_sentences(corpus: TokenStreams, cfg) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(the test's sentences, the other corpus's), as ids of the model's vocabulary: read before anything is scored,
    so that missing or empty text is refused at once."""
    inside = sentences(corpus.test, corpus.vocab)
    outside = in_vocabulary(corpus_sentences(cfg.ood, cfg.ood_root), corpus.vocab, cfg.ood)[: len(inside)]
    if not inside or not outside:
        empty = "the model's test split" if not inside else f"ood={cfg.ood}'s test split"
        raise DataError(f"{empty} holds no sentence to score: give it text (or raise data.eval_max_tokens)")
    return inside, outside


@torch.no_grad()
def sentence_scores(model: LanguageModel, found: list[torch.Tensor], eos: int, cfg, mc: bool,
                    temperature: float) -> dict[str, torch.Tensor]:
    """Each score of each sentence [len(found)]: the mean over its words' predictions. ``mc``: MC dropout with the
    run's eval settings, else weight scaling. Every sentence runs as ``eval.samples`` copies side by side (at most
    ``eval.batch`` columns a call, and one sentence at least)."""
    e, amp = cfg.eval, cfg.trainer.amp
    device = next(model.parameters()).device
    samples = e.samples if mc else 1
    side_by_side = min(samples, samples_side_by_side(model, e.batch, e.word_dropout) if mc else 1)
    per_call = max(1, e.batch // side_by_side)
    model.eval()
    out: dict[str, list[torch.Tensor]] = {}
    for first in range(0, len(found), per_call):
        batch = found[first : first + per_call]
        lengths = torch.tensor([len(s) for s in batch], device=device)
        targets = torch.nn.utils.rnn.pad_sequence(batch, padding_value=eos).to(device)  # [T, B]
        inputs = torch.cat([torch.full_like(targets[:1], eos), targets[:-1]])  # each word predicted after the last
        steps, width = targets.shape
        sums = ReplicaSums(steps * width, model.vocab_size, device, e.average if mc else "arithmetic", full=True,
                           temperature=temperature)
        done = 0
        while done < samples:
            k = min(side_by_side, samples - done)
            # Copy j of sentence b is column b * k + j, so the logits [T, B * k, V] view as [T * B, k, V].
            with vnn.mc_dropout(model, embedding=e.word_dropout) if mc else nullcontext(), autocast(device, amp):
                logits, _ = model(inputs.repeat_interleave(k, dim=1), model.initial_state(width * k, device))
            sums.add(slice(None), logits.float().view(steps * width, k, -1), targets.flatten())
            done += k
        everything = slice(None)
        epistemic = decompose(*sums.mixture(everything, samples))["epistemic"] if mc else None
        words = torch.arange(steps, device=device)[:, None] < lengths  # [T, B]: not padding
        for name, score in uncertainty_scores(sums.predictive(everything, samples), epistemic).items():
            per_sentence = (score.view(steps, width) * words).sum(dim=0) / lengths
            out.setdefault(name, []).append(per_sentence.double().cpu())
    return {name: torch.cat(parts) for name, parts in out.items()}


def ood_metrics(model: LanguageModel, sampled: LanguageModel | None, sides: tuple[list[torch.Tensor], ...],
                eos: int, cfg, temperature: float, mc_temperature: float | None) -> dict[str, Any]:
    """``ood_auroc_<score>`` and ``ood_aupr_<score>`` of weight scaling and (``sampled``: the model MC dropout
    samples) of MC (``_mc``) on the ``sides`` of :func:`ood_sentences`, with the sentences counted: the test's
    (``ood_in_count``) and the other corpus's."""
    inside, outside = sides
    metrics: dict[str, Any] = {"ood": cfg.ood, "ood_in_count": len(inside), "ood_out_count": len(outside)}
    for suffix, scoring, t in (("", model, temperature), ("_mc", sampled, mc_temperature)):
        if scoring is None:
            continue
        scores = [sentence_scores(scoring, side, eos, cfg, suffix == "_mc", t) for side in sides]
        metrics.update({f"ood_{key}{suffix}": value for key, value in detection(*scores).items()})
    return metrics
