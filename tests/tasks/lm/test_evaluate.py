"""Weight-scaling and MC-dropout perplexity."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import vdrnn.nn as vnn
from vdrnn.config import ModelConfig
from vdrnn.dropout.config import DropoutConfig
from vdrnn.tasks.lm.evaluate import mc_perplexity, perplexity, ws_nll_at
from vdrnn.tasks.lm.model import LanguageModel

V = 12


def model_with(scheme: str, **p) -> LanguageModel:
    torch.manual_seed(0)
    return LanguageModel(V, ModelConfig(num_layers=2, hidden_size=10, impl="reference"),
                         DropoutConfig(scheme=scheme, **p)).eval()


def test_perplexity_matches_a_direct_computation():
    model = model_with("none")
    stream = torch.randint(0, V, (50,))
    logits, _ = model(stream[:-1, None], model.initial_state(1, "cpu"))
    nll = torch.nn.functional.cross_entropy(logits[:, 0], stream[1:])
    assert abs(perplexity(model, stream, batch_size=1, bptt=7) - math.exp(nll.item())) < 1e-4


def test_parallel_streams_each_carry_their_own_state_over_the_minibatches():
    """batch_size 4, bptt 5: the validation layout (one column per stream, state carried between minibatches) scores
    what one call over every column does."""
    from vdrnn.tasks.lm.data import batchify

    model = model_with("none")
    stream = torch.randint(0, V, (50,))
    columns = batchify(stream, 4)  # [12, 4]: 48 tokens, the last 2 dropped
    logits, _ = model(columns[:-1], model.initial_state(4, "cpu"))
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), columns[1:].flatten())  # 44 targets
    assert perplexity(model, stream, batch_size=4, bptt=5) == pytest.approx(math.exp(nll.item()), rel=1e-5)


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

    def initial_state(self, batch, device):
        return None

    def forward(self, tokens, state):
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


def counting_batch(batch: int, steps: int) -> torch.Tensor:
    """[steps, batch] sequences that count up from a random start: w, w+1, ... (mod V)."""
    return (torch.randint(0, V, (1, batch)) + torch.arange(steps)[:, None]) % V


@pytest.fixture(scope="module")
def trained():
    """A variational-dropout model (word types included) trained for a few seconds on counting sequences: its
    predictions are far from uniform, so MC and weight scaling differ from V and from each other."""
    model = model_with("variational", embedding=0.2, input=0.3, recurrent=0.3, output=0.3).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(30):  # measured: weight-scaling perplexity 2.2 on COUNTING after 30 steps (uniform: V = 12)
        tokens = counting_batch(16, 11)
        logits, _ = model(tokens[:-1], model.initial_state(16, "cpu"))
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


# A test stream the model has learned: two counting runs (the jump at 30 is not predictable).
COUNTING = torch.cat([(torch.arange(30) + 3) % V, (torch.arange(30) + 7) % V])


def mc_reference(model, stream: torch.Tensor, samples: int, batch: int, word_dropout: bool = False) -> float:
    """ppl_MC computed directly: each pass of up to ``batch`` samples reads the whole stream in one forward call
    (one mask draw per sample: what masks="stream" keeps over the minibatches), softmax in float64, each token's
    probability averaged over all samples, then the log."""
    probs, done = [], 0
    with torch.no_grad():
        while done < samples:
            k = min(batch, samples - done)
            with vnn.mc_dropout(model, embedding=word_dropout):
                logits, _ = model(stream[:-1, None].expand(-1, k), model.initial_state(k, "cpu"))
            probs.append(logits.double().softmax(dim=-1))  # [T, k, V]
            done += k
    mean = torch.cat(probs, dim=1).mean(dim=1)  # [T, V]: the average over all samples
    return math.exp(-mean.gather(1, stream[1:, None]).log().mean().item())


def test_mc_perplexity_is_the_average_probability_over_the_same_seeded_masks(trained):
    # 6 samples, 4 side by side: passes of 4 and 2 columns; bptt 7 cuts the stream into 9 minibatches, the last short.
    torch.manual_seed(1)
    got = mc_perplexity(trained, COUNTING, samples=6, batch=4, bptt=7)
    torch.manual_seed(1)
    expected = mc_reference(trained, COUNTING, samples=6, batch=4)
    assert got == pytest.approx(expected, rel=1e-5)
    # The masks matter: an MC that ignored them would be weight scaling, and this model is far from uniform.
    scale = perplexity(trained, COUNTING, 1, 7)
    assert scale < V / 2 and got < V / 2  # measured: 2.19 and 2.63
    assert abs(math.log(got) - math.log(scale)) > 0.05  # measured: 0.18
    assert mc_perplexity(trained, COUNTING, samples=6, batch=4, bptt=7) != got  # unseeded: other masks


@pytest.mark.parametrize("scheme, p", [
    ("moon", {"cell": 0.5, "embedding": 0.2}),
    ("gaussian", {"embedding": 0.2, "input": 0.3, "recurrent": 0.3, "output": 0.3}),
    ("gaussian", {"input": 0.3, "recurrent": 0.3, "output": 0.3, "learn_alpha": True}),
    ("variational", {"input": 0.3, "recurrent": 0.3, "per_gate": True}),
], ids=["moon", "gaussian", "gaussian-learned", "untied"])
def test_every_schemes_stream_masks_are_one_draw_per_sample_for_the_whole_stream(scheme, p):
    """Nine minibatches of 7 tokens and a single call over the stream see the same masks (what each scheme draws)."""
    model = model_with(scheme, **p)
    torch.manual_seed(3)
    got = mc_perplexity(model, COUNTING, samples=5, batch=3, bptt=7, word_dropout=True)
    torch.manual_seed(3)
    assert got == pytest.approx(mc_reference(model, COUNTING, samples=5, batch=3, word_dropout=True), rel=1e-6)


def test_mc_word_dropout_drops_word_types_when_asked(trained):
    # Nine minibatches: each sample keeps its word-type draws for the whole stream, as the reference's single
    # call does.
    results = {}
    for word_dropout in (False, True):
        torch.manual_seed(2)
        results[word_dropout] = mc_perplexity(trained, COUNTING, samples=4, batch=4, bptt=7,
                                              word_dropout=word_dropout)
        torch.manual_seed(2)
        assert results[word_dropout] == pytest.approx(
            mc_reference(trained, COUNTING, samples=4, batch=4, word_dropout=word_dropout), rel=1e-5)
    assert abs(math.log(results[True]) - math.log(results[False])) > 1e-3  # measured: 0.029 (2.40 vs 2.47)


@pytest.mark.parametrize("word_dropout", [False, True])
def test_stream_masks_are_kept_for_the_whole_stream_as_gals_mc_test(word_dropout):
    """With masks="stream" the chunking of the stream cannot matter: one mask per sample for all of it, and with
    word-type dropout on, one draw per word type per sample."""
    model = model_with("variational", embedding=0.3, input=0.3, recurrent=0.3, output=0.3)
    stream = torch.randint(0, V, (60,))
    results = {}
    for masks in ("stream", "minibatch"):
        for bptt in (7, 59):
            torch.manual_seed(5)
            results[masks, bptt] = mc_perplexity(model, stream, samples=4, batch=4, bptt=bptt, masks=masks,
                                                 word_dropout=word_dropout)
    assert abs(results["stream", 7] - results["stream", 59]) < 1e-9
    assert abs(results["minibatch", 7] - results["minibatch", 59]) > 1e-6  # redrawn every 7 tokens


def test_fixed_masks_keep_locked_masks_but_not_zaremba_fresh_ones():
    tokens = torch.randint(0, V, (5, 3))
    for scheme, p, kept in (("variational", {"input": 0.5, "recurrent": 0.5}, True),
                            ("variational", {"embedding": 0.5}, True),  # word types: one table per stream
                            ("zaremba", {"input": 0.5}, False)):
        model = model_with(scheme, **p).train()
        state = model.initial_state(3, "cpu")
        with vnn.fixed_masks(model):
            a, _ = model(tokens, state)
            b, _ = model(tokens, state)
        assert torch.equal(a, b) == kept
        c, _ = model(tokens, state)
        assert not torch.equal(a, c)  # outside the context masks are drawn per call again


def test_mc_with_masks_shared_by_the_batch_runs_its_samples_one_by_one():
    """AWD's weight drop draws one W_hh mask per pass: side by side, all columns would be one sample."""
    model = model_with("awd", weight=0.5)
    assert vnn.shares_draws_across_batch(model, embedding=False)
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
        return vnn.shares_draws_across_batch(model_with(**config), embedding=word_dropout)

    assert not shares(scheme="variational", input=0.5, recurrent=0.5, embedding=0.5)
    assert shares(scheme="variational", input=0.5, locked_mask="batch")
    assert not shares(scheme="variational", embedding=0.5, embedding_mask="batch")  # word types off in MC
    assert shares(True, scheme="variational", embedding=0.5, embedding_mask="batch")
    assert shares(scheme="awd", weight=0.5) and not shares(scheme="awd", input=0.5)


