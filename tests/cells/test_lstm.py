"""The reference LSTM loop against torch.nn.LSTM, and gradient flow through every mask."""

from __future__ import annotations

import torch

from tests.cells.common import Layer
from vdrnn.cells.common import uses_kernels
from vdrnn.cells.lstm import LSTM_GATES as GATES
from vdrnn.cells.lstm import lstm_reference
from vdrnn.config import ModelConfig
from vdrnn.dropout import LayerMasks
from vdrnn.dropout.config import DropoutConfig
from vdrnn.tasks.lm.model import LanguageModel
from vdrnn.training.graphs import detach_state, tensors_of

T, B, D, H = 9, 4, 6, 11


def ones_masks(per_gate: bool) -> LayerMasks:
    """All-ones masks force the reference loop (a masked recurrence) while dropping nothing (p = 0)."""
    if per_gate:
        return LayerMasks(x=torch.ones(B, GATES, D), h=torch.ones(B, GATES, H), per_gate=True)
    return LayerMasks(x=torch.ones(B, D), h=torch.ones(B, H))


def test_reference_loop_equals_nn_lstm_at_p0_tied_and_untied():
    torch.manual_seed(0)
    layer = Layer("lstm", D, H)
    x = torch.randn(T, B, D)
    h0, c0 = torch.randn(B, H), torch.randn(B, H)
    expected, (h_ref, c_ref) = layer.module(x, (h0[None], c0[None]))  # the stock module, same weights
    for per_gate in (False, True):
        y, (h, c) = lstm_reference(x, (h0, c0), layer.params(), ones_masks(per_gate))
        assert torch.allclose(y, expected, atol=1e-6)
        assert torch.allclose(h, h_ref[0], atol=1e-6) and torch.allclose(c, c_ref[0], atol=1e-6)


def test_gradients_of_reference_loop_equal_nn_lstm_at_p0():
    torch.manual_seed(0)
    layer = Layer("lstm", D, H)
    x = torch.randn(T, B, D, requires_grad=True)
    y, _ = lstm_reference(x, (torch.zeros(B, H), torch.zeros(B, H)), layer.params(), ones_masks(True))
    y.square().sum().backward()
    ours = [x.grad.clone()] + [p.grad.clone() for p in layer.parameters()]
    x.grad = None
    layer.zero_grad()
    layer.module(x)[0].square().sum().backward()
    theirs = [x.grad] + [p.grad for p in layer.parameters()]
    for a, b in zip(ours, theirs, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_zero_probability_model_is_the_same_function_on_both_paths():
    """dropout=variational with every p = 0 runs cuDNN/nn.LSTM; with masks it runs the loop."""
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=2, hidden_size=H, impl="reference")
    model = LanguageModel(20, cfg, DropoutConfig(scheme="variational")).train()
    tokens = torch.randint(0, 20, (T, B))
    state = model.initial_state(B, "cpu")
    fused, _ = model(tokens, state)  # no masks drawn: every layer on nn.LSTM
    x = model.embedding(tokens)
    for k in range(model.rnn.num_layers):
        x, _ = lstm_reference(x, (torch.zeros(B, H), torch.zeros(B, H)), model.rnn.layer_parameters(k),
                              LayerMasks(h=torch.ones(B, H)))
    assert torch.allclose(fused, model.decoder(x), atol=1e-5)


def test_every_parameter_gets_gradient_under_variational_dropout():
    torch.manual_seed(0)
    for per_gate in (False, True):
        cfg = ModelConfig(num_layers=2, hidden_size=H, impl="reference", gates="untied" if per_gate else "tied")
        dropout = DropoutConfig(scheme="variational", embedding=0.2, input=0.3, recurrent=0.3, output=0.3,
                                per_gate=per_gate)
        model = LanguageModel(20, cfg, dropout)
        tokens = torch.randint(0, 20, (T, B))
        logits, state = model(tokens, model.initial_state(B, "cpu"))
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
        for name, p in model.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        # Truncated BPTT: the carried state has no graph behind it.
        assert not any(t.requires_grad for t in tensors_of(detach_state(state)))


def test_keras_init_reaches_every_layer_of_a_language_model():
    torch.manual_seed(0)
    config = ModelConfig(num_layers=2, hidden_size=8, embedding_size=8, tie_weights=True, init="keras")
    model = LanguageModel(30, config, DropoutConfig(scheme="variational"))
    for k in range(model.rnn.num_layers):
        _, w_hh, b_ih, _ = model.rnn.layer_parameters(k)
        for gate in w_hh.chunk(GATES):
            torch.testing.assert_close(gate @ gate.T, 1.21 * torch.eye(8), atol=1e-5, rtol=0)
        assert torch.equal(b_ih[8:16], torch.ones(8))  # the forget gate's
    assert model.decoder.weight is model.embedding.weight and model.embedding.weight.abs().max() <= 0.05


def test_impl_auto_runs_masked_recurrences_on_the_kernels_on_cuda_only():
    """impl='auto': the fused Triton kernels for CUDA tensors (a CUDA run silently on the step loop would be many
    times slower), the reference loop on the CPU; fast and reference as named; float64 (gradcheck's) on the loop."""
    from types import SimpleNamespace

    on_cuda = SimpleNamespace(is_cuda=True, dtype=torch.float32)  # a stand-in: this test runs without a GPU
    on_cpu = torch.zeros(1)
    assert uses_kernels("auto", on_cuda) and not uses_kernels("auto", on_cpu)
    assert uses_kernels("fast", on_cpu) and not uses_kernels("reference", on_cuda)
    assert not uses_kernels("fast", on_cpu.double())


def test_uniform_init_draws_every_parameter_biases_included_from_the_init_range():
    """Zaremba's and Gal's init (model.init=uniform): every parameter U(+-init_range), the LSTM and decoder biases
    too; PyTorch's own bias init, U(+-1/sqrt(H)), is 6 times wider at H = 11."""
    torch.manual_seed(0)
    model = LanguageModel(30, ModelConfig(num_layers=2, hidden_size=H, init_range=0.05, impl="reference"),
                          DropoutConfig(scheme="none"))
    for name, p in model.named_parameters():
        assert 0.04 < p.abs().max().item() <= 0.05, name  # inside the range, and spread over it


def test_the_fast_path_on_the_cpu_says_once_that_the_reference_loop_runs(monkeypatch, caplog):
    """impl='fast' without CUDA (nor Triton's interpreter) runs the reference loop, and says so in one log line
    per cell, not a Python warning with a source line."""
    from vdrnn import kernels

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(kernels, "WARNED", set())
    cpu = torch.device("cpu")
    assert [kernels.kernels_or_fallback(cpu, "the LSTM layer") for _ in range(2)] == [False, False]
    lines = [r.getMessage() for r in caplog.records if r.name == "vdrnn"]
    assert lines == ["the LSTM layer: the Triton kernels need CUDA (or TRITON_INTERPRET=1), so the reference loop runs "
                     "instead (impl='auto' picks it on the CPU without this line)"]
