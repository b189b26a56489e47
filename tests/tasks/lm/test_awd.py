"""AWD-LSTM's regularizers: weight drop, locked and embedding dropout granularity, AR/TAR, variable
BPTT, NT-ASGD, tied embeddings."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from tests.cells.common import Layer
from tests.helpers import TINY, history, run_in_process
from vdrnn.config import ModelConfig
from vdrnn.dropout import WeightDrop
from vdrnn.dropout.config import DropoutConfig
from vdrnn.tasks.lm.datasets import tokenize
from vdrnn.tasks.lm.model import LanguageModel

V, B, T = 30, 5, 8


def awd_model(**dropout) -> LanguageModel:
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=3, hidden_size=12, embedding_size=6, tie_weights=True, init="awd", init_range=0.1,
                      impl="reference")
    p = {"embedding": 0.1, "input": 0.4, "hidden": 0.25, "output": 0.4, "weight": 0.5, "embedding_mask": "batch"}
    return LanguageModel(V, cfg, DropoutConfig(scheme="awd", **{**p, **dropout}))


def w_hh(model: LanguageModel) -> list[torch.Tensor]:
    """Every layer's raw W_hh."""
    return [model.rnn.layer_parameters(k)[1] for k in range(model.rnn.num_layers)]


def test_sizes_and_tied_embeddings():
    model = awd_model()
    rnn = model.rnn
    assert [(rnn.layer_input_size(k), rnn.sizes[k]) for k in range(3)] == [(6, 12), (12, 12), (12, 6)]
    assert rnn.hidden_size == (12, 12, 6)  # each layer's own size: the state is a tuple of one tensor per layer
    assert model.decoder.weight is model.embedding.weight
    assert torch.all(model.decoder.bias == 0)


def test_the_layer_runs_the_lstm_with_w_hh_times_the_schemes_mask():
    """Weight drop as DropConnect: the layer's output is a plain LSTM's with W_hh' = W_hh * M / (1-p), M the
    mask the scheme drew, and the raw W_hh's gradient is zero exactly where M dropped an entry."""
    torch.manual_seed(0)
    layer = Layer("lstm", 6, 12)
    x = torch.randn(T, B, 6)
    masks = WeightDrop(weight=0.5).layer_masks(x, 12, 4, 0)
    state = (torch.zeros(B, 12), torch.zeros(B, 12))
    y, _ = layer(x, state, masks)
    plain = torch.nn.LSTM(6, 12)
    plain.load_state_dict(layer.module.state_dict())
    with torch.no_grad():
        plain.weight_hh_l0.mul_(masks.w_hh.keep * masks.w_hh.scale)
    torch.testing.assert_close(y, plain(x)[0])
    y.sum().backward()
    grad = layer.module.weight_hh_l0.grad
    assert torch.all(grad[~masks.w_hh.keep] == 0) and (grad[masks.w_hh.keep] != 0).float().mean() > 0.9


def test_raw_w_hh_gets_gradients_is_never_overwritten_and_eval_uses_it():
    model = awd_model(embedding=0.0, input=0.0, hidden=0.0, output=0.0)
    raw = [w.detach().clone() for w in w_hh(model)]
    tokens = torch.randint(0, V, (T, B))
    logits, _ = model.train()(tokens, model.initial_state(B, "cpu"))
    logits.sum().backward()
    for w, before in zip(w_hh(model), raw, strict=True):
        assert torch.equal(w, before) and w.grad is not None and w.grad.abs().sum() > 0
        assert (w.grad == 0).float().mean() > 0.3  # dropped entries get no gradient this minibatch
    model.eval()
    a, _ = model(tokens, model.initial_state(B, "cpu"))
    b, _ = model(tokens, model.initial_state(B, "cpu"))
    assert torch.equal(a, b)  # evaluation: the raw weights, no mask
    plain = torch.nn.LSTM(6, 12)  # layer 1 of the evaluating model is a stock LSTM on the raw weights
    plain.load_state_dict({f"{name}_l0": getattr(model.rnn, f"{name}_l0") for name in
                           ("weight_ih", "weight_hh", "bias_ih", "bias_hh")})
    embedded = model.embedding(tokens)
    assert torch.allclose(model.rnn.eval()(embedded)[1][0][0], plain(embedded)[1][0][0], atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="cuDNN's LSTM needs CUDA")
