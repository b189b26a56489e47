"""vdrnn.nn.LSTM, GRU and RNN as torch.nn's: the same numbers without a scheme, the same arguments, shapes and state
dicts, and errors a Python user understands."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import vdrnn.nn as vnn

T, B, D, H = 6, 4, 5, 7
MODULES = [(vnn.LSTM, nn.LSTM), (vnn.GRU, nn.GRU), (vnn.RNN, nn.RNN)]


def pair(ours, theirs, **kwargs):
    """A vdrnn.nn module and the torch.nn module holding the same weights."""
    torch.manual_seed(0)
    stock = theirs(D, H, **kwargs)
    module = ours(D, H, **kwargs)
    module.load_state_dict(stock.state_dict())
    return module, stock


def state_like(theirs, layers: int, batch: int = B):
    h = torch.randn(layers, batch, H)
    return (h, torch.randn(layers, batch, H)) if theirs is nn.LSTM else h


def assert_same(a, b, atol=1e-6):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, atol=atol, rtol=1e-5)
    else:
        for x, y in zip(a, b, strict=True):
            assert_same(x, y, atol)


@pytest.mark.parametrize("ours, theirs", MODULES)
@pytest.mark.parametrize("num_layers", [1, 2, 3])
@pytest.mark.parametrize("batch_first", [False, True])
def test_without_a_scheme_the_module_is_torchs(ours, theirs, num_layers, batch_first):
    module, stock = pair(ours, theirs, num_layers=num_layers, batch_first=batch_first)
    x = torch.randn(B, T, D) if batch_first else torch.randn(T, B, D)
    for hx in (None, state_like(theirs, num_layers)):
        for mode in ("train", "eval"):
            getattr(module, mode)(), getattr(stock, mode)()
            assert_same(module(x, hx), stock(x, hx))
    # and its gradients
    x.requires_grad_(True)
    module(x)[0].square().sum().backward()
    ours_grads = [x.grad.clone()] + [p.grad for p in module.parameters()]
    x.grad = None
    stock(x)[0].square().sum().backward()
    assert_same(ours_grads, [x.grad] + [p.grad for p in stock.parameters()], atol=1e-5)


@pytest.mark.parametrize("ours, theirs", MODULES)
def test_state_dicts_pass_both_ways_under_torchs_names(ours, theirs):
    module = ours(D, H, num_layers=2, dropout=vnn.Zaremba(between=0.3) if theirs is not nn.RNN else None)
    assert list(module.state_dict()) == list(theirs(D, H, num_layers=2).state_dict())
    assert [name for name, _ in module.named_parameters()] == [name for name, _ in theirs(D, H, num_layers=2)
                                                                .named_parameters()]
    stock = theirs(D, H, num_layers=2)
    stock.load_state_dict(module.state_dict())
    module.load_state_dict(theirs(D, H, num_layers=2).state_dict())
    assert module.weight_hh_l1.shape == stock.weight_hh_l1.shape


@pytest.mark.parametrize("ours, theirs", MODULES)
def test_bias_false_bidirectional_and_one_unbatched_sequence_as_torch(ours, theirs):
    for kwargs in ({"bias": False}, {"bidirectional": True, "num_layers": 2}):
        module, stock = pair(ours, theirs, **kwargs)
        assert list(module.state_dict()) == list(stock.state_dict())
        x = torch.randn(T, B, D)
        assert_same(module(x), stock(x))
    module, stock = pair(ours, theirs, num_layers=2)
    one = torch.randn(T, D)
    out, state = module(one)
    assert out.shape == (T, H)
    assert_same((out, state), stock(one))


@pytest.mark.parametrize("ours, theirs", MODULES)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_packed_sequences_as_torch_without_a_scheme(ours, theirs, bidirectional):
    module, stock = pair(ours, theirs, num_layers=2, bidirectional=bidirectional)
    lengths = torch.tensor([4, 6, 2, 5])
    x = torch.randn(T, B, D)
    packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, state = module(packed)
    expected_out, expected_state = stock(packed)
    assert isinstance(out, type(packed)) and torch.equal(out.sorted_indices, packed.sorted_indices)
    assert_same(pad_packed_sequence(out)[0], pad_packed_sequence(expected_out)[0])
    assert_same(state, expected_state)


@pytest.mark.parametrize("ours, scheme", [
    (vnn.LSTM, vnn.Variational(input=0.3, recurrent=0.3, output=0.3)),
    (vnn.LSTM, vnn.Zoneout(cell=0.3, hidden=0.3)),
    (vnn.GRU, vnn.Variational(input=0.3, recurrent=0.3, gates="untied")),
    (vnn.RNN, vnn.Variational(recurrent=0.3)),
])
def test_packed_sequences_under_recurrent_masks_end_each_state_at_its_own_last_step(ours, scheme):
    """With masks inside the recurrence the padded batch runs on the masked path; each sequence's state is held past
    its end, so h_n is the output at its last real step, and the padding after it changes nothing."""
    torch.manual_seed(0)
    module = ours(D, H, dropout=scheme).train()
    lengths = torch.tensor([4, 6, 2, 5])
    x = torch.randn(T, B, D)
    torch.manual_seed(1)
    out, state = module(pack_padded_sequence(x, lengths, enforce_sorted=False), drop_output=False)
    h_n = state[0] if isinstance(state, tuple) else state
    padded, _ = pad_packed_sequence(out)
    last = padded[lengths - 1, torch.arange(B)]
    torch.testing.assert_close(h_n[-1], last)
    longer = torch.cat([x, torch.randn(3, B, D)])  # more padding, other values in it
    torch.manual_seed(1)
    _, again = module(pack_padded_sequence(longer, lengths, enforce_sorted=False), drop_output=False)
    assert_same(again, state)


def test_per_layer_sizes_make_awds_stack_with_one_state_tensor_per_layer():
    lstm = vnn.LSTM(4, [9, 9, 4], num_layers=3, dropout=vnn.WeightDrop(weight=0.5, input=0.4, between=0.3))
    y, (h, c) = lstm(torch.randn(T, B, 4))
    assert y.shape == (T, B, 4) and [t.shape for t in h] == [(B, 9), (B, 9), (B, 4)]
    assert [t.shape for t in lstm.initial_state(B)[1]] == [(B, 9), (B, 9), (B, 4)]
    lstm(torch.randn(T, B, 4), (h, c))  # the state it returns is the state it takes
    with pytest.raises(ValueError, match=r"hidden_size=\[9, 9, 4\]\): one size per layer, so num_layers=3"):
        vnn.LSTM(4, [9, 9, 4])
    with pytest.raises(ValueError, match="the layers' sizes differ, so hidden\\[0\\] is a tuple"):
        lstm(torch.randn(T, B, 4), (torch.zeros(3, B, 9), torch.zeros(3, B, 9)))


@pytest.mark.parametrize("call, message", [
    (lambda: vnn.LSTM(D, 0), r"LSTM\(hidden_size=0\): must be a whole number >= 1"),
    (lambda: vnn.LSTM(D, H, num_layers=1.5), r"LSTM\(num_layers=1.5\)"),
    (lambda: vnn.LSTM(D, H, dropout=0.5), r"dropout=0.5 between layers is vdrnn.nn.Zaremba\(between=0.5\)"),
    (lambda: vnn.GRU(D, H, dropout=vnn.Moon(cell=0.5)), r"Moon cannot run on the GRU: it drops the LSTM's cell state"),
    (lambda: vnn.RNN(D, H, dropout=vnn.WeightDrop(weight=0.5)), "WeightDrop cannot run on the RNN"),
    (lambda: vnn.LSTM(D, H, impl="cuda"), r"LSTM\(impl='cuda'\): choose one of 'auto', 'fast', 'reference'"),
    (lambda: vnn.LSTM(D, H, proj_size=3), r"LSTM\(proj_size=3\): projections are not supported"),
    (lambda: vnn.RNN(D, H, nonlinearity="gelu"), r"RNN\(nonlinearity='gelu'\): choose 'tanh' or 'relu'"),
    (lambda: vnn.LSTM(D, H, bidirectional=True, dropout=vnn.Concrete(input=0.1)), "bidirectional=True"),
    (lambda: vnn.LSTM(D, H)(torch.randn(T, B, D + 1)), "input.size\\(-1\\) must be equal to input_size. Expected 5, got 6"),
    (lambda: vnn.LSTM(D, H)(torch.randn(T, D, 1, 1)), "expected the input to be 2-D .* or 3-D"),
    (lambda: vnn.LSTM(D, H)(torch.randn(T, B, D).double()), "the input is torch.float64 and the weights torch.float32"),
    (lambda: vnn.LSTM(D, H)(torch.randn(T, B, D), torch.zeros(1, B, H)), "hx must be a tuple \\(h_0, c_0\\)"),
    (lambda: vnn.LSTM(D, H, num_layers=2)(torch.randn(T, B, D), (torch.zeros(1, B, H), torch.zeros(1, B, H))),
     r"expected hidden\[0\] of size \(2, 4, 7\), got \(1, 4, 7\)"),
    (lambda: vnn.GRU(D, H)(torch.randn(T, B, D), torch.zeros(1, B + 1, H)), r"expected hidden\[0\] of size \(1, 4, 7\)"),
])
def test_bad_arguments_and_inputs_are_value_errors_that_name_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_deepcopy_pickle_and_torch_save_keep_the_module_and_its_scheme():
    torch.manual_seed(0)
    lstm = vnn.LSTM(D, H, num_layers=2, dropout=vnn.Concrete(input=0.2, recurrent=0.1)).eval()
    x = torch.randn(T, B, D)
    expected = lstm(x)[0]
    buffer = io.BytesIO()
    torch.save(lstm, buffer)
    buffer.seek(0)
    for twin in (copy.deepcopy(lstm), pickle.loads(pickle.dumps(lstm)), torch.load(buffer, weights_only=False)):
        assert twin.dropout == lstm.dropout and twin.noise is not lstm.noise
        torch.testing.assert_close(twin(x)[0], expected)
        assert sorted(twin.state_dict()) == sorted(lstm.state_dict())  # the learned p's travel with the weights


def test_to_double_and_autocast():
    torch.manual_seed(0)
    lstm = vnn.LSTM(D, H, dropout=vnn.Variational(input=0.2, recurrent=0.2))
    y, (h, c) = lstm.double().train()(torch.randn(T, B, D, dtype=torch.float64))
    assert y.dtype == h.dtype == torch.float64  # the reference loop keeps float64: gradcheck's
    lstm.float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, (h, c) = lstm(torch.randn(T, B, D))
    assert y.dtype == torch.bfloat16 and h.dtype == c.dtype == torch.float32  # low-precision products, fp32 state


def test_repr_names_the_scheme_as_it_was_built():
    lstm = vnn.LSTM(10, 20, num_layers=2, batch_first=True, dropout=vnn.Variational(input=0.3, recurrent=0.2))
    assert repr(lstm) == ("LSTM(10, 20, num_layers=2, batch_first=True, dropout=Variational(input=0.3, "
                          "recurrent=0.2, output=0.0, between=None, gates='tied', per='sequence'))")


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="the fused kernels under torch.compile need CUDA"))])
def test_torch_compile_runs_the_module_with_its_masks(device):
    """torch.compile traces around the masks' draws and the recurrence (the reference loop on the CPU, the fused
    kernels on CUDA, behind a graph break): evaluating, the compiled module gives the eager module's numbers; training,
    its masks are drawn (not the evaluation's numbers) from the global seed (the same seed, the same numbers). Which
    numbers a seed draws under compile is torch's to choose: some versions draw the eager module's, others not."""
    torch.manual_seed(0)
    lstm = vnn.LSTM(4, 6, num_layers=2, dropout=vnn.Variational(input=0.3, recurrent=0.3, output=0.3)).to(device)
    compiled = torch.compile(lstm)
    x = torch.randn(3, 2, 4, device=device)
    lstm.eval()
    evaluated = lstm(x)[0]
    torch.testing.assert_close(compiled(x)[0], evaluated)
    lstm.train()
    draws = []
    for _ in range(2):
        torch.manual_seed(1)
        draws.append(compiled(x)[0])
    torch.testing.assert_close(draws[0], draws[1])
    assert not torch.allclose(draws[0], evaluated)
    torch.manual_seed(2)
    assert not torch.allclose(compiled(x)[0], draws[0])
