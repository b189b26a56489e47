"""The fused Triton GRU recurrence (vdrnn.kernels.gru) against the reference loop.

On a machine without CUDA the kernels run in Triton's interpreter on CPU tensors (TRITON_INTERPRET=1,
see triton_setup.py); on a GPU the same tests run the compiled kernels.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.cells.common import Layer
from tests.kernels.triton_setup import (  # noqa: F401 (exact_fp32: autouse fixture)
    CUDA,
    DEVICE,
    FP32_TOL,
    TF32_TOL,
    exact_fp32,
    gpu,
    kernel_units,
    packed_dtypes,
    random_weights,
    rel,
    shared_masks,
    tf32_products,
)
from vdrnn.cells.gru import GRU_GATES, gru_reference
from vdrnn.dropout import LayerMasks, bernoulli_mask
from vdrnn.dropout.masks import constant_over, zoneout_draws
from vdrnn.kernels import common, gemm, launch
from vdrnn.kernels import gru as kernels_gru
from vdrnn.kernels.gru import gru_fused

# The candidate's and zoneout's masks (masks.g, masks.zone_h), alone and with the others: kind -> (g, zone_h, the
# shared kind or "" for none). Semeniuta's m per step [T, B, H] or per sequence [B, H]; zoneout's draws d_t, or its
# expectation (evaluation), a [T, B, H] view of one row.
CELL_MASKS = {
    "semeniuta_step": ("step", None, ""),
    "semeniuta_sequence": ("sequence", None, ""),
    "zoneout": (None, "draws", ""),
    "zoneout_expected": (None, "expected", ""),
    "semeniuta_fresh_x": ("step", None, "fresh_x"),  # the paper's PTB runs: with Zaremba's masks
    "semeniuta_tied_h": ("sequence", None, "tied_h"),
    "zoneout_fresh_x_tied_h": (None, "draws", "fresh_x_tied_h"),
    "semeniuta_zoneout_untied": ("step", "draws", "untied"),
}


def make_masks(kind: str, steps: int, batch: int, inputs: int, hidden: int) -> LayerMasks:
    like = torch.empty(steps, batch, 0, device=DEVICE)
    if kind == "none":  # per_gate with no mask: still the masked (fused) path
        return LayerMasks(per_gate=True)
    if kind == "tied_h":
        return LayerMasks(h=bernoulli_mask((batch, hidden), 0.5, like))
    if kind == "fresh_x":  # Zaremba's input mask alone, fresh per step
        return LayerMasks(x=bernoulli_mask((steps, batch, inputs), 0.5, like))
    if kind in CELL_MASKS:
        g, zone, base = CELL_MASKS[kind]
        masks = make_masks(base, steps, batch, inputs, hidden) if base else LayerMasks()
        if g is not None:
            masks.g = bernoulli_mask((steps, batch, hidden) if g == "step" else (batch, hidden), 0.3, like)
        if zone == "draws":
            masks.zone_h = zoneout_draws((steps, batch, hidden), 0.3, like)
        elif zone == "expected":
            masks.zone_h = constant_over(like, hidden, 0.3)
        return masks
    masks = shared_masks(kind, GRU_GATES, steps, batch, inputs, hidden)
    if masks is None:
        raise ValueError(kind)
    return masks


def random_problem(steps: int, batch: int, inputs: int, hidden: int):
    """Fresh inputs, state and weights."""
    x = torch.randn(steps, batch, inputs, device=DEVICE)
    h0 = torch.randn(batch, hidden, device=DEVICE) * 0.5
    return [t.requires_grad_() for t in (x, h0, *random_weights(GRU_GATES, inputs, hidden))]


def run_with_grads(fn, leaves, masks, weights):
    """Outputs, and the gradients of a random projection of them with respect to ``leaves``: the problem's
    tensors (x, h0, W_ih, W_hh, b_ih, b_hh), then any leaves that ``masks`` were made from."""
    x, h0, *params = leaves[:6]
    y, h = fn(x, h0, tuple(params), masks)
    wy, wh = weights
    loss = (y.float() * wy).sum() + (h * wh).sum()
    # Detached: a kept graph would pin the leaves' AccumulateGrad nodes to the stream that made them.
    return [y.detach(), h.detach(), *torch.autograd.grad(loss, leaves)]


def loss_weights(steps: int, batch: int, hidden: int):
    return [torch.randn(steps, batch, hidden, device=DEVICE), torch.randn(batch, hidden, device=DEVICE)]


NAMES = ["y", "h_T", "dx", "dh0", "dw_ih", "dw_hh", "db_ih", "db_hh"]


def compare(steps, batch, inputs, hidden, kind, tol=FP32_TOL):
    leaves = random_problem(steps, batch, inputs, hidden)
    masks = make_masks(kind, steps, batch, inputs, hidden)
    weights = loss_weights(steps, batch, hidden)
    ref = run_with_grads(gru_reference, leaves, masks, weights)
    out = run_with_grads(gru_fused, leaves, masks, weights)
    errors = {name: rel(o, r) for name, o, r in zip(NAMES, out, ref, strict=True)}
    assert all(e < tol for e in errors.values()), errors
    assert out[0].dtype == ref[0].dtype and out[1].dtype == torch.float32


@pytest.mark.parametrize("kind", ["none", "tied_h", "tied", "fresh_x_tied_h", "untied", "untied_x_only", "tied_batch",
                                  "untied_batch", "gaussian_untied", *CELL_MASKS])
def test_fused_gru_matches_reference(kind):
    torch.manual_seed(0)
    compare(steps=4, batch=3, inputs=5, hidden=13, kind=kind)


@pytest.mark.parametrize("tf32,stored,tol", [(True, torch.float16, TF32_TOL), (False, torch.float32, FP32_TOL)])
@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_fused_gru_tf32_products_read_their_operands_stored_in_fp16(kind, tf32, stored, tol, monkeypatch):
    """As the LSTM's (test_fused.py): with TF32 on, W_hh and the masked h_t are stored in fp16, the gradients stay
    fp32, and the results stay within TF32's error; IEEE fp32 products keep fp32 operands."""
    packed = packed_dtypes(monkeypatch)
    torch.manual_seed(0)
    with tf32_products(tf32):
        compare(steps=4, batch=3, inputs=5, hidden=13, kind=kind, tol=tol)
    assert packed == [stored]


