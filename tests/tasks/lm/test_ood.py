"""A language model's out-of-domain detection: how corpora are cut into sentences, and each sentence's scores against
one sentence scored at a time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.tasks.lm.test_evaluate import V, model_with
from vdrnn.errors import DataError
from vdrnn.nn.mc import entropy
from vdrnn.tasks.lm.ood import in_vocabulary, sentence_scores, sentences


def ids(text: str, vocab: list[str]) -> list[int]:
    return [vocab.index(word) for word in text.split()]


def test_ptb_lines_are_sentences_and_wikitext_paragraphs_are_cut_after_their_stops():
    ptb = ["<eos>", "a", "b", "c"]
    assert [s.tolist() for s in sentences(ids("a b <eos> c a b c <eos>", ptb), ptb)] == [[1, 2], [3, 1, 2, 3]]
    wiki = ["<eos>", "=", "Title", "x", "y", ".", "?"]
    stream = ids("= Title = <eos> <eos> x y . y x ? x <eos> <eos> y . <eos>", wiki)
    # The heading and the blank lines go; the paragraph gives three sentences, the last without a stop.
    assert [s.tolist() for s in sentences(stream, wiki)] == [[3, 4, 5], [4, 3, 6], [3], [4, 5]]


def test_other_text_is_read_with_the_models_vocabulary_lowercased_where_only_that_form_is_known():
    vocab = ["<eos>", "the", "The", "cat", "<unk>"]
    got = in_vocabulary([["The", "Cat", "sat"], ["the", "CAT"]], vocab, "wikitext2")
    # "The" is a word of its own; "Cat" and "CAT" read as "cat"; "sat" is unknown.
    assert [s.tolist() for s in got] == [[2, 3, 4], [1, 3]]
    with pytest.raises(DataError, match=r"ood=ptb: its text has words the model's vocabulary lacks \(e.g. \['sat'\]\)"):
        in_vocabulary([["the", "sat"]], vocab[:4], "ptb")


def settings(samples: int = 1, batch: int = 4, average: str = "arithmetic"):
    return SimpleNamespace(eval=SimpleNamespace(samples=samples, batch=batch, word_dropout=False, average=average),
                           trainer=SimpleNamespace(amp="off"))


def one_at_a_time(model, sentence: torch.Tensor, eos: int, temperature: float) -> dict[str, float]:
    """Weight scaling's scores of one sentence read alone: its words predicted after an <eos>, averaged."""
    inputs = torch.cat([torch.tensor([eos]), sentence[:-1]])[:, None]
    logits, _ = model(inputs, model.initial_state(1, "cpu"))
    p = (logits[:, 0].double() / temperature).softmax(-1)
    return {"max_prob": (1 - p.max(-1).values).mean().item(), "entropy": entropy(p).mean().item()}


def test_sentences_of_any_length_score_as_each_read_alone():
    model = model_with("variational", input=0.3, recurrent=0.3, output=0.3)
    generator = torch.Generator().manual_seed(0)
    found = [torch.randint(1, V, (n,), generator=generator) for n in (3, 9, 1, 6, 4)]
    with torch.no_grad():
        got = sentence_scores(model, found, 0, settings(batch=2), mc=False, temperature=1.3)  # padded pairs
        for i, sentence in enumerate(found):
            expected = one_at_a_time(model, sentence, 0, 1.3)
            assert {name: got[name][i].item() for name in expected} == pytest.approx(expected, rel=1e-5)
    assert set(got) == {"max_prob", "entropy"}


def test_mc_scores_without_dropout_are_weight_scalings_and_have_no_mutual_information():
    model = model_with("none")
    found = [torch.tensor([3, 4, 5]), torch.tensor([6, 1])]
    ws = sentence_scores(model, found, 0, settings(), mc=False, temperature=1.0)
    mc = sentence_scores(model, found, 0, settings(samples=3, batch=2), mc=True, temperature=1.0)
    for name in ("max_prob", "entropy"):
        assert torch.allclose(mc[name], ws[name], atol=1e-6)
    assert mc["mutual_information"].abs().max() < 1e-6
    sampled = model_with("variational", input=0.4, recurrent=0.4, output=0.4)
    for p in sampled.parameters():  # large weights: the masks move the predictions a lot
        torch.nn.init.uniform_(p, -1.0, 1.0)
    assert sentence_scores(sampled, found, 0, settings(samples=3, batch=2), mc=True,
                           temperature=1.0)["mutual_information"].min() > 1e-4  # the samples do disagree