def test_weight_scaling_perplexity_ignores_the_models_training_mode():
    """The trainer validates straight after an epoch, the model still in train mode: perplexity must still be weight
    scaling (every mask one), the same number as in eval mode, not one stochastic draw."""
    model = model_with("variational", embedding=0.3, input=0.3, recurrent=0.3, output=0.3)
    stream = torch.randint(0, V, (40,))
    expected = perplexity(model.eval(), stream, batch_size=2, bptt=7)
    torch.manual_seed(0)
    assert perplexity(model.train(), stream, batch_size=2, bptt=7) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("mc", [False, True], ids=["scale", "mc"])
def test_amp_reaches_every_forward_pass_of_the_evaluation(mc):
    """trainer.amp=bf16 also runs validation and test (weight scaling and MC) under bf16 autocast, and amp=off
    under none: a run's evaluation then costs and rounds as its training does."""
    model = model_with("variational", input=0.3, recurrent=0.3)
    forward, seen = model.forward, []

    def recording(*args, **kwargs):
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return forward(*args, **kwargs)

    model.forward = recording
    stream = torch.randint(0, V, (30,))
    for amp, dtype in (("bf16", torch.bfloat16), ("off", None)):
        seen.clear()
        if mc:
            mc_perplexity(model, stream, samples=2, batch=2, bptt=7, amp=amp)
        else:
            perplexity(model, stream, batch_size=2, bptt=7, amp=amp)
        assert len(seen) == (5 if mc else 2) and set(seen) == {dtype}  # minibatches of 7 of 29 rows (MC), of 14