@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_fused_gru_with_aligned_products_matches_reference(kind, monkeypatch):
    """The products zero-padded for cuBLAS (vdrnn.gemm, CUDA only) run here too: 5 inputs pad to 8, and the input
    product writes each gate's 13 units as the kernels' 16."""
    monkeypatch.setattr(gemm, "ALIGNED_DEVICES", ("cuda", "cpu"))
    torch.manual_seed(0)
    compare(steps=4, batch=3, inputs=5, hidden=13, kind=kind)


@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_fused_gru_skips_the_product_for_a_detached_initial_state(kind, monkeypatch):
    """As the LSTM's: with h_0 detached (training's carried state) no dh_0 product runs, and the other gradients are
    the reference's."""
    calls = []
    real = common.initial_state_grad
    monkeypatch.setattr(common, "initial_state_grad", lambda *args: calls.append(1) or real(*args))
    steps, batch, inputs, hidden = 5, 3, 7, 33
    x, h0, *params = random_problem(steps, batch, inputs, hidden)
    h0 = h0.detach()
    masks = make_masks(kind, steps, batch, inputs, hidden)

    def grads(fn):
        y, h = fn(x, h0, tuple(params), masks)
        return torch.autograd.grad(y.sum() + h.sum(), [x, *params])

    got = grads(gru_fused)
    assert calls == []
    for g, r in zip(got, grads(gru_reference), strict=True):
        assert rel(g, r) < FP32_TOL


@pytest.mark.parametrize("hidden", [32, 33])
@pytest.mark.parametrize("used", ["y", "h"])
def test_fused_gru_unused_outputs_get_zero_gradients_made_at_the_kernels_units(used, hidden):
    """Autograd hands the backward None for an output the loss does not use (a classifier reads h_T only): the
    gradients are the reference's all the same, and the output gradient the caller passed in is left as it was."""
    steps, batch, inputs = 3, 3, 7
    x, h0, *params = random_problem(steps, batch, inputs, hidden)
    masks = make_masks("tied", steps, batch, inputs, hidden)
    weight = dict(zip("yh", loss_weights(steps, batch, hidden), strict=True))[used]
    kept = weight.clone()

    def grads(fn):
        y, h = fn(x, h0, tuple(params), masks)
        return torch.autograd.grad({"y": y, "h": h}[used], [x, h0, *params], grad_outputs=weight)

    for g, r in zip(grads(gru_fused), grads(gru_reference), strict=True):
        assert rel(g, r) < FP32_TOL
    assert torch.equal(weight, kept)


@pytest.mark.parametrize("multiple,units", [(1, 13), (16, 16)])
@pytest.mark.parametrize("kind", ["tied", "untied", "semeniuta_zoneout_untied"])
def test_fused_gru_dead_units_change_nothing(kind, multiple, units, monkeypatch):
    """13 units run by the kernels as 16 (3 dead units, launch.UNIT_MULTIPLE 16) or as they are: the same results."""
    runs = kernel_units(monkeypatch, kernels_gru, multiple)
    torch.manual_seed(0)
    compare(steps=4, batch=3, inputs=5, hidden=13, kind=kind)
    [(run_units, y)] = runs
    assert run_units == units
    assert y[..., 13:].abs().max().item() == 0 if units > 13 else y.shape[-1] == 13  # dead units stay exactly 0


