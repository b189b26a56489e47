"""Sentiment pieces without the real data: tokenizer, vocabulary, padding invariance, metrics, MC, config."""

from __future__ import annotations

import gzip
import importlib
import json
import math
import random
import re
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from tests.helpers import fit, trainer_for
from vdrnn.calibration import ece_difference, ece_floor, expected_calibration_error, reliability_bins
from vdrnn.dropout.config import DropoutConfig
from vdrnn.errors import ConfigError, DataError
from vdrnn.tasks.sentiment.config import SentimentDataConfig, SentimentModelConfig
from vdrnn.tasks.sentiment.data import CLASSIFICATION, Split, load_data
from vdrnn.tasks.sentiment.datasets import imdb, scale
from vdrnn.tasks.sentiment.datasets.scale import AUTHORS
from vdrnn.tasks.sentiment.metrics import classification_metrics, rmse
from vdrnn.tasks.sentiment.model import SentimentModel
from vdrnn.tasks.sentiment.predict import predict, predict_mc
from vdrnn.tasks.sentiment.text import PAD_ID, UNK, UNK_ID, build_vocab, chunks, pad, to_ids, tokenize


def load_task(data: SentimentDataConfig):
    """The dataset ``data`` names, read by its module under vdrnn/tasks/sentiment/datasets/, as tensors."""
    return load_data(SimpleNamespace(data=data), importlib.import_module(f"vdrnn.tasks.sentiment.datasets.{data.name}"))

def test_tokenizer_lowercases_strips_html_and_splits_punctuation():
    text = "A GREAT film!<br /><br />I didn't like the END...<i>really</i>"
    assert tokenize(text) == ["a", "great", "film", "!", "i", "didn't", "like", "the", "end", ".", ".", ".",
                              "really"]
    assert "br" not in tokenize("one<br />two<br/>three")


def test_a_less_than_sign_that_opens_no_tag_is_text_not_the_start_of_a_deleted_stretch():
    # From IMDB's training reviews: "<" before a number or a space opened a "tag" up to the next ">".
    text = "It made < $600 per screen, I <3 it.<br />Rated <=8. <SPOILER>He dies</SPOILER>"
    assert tokenize(text) == ["it", "made", "<", "$", "600", "per", "screen", ",", "i", "<", "3", "it", ".", "rated",
                              "<", "=", "8", ".", "he", "dies"]


def test_vocabulary_is_most_frequent_first_with_pad_and_unk():
    vocab = build_vocab([["b", "a", "b"], ["c", "b", "a"]], size=4)
    assert vocab == ["<pad>", UNK, "b", "a"]
    assert to_ids([["a", "zzz"], []], vocab) == [[3, UNK_ID], [UNK_ID]]


def test_a_tag_between_two_words_separates_them():
    assert tokenize("one<br />two") == ["one", "two"]  # not "onetwo"


def test_vocabulary_breaks_frequency_ties_by_first_appearance():
    # Every word twice: z, m, a in the order first seen, not alphabetical; the size keeps the first two.
    assert build_vocab([["z", "m", "a"], ["a", "m", "z"]], size=4) == ["<pad>", UNK, "z", "m"]


def test_pad_keeps_the_last_tokens_and_chunks_cover_everything():
    tokens, lengths = pad([[1, 2, 3, 4, 5], [7]], max_length=3)
    assert tokens.tolist() == [[3, 4, 5], [7, PAD_ID, PAD_ID]] and lengths.tolist() == [3, 1]
    assert chunks(list(range(5)), 2) == [[0, 1], [2, 3], [4]]


def tiny_imdb_config(root, *overrides: str) -> dict:
    """The resolved config of a CPU run of a tiny variational model on the fake IMDB files in ``root`` (a quarter of
    the training reviews for validation), with ``overrides`` on top."""
    from tests.helpers import composed
    from vdrnn.config import to_container

    return to_container(composed("dataset=imdb", "dropout=variational", f"data.root={root}", "model.hidden_size=8",
                                 "data.batch_size=8", "data.valid_fraction=0.25", "trainer.progress=false",
                                 "device=cpu", *overrides))


def test_vocabulary_comes_from_training_reviews_only(fake_imdb):
    task = load_task(SentimentDataConfig(root=str(fake_imdb), valid_fraction=0.25))
    assert task.kind == CLASSIFICATION and (len(task.train), len(task.valid), len(task.test)) == (30, 10, 40)
    assert "trainword" in task.vocab and "testonly" not in task.vocab and "br" not in task.vocab
    assert UNK_ID in task.test.tokens.tolist()[0]
    # "Review {i}": each training-file review has a number of its own; the 10 held out for validation keep theirs
    # out of the vocabulary too.
    assert sum(word.isdigit() for word in task.vocab) == 30


def test_without_validation_reviews_every_training_review_trains_and_builds_the_vocabulary(fake_imdb, fake_scale):
    """data.valid_fraction=0 (Gal's scripts' protocol, with trainer.select=last) holds nothing out."""
    task = load_task(SentimentDataConfig(root=str(fake_imdb), valid_fraction=0))
    assert (len(task.train), len(task.valid), len(task.test)) == (40, 0, 40)
    assert sum(word.isdigit() for word in task.vocab) == 40  # every training review's own number
    scale_task = load_task(SentimentDataConfig(name="scale", root=str(fake_scale), max_length=4, test_fraction=0.2,
                                               valid_fraction=0))
    assert len(scale_task.valid) == 0 and len(set(scale_task.train.targets.tolist())) == 32  # 40 reviews less 8 test


def test_a_smoke_runs_test_subset_holds_both_labels_of_a_file_sorted_by_label(tmp_path):
    """data.limit takes a shuffled subset of the test reviews, not the file's first ones: IMDB's files are sorted by
    label, so the first N would all be negative."""
    for split in ("train", "test"):
        with gzip.open(tmp_path / f"{split}.jsonl.gz", "wt", encoding="utf-8") as f:
            for i in range(80):
                label = int(i >= 40)  # 40 negative reviews, then 40 positive ones
                f.write(json.dumps({"id": i, "rating": 8 if label else 2, "label": label, "file": "",
                                    "text": f"review {i} {'good' if label else 'bad'}"}) + "\n")
    task = load_task(SentimentDataConfig(root=str(tmp_path), valid_fraction=0.25, limit=20))
    assert len(task.test) == 20
    assert 5 <= task.test.targets.sum().item() <= 15  # measured: 11 positive