# ----------------------------------------------------------------------------- calibration of next-token predictions
def test_the_tests_calibration_scores_are_those_of_its_predictive_distributions():
    from vdrnn.calibration import Calibration, expected_calibration_error

    model = model_with("none")
    stream = torch.randint(0, V, (50,))
    calibration = Calibration()
    perplexity(model, stream, batch_size=1, bptt=7, calibration=calibration)
    logits, _ = model(stream[:-1, None], model.initial_state(1, "cpu"))
    probs, targets = logits[:, 0].softmax(dim=-1).double(), stream[1:]
    scores = calibration.summary()
    assert scores["ece"] == pytest.approx(expected_calibration_error(probs, targets), abs=1e-6)
    brier = (probs - torch.nn.functional.one_hot(targets, V)).square().sum(dim=1).mean().item()
    assert scores["brier"] == pytest.approx(brier, rel=1e-5)
    assert scores["entropy"] == pytest.approx(-(probs * probs.log()).sum(dim=1).mean().item(), rel=1e-5)
    assert sum(scores["reliability"]["count"]) == 49


@pytest.mark.parametrize("batch", [3, 2], ids=["one-pass", "several-passes"])
def test_mc_calibration_without_dropout_is_weight_scalings_in_one_pass_and_in_several(batch):
    from vdrnn.calibration import Calibration

    model = model_with("none")
    stream = torch.randint(0, V, (60,))
    ws, mc = Calibration(), Calibration()
    perplexity(model, stream, 1, 8, calibration=ws)
    mc_perplexity(model, stream, samples=3, batch=batch, bptt=8, calibration=mc)
    ws, mc = ws.summary(), mc.summary()
    assert ws.keys() == mc.keys()
    for key in ("ece", "brier", "entropy"):
        assert mc[key] == pytest.approx(ws[key], rel=1e-5, abs=1e-7)
    assert mc["reliability"]["count"] == ws["reliability"]["count"]