@pytest.mark.parametrize("kind", ["tied", "gaussian_untied", "tied_batch"])
def test_fused_gru_passes_the_masks_gradient(kind, block_plan):
    """Learned Gaussian noise (dropout.learn_alpha) makes the masks leaves: dL/dz_h from the kernels' backward."""
    torch.manual_seed(3)
    steps, batch, inputs, hidden = 4, 3, 5, 37
    leaves = random_problem(steps, batch, inputs, hidden)
    masks = make_masks(kind, steps, batch, inputs, hidden)
    x_mask, h_mask = (m.clone().requires_grad_() for m in (masks.x, masks.h))
    masks = dataclasses.replace(masks, x=x_mask, h=h_mask)
    weights = loss_weights(steps, batch, hidden)
    ref = run_with_grads(gru_reference, leaves + [x_mask, h_mask], masks, weights)
    out = run_with_grads(gru_fused, leaves + [x_mask, h_mask], masks, weights)
    errors = {name: rel(o, r) for name, o, r in zip(NAMES + ["dz_x", "dz_h"], out, ref, strict=True)}
    assert all(e < 1e-5 for e in errors.values()), errors
    assert out[-1].shape == h_mask.shape and out[-1].abs().sum() > 0


@pytest.mark.parametrize("kind,batch", [("tied", 1), ("tied", 3), ("untied", 1), ("untied", 3),
                                        ("semeniuta_tied_h", 3), ("zoneout_fresh_x_tied_h", 3)])
def test_fused_gru_split_k(kind, batch, block_plan):
    """Hidden 37 with 16-wide K slices: 3 slices, the last partly past H, summed by the last arriver."""
    torch.manual_seed(1)
    compare(steps=3, batch=batch, inputs=4, hidden=37, kind=kind)


@pytest.mark.parametrize("split", [(1, 1), (2, 2)])
@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_fused_gru_w_tiles_loaded_before_the_wait_change_nothing(prefetch, split, monkeypatch):
    """The backward's first W_hh tiles loaded before the wait (launch.PREFETCH_B), as the LSTM's test."""
    monkeypatch.setattr(launch, "BLOCK_K", 16)
    monkeypatch.setattr(launch, "FORCE_SPLIT", split)
    monkeypatch.setattr(launch, "PREFETCH_B", prefetch)
    torch.manual_seed(1)
    compare(steps=3, batch=3, inputs=4, hidden=37, kind="tied")


def inference_error(kind: str, steps: int, batch: int, inputs: int, hidden: int) -> float:
    """The no-grad path (saves nothing, as MC evaluation runs it): worst relative error of y and h_T."""
    x, h0, *params = random_problem(steps, batch, inputs, hidden)
    masks = make_masks(kind, steps, batch, inputs, hidden)
    with torch.no_grad():
        y_ref, h_ref = gru_reference(x, h0, tuple(params), masks)
        y, h = gru_fused(x, h0, tuple(params), masks)
    return max(rel(y, y_ref), rel(h, h_ref))


@pytest.mark.parametrize("kind", ["untied", "semeniuta_sequence", "zoneout_expected", "semeniuta_zoneout_untied"])
def test_fused_gru_inference_without_grad(kind):
    torch.manual_seed(2)
    assert inference_error(kind, steps=3, batch=2, inputs=5, hidden=13) < FP32_TOL


@pytest.mark.parametrize("kind", ["semeniuta_fresh_x", "zoneout_expected"])
def test_fused_gru_many_batch_blocks_and_inference(kind, block_plan):
    """More than one block of batch rows (B > 64): the masks' batch strides, on the no-grad path."""
    assert launch.Plan(70, 32, DEVICE, GRU_GATES).n_b == 2
    torch.manual_seed(2)
    assert inference_error(kind, steps=2, batch=70, inputs=5, hidden=20) < FP32_TOL


def test_fused_gru_reads_zoneouts_expectation_through_its_strides():
    """Zoneout's expectation, one row expanded to [T, B, H], goes to the kernels as that one row (padded to the
    kernels' units), read at every step and sample through zero strides; a per-sequence mask gets a zero time stride."""
    steps, batch, hidden = 4, 3, 13
    like = torch.empty(steps, batch, 0, device=DEVICE)
    units = launch.Units(hidden)
    zone, *strides = common.unit_mask(constant_over(like, hidden, 0.3), units, like)
    assert zone.shape == (1, 1, units.padded) and strides == [0, 0]
    assert zone[..., :hidden].eq(0.3).all() and zone[..., hidden:].eq(0).all()
    g, *strides = common.unit_mask(bernoulli_mask((batch, hidden), 0.3, like), units, like)
    assert g.shape == (1, batch, units.padded) and strides == [0, units.padded]
    with pytest.raises(ValueError, match="mask on the units"):
        common.unit_mask(torch.ones(steps, batch, hidden + 1, device=DEVICE), units, like)