def test_the_validation_split_is_fixed_by_split_seed_alone(fake_imdb):
    def valid_tokens(split_seed: int, global_seed: int) -> torch.Tensor:
        torch.manual_seed(global_seed)
        random.seed(global_seed)
        return load_task(SentimentDataConfig(root=str(fake_imdb), valid_fraction=0.25, split_seed=split_seed)).valid.tokens

    assert torch.equal(valid_tokens(0, 1), valid_tokens(0, 2))  # the run's seed does not move it
    assert not torch.equal(valid_tokens(0, 1), valid_tokens(1, 1))


def test_files_holding_another_number_of_reviews_than_imdb_are_named_in_a_warning(fake_imdb, caplog):
    load_task(SentimentDataConfig(root=str(fake_imdb), valid_fraction=0.25))
    assert "the IMDB train split holds 40 reviews, not the 25000 of the published dataset" in caplog.text


def test_missing_imdb_files_are_a_data_error_that_says_what_to_put_where(tmp_path, monkeypatch):
    with pytest.raises(DataError, match="holds none of train.jsonl.gz, test.jsonl.gz"):
        load_task(SentimentDataConfig(root=str(tmp_path)))
    (tmp_path / "imdb").mkdir()  # $VDRNN_DATA_DIR/imdb with a file missing: an error, not a download
    (tmp_path / "imdb" / "train.jsonl.gz").write_bytes(b"")
    monkeypatch.setenv("VDRNN_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=r"\$VDRNN_DATA_DIR/imdb: .* lacks test.jsonl.gz"):
        load_task(SentimentDataConfig())


def truncate(path):
    path.write_bytes(path.read_bytes()[:-20])


def second_line(record: str):
    """A damage: the file's second review replaced by ``record`` (a line of text)."""
    def damage(path):
        with gzip.open(path, "rt") as f:
            lines = f.read().splitlines()
        with gzip.open(path, "wt") as f:
            f.write("\n".join([lines[0], record, *lines[2:]]) + "\n")
    return damage


def damaged_deflate(path):
    """The compressed stream's bytes changed after the gzip header, which stays whole."""
    data = bytearray(path.read_bytes())
    data[12:40] = bytes(range(28))
    path.write_bytes(bytes(data))


def emptied(path):
    with gzip.open(path, "wb"):
        pass


def latin1(path):
    with gzip.open(path, "wb") as f:
        f.write(json.dumps({"text": "caf\u00e9", "label": 1}, ensure_ascii=False).encode("latin-1") + b"\n")


@pytest.mark.parametrize("damage,message", [
    (truncate, "not a whole gzipped UTF-8 JSON Lines file.*EOFError.*copy it again"),
    (second_line(json.dumps({"text": "fine", "label": 7})), r"line 2 has label 7; IMDB's labels are 0 \(negative\)"),
    (second_line(json.dumps({"text": "fine", "label": 0.7})), r"line 2 has label 0.7; IMDB's labels are 0"),
    (second_line(json.dumps({"text": "fine", "label": True})), r"line 2 has label True"),
    (second_line(json.dumps({"text": None, "label": 1})), r"line 2 has no review text"),
    (second_line('{"text": "cut sh'), r"line 2 is not JSON \(.* at column \d+\); the file is damaged: copy it again"),
    (latin1, r"not a whole gzipped UTF-8 JSON Lines file \(UnicodeDecodeError"),
    (damaged_deflate, r"not a whole gzipped UTF-8 JSON Lines file \(error: .*; copy it again"),
    (emptied, r"holds no reviews: it is empty or cut short; copy it again"),
], ids=["truncated", "foreign-label", "fractional-label", "boolean-label", "null-text", "torn-line", "latin-1",
        "damaged-deflate", "empty"])
def test_a_damaged_imdb_file_is_a_data_error_naming_it_and_the_line(fake_imdb, damage, message):
    damage(fake_imdb / "test.jsonl.gz")
    with pytest.raises(DataError, match=message) as err:
        load_task(SentimentDataConfig(root=str(fake_imdb)))
    assert "test.jsonl.gz" in str(err.value)


def test_a_damaged_scale_rating_is_a_data_error_naming_file_and_line(fake_scale):
    path = fake_scale / "scaledata" / AUTHORS[2] / f"rating.{AUTHORS[2]}"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:3], "0,7", *lines[4:]]) + "\n")
    with pytest.raises(DataError, match=re.escape(f"rating.{AUTHORS[2]}, line 4: '0,7' is not a rating in [0, 1]")):
        load_task(SentimentDataConfig(name="scale", root=str(fake_scale), test_fraction=0.2))


def test_a_data_dir_imdb_folder_without_the_training_file_is_an_error_not_a_download(tmp_path, monkeypatch):
    """$VDRNN_DATA_DIR/imdb holding only test.jsonl.gz: the user meant that folder, so say what it lacks rather than
    fetch Hugging Face's copy (whose order, hence validation split, may differ)."""
    (tmp_path / "imdb").mkdir()
    (tmp_path / "imdb" / "test.jsonl.gz").write_bytes(b"")
    monkeypatch.setenv("VDRNN_DATA_DIR", str(tmp_path))
    downloads = []

    def download():
        downloads.append(True)
        raise ConnectionError("no network in tests")

    monkeypatch.setattr(imdb, "_from_hugging_face", download)
    with pytest.raises(DataError, match=r"\$VDRNN_DATA_DIR/imdb: .* lacks train.jsonl.gz"):
        imdb.load(None)
    assert not downloads


