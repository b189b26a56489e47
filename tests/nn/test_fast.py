"""The public modules on the fused kernels against the same modules on the reference loop (Triton's interpreter on a
CPU): the same outputs, final states and gradients, for every scheme that masks inside the recurrence."""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import vdrnn.nn as vnn
from tests.kernels.triton_setup import DEVICE, FP32_TOL, exact_fp32, rel  # noqa: F401 (exact_fp32: autouse fixture)

T, B, D, H = 4, 3, 5, 9  # 9 units run as 16 on the kernels

CASES = [
    (vnn.LSTM, vnn.Variational(input=0.3, recurrent=0.3, output=0.3)),
    (vnn.LSTM, vnn.Variational(input=0.3, recurrent=0.3, gates="untied")),
    (vnn.LSTM, vnn.Moon(cell=0.3)),
    (vnn.LSTM, vnn.Zoneout(cell=0.3, hidden=0.3, input=0.2)),
    (vnn.LSTM, vnn.Semeniuta(candidate=0.3)),
    (vnn.LSTM, vnn.WeightDrop(weight=0.3, input=0.3)),
    (vnn.LSTM, vnn.Gaussian(input=0.3, recurrent=0.3, learn=True)),
    (vnn.GRU, vnn.Variational(input=0.3, recurrent=0.3, gates="untied")),
    (vnn.GRU, vnn.Zoneout(hidden=0.3)),
]


def run(cell, scheme, impl: str, x, packed_lengths=None, batch_first=False):
    """Output, final state and every gradient of a training call, the masks drawn from one seed."""
    torch.manual_seed(0)
    module = cell(D, H, num_layers=2, dropout=scheme, impl=impl, batch_first=batch_first).to(DEVICE).train()
    x = x.clone().requires_grad_(True)
    torch.manual_seed(1)
    if packed_lengths is None:
        y, state = module(x)
    else:
        out, state = module(pack_padded_sequence(x, packed_lengths, enforce_sorted=False))
        y = pad_packed_sequence(out)[0]
    states = list(state) if isinstance(state, tuple) else [state]
    (y.square().sum() + sum(s.sum() for s in states)).backward()
    return [y, *states, x.grad, *(p.grad for p in module.parameters())]


@pytest.mark.parametrize("cell, scheme", CASES, ids=[f"{c.__name__}-{type(s).__name__}" for c, s in CASES])
@pytest.mark.parametrize("batch_first", [False, True])
def test_the_kernels_give_the_reference_loops_outputs_and_gradients(cell, scheme, batch_first):
    x = torch.randn((B, T, D) if batch_first else (T, B, D), device=DEVICE)
    fast, reference = (run(cell, scheme, impl, x, batch_first=batch_first) for impl in ("fast", "reference"))
    errors = [rel(a, b) for a, b in zip(fast, reference, strict=True)]
    assert max(errors) < FP32_TOL, errors


@pytest.mark.parametrize("cell, scheme", CASES[:1] + CASES[3:4] + CASES[-1:], ids=["LSTM", "LSTM-zoneout", "GRU"])
def test_packed_sequences_hold_each_state_past_its_end_on_the_kernels_too(cell, scheme):
    x = torch.randn(T, B, D, device=DEVICE)
    lengths = torch.tensor([2, 4, 3])
    fast, reference = (run(cell, scheme, impl, x, lengths) for impl in ("fast", "reference"))
    errors = [rel(a, b) for a, b in zip(fast, reference, strict=True)]
    assert max(errors) < FP32_TOL, errors


def test_mc_prediction_runs_the_kernels_without_gradients_as_the_reference():
    torch.manual_seed(0)
    x = torch.randn(T, B, D, device=DEVICE)
    means = []
    for impl in ("fast", "reference"):
        torch.manual_seed(0)
        lstm = vnn.LSTM(D, H, dropout=vnn.Variational(input=0.3, recurrent=0.3), impl=impl).to(DEVICE)
        torch.manual_seed(1)
        means.append(vnn.mc_predict(lstm, x, samples=4, probabilities=lambda y: y.double()).mean)
    assert rel(*means) < FP32_TOL