# 3 samples in one pass are replicas 0, 1, 2; at batch 2 they run 2 + 1: replicas 0, 1, then 0 again.
@pytest.mark.parametrize("batch,replicas", [(3, [0, 1, 2]), (2, [0, 1, 0])], ids=["one-pass", "several-passes"])
def test_mc_calibration_scores_the_mean_of_the_samples_probabilities(batch, replicas):
    from vdrnn.calibration import Calibration

    model = FixedSamples()
    model.vocab_size = 3
    stream = torch.tensor([2, 0, 1, 2, 2])  # targets 0, 1, 2, 2
    calibration = Calibration()
    mc_perplexity(model, stream, samples=3, batch=batch, bptt=2, calibration=calibration)
    mean = FixedSamples.PROBS[replicas].mean(dim=0).double()  # the same prediction at every step
    confidence, top = mean.max(dim=0)
    right = (stream[1:] == top).double().mean().item()
    scores = calibration.summary()
    assert scores["ece"] == pytest.approx(abs(right - confidence.item()), abs=1e-6)
    assert scores["entropy"] == pytest.approx(-(mean * mean.log()).sum().item(), rel=1e-5)


# ----------------------------------------------------------------------------- the MC average every way, decomposed
def mc_reference_logits(model, stream: torch.Tensor, samples: int, batch: int) -> torch.Tensor:
    """Every sample's logits [T, S, V], drawn as mc_reference draws them (a pass of up to ``batch`` samples reads the
    whole stream in one call)."""
    logits, done = [], 0
    with torch.no_grad():
        while done < samples:
            k = min(batch, samples - done)
            with vnn.mc_dropout(model, embedding=False):
                out, _ = model(stream[:-1, None].expand(-1, k), model.initial_state(k, "cpu"))
            logits.append(out)
            done += k
    return torch.cat(logits, dim=1)


@pytest.mark.parametrize("average", ["arithmetic", "geometric"])
@pytest.mark.parametrize("batch, temperature", [(4, 1.0), (2, 1.7)], ids=["one-pass", "several-passes-tempered"])
def test_mc_perplexity_calibration_and_decomposition_are_those_of_the_full_distributions(trained, average, batch,
                                                                                         temperature):
    """The streamed sums (ReplicaSums) against the slow path: every sample's whole distribution kept, then averaged
    (log_predictive), scored (token_scores) and decomposed (MCPrediction)."""
    from vdrnn.calibration import Calibration, token_scores
    from vdrnn.nn.mc import MCPrediction, log_predictive
    from vdrnn.uncertainty import Decomposition

    torch.manual_seed(4)
    calibration, decomposition = Calibration(), Decomposition()
    got = mc_perplexity(trained, COUNTING, samples=4, batch=batch, bptt=7, calibration=calibration,
                        decomposition=decomposition, average=average, temperature=temperature)
    torch.manual_seed(4)
    logits = mc_reference_logits(trained, COUNTING, samples=4, batch=batch)
    log_p = log_predictive(logits, 1, average, temperature)  # [T, V]
    targets = COUNTING[1:]
    assert got == pytest.approx(math.exp(-log_p.gather(1, targets[:, None]).mean().item()), rel=1e-5)
    expected_calibration = Calibration()
    expected_calibration.add(*token_scores(log_p.exp(), targets))
    for key in ("ece", "brier", "entropy"):
        assert calibration.summary()[key] == pytest.approx(expected_calibration.summary()[key], rel=1e-4, abs=1e-6)
    samples = (logits.double() / temperature).softmax(-1).movedim(1, 0)  # [S, T, V]
    mc, expected_parts = MCPrediction(samples.mean(0), samples), Decomposition()
    expected_parts.add(mc.mean, mc.expected_entropy())
    assert decomposition.summary() == pytest.approx(expected_parts.summary(), rel=1e-4, abs=1e-6)
    assert decomposition.summary()["uncertainty_epistemic"] > 1e-3  # the samples do disagree (measured: ~0.05)