def test_scale_splits_by_review_keeps_repeated_texts_once_and_standardises_on_training_chunks(fake_scale):
    cfg = SentimentDataConfig(name="scale", root=str(fake_scale), max_length=4, test_fraction=0.2,
                              valid_fraction=0.25)
    task = load_task(cfg)
    ratings = {name: [round(float(task.target_mean + task.target_std * t), 6) for t in getattr(task, name).targets]
               for name in ("train", "valid", "test")}
    reviews = {name: set(r) for name, r in ratings.items()}
    assert sum(map(len, reviews.values())) == 40  # 42 lines, 40 texts: each review once, in one split only
    assert not (reviews["test"] & reviews["train"] or reviews["test"] & reviews["valid"]
                or reviews["train"] & reviews["valid"])
    assert len(reviews["test"]) == 8 and len(reviews["valid"]) == 8  # 20% of 40, then 25% of the other 32
    chunks_of_first = sum(r.count(0.0) for r in ratings.values())
    assert chunks_of_first == 2  # "critic 0 review 0 word word word": 7 tokens, 2 chunks of 4, not 3 x 2
    train = torch.tensor(ratings["train"])
    assert task.target_mean == pytest.approx(train.mean().item())
    assert task.target_std == pytest.approx(train.std(correction=0).item())


def model(cell_type: str, scheme: str, p: dict) -> SentimentModel:
    torch.manual_seed(0)
    dropout = DropoutConfig(scheme=scheme, **p)
    return SentimentModel(30, 2, SentimentModelConfig(cell=cell_type, hidden_size=8, num_layers=2, impl="reference"),
                          dropout)


VARIATIONAL = dict(embedding=0.3, input=0.5, recurrent=0.5, output=0.5)


@pytest.mark.parametrize("cell,scheme,p", [("lstm", "variational", VARIATIONAL), ("gru", "variational", VARIATIONAL),
                                           ("rnn", "variational", VARIATIONAL), ("lstm", "moon", {"cell": 0.5})])
def test_padding_never_changes_the_output(cell, scheme, p):
    net = model(cell, scheme, p)
    lengths = torch.tensor([5, 2, 7])
    tokens = torch.randint(2, 30, (7, 3))
    tokens[5:, 0], tokens[2:, 1] = PAD_ID, PAD_ID
    padded = torch.cat([tokens, torch.zeros(6, 3, dtype=torch.long)])  # 6 more steps of padding
    # Deterministic: a review alone, unpadded, gives what it gives inside a padded batch.
    net.eval()
    batch = net(padded, lengths)
    for i in range(3):
        alone = net(tokens[: lengths[i], i : i + 1], lengths[i : i + 1])
        assert torch.allclose(alone, batch[i : i + 1], atol=1e-6)
    # Under dropout: the masks have no time axis, so the same draws give the same outputs at any padding.
    net.train()
    torch.manual_seed(1)
    short = net(tokens, lengths)
    torch.manual_seed(1)
    long = net(padded, lengths)
    assert torch.allclose(short, long, atol=1e-6)
    assert not torch.allclose(short, net.eval()(tokens, lengths))  # dropout did act


def test_classification_metrics_on_a_hand_computed_example():
    probs = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.2, 0.8], [0.88, 0.12]])
    labels = torch.tensor([0, 1, 1, 1, 1])
    m = classification_metrics(probs, labels)
    assert m["accuracy"] == pytest.approx(3 / 5)
    assert m["nll"] == pytest.approx(-(math.log(0.9) + math.log(0.4) + math.log(0.7) + math.log(0.8)
                                       + math.log(0.12)) / 5)
    # Bins of width 1/15: 0.9 and 0.88 share (13/15, 14/15]: accuracy 1/2, mean confidence 0.89.
    # ECE = 2/5 * |0.5 - 0.89| + 1/5 * (|0 - 0.6| + |1 - 0.7| + |1 - 0.8|) = 1.88 / 5.
    assert m["ece"] == pytest.approx(1.88 / 5)
    entropy = [-(p * math.log(p) + (1 - p) * math.log(1 - p)) for p in (0.9, 0.6, 0.3, 0.2, 0.88)]
    assert m["entropy"] == pytest.approx(sum(entropy) / 5)


def test_ece_is_zero_when_calibrated_and_bins_count():
    probs = torch.tensor([[0.5, 0.5]] * 4)
    assert expected_calibration_error(probs, torch.tensor([0, 1, 0, 1])) == pytest.approx(0.0)
    # One bin per example: 0.7 right and 0.7 wrong average to 0.5 in one bin (ECE 0.2), not 0.3 + 0.7.
    assert expected_calibration_error(torch.tensor([[0.7, 0.3]] * 2), torch.tensor([0, 1])) == pytest.approx(0.2)


