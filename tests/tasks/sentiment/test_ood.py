"""A classifier's test predictions and out-of-domain text: other text cut to the reviews' lengths, and each review's
scores whatever the average."""

from __future__ import annotations

import pytest
import torch

from vdrnn.nn.mc import log_predictive
from vdrnn.tasks.sentiment.ood import cut_to_lengths, ood_reviews
from vdrnn.tasks.sentiment.predict import predictions
from vdrnn.tasks.sentiment.text import UNK_ID


def test_text_is_cut_into_consecutive_pieces_of_the_reviews_lengths_until_it_runs_out():
    words = [f"w{i}" for i in range(10)]
    assert cut_to_lengths(words, [3, 1, 4, 5, 2]) == [["w0", "w1", "w2"], ["w3"], ["w4", "w5", "w6", "w7"]]
    assert cut_to_lengths(words, [2, 2]) == [["w0", "w1"], ["w2", "w3"]]  # as many as there are reviews


def test_ptb_sentences_of_every_split_become_pieces_of_lowercase_words_without_its_unknowns(tmp_path):
    texts = {"train": " the Film <unk> ended \n a plot \n", "valid": " plot \n", "test": " Film the \n"}
    for split, text in texts.items():
        (tmp_path / f"ptb.{split}.txt").write_text(text)
    vocab = ["<pad>", "<unk>", "the", "film", "plot"]
    pieces = ood_reviews("ptb", str(tmp_path), vocab, lengths=[2, 3, 3, 1], max_length=5)
    # the film | ended a plot | plot film the: "ended" and "a" unknown to the classifier; no word is left for a
    # fourth piece.
    assert pieces.lengths.tolist() == [2, 3, 3]
    assert pieces.tokens.tolist() == [[2, 3, 0, 0, 0], [UNK_ID, UNK_ID, 4, 0, 0], [4, 3, 2, 0, 0]]


@pytest.mark.parametrize("average", ["arithmetic", "geometric"])
def test_mc_predictions_average_as_asked_and_decompose_the_tempered_mixture(average):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 7, 2, generator=generator, dtype=torch.float64) * 3  # [S, N, C]
    got = predictions(logits, True, average, temperature=2.0)
    assert torch.allclose(got.probs, log_predictive(logits, 0, average, 2.0).exp())
    samples = (logits / 2.0).softmax(-1)
    mixture = samples.mean(0)
    entropy = lambda p: -(p * p.log()).sum(-1)  # noqa: E731
    assert torch.allclose(got.scores["mutual_information"], entropy(mixture) - entropy(samples).mean(0))
    assert torch.allclose(got.scores["entropy"], entropy(got.probs))
    assert torch.allclose(got.scores["max_prob"], 1 - got.probs.max(-1).values)
    scaled = predictions(logits[:1], False, temperature=2.0)
    assert scaled.mc is None and set(scaled.scores) == {"max_prob", "entropy"}