def test_weight_drop_trains_through_cudnn_on_the_gpu():
    # cuDNN (unlike the CPU kernel) can only differentiate a training-mode forward: the weight-drop call
    # must ask for one whenever gradients are on, and still run under no_grad for evaluation.
    model = awd_model().cuda()
    tokens = torch.randint(0, V, (T, B), device="cuda")
    logits, _ = model.train()(tokens, model.initial_state(B, "cuda"))
    logits.sum().backward()
    assert all(w.grad.abs().sum() > 0 for w in w_hh(model))
    with torch.no_grad():
        model.eval()
        assert torch.isfinite(model(tokens, model.initial_state(B, "cuda"))[0]).all()


def awd_cli(tmp_path, corpus, *extra, experiment="awd_ptb", run="run"):
    tiny = [a for a in TINY if not a.startswith(("model=", "model.hidden_size", "data.bptt"))]
    return run_in_process("train", f"experiment={experiment}", *tiny, "model.hidden_size=16", "model.embedding_size=8",
                   "data.bptt=6", f"data.root={corpus}", f"hydra.run.dir={run}", *extra, cwd=tmp_path)


@pytest.mark.slow
def test_awd_preset_trains_with_nt_asgd_switch_and_variable_bptt(tmp_path, tiny_corpus):
    # nonmono=1 and a large lr make the switch to averaged SGD happen within a few epochs: after epoch 4 on one CPU,
    # earlier on another (the lr makes the run chaotic), so 6 epochs leave averaged steps to check on either.
    result = awd_cli(tmp_path, tiny_corpus, "trainer.epochs=6", "trainer.nonmono=1", "trainer.lr=60")
    log = result.stderr + result.stdout
    records = history(tmp_path / "run")
    switched = re.search(r"switching to averaged SGD after epoch (\d+)", log)
    assert len(records) == 6 and switched and int(switched[1]) < 6, log
    last = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    assert last["averaging"] and "ax" in str(last["optimizer"]["state"][0].keys())
    # Variable BPTT: the step count differs from the fixed-length count of an epoch, computed from the run's own
    # data and settings: ceil((rows - 1) / bptt) minibatches of the [N // batch_size, batch_size] training stream.
    data = json.loads((tmp_path / "run" / "metrics.json").read_text())["config"]["data"]
    tokens = len(tokenize(tiny_corpus.joinpath("ptb.train.txt").read_text().splitlines()))  # words + <eos>
    assert data["variable_bptt"] and tokens > 10 * data["batch_size"] * data["bptt"]  # an epoch of many minibatches
    fixed = math.ceil((tokens // data["batch_size"] - 1) / data["bptt"])
    assert records[0]["step"] != fixed
    assert math.isfinite(json.loads((tmp_path / "run" / "metrics.json").read_text())["test_ppl"])


@pytest.mark.slow
def test_fine_tuning_stage_starts_from_the_trained_weights_and_averages_from_its_first_step(tmp_path, tiny_corpus):
    awd_cli(tmp_path, tiny_corpus, "trainer.epochs=3")
    # With a vanishing lr the fine-tuning stage keeps the weights it starts from: it tests the first stage's model.
    started = awd_cli(tmp_path, tiny_corpus, "trainer.epochs=1", "trainer.lr=1e-12",
                      f"init_from={tmp_path / 'run' / 'best.pt'}", experiment="awd_ptb_finetune", run="finetune")
    assert f"starting from the weights of {tmp_path / 'run' / 'best.pt'} (epoch " in started.stdout + started.stderr
    stage1, stage2 = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("run", "finetune"))
    assert stage2["test_ppl"] == pytest.approx(stage1["test_ppl"], rel=1e-4)
    assert stage2["paper"]["row"] == "AWD-LSTM (fine-tuned)"
    # Averaged SGD from its first step (the averaged weights are what it evaluates).
    last = torch.load(tmp_path / "finetune" / "last.pt", weights_only=True)
    assert last["averaging"] and "ax" in str(last["optimizer"]["state"][0].keys())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
@pytest.mark.parametrize("impl", ["reference", "fast"])  # the dropped W_hh on cuDNN, or on the fused kernels
def test_graphed_awd_steps_and_evaluation_match_eager_ones_through_the_switch_to_averaging(tmp_path, tiny_corpus,
                                                                                           impl):
    from tests.helpers import composed, trainer_for
    from vdrnn.config import to_container
    from vdrnn.tasks.lm.data import variable_minibatches
    from vdrnn.tasks.lm.evaluate import perplexity
    from vdrnn.training.graphs import ShapeGraphs

    tiny = [a for a in TINY if not a.startswith(("model=", "model.hidden_size", "model.impl"))]
    results = {}
    for graph in ("auto", "off"):
        raw = to_container(composed("experiment=awd_ptb", *tiny, "model.hidden_size=16", "model.embedding_size=8",
                                    f"data.root={tiny_corpus}", "device=cuda", f"trainer.cuda_graph={graph}",
                                    f"model.impl={impl}"))
        t = trainer_for(raw, tmp_path / graph)
        assert isinstance(t.graphed_step(), ShapeGraphs) == (graph == "auto")
        assert t.model.rnn.weight_drop_on_kernels == (impl == "fast")
        torch.manual_seed(5)
        batches = list(variable_minibatches(t.train_data, t.cfg.data.bptt))[:10]
        assert len({inputs.shape[0] for inputs, _ in batches}) > 2  # several lengths, a graph each
        t.model.train()
        t.next_row, t.carried = 0, t.model.initial_state(t.cfg.data.batch_size, t.device)
        steps = [t.advance(inputs, targets, 30.0) for inputs, targets in batches]
        t.optimization.switch_to_averaging()  # NT-ASGD's switch: a new optimizer, the graphs recorded anew
        steps += [t.advance(inputs, targets, 30.0) for inputs, targets in batches]
        ax = [t.optimization.optimizer.state[p]["ax"].clone() for p in t.model.parameters()]
        t.model.eval()
        ppl = perplexity(t.model, t.data.valid, 4, t.cfg.data.bptt, graphed=graph == "auto")
        results[graph] = (torch.tensor([[loss.item(), norm.item()] for loss, norm in steps]),
                          [p.detach().clone() for p in t.model.parameters()], ax, ppl)
        t.cleanup()
    (g_steps, g_weights, g_ax, g_ppl), (e_steps, e_weights, e_ax, e_ppl) = results["auto"], results["off"]
    torch.testing.assert_close(g_steps, e_steps, rtol=1e-4, atol=1e-5)
    for g, e in zip(g_weights + g_ax, e_weights + e_ax, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    assert g_ppl == pytest.approx(e_ppl, rel=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
def test_under_impl_auto_the_graphed_awd_step_runs_weight_drop_on_the_fused_kernels(tmp_path, tiny_corpus):
    from tests.helpers import composed, trainer_for
    from vdrnn.config import to_container

    tiny = [a for a in TINY if not a.startswith(("model=", "model.hidden_size", "model.impl"))]
    for graph, on_kernels in (("auto", True), ("off", False)):  # eagerly, cuDNN is the faster
        raw = to_container(composed("experiment=awd_ptb", *tiny, "model.hidden_size=16", "model.embedding_size=8",
                                    f"data.root={tiny_corpus}", "device=cuda", f"trainer.cuda_graph={graph}"))
        t = trainer_for(raw, tmp_path / graph)
        t.graphed_step()
        assert t.model.rnn.weight_drop_on_kernels == on_kernels
        t.cleanup()
