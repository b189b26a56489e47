"""vdrnn.gemm: zero-padding a product's dimensions to whole 16-byte rows gives the same product and gradients.

The padding only happens on CUDA, where cuBLAS's kernels care; here ``aligned_on_cpu`` turns it on for CPU tensors,
and ``linear_calls`` records the shapes F.linear is given, so that a test sees the padding happen.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vdrnn import gemm
from vdrnn.recurrent import masked_linear


@pytest.fixture
def aligned_on_cpu(monkeypatch):
    monkeypatch.setattr(gemm, "ALIGNED_DEVICES", ("cuda", "cpu"))


@pytest.fixture
def linear_calls(monkeypatch):
    calls = []
    real = F.linear

    def spy(x, weight, bias=None):
        calls.append((tuple(x.shape), tuple(weight.shape)))
        return real(x, weight, bias)
    monkeypatch.setattr(F, "linear", spy)
    return calls


@pytest.mark.parametrize("size,dtype,expected", [
    (1500, torch.bfloat16, 4), (1504, torch.bfloat16, 0), (650, torch.bfloat16, 6), (650, torch.float32, 2),
    (1500, torch.float32, 0), (6000, torch.bfloat16, 0), (4500, torch.bfloat16, 4), (10_000, torch.float32, 0),
])
def test_padding_makes_rows_whole_16_bytes(size, dtype, expected):
    assert gemm.padding(size, dtype, torch.device("cuda")) == expected
    assert (size + expected) * dtype.itemsize % 16 == 0
    assert gemm.padding(size, dtype, torch.device("cpu")) == 0  # no padding where cuBLAS is not used


def leaves(*shapes):
    return [torch.randn(*s, dtype=torch.float64).requires_grad_() for s in shapes]


@pytest.mark.parametrize("inputs,outputs", [(7, 12), (8, 13), (7, 13), (8, 12)])
def test_linear_is_f_linear_with_padded_operands(inputs, outputs, aligned_on_cpu, linear_calls):
    """Same result and the same gradients for x, W and b; F.linear sees the padded sizes (float64: multiples of 2)."""
    x, w, b = leaves((3, 5, inputs), (outputs, inputs), (outputs,))
    probe = torch.randn(3, 5, outputs, dtype=torch.float64)
    got = gemm.linear(x, w, b)
    grads = torch.autograd.grad((got * probe).sum(), (x, w, b))
    want = F.linear(x, w, b)
    want_grads = torch.autograd.grad((want * probe).sum(), (x, w, b))
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)
    for g, r in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(g, r)
    padded_in, padded_out = inputs + inputs % 2, outputs + outputs % 2
    assert linear_calls[0] == ((3, 5, padded_in), (padded_out, padded_in))


def test_linear_pads_in_the_product_dtype_under_autocast(aligned_on_cpu, linear_calls):
    """bf16 autocast: the operands are cast before they are padded, to whole 8-value (16-byte) rows."""
    x, w = torch.randn(4, 1500), torch.randn(6000, 1500)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = gemm.linear(x, w)
    assert y.dtype == torch.bfloat16 and y.shape == (4, 6000)
    assert linear_calls[0] == ((4, 1504), (6000, 1504))
    torch.testing.assert_close(y.float(), x.bfloat16().float() @ w.bfloat16().float().t(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("per_gate", [False, True])
def test_masked_linear_aligned_is_the_same_product(per_gate, aligned_on_cpu, linear_calls, monkeypatch):
    """The fast paths' input product (aligned=True) against the reference's, tied and untied masks, H and D odd."""
    einsums = []
    real_einsum = torch.einsum
    monkeypatch.setattr(torch, "einsum", lambda eq, *ops: einsums.append([o.shape for o in ops]) or real_einsum(eq, *ops))
    gates, hidden, inputs, batch = 4, 5, 7, 3
    v, w, b = leaves((2, batch, inputs), (gates * hidden, inputs), (gates * hidden,))
    mask = torch.rand(batch, gates, inputs, dtype=torch.float64) if per_gate else torch.rand(batch, inputs,
                                                                                             dtype=torch.float64)
    probe = torch.randn(2, batch, gates * hidden, dtype=torch.float64)
    outs = []
    for aligned in (False, True):
        y = masked_linear(v, w, b, mask, per_gate, aligned=aligned)
        outs.append((y, *torch.autograd.grad((y * probe).sum(), (v, w, b))))
    for got, want in zip(outs[1], outs[0], strict=True):
        torch.testing.assert_close(got, want)
    # the aligned call's product saw D = 7 -> 8 and, untied, each gate's H = 5 -> 6 (float64: whole pairs)
    if per_gate:
        assert einsums[1] == [(2, batch, gates, 8), (gates, 6, 8)]
    else:
        assert linear_calls[1] == ((2, batch, 8), (gates * hidden, 8))