def layer_outputs(steps: int, batch: int, inputs: int, hidden: int, masks_for) -> list[list[torch.Tensor]]:
    """(y, h_T and every parameter's gradient) of a GRU layer with impl=fast, then of its copy with impl=reference,
    on the same input, state and masks ``masks_for(x)``."""
    torch.manual_seed(3)
    fast = Layer("gru", inputs, hidden, impl="fast").to(DEVICE)
    reference = Layer("gru", inputs, hidden, impl="reference").to(DEVICE)
    reference.module.load_state_dict(fast.module.state_dict())
    x = torch.randn(steps, batch, inputs, device=DEVICE)
    h0 = torch.randn(batch, hidden, device=DEVICE)
    masks = masks_for(x)
    outputs = []
    for layer in (fast, reference):
        y, h = layer(x, h0, masks)
        (y.square().sum() + h.sum()).backward()
        outputs.append([y, h] + [p.grad for p in layer.parameters()])
    return outputs


@pytest.mark.parametrize("per_gate", [False, True])
def test_gru_layer_fast_matches_reference(per_gate):
    batch, hidden = 2, 9
    gates = (GRU_GATES,) if per_gate else ()
    outputs = layer_outputs(4, batch, 5, hidden, lambda x: LayerMasks(
        h=bernoulli_mask((batch, *gates, hidden), 0.5, x), per_gate=per_gate))
    for a, b in zip(*outputs, strict=True):
        assert rel(a, b) < 1e-5


def test_gru_layer_fast_runs_the_kernels_for_the_candidate_and_zoneout_masks(monkeypatch):
    """Semeniuta's and zoneout's masks alone (no h mask) make the layer's recurrence a masked one: with impl=fast the
    kernels run it, with the reference's results."""
    runs = kernel_units(monkeypatch, kernels_gru, launch.UNIT_MULTIPLE)
    steps, batch, inputs, hidden = 3, 2, 5, 9

    def masks_for(x):
        masks = make_masks("semeniuta_zoneout_untied", steps, batch, inputs, hidden)
        return LayerMasks(g=masks.g, zone_h=masks.zone_h)

    outputs = layer_outputs(steps, batch, inputs, hidden, masks_for)
    assert len(runs) == 1
    for a, b in zip(*outputs, strict=True):
        assert rel(a, b) < FP32_TOL


@gpu
@pytest.mark.parametrize("kind", ["none", "tied", "untied", "semeniuta_fresh_x", "zoneout_fresh_x_tied_h",
                                  "zoneout_expected", "semeniuta_zoneout_untied"])
def test_fused_gru_matches_reference_on_gpu(kind):
    torch.manual_seed(4)
    compare(steps=35, batch=20, inputs=64, hidden=128, kind=kind)


@gpu
@pytest.mark.parametrize("kind", ["tied", "semeniuta_zoneout_untied"])
def test_fused_gru_bf16_autocast_close_to_reference(kind):
    torch.manual_seed(5)
    steps, batch, inputs, hidden = 7, 20, 48, 72
    leaves = random_problem(steps, batch, inputs, hidden)
    masks = make_masks(kind, steps, batch, inputs, hidden)
    weights = loss_weights(steps, batch, hidden)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ref = run_with_grads(gru_reference, leaves, masks, weights)
        out = run_with_grads(gru_fused, leaves, masks, weights)
    assert out[0].dtype == ref[0].dtype
    errors = {name: rel(o, r) for name, o, r in zip(NAMES, out, ref, strict=True)}
    assert all(e < 3e-2 for e in errors.values()), errors


@gpu
@pytest.mark.parametrize("kind", ["tied", "untied", "semeniuta_zoneout_untied"])
def test_fused_gru_in_cuda_graph_matches_eager(kind):
    """Forward and backward captured in one CUDA graph, replayed on new inputs: eager's numbers."""
    torch.manual_seed(6)
    steps, batch, inputs, hidden = 6, 20, 32, 128
    leaves = random_problem(steps, batch, inputs, hidden)
    masks = make_masks(kind, steps, batch, inputs, hidden)
    weights = loss_weights(steps, batch, hidden)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: compiles the kernels
        run_with_grads(gru_fused, leaves, masks, weights)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run_with_grads(gru_fused, leaves, masks, weights)
    with torch.no_grad():  # new values in the captured input buffers
        for leaf in leaves:
            leaf.copy_(torch.randn_like(leaf) * leaf.std())
        for mask in (masks.x, masks.h, masks.g, masks.zone_h):
            if mask is not None:
                mask.copy_(mask.flip(0))
    graph.replay()
    eager = run_with_grads(gru_fused, leaves, masks, weights)
    for name, a, b in zip(NAMES, captured, eager, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