def test_without_dropout_every_average_is_weight_scaling_and_nothing_is_epistemic():
    from vdrnn.uncertainty import Decomposition

    model = model_with("none")
    stream = torch.randint(0, V, (40,))
    for average in ("arithmetic", "geometric"):
        decomposition = Decomposition()
        ppl = mc_perplexity(model, stream, samples=3, batch=2, bptt=8, decomposition=decomposition, average=average)
        assert ppl == pytest.approx(perplexity(model, stream, 1, 8), rel=1e-6)
        assert decomposition.summary()["uncertainty_epistemic"] == pytest.approx(0, abs=1e-6)


def test_the_mc_temperature_fit_replays_its_masks_and_finds_the_brute_force_minimum(trained):
    """eval.temperature=fit on a stream: each grid's NLLs come from the same masks (the seeded fork), so the fit is the
    minimum of one function of T, which a brute-force grid finds too; the draws after the fit are those before."""
    from vdrnn.tasks.lm.data import TokenStreams
    from vdrnn.tasks.lm.evaluate import evaluation_temperatures, mc_nll_at

    corpus = TokenStreams([str(v) for v in range(V)], COUNTING, COUNTING, COUNTING)
    cfg = SimpleNamespace(seed=7, data=SimpleNamespace(eval_batch_size=2, bptt=7), trainer=SimpleNamespace(amp="off"),
                          eval=SimpleNamespace(temperature="fit", samples=3, batch=3, word_dropout=False,
                                               mc_masks="stream", average="arithmetic", mode="mc"))
    torch.manual_seed(0)
    ws, mc = evaluation_temperatures(trained, trained, corpus, cfg)
    after = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(3), after)  # the fit drew from a fork
    grid = torch.logspace(-1.2, 0.5, 601, dtype=torch.float64)  # 0.063 .. 3.2, 0.65% a step
    torch.manual_seed(cfg.seed)
    nll = mc_nll_at(trained, COUNTING, 3, 3, 7, grid)
    assert abs(math.log(mc) - math.log(grid[int(nll.argmin())].item())) < 0.007
    assert abs(math.log(ws) - math.log(grid[int(ws_nll_at(trained, COUNTING, 2, 7, grid).argmin())].item())) < 0.007
    assert ws != mc  # two fits: weight scaling's and MC's


def test_mc_with_a_dropout_scale_samples_the_model_built_with_those_probabilities(trained):
    """eval.dropout_scale=0.5 runs the MC passes on a twin of the model whose every probability is halved, its weights
    the model's; building it draws nothing from the generator the passes draw from."""
    from vdrnn.training.evaluation import mc_model

    config = DropoutConfig(scheme="variational", embedding=0.2, input=0.3, recurrent=0.3, output=0.3)
    cfg = SimpleNamespace(dropout=config, eval=SimpleNamespace(dropout_scale=0.5))
    halved = LanguageModel(V, trained.config, DropoutConfig(scheme="variational", embedding=0.1, input=0.15,
                                                            recurrent=0.15, output=0.15))
    halved.load_state_dict(trained.state_dict())
    torch.manual_seed(2)
    twin = mc_model(trained, cfg)
    got = mc_perplexity(twin, COUNTING, samples=4, batch=4, bptt=7)
    torch.manual_seed(2)
    assert got == mc_perplexity(halved.eval(), COUNTING, samples=4, batch=4, bptt=7)
    torch.manual_seed(2)
    assert got != mc_perplexity(trained, COUNTING, samples=4, batch=4, bptt=7)  # the scale does change the draws
    assert mc_model(trained, SimpleNamespace(dropout=config, eval=SimpleNamespace(dropout_scale=1.0))) is trained
