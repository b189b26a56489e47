"""Weight-scaling and MC-dropout perplexity."""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch

from vdrnn.dropout import DropoutConfig, make_dropout
from vdrnn.evaluate import mc_perplexity, perplexity
from vdrnn.model import LanguageModel, ModelConfig

V = 12


def model_with(scheme: str, **p) -> LanguageModel:
    torch.manual_seed(0)
    return LanguageModel(V, ModelConfig(num_layers=2, hidden_size=10, impl="reference"),
                         make_dropout(DropoutConfig(scheme=scheme, **p))).eval()


def test_perplexity_matches_a_direct_computation():
    model = model_with("none")
    stream = torch.randint(0, V, (50,))
    logits, _ = model(stream[:-1, None], model.initial_state(1, "cpu"))
    nll = torch.nn.functional.cross_entropy(logits[:, 0], stream[1:])
    assert abs(perplexity(model, stream, batch_size=1, bptt=7) - math.exp(nll.item())) < 1e-4


def test_mc_without_dropout_equals_weight_scaling():
    model = model_with("none")
    stream = torch.randint(0, V, (60,))
    assert abs(mc_perplexity(model, stream, samples=3, batch=2, bptt=8) - perplexity(model, stream, 1, 8)) < 1e-6


class FixedSamples(torch.nn.Module):
    """Stands in for a stochastic model: replica r predicts with probabilities PROBS[r] at every step."""

    PROBS = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.4, 0.3]])

    def __init__(self):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.dropout = make_dropout(DropoutConfig(scheme="variational", recurrent=0.5))  # per-sample masks

    def initial_state(self, batch, device):
        return None

    def frozen_masks(self):
        return nullcontext()

    def forward(self, tokens, state, stochastic=None, word_dropout=True):
        steps, replicas = tokens.shape
        return self.PROBS[:replicas].log().expand(steps, replicas, 3), state


def test_mc_averages_probabilities_not_log_probabilities():
    stream = torch.tensor([0, 2, 1, 2, 0, 0])  # targets 2, 1, 2, 0, 0
    ppl = mc_perplexity(FixedSamples(), stream, samples=3, batch=3, bptt=2)
    mean_p = FixedSamples.PROBS.mean(0)
    expected = math.exp(-sum(math.log(mean_p[t]) for t in stream[1:].tolist()) / 5)
    geometric = math.exp(-sum(FixedSamples.PROBS[:, t].log().mean().item() for t in stream[1:].tolist()) / 5)
    assert abs(ppl - expected) < 1e-5 and ppl < geometric - 0.1


def test_mc_splits_samples_into_passes():
    stream = torch.tensor([0, 2, 1, 2, 0, 0])
    # 3 samples run 2 + 1: replicas 0, 1 then replica 0 again.
    ppl = mc_perplexity(FixedSamples(), stream, samples=3, batch=2, bptt=4)
    mean_p = FixedSamples.PROBS[[0, 1, 0]].mean(0)
    assert abs(ppl - math.exp(-sum(math.log(mean_p[t]) for t in stream[1:].tolist()) / 5)) < 1e-5


def test_mc_is_stochastic_and_close_to_weight_scaling_with_variational_dropout():
    model = model_with("variational", input=0.3, recurrent=0.3, output=0.3)
    stream = torch.randint(0, V, (80,))
    torch.manual_seed(1)
    a = mc_perplexity(model, stream, samples=8, batch=8, bptt=10)
    b = mc_perplexity(model, stream, samples=8, batch=8, bptt=10)
    scale = perplexity(model, stream, 1, 10)
    assert a != b and abs(math.log(a) - math.log(scale)) < 0.2


def test_stream_masks_are_kept_for_the_whole_stream_as_gals_mc_test():
    """With masks="stream" the chunking of the stream cannot matter: one mask per sample for all of it."""
    model = model_with("variational", input=0.3, recurrent=0.3, output=0.3)
    stream = torch.randint(0, V, (60,))
    results = {}
    for masks in ("stream", "minibatch"):
        for bptt in (7, 59):
            torch.manual_seed(5)
            results[masks, bptt] = mc_perplexity(model, stream, samples=4, batch=4, bptt=bptt, masks=masks)
    assert abs(results["stream", 7] - results["stream", 59]) < 1e-9
    assert abs(results["minibatch", 7] - results["minibatch", 59]) > 1e-6  # redrawn every 7 tokens


def test_frozen_masks_keep_locked_masks_but_not_zaremba_fresh_ones():
    tokens = torch.randint(0, V, (5, 3))
    for scheme, p, kept in (("variational", {"input": 0.5, "recurrent": 0.5}, True),
                            ("zaremba", {"input": 0.5}, False)):
        model = model_with(scheme, **p)
        state = model.initial_state(3, "cpu")
        with model.frozen_masks():
            a, _ = model(tokens, state, stochastic=True)
            b, _ = model(tokens, state, stochastic=True)
        assert torch.equal(a, b) == kept
        c, _ = model(tokens, state, stochastic=True)
        assert not torch.equal(a, c)  # outside the context masks are drawn per call again


def test_mc_with_masks_shared_by_the_batch_runs_its_samples_one_by_one():
    """AWD's weight drop draws one W_hh mask per pass: side by side, all columns would be one sample."""
    model = model_with("awd", weight=0.5)
    assert model.dropout.shares_draws_across_batch(word_dropout=False)
    stream = torch.randint(0, V, (40,))
    results = []
    for batch in (8, 1):
        torch.manual_seed(1)
        results.append(mc_perplexity(model, stream, samples=8, batch=batch, bptt=8))
    torch.manual_seed(1)
    one_sample = mc_perplexity(model, stream, samples=1, batch=1, bptt=8)
    assert results[0] == results[1] and results[0] != one_sample


def test_which_schemes_share_draws_across_the_batch():
    def shares(word_dropout=False, **config):
        return make_dropout(DropoutConfig(**config)).shares_draws_across_batch(word_dropout)

    assert not shares(scheme="variational", input=0.5, recurrent=0.5, embedding=0.5)
    assert shares(scheme="variational", input=0.5, locked_mask="batch")
    assert not shares(scheme="variational", embedding=0.5, embedding_mask="batch")  # word types off in MC
    assert shares(True, scheme="variational", embedding=0.5, embedding_mask="batch")
    assert shares(scheme="awd", weight=0.5) and not shares(scheme="awd", input=0.5)