def binary_predictor(n: int, sharpen: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n reviews a model is right about with probability a, a in [0.5, 1); its confidence is a sharpened
    (sharpen > 1: overconfident) or softened (< 1) away from 0.5. Returns (probs [n, 2], labels), class 1 predicted."""
    g = torch.Generator().manual_seed(seed)
    accuracy = 0.5 + 0.5 * torch.rand(n, generator=g, dtype=torch.float64) ** 0.4 * 0.98
    labels = (torch.rand(n, generator=g, dtype=torch.float64) < accuracy).long()
    confidence = (0.5 + (accuracy - 0.5) * sharpen).clamp(max=1.0)
    return torch.stack([1 - confidence, confidence], dim=1), labels


def test_a_calibrated_predictor_scores_the_floor_and_a_miscalibrated_one_far_above_it():
    calibrated, labels = binary_predictor(25_000, sharpen=1.0, seed=0)
    floor = ece_floor(calibrated)
    assert 0.002 < floor < 0.01  # sampling alone, at 25,000 reviews
    assert expected_calibration_error(calibrated, labels) == pytest.approx(floor, abs=0.003)
    softened, _ = binary_predictor(25_000, sharpen=0.8, seed=0)
    assert expected_calibration_error(softened, labels) > 5 * ece_floor(softened)
    # More examples, less sampling noise: the floor falls like 1/sqrt(N).
    assert ece_floor(binary_predictor(2_500, 1.0, 0)[0]) == pytest.approx(floor * 10 ** 0.5, rel=0.25)


def test_the_ece_floor_reads_the_confidence_of_either_class():
    """The floor depends on how sure each prediction is, not on which class it names: swapping the classes of two-class
    probabilities leaves it as it was."""
    g = torch.Generator().manual_seed(0)
    positive = torch.rand(500, generator=g, dtype=torch.float64)
    probs = torch.stack([1 - positive, positive], dim=1)  # either class the more likely, about half the time each
    assert ece_floor(probs) == pytest.approx(ece_floor(probs.flip(1)), rel=1e-12)


def test_ece_difference_tells_the_better_calibrated_of_two_predictors_of_the_same_reviews():
    for seed in range(5):
        calibrated, labels = binary_predictor(10_000, sharpen=1.0, seed=seed)
        softened, _ = binary_predictor(10_000, sharpen=0.9, seed=seed)  # the same reviews, less sure of each
        difference, low, high = ece_difference(softened, calibrated, labels, resamples=200, seed=seed)
        assert 0 < low < difference < high  # the softened one is the worse calibrated, beyond chance
        assert ece_difference(calibrated, softened, labels, resamples=200, seed=seed)[2] < 0  # either way round
    assert ece_difference(calibrated, calibrated, labels, resamples=50) == pytest.approx((0.0, 0.0, 0.0))


def test_the_ece_difference_interval_is_the_basic_bootstrap_one_not_the_percentile_one():
    from vdrnn.calibration import ECE_BINS, binned_ece

    a, labels = binary_predictor(300, sharpen=1.0, seed=7)
    b, _ = binary_predictor(300, sharpen=0.7, seed=7)
    difference, low, high = ece_difference(a, b, labels, resamples=400, seed=3)
    # The same resamples by hand: 400 draws of 300 indices from the seeded generator (drawn in one go or in chunks,
    # the generator gives the same indices).
    index = torch.randint(300, (400, 300), generator=torch.Generator().manual_seed(3))
    (conf_a, pred_a), (conf_b, pred_b) = (p.double().max(dim=1) for p in (a, b))
    resampled = (binned_ece(conf_a[index], (pred_a == labels)[index], ECE_BINS)
                 - binned_ece(conf_b[index], (pred_b == labels)[index], ECE_BINS))
    q_low, q_high = resampled.quantile(torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    assert (low, high) == pytest.approx((2 * difference - q_high, 2 * difference - q_low))
    assert (low, high) != pytest.approx((q_low, q_high))  # the resamples sit off-centre here: the two differ


def test_reliability_bins_are_sums_that_give_back_the_ece():
    probs, labels = binary_predictor(3_000, sharpen=1.3, seed=2)
    bins = reliability_bins(probs, labels)
    count, right, confidence = (torch.tensor(bins[k], dtype=torch.float64) for k in ("count", "right", "confidence"))
    assert count.sum() == 3_000 and len(count) == 15
    assert count[:7].sum() == 0  # binary: no confidence below 1/2
    assert ((right - confidence).abs().sum() / 3_000).item() == pytest.approx(expected_calibration_error(probs, labels))


def test_rmse_in_rating_units():
    assert rmse(torch.tensor([1.0, -1.0]), torch.tensor([0.0, 0.0]), scale=0.2) == pytest.approx(0.2)


def sample_logits(review: int, sample: int) -> torch.Tensor:
    """The logits a stochastic pass gives review ``review`` on its ``sample``-th draw: different for every
    review and every draw, and far enough apart that averaging logits and averaging probabilities differ."""
    return torch.tensor([3.0 * (review + 1) * (-1) ** sample, float(review + sample)])


class PerReviewFake(nn.Module):
    """Logits by (review, draw): the review is read off its tokens (id review + 2) and each review's draws
    are counted column by column, so the outputs do not depend on how predict_mc lays the copies out."""

    def __init__(self):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))  # gives predict_mc a device
        self.draws: dict[int, int] = {}

    def forward(self, tokens, lengths):
        out = []
        for review in (tokens[0] - 2).tolist():
            sample = self.draws.get(review, 0)
            self.draws[review] = sample + 1
            out.append(sample_logits(review, sample))
        return torch.stack(out)


@pytest.mark.parametrize("reviews,samples,per_pass,batch_size", [
    (3, 2, 1, 8),  # one copy per pass: 8 reviews side by side
    (3, 2, 2, 8),  # both copies in one pass: 4 reviews per pass, so all 3 in one
    (5, 3, 2, 4),  # 2 reviews per pass (minibatches of 2, 2, 1); 2 copies, then the third draw alone
    (4, 3, 3, 12),  # 3 copies of 4 reviews in one pass
])
def test_mc_averages_probabilities_not_logits(reviews, samples, per_pass, batch_size):
    tokens = (torch.arange(reviews) + 2).unsqueeze(1).expand(reviews, 3).contiguous()
    split = Split(tokens, torch.full((reviews,), 3), torch.zeros(reviews, dtype=torch.long))
    fake = PerReviewFake()
    got = predict_mc(fake, split, CLASSIFICATION, samples=samples, samples_per_pass=per_pass, batch_size=batch_size)
    assert got.shape == (reviews, 2) and fake.draws == {i: samples for i in range(reviews)}
    for i in range(reviews):
        draws = [sample_logits(i, s) for s in range(samples)]
        expected = sum(logits.double().softmax(0) for logits in draws) / samples
        assert torch.allclose(got[i], expected, atol=1e-6), f"review {i}: {got[i]} != {expected}"
        assert not torch.allclose(got[i], (sum(draws) / samples).double().softmax(0), atol=1e-3)  # not the mean logit


@pytest.mark.parametrize("raw_change,message", [
    ({"cell": {"type": "gru", "gates": "tied"}, "dropout": {"scheme": "moon", "cell": 0.5}},
     "dropout=moon cannot run on cell=gru: it drops the LSTM's cell state c_t, which the GRU cell does not have"),
    ({"data": {"name": "scale", "test_fraction": 1.0}}, r"data.test_fraction=1.0 must be in \(0, 1\)"),
    ({"model": {"tie_weights": True}}, "model.tie_weights=true"),
    # Keys only the language model reads: a sentiment run would otherwise ignore them without a word.
    ({"init_from": "lm/best.pt"}, r"init_from=lm/best.pt: sentiment runs do not take init_from"),
    ({"trainer": {"optimizer": "adam", "loss": "mean"}},
     r"trainer.loss=mean is for language models \(dataset=ptb\).*default: trainer.loss=sum_over_time"),
    ({"trainer": {"optimizer": "adam", "cuda_graph": "off"}}, r"trainer.cuda_graph=off is for language models"),
    ({"trainer": {"optimizer": "adam", "nonmono": 3}}, r"trainer.nonmono=3 is for language models"),
    ({"trainer": {"optimizer": "adam", "stop_nonmono": True}}, r"trainer.stop_nonmono=True is for language models"),
    ({"eval": {"mc_masks": "minibatch"}}, r"eval.mc_masks=minibatch is for language models \(dataset=ptb\)"),
])
def test_bad_sentiment_settings_are_refused_with_the_fix(raw_change, message):
    from vdrnn.tasks.sentiment.config import from_dict

    raw = {"data": {"name": "imdb"}, "model": {}, "cell": {"type": "lstm", "gates": "tied"},
           "dropout": {"scheme": "none"}, "trainer": {"optimizer": "adam"}, "eval": {}}
    raw.update(raw_change)
    with pytest.raises(ConfigError, match=message):
        from_dict(raw)


def test_a_test_fraction_is_refused_for_a_dataset_with_its_own_test_set_and_needed_without_one(fake_imdb,
                                                                                                  fake_scale):
    """Whether a dataset has a test split of its own is its reader's to say (IMDB does, the scale data does not), so
    data.test_fraction is checked against what the reader gives."""
    with pytest.raises(ConfigError, match=r"data.test_fraction=0.2 splits a test set off a dataset that has none, and "
                                          r"imdb has its own \(40 reviews\): drop data.test_fraction"):
        load_task(SentimentDataConfig(root=str(fake_imdb), test_fraction=0.2))
    with pytest.raises(ConfigError, match=r"scale has no test split of its own: set data.test_fraction"):
        load_task(SentimentDataConfig(name="scale", root=str(fake_scale)))


def test_language_model_keys_at_their_defaults_are_accepted():
    """The composed config always carries them (conf/config.yaml), so only a changed value is an error."""
    from vdrnn.tasks.sentiment.config import from_dict

    raw = {"data": {"name": "imdb"}, "model": {}, "cell": {"type": "gru", "gates": "tied"},
           "dropout": {"scheme": "none"}, "init_from": None,
           "trainer": {"optimizer": "adam", "loss": "sum_over_time", "cuda_graph": "auto", "nonmono": 5,
                       "stop_nonmono": False},
           "eval": {"mode": "mc", "mc_masks": "stream"}}
    cfg = from_dict(raw)
    assert cfg.trainer.loss == "sum_over_time" and cfg.eval.mc_masks == "stream"


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_keras_init_is_gal_scripts_layer_defaults(cell):
    """model.init=keras: per gate, W_ih Glorot-uniform and W_hh orthogonal x 1.1; LSTM forget bias 1."""
    torch.manual_seed(0)
    D, H = 24, 16
    config = SentimentModelConfig(cell=cell, hidden_size=H, embedding_size=D, init="keras")
    model = SentimentModel(50, 2, config, DropoutConfig(scheme="variational"))
    rnn = model.rnn
    gates = {"lstm": 4, "gru": 3, "rnn": 1}[cell]
    bound = math.sqrt(6 / (D + H))
    for w_ih, w_hh in zip(rnn.weight_ih_l0.chunk(gates), rnn.weight_hh_l0.chunk(gates), strict=True):
        assert w_ih.abs().max() <= bound and w_ih.abs().max() > 0.8 * bound  # U(+-bound), not a smaller range
        torch.testing.assert_close(w_hh @ w_hh.T, 1.21 * torch.eye(H), atol=1e-5, rtol=0)
    bias = (rnn.bias_ih_l0 + rnn.bias_hh_l0).detach()
    expected = torch.zeros(gates * H)
    if cell == "lstm":
        expected[H:2 * H] = 1.0  # i, f, g, o: the forget gate opens at the start
    assert torch.equal(bias, expected)
    assert model.embedding.weight.abs().max() <= 0.05 and torch.equal(model.head.bias, torch.zeros(2))
    head_bound = math.sqrt(6 / (H + 2))
    assert head_bound * 0.5 < model.head.weight.abs().max() <= head_bound


def test_unknown_init_names_the_choices():
    with pytest.raises(ConfigError, match="uniform, awd, keras"):
        SentimentModelConfig(init="glorot")


def test_mc_with_masks_shared_by_the_batch_runs_its_passes_one_by_one():
    torch.manual_seed(0)
    # init_range 0.5, not the default 0.05: outputs far enough from 1/2 for the samples to differ measurably.
    config = SentimentModelConfig(hidden_size=8, impl="reference", init_range=0.5)
    shared = DropoutConfig(scheme="variational", input=0.5, recurrent=0.5, locked_mask="batch")
    model = SentimentModel(20, 2, config, shared)
    split = Split(torch.randint(2, 20, (6, 7)), torch.full((6,), 7), torch.zeros(6, dtype=torch.long))
    results = []
    for per_pass in (8, 1):
        torch.manual_seed(1)
        results.append(predict_mc(model, split, CLASSIFICATION, samples=8, samples_per_pass=per_pass,
                                  batch_size=48))
    assert torch.equal(results[0], results[1])
    # ... and they are 8 samples: one sample from the same seed (as a model that ignored its masks would give) differs.
    torch.manual_seed(1)
    one_sample = predict_mc(model, split, CLASSIFICATION, samples=1, samples_per_pass=1, batch_size=48)
    assert (results[0] - one_sample).abs().max() > 1e-3  # measured: 0.014


def test_the_output_mask_drops_inputs_of_the_head():
    """Gal's sentiment model is recurrent layer -> dropout -> dense: a dropped unit gives its head column no gradient."""
    torch.manual_seed(0)
    model = SentimentModel(20, 2, SentimentModelConfig(hidden_size=16, impl="reference"),
                           DropoutConfig(scheme="variational", output=0.5))
    tokens, lengths = torch.randint(2, 20, (6, 1)), torch.tensor([6])
    model.train()(tokens, lengths).sum().backward()
    dead = (model.head.weight.grad == 0).all(dim=0)
    assert 0 < dead.sum() < 16
    model.zero_grad()
    model.eval()(tokens, lengths).sum().backward()  # weight scaling: every unit reaches the head
    assert not (model.head.weight.grad == 0).all(dim=0).any()


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_model_learns_reviews_whose_label_is_one_word_before_the_end(fake_imdb, tmp_path, cell):
    from tests.helpers import train as run

    raw = tiny_imdb_config(fake_imdb, f"cell={cell}", "model.hidden_size=16", "trainer.epochs=15", "trainer.lr=0.01",
                           "eval=mc", "eval.samples=4", "eval.batch=4", "dropout.embedding=0", "dropout.input=0.1",
                           "dropout.recurrent=0.1", "dropout.output=0.1")
    metrics = run(raw, tmp_path)
    # "good" or "bad", then a word the label does not depend on: the recurrence must carry it one step.
    assert metrics["test_accuracy"] == 1.0 and metrics["test_accuracy_mc"] == 1.0
    assert metrics["test_nll"] < 0.2


def test_the_final_mc_test_runs_with_the_eval_settings(fake_imdb, tmp_path, monkeypatch):
    """eval.samples, eval.batch, eval.word_dropout and data.eval_batch_size reach the MC passes over the test
    reviews."""
    import inspect

    from tests.helpers import train as run
    from vdrnn.tasks.sentiment import predict as predict_module

    calls, real = [], predict_module.mc_outputs

    def spy(*args, **kwargs):
        calls.append(inspect.signature(real).bind(*args, **kwargs).arguments)
        return real(*args, **kwargs)

    monkeypatch.setattr(predict_module, "mc_outputs", spy)
    raw = tiny_imdb_config(fake_imdb, "data.eval_batch_size=7", "trainer.epochs=1", "eval=mc", "eval.samples=3",
                           "eval.batch=2", "eval.word_dropout=true")
    run(raw, tmp_path)
    [call] = calls  # trainer.select=scale: the final test alone is MC
    assert len(call["split"]) == 40  # the test reviews
    assert (call["samples"], call["samples_per_pass"], call["batch_size"], call["word_dropout"]) == (3, 2, 7, True)


def test_mc_regression_side_by_side_equals_one_pass_at_a_time_in_expectation():
    # Copies of a review run side by side must each draw their own masks: if they shared one, the side-by-side
    # average would be a single draw, as far from the expectation as the sequential average's spread times sqrt(K).
    torch.manual_seed(0)
    net = SentimentModel(30, 1, SentimentModelConfig(cell="lstm", hidden_size=16, impl="reference"),
                         DropoutConfig(scheme="variational", **VARIATIONAL))
    for p in net.parameters():  # large weights, so that masks move the prediction a lot
        p.data.uniform_(-1.0, 1.0)
    tokens = torch.randint(2, 30, (6, 12))
    split = Split(tokens, torch.full((6,), 12), torch.zeros(6))
    scaled = predict(net, split, "regression", batch_size=6)
    single = torch.stack([predict_mc(net, split, "regression", 1, 1, 6) for _ in range(50)])  # [50 draws, 6]
    side_by_side = predict_mc(net, split, "regression", 400, 400, 6 * 400)
    one_at_a_time = predict_mc(net, split, "regression", 400, 1, 6)
    assert side_by_side.shape == one_at_a_time.shape == scaled.shape == (6,)
    error = single.std(dim=0) / 400**0.5  # of a 400-sample mean
    assert ((side_by_side - one_at_a_time).abs() < 5 * error).all()
    assert ((side_by_side - scaled).abs() > 5 * error).any()  # the MC estimate, not weight scaling


@pytest.mark.parametrize("select", ["scale", "mc", "last"])
def test_an_interrupted_sentiment_run_resumes_to_the_uninterrupted_numbers(fake_imdb, tmp_path, select):
    """Adam's moments, the weight average, the RNG and the per-epoch test curve all come back from last.pt; with
    trainer.select=mc the MC validation scores too; with trainer.select=last, here without validation reviews, the
    last epoch is tested."""
    from tests.helpers import history
    from tests.helpers import train as run

    held_out = ["data.valid_fraction=0"] if select == "last" else []

    def train(folder, epochs):
        raw = tiny_imdb_config(fake_imdb, "cell=gru", f"trainer.epochs={epochs}", "trainer.ema=0.9", "eval=mc",
                               "eval.samples=3", "eval.batch=3", f"trainer.select={select}", *held_out)
        return run(raw, tmp_path / folder)

    straight = train("straight", 3)
    train("resumed", 1)
    resumed = train("resumed", 3)

    def untimed(folder):  # every per-epoch record but its speed
        return [{k: v for k, v in r.items() if k not in ("wps", "epoch_seconds")} for r in history(tmp_path / folder)]

    assert untimed("resumed") == untimed("straight") and len(untimed("resumed")) == 3
    for key in ("test_accuracy", "test_nll", "test_accuracy_mc", "test_nll_mc",
                {"scale": "best_valid_nll", "mc": "best_valid_nll_mc", "last": "best_valid_nll"}[select]):
        assert resumed[key] == straight[key], key


def test_selecting_by_mc_validation_keeps_the_training_run_and_the_epoch_of_best_mc_nll(fake_imdb, tmp_path):
    """trainer.select=mc scores every epoch with MC dropout on the validation reviews and keeps the epoch of least
    MC NLL; its masks come from a fork of the random state, so the training itself is trainer.select=scale's."""
    from tests.helpers import history
    from tests.helpers import train as run
    from vdrnn.training import checkpoint

    def train(select):
        raw = tiny_imdb_config(fake_imdb, "cell=lstm", "trainer.epochs=6", "trainer.lr=0.01", "eval=mc",
                               "eval.samples=4", "eval.batch=4", f"trainer.select={select}")
        return run(raw, tmp_path / select), history(tmp_path / select)

    (by_scale, scale_epochs), (by_mc, mc_epochs) = train("scale"), train("mc")
    same = ("train_loss", "valid_nll", "valid_accuracy", "test_nll", "test_accuracy")
    assert [[r[k] for k in same] for r in mc_epochs] == [[r[k] for k in same] for r in scale_epochs]
    assert "valid_nll_mc" not in scale_epochs[0]
    mc_scores = [r["valid_nll_mc"] for r in mc_epochs]
    assert all({"valid_accuracy_mc", "valid_ece_mc", "valid_entropy_mc"} <= r.keys() for r in mc_epochs)
    assert [r["valid_nll_mc"] for r in mc_epochs] != [r["valid_nll"] for r in mc_epochs]  # MC, not weight scaling
    assert by_mc["best_valid_nll_mc"] == min(mc_scores) and "best_valid_nll" not in by_mc
    assert checkpoint.load(tmp_path / "mc" / checkpoint.BEST)["epoch"] == 1 + mc_scores.index(min(mc_scores))
    assert by_scale["best_valid_nll"] == min(r["valid_nll"] for r in scale_epochs)


def test_selecting_the_last_epoch_keeps_the_training_run_and_tests_its_last_weights(fake_imdb, tmp_path):
    """trainer.select=last: the same training run as trainer.select=scale (validation still scored and logged),
    best.pt rewritten every epoch, and the final test that of the last epoch's weights."""
    from tests.helpers import history
    from tests.helpers import train as run
    from vdrnn.training import checkpoint

    def train(select):
        # lr 1 overshoots: validation NLL measured 0.83, 0.21, 2.42, 2.17, so the two keep different epochs.
        raw = tiny_imdb_config(fake_imdb, "trainer.epochs=4", "trainer.lr=1.0", "eval=scale",
                               f"trainer.select={select}")
        return run(raw, tmp_path / select), history(tmp_path / select)

    (by_scale, scale_epochs), (by_last, last_epochs) = train("scale"), train("last")
    same = ("train_loss", "valid_nll", "test_nll", "test_accuracy")
    assert [[r[k] for k in same] for r in last_epochs] == [[r[k] for k in same] for r in scale_epochs]
    scores = [r["valid_nll"] for r in scale_epochs]
    assert scores.index(min(scores)) != 3
    assert checkpoint.load(tmp_path / "last" / checkpoint.BEST)["epoch"] == 4
    assert by_last["best_valid_nll"] == scores[-1] and by_scale["best_valid_nll"] == min(scores)
    for key in ("nll", "accuracy", "ece"):  # no weight average: best.pt's weights are the last epoch's
        assert by_last[f"test_{key}"] == last_epochs[-1][f"test_{key}"], key
    assert by_scale["test_nll"] != by_last["test_nll"]


def test_a_run_without_validation_reviews_trains_on_all_and_tests_its_last_epoch(fake_imdb, tmp_path):
    """data.valid_fraction=0 with trainer.select=last: nothing validated or logged as validation, every epoch on all
    40 training reviews, the last epoch tested; the score a sweeper would read is None."""
    from tests.helpers import history
    from tests.helpers import train as run
    from vdrnn.training import checkpoint

    raw = tiny_imdb_config(fake_imdb, "trainer.epochs=2", "trainer.lr=0.05", "trainer.ema=0", "eval=scale",
                           "trainer.select=last", "data.valid_fraction=0")
    metrics = run(raw, tmp_path)
    records = history(tmp_path)
    assert len(records) == 2 and not any(k.startswith("valid_") for r in records for k in r)
    assert records[-1]["step"] == 2 * 5  # 40 reviews in minibatches of 8, not the 30 a quarter held out leaves
    assert metrics["best_valid_nll"] is None and not any(k.startswith("valid_") for k in metrics)
    assert metrics["test_nll"] == records[-1]["test_nll"]
    assert checkpoint.load(tmp_path / checkpoint.BEST)["epoch"] == 2
    assert json.loads((tmp_path / "metrics.json").read_text())["best_valid_nll"] is None  # JSON null, not NaN


def test_a_fixed_budget_run_whose_best_pt_is_gone_is_not_tested_on_the_weights_in_memory(fake_imdb, tmp_path):
    """Under trainer.ema the weights in memory are not the average best.pt kept: the rerun refuses to test them."""
    from tests.helpers import train as run
    from vdrnn.errors import CheckpointError

    raw = tiny_imdb_config(fake_imdb, "trainer.epochs=1", "trainer.ema=0.9", "eval=scale", "trainer.select=last",
                           "data.valid_fraction=0")
    run(raw, tmp_path)
    (tmp_path / "best.pt").unlink()
    with pytest.raises(CheckpointError, match=r"best.pt is missing although the run kept there its last epoch's "
                                              r"weights \(trainer.select=last\)"):
        run(raw, tmp_path)  # continues from last.pt, with no epoch left to train, to the test


def test_a_run_selecting_by_mc_resumes_only_with_the_mc_score_it_selected_by(fake_imdb, tmp_path):

    from tests.helpers import train as run

    def train(*extra):
        raw = tiny_imdb_config(fake_imdb, "eval=mc", "eval.samples=3", "eval.batch=3", "trainer.select=mc", *extra)
        return run(raw, tmp_path)

    train("trainer.epochs=1")
    with pytest.raises(ConfigError, match=r"eval.samples: 3 -> 10") as refused:
        train("trainer.epochs=2", "eval.samples=10")
    assert "init_from" not in str(refused.value)  # which sentiment runs do not take
    train("trainer.epochs=2", "eval.batch=1")  # how the passes are grouped is not the score


def test_a_confident_mistake_costs_its_log_probability_not_the_clamp():
    """A class 110 logits behind has probability e^-110: in fp32 that rounds to 0 and the NLL would be the clamp's
    708 nats."""
    from vdrnn.tasks.sentiment.predict import readout

    probs = readout(torch.tensor([[110.0, 0.0]]), CLASSIFICATION)
    assert classification_metrics(probs, torch.tensor([1]))["nll"] == pytest.approx(110.0, rel=1e-9)


def test_mc_validation_scores_the_validation_reviews(fake_imdb, tmp_path):
    """trainer.select=mc with every dropout probability 0: an MC pass is the weight-scaling pass, so each epoch's
    valid_nll_mc is its valid_nll (and not the test reviews' NLL)."""
    from tests.helpers import history
    from tests.helpers import train as run

    raw = tiny_imdb_config(fake_imdb, "trainer.epochs=2", "trainer.lr=0.05", "dropout.embedding=0", "dropout.input=0",
                           "dropout.recurrent=0", "dropout.output=0", "eval=mc", "eval.samples=2", "eval.batch=2",
                           "trainer.select=mc")
    run(raw, tmp_path)
    records = history(tmp_path)
    assert len(records) == 2
    for record in records:
        assert record["valid_nll_mc"] == pytest.approx(record["valid_nll"], rel=1e-6)
        assert record["valid_nll"] != pytest.approx(record["test_nll"], rel=1e-5)  # the two splits tell apart


def test_the_per_epoch_test_curve_scores_the_test_reviews(fake_imdb, tmp_path):
    """One epoch without a weight average: best.pt holds that epoch's weights, so the final test (metrics.json) and
    the epoch's point of the test curve (metrics.jsonl) are the same numbers."""
    from tests.helpers import history
    from tests.helpers import train as run

    raw = tiny_imdb_config(fake_imdb, "trainer.epochs=1", "trainer.lr=0.01", "trainer.ema=0", "eval=scale")
    metrics = run(raw, tmp_path)
    [epoch] = history(tmp_path)
    for key in ("nll", "accuracy", "ece", "entropy"):
        assert epoch[f"test_{key}"] == metrics[f"test_{key}"], key
    assert epoch["test_nll"] != epoch["valid_nll"]  # the two splits tell apart


def record_training_batches(monkeypatch) -> list:
    """The minibatches SentimentTrainer trains on, in the order it draws them (a spy on its ``minibatches``)."""
    from vdrnn.tasks.sentiment import train as trainer

    drawn, minibatches = [], trainer.minibatches

    def recording(*args, **kwargs):
        for batch in minibatches(*args, **kwargs):
            drawn.append(batch)
            yield batch

    monkeypatch.setattr(trainer, "minibatches", recording)
    return drawn


def test_the_scale_loss_is_the_mse_of_the_ratings_plus_the_kl_term_of_learned_noise(fake_scale, tmp_path,
                                                                                       monkeypatch):
    """Every optimizer step of a scale run minimises the mean squared error of the standardised ratings, plus, with
    dropout.learn_alpha, Kingma's KL term: kl_weight * KL / (training chunks)."""
    from tests.helpers import composed
    from vdrnn.config import to_container

    raw = to_container(composed("dataset=scale", "dropout=gaussian", "dropout.learn_alpha=true",
                                "dropout.kl_weight=0.5", f"data.root={fake_scale}", "data.max_length=4",
                                "model.hidden_size=8", "data.batch_size=8", "trainer.epochs=1", "eval=scale",
                                "trainer.progress=false", "device=cpu"))
    trainer = trainer_for(raw, tmp_path)
    batches, outputs, steps = record_training_batches(monkeypatch), [], []
    model, forward, optimizer_step = trainer.model, trainer.model.forward, trainer.optimization.step

    def recorded_forward(*args, **kwargs):
        out = forward(*args, **kwargs)
        outputs.append(out.detach().clone())
        return out

    def recorded_step(loss):
        targets = batches[-1][2]
        mse = (outputs[-1].squeeze(-1) - targets).square().mean()
        kl = 0.5 * model.regularizer(len(trainer.data.train)).detach()
        steps.append((loss.detach().clone(), mse, kl))
        return optimizer_step(loss)

    model.forward, trainer.optimization.step = recorded_forward, recorded_step
    fit(trainer)
    assert len(steps) == trainer.steps_per_epoch() > 1
    for loss, mse, kl in steps:
        assert kl > 0.01 * mse  # a term the comparison would notice missing
        assert loss.item() == pytest.approx((mse + kl).item(), rel=1e-5)


def test_the_training_reviews_are_reshuffled_every_epoch_and_the_seed_fixes_the_order(fake_imdb, tmp_path,
                                                                                      monkeypatch):


    raw = tiny_imdb_config(fake_imdb, "trainer.epochs=2", "eval=scale")
    drawn = record_training_batches(monkeypatch)

    def orders(folder: str) -> tuple[list, list[list]]:
        """The training reviews in file order, and in the order each epoch read them (a review: its tokens)."""
        drawn.clear()
        trainer = trainer_for(raw, tmp_path / folder)
        fit(trainer)
        train = trainer.data.train
        in_file = [tuple(train.tokens[i, : train.lengths[i]].tolist()) for i in range(len(train))]
        read = [tuple(tokens[: n, b].tolist()) for tokens, lengths, _ in drawn for b, n in enumerate(lengths.tolist())]
        return in_file, [read[: len(train)], read[len(train) :]]

    in_file, (first, second) = orders("a")
    assert len(set(in_file)) == len(in_file) == 30  # every review tells itself apart
    assert sorted(first) == sorted(second) == sorted(in_file)  # each epoch reads every review once
    assert first != in_file and second != first
    assert orders("b") == (in_file, [first, second])  # the same seed, the same shuffles


def test_scale_reviews_come_critic_by_critic_in_gals_order(fake_scale):
    """The split shuffles this list with data.split_seed, so Gal's order (Schwartz, Berardinelli, Renshaw, Rhodes) is
    part of which reviews are test reviews."""
    gal = ["Dennis+Schwartz", "James+Berardinelli", "Scott+Renshaw", "Steve+Rhodes"]
    critic_of_folder = {author: int(next((fake_scale / "scaledata" / author).glob("subj.*")).read_text().split()[1])
                        for author in gal}  # fake_scale writes "critic <a> review <i> ..."
    critics = [int(r.text.split()[1]) for r in scale.load(str(fake_scale))]
    assert critics == sorted(critics, key=[critic_of_folder[a] for a in gal].index)


def test_scale_ratings_at_both_ends_of_the_unit_interval_are_read(fake_scale):
    """0 and 1 are ratings (Renshaw's files hold both), not damage."""
    path = fake_scale / "scaledata" / AUTHORS[1] / f"rating.{AUTHORS[1]}"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(["0", "1", *lines[2:]]) + "\n")
    ratings = [r.target for r in scale.load(str(fake_scale)) if r.text.startswith("critic 1 ")]
    assert ratings[:2] == [0.0, 1.0]


def test_scale_files_of_different_lengths_are_a_data_error_naming_both(fake_scale):
    """A rating line lost: every later review would get its neighbour's rating, so it is refused, naming the files."""
    path = fake_scale / "scaledata" / AUTHORS[3] / f"rating.{AUTHORS[3]}"
    path.write_text("\n".join(path.read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(DataError, match=rf"subj.{re.escape(AUTHORS[3])} has 10 reviews but .*rating.{re.escape(AUTHORS[3])} 9"):
        scale.load(str(fake_scale))
