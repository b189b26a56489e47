"""vdrnn.gemm: zero-padding a product's dimensions to whole 16-byte rows gives the same product and gradients.

The padding only happens on CUDA, where cuBLAS's kernels care; here ``aligned_on_cpu`` turns it on for CPU tensors,
and ``linear_calls`` records the shapes F.linear is given, so that a test sees the padding happen.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vdrnn.cells.common import masked_linear
from vdrnn.dropout import LayerMasks
from vdrnn.kernels import common, gemm


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


@pytest.mark.parametrize("per_gate,inputs", [(False, 7), (False, 8), (True, 7), (True, 8)])
def test_input_product_is_masked_linear(per_gate, inputs, aligned_on_cpu, linear_calls, monkeypatch):
    """The fast paths' input product against the reference's masked_linear, tied and untied masks, H odd: the same
    values and gradients, as [T, B, G, units] with zeros for the kernels' dead units (5 live units of 6)."""
    baddbmms = []
    real_baddbmm = torch.baddbmm
    # Each call's operand shapes, whether the masked input is a view of v * z (flattened without a copy), and the row
    # stride the product writes its output with (the result's, units: written in place, not copied there).
    monkeypatch.setattr(torch, "baddbmm", lambda b, x, w, out: baddbmms.append(
        (x.shape, w.shape, x._base is not None, out.stride(1))) or real_baddbmm(b, x, w, out=out))
    gates, hidden, units, batch = 4, 5, 6, 3
    v, w, b = leaves((2, batch, inputs), (gates * hidden, inputs), (gates * hidden,))
    mask = torch.rand(batch, gates, inputs, dtype=torch.float64) if per_gate else torch.rand(batch, inputs,
                                                                                             dtype=torch.float64)
    probe = torch.randn(2, batch, gates * hidden, dtype=torch.float64)
    want = masked_linear(v, w, b, mask, per_gate)
    got = common.input_product(v, w, b, LayerMasks(x=mask, per_gate=per_gate), gates, units)
    assert got.shape == (2, batch, gates, units)
    assert got[..., hidden:].abs().max().item() == 0
    got = got[..., :hidden].flatten(-2)
    torch.testing.assert_close(got, want)
    grads = torch.autograd.grad((got * probe).sum(), (v, w, b))
    for g, r in zip(grads, torch.autograd.grad((want * probe).sum(), (v, w, b)), strict=True):
        torch.testing.assert_close(g, r)
    # The aligned product saw D = 7 -> 8 (float64: whole pairs). Tied: it wrote each gate's 6 units itself, or with D
    # = 8 aligned already and fewer rows of output (6) than of weight (8 inputs), the output is padded after it.
    # Untied: the batched product writes each gate's 6 units (5 live values are not whole 16-byte rows: W's rows are
    # zero-padded) into the result's rows in place.
    if per_gate:
        assert baddbmms == [((gates, 2 * batch, 8), (gates, 8, units), True, units)]
    else:
        assert linear_calls[-1] == ((2, batch, 8), (gates * (units if inputs == 7 else hidden), 8))


def test_per_gate_linear_is_a_view_of_gate_major_storage():
    """Each gate's [N, units] rows are one matrix, which the kernels and the batched GEMM's backward read in place;
    the kernels tell the two layouts of x_proj apart, and refuse any other."""
    v, w, mask = torch.randn(2, 3, 7), torch.randn(4 * 5, 7), torch.rand(3, 4, 7)
    out = gemm.per_gate_linear(v, w, None, mask, units=8)
    assert out.shape == (2, 3, 4, 8) and out.stride() == (3 * 8, 8, 2 * 3 * 8, 1)
    assert common.gate_major(out) and not common.gate_major(out.contiguous())
    with pytest.raises(ValueError, match="neither"):
        common.gate_major(out.transpose(0, 1))


@pytest.mark.parametrize("mask_rows,hidden", [(3, 5), (1, 5), (3, 6)])
def test_per_gate_linear_gradients_include_a_learned_mask(mask_rows, hidden, aligned_on_cpu, monkeypatch):
    """The batched product's own backward against autograd through the einsum it stands for: v, W, b and the mask
    (learned, as Kingma's adaptive Gaussian dropout's; per sample, or one row shared by the batch), D padded 7 -> 8.
    6 live units (whole 16-byte rows in float64) are written as they are, 5 with W's rows zero-padded to the 8 units."""
    gates, units, batch = 4, 8, 3
    written = []
    real_baddbmm = torch.baddbmm
    monkeypatch.setattr(torch, "baddbmm", lambda b, x, w, out: written.append(out.shape[-1])
                        or real_baddbmm(b, x, w, out=out))
    v, w, b = leaves((2, batch, 7), (gates * hidden, 7), (gates * hidden,))
    mask = torch.rand(mask_rows, gates, 7, dtype=torch.float64).requires_grad_()
    probe = torch.randn(2, batch, gates, units, dtype=torch.float64)
    got = gemm.per_gate_linear(v, w, b, mask, units)
    assert written == [hidden if hidden == 6 else units]
    want = torch.einsum("tbgd,ghd->tbgh", v.unsqueeze(-2) * mask, w.view(gates, hidden, 7)) + b.view(gates, hidden)
    torch.testing.assert_close(got[..., :hidden], want)
    assert got[..., hidden:].abs().max().item() == 0
    grads = torch.autograd.grad((got * probe).sum(), (v, w, b, mask))
    want_grads = torch.autograd.grad((want * probe[..., :hidden]).sum(), (v, w, b, mask))
    for g, r in zip(grads, want_grads, strict=True):
        assert g.shape == r.shape
        torch.testing.assert_close(g, r)


def test_per_gate_linear_rounds_the_masked_input_once_under_autocast(aligned_on_cpu):
    """bf16 autocast: v * z is formed in fp32 and rounded once, as F.linear under autocast rounds the reference's."""
    gates, hidden, inputs = 4, 6, 1500
    gen = torch.Generator().manual_seed(0)  # fixed: a sum landing on a bf16 rounding boundary would differ by one ulp
    v, w = torch.randn(5, 2, inputs, generator=gen), torch.randn(gates * hidden, inputs, generator=gen)
    mask = torch.full((2, gates, inputs), 1 / 0.7)  # 1/(1-p): not a bf16 value
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = gemm.per_gate_linear(v, w, None, mask, hidden)
    want = torch.einsum("tbgd,ghd->tbgh", (v.unsqueeze(-2) * mask).bfloat16().float(),
                        w.bfloat16().float().view(gates, hidden, inputs))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.bfloat16().float(), rtol=0, atol=0.05)
