"""MC dropout in one call (mc_predict) against a hand-written loop, its uncertainty measures, and the contexts it is
built from (mc_dropout, fixed_masks)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vdrnn.nn as vnn

V, E, H, C, T, B = 20, 6, 8, 3, 7, 4


class Classifier(nn.Module):
    """A user's sequence classifier: embedding, a 2-layer vdrnn.nn.LSTM, nn.Dropout, the last step's logits."""

    def __init__(self, scheme):
        super().__init__()
        self.embedding = vnn.Embedding(V, E, dropout=0.2, batch_first=True)
        self.lstm = vnn.LSTM(E, H, num_layers=2, batch_first=True, dropout=scheme)
        self.dropout = nn.Dropout(0.5)  # a torch module: MC leaves it evaluating
        self.head = nn.Linear(H, C)

    def forward(self, tokens):
        y, _ = self.lstm(self.embedding(tokens))
        return self.head(self.dropout(y[:, -1]))


def classifier(scheme=None) -> Classifier:
    torch.manual_seed(0)
    model = Classifier(scheme or vnn.Variational(input=0.4, recurrent=0.4, output=0.4))
    for p in model.parameters():  # large weights: masks move the predictions a lot
        nn.init.uniform_(p, -1.5, 1.5)
    return model.eval()


TOKENS = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(3))


def by_hand(model, samples: int, per_call: int, embedding: bool = False) -> torch.Tensor:
    """Every sample's probabilities [S, B, C]: ``per_call`` copies of the batch in one training-mode call of the
    recurrent modules (copy j of sequence i at row j * B + i), the rest of the model evaluating."""
    out = []
    with torch.no_grad():
        for start in range(0, samples, per_call):
            k = min(per_call, samples - start)
            model.lstm.train()
            model.embedding.train(embedding)
            logits = model(TOKENS.repeat(k, 1))
            model.eval()
            out.append(logits.double().softmax(-1).view(k, B, C))
    return torch.cat(out)


@pytest.mark.parametrize("per_call", [None, 2, 1])
def test_mc_predict_is_the_average_of_the_samples_probabilities_drawn_as_by_hand(per_call):
    model = classifier()
    torch.manual_seed(5)
    got = vnn.mc_predict(model, TOKENS, samples=6, samples_per_call=per_call)
    torch.manual_seed(5)
    expected = by_hand(model, 6, per_call or 6)
    torch.testing.assert_close(got.samples, expected.float())
    torch.testing.assert_close(got.mean, expected.mean(0))
    assert got.mean.dtype == torch.float64 and torch.allclose(got.mean.sum(-1), torch.ones(B, dtype=torch.float64))
    assert not model.training and not model.lstm.training  # left as it came


def test_the_samples_differ_and_word_dropout_is_off_unless_asked():
    model = classifier()
    prediction = vnn.mc_predict(model, TOKENS, samples=8)
    assert prediction.samples.shape == (8, B, C) and not torch.allclose(prediction.samples[0], prediction.samples[1])
    torch.manual_seed(5)
    with_words = vnn.mc_predict(model, TOKENS, samples=4, embedding=True)
    torch.manual_seed(5)
    torch.testing.assert_close(with_words.samples, by_hand(model, 4, 4, embedding=True).float())


def test_masks_shared_by_the_batch_run_one_sample_per_call():
    """WeightDrop draws one W_hh mask per call: side by side, every copy would be the same sample."""
    model = classifier(vnn.WeightDrop(weight=0.5, input=0.3))
    assert vnn.shares_draws_across_batch(model)
    torch.manual_seed(5)
    got = vnn.mc_predict(model, TOKENS, samples=3)
    torch.manual_seed(5)
    torch.testing.assert_close(got.samples, by_hand(model, 3, 1).float())
    assert not torch.allclose(got.samples[0], got.samples[1])


def test_uncertainty_splits_into_the_datas_and_the_models():
    model = classifier()
    prediction = vnn.mc_predict(model, TOKENS, samples=50)
    p, samples = prediction.mean, prediction.samples.double()
    total = -(p * p.log()).sum(-1)
    aleatoric = -(samples * samples.clamp_min(1e-300).log()).sum(-1).mean(0)
    torch.testing.assert_close(prediction.predictive_entropy(), total)
    torch.testing.assert_close(prediction.expected_entropy(), aleatoric, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(prediction.mutual_information(), total - aleatoric, atol=1e-6, rtol=1e-5)
    assert (prediction.mutual_information() > 1e-3).all()  # the sampled models disagree
    undropped = classifier(vnn.Variational())  # no noise: every sample is the same model
    still = vnn.mc_predict(undropped, TOKENS, samples=5)
    torch.testing.assert_close(still.mutual_information(), torch.zeros(B, dtype=torch.float64), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="keep_samples=True"):
        vnn.mc_predict(model, TOKENS, samples=2, keep_samples=False).expected_entropy()


def test_time_major_models_and_several_inputs_with_their_own_batch_dimensions():
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = vnn.LSTM(E, H, dropout=vnn.Variational(recurrent=0.5))
            self.head = nn.Linear(H, C)

        def forward(self, x, scale):
            return self.head(self.lstm(x)[0]) * scale.view(1, -1, 1)  # [T, B, C]

    torch.manual_seed(0)
    model = Tagger().eval()
    x, scale = torch.randn(T, B, E), torch.ones(B)
    prediction = vnn.mc_predict(model, (x, scale), samples=3, batch_dim=(1, 0), output_batch_dim=1)
    assert prediction.samples.shape == (3, T, B, C)
    # the model's batch dimension found from its own modules (time-major), and a call of one's own
    alone = vnn.mc_predict(model, x, samples=2, forward=lambda m, x: m(x, torch.ones(x.shape[1])))
    assert alone.mean.shape == (T, B, C)
    with pytest.raises(ValueError, match="pass output_batch_dim"):
        vnn.mc_predict(model, (x, scale), samples=2, batch_dim=(1, 0))
    with pytest.raises(ValueError, match=r"mc_predict\(samples=0\): must be a whole number >= 1"):
        vnn.mc_predict(model, (x, scale), samples=0)


def test_regression_averages_the_predictions_themselves():
    model = classifier()
    prediction = vnn.mc_predict(model, TOKENS, samples=4, probabilities=lambda out: out.double())
    torch.testing.assert_close(prediction.mean, prediction.samples.double().mean(0), atol=1e-6, rtol=1e-6)


def test_mc_dropout_switches_on_the_masks_and_nothing_else():
    model = classifier()
    with vnn.mc_dropout(model):
        assert model.lstm.training and model.embedding.training and not model.dropout.training
        assert not model.training
    with vnn.mc_dropout(model, embedding=False):
        assert model.lstm.training and not model.embedding.training
    assert not any(m.training for m in model.modules())


@pytest.mark.parametrize("scheme, kept", [(vnn.Variational(input=0.3, recurrent=0.3, output=0.3), True),
                                          (vnn.Zaremba(input=0.3), False)])
def test_inside_fixed_masks_a_stream_in_minibatches_is_one_long_sequence(scheme, kept):
    """Gal's MC test reads the test stream in minibatches, carrying the state, each sample keeping its masks: the
    same as one call over the whole stream with one draw. Zaremba's fresh masks are drawn at every step anyway."""
    torch.manual_seed(0)
    lstm = vnn.LSTM(E, H, num_layers=2, dropout=scheme).train()
    stream = torch.randn(12, B, E)
    torch.manual_seed(1)
    whole, _ = lstm(stream)
    torch.manual_seed(1)
    with vnn.fixed_masks(lstm):
        parts, state = [], None
        for start in range(0, 12, 5):
            y, state = lstm(stream[start:start + 5], state)
            parts.append(y)
    assert torch.allclose(torch.cat(parts), whole, atol=1e-6) == kept
