"""The fused Triton recurrence (vdrnn.kernels.lstm) against the reference loop, and the graphed training step.

On a machine without CUDA the kernels run in Triton's interpreter on CPU tensors (TRITON_INTERPRET=1,
see triton_setup.py); on a GPU the same tests run the compiled kernels.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools

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
from vdrnn.cells.lstm import lstm_reference
from vdrnn.config import ModelConfig
from vdrnn.dropout import LayerMasks, Scheme, bernoulli_mask, gaussian_mask, weight_mask
from vdrnn.dropout.config import DropoutConfig
from vdrnn.dropout.masks import constant_over, zoneout_draws
from vdrnn.kernels import common, gemm, launch
from vdrnn.kernels import lstm as kernels_lstm
from vdrnn.kernels.graph import GraphedTrainStep
from vdrnn.kernels.lstm import lstm_fused
from vdrnn.tasks.lm.model import LanguageModel


def make_masks(kind: str, steps: int, batch: int, inputs: int, hidden: int) -> LayerMasks:
    like = torch.empty(0, device=DEVICE)
    if kind == "none":
        return LayerMasks()
    if kind == "tied_h_only":
        return LayerMasks(h=bernoulli_mask((batch, hidden), 0.3, like))
    if kind == "gaussian":  # Kingma's N(1, p/(1-p)) entries: real-valued, some negative
        return LayerMasks(x=gaussian_mask((batch, inputs), 0.4, like), h=gaussian_mask((batch, hidden), 0.5, like))
    if kind == "moon":
        keep = torch.empty(batch, hidden, device=DEVICE).bernoulli_(0.6)
        return LayerMasks(c=keep, c_scale=1 / 0.6)
    if kind == "moon_c":  # dropout.cell_scale=c: the 1/(1-p) on c_t, inside the recurrence
        keep = torch.empty(batch, hidden, device=DEVICE).bernoulli_(0.6) / 0.6
        return LayerMasks(c=keep, c_scale=1.0)
    if kind in NEW_SCHEME_MASKS:
        return NEW_SCHEME_MASKS[kind](steps, batch, inputs, hidden, like)
    masks = shared_masks(kind, 4, steps, batch, inputs, hidden)
    if masks is None:
        raise ValueError(kind)
    return masks


def zoneout(steps, batch, hidden, z, like):
    return zoneout_draws((steps, batch, hidden), z, like)


# Semeniuta's candidate masks and zoneout's draws, with the Zaremba input masks their schemes put beside them.
NEW_SCHEME_MASKS = {
    "semeniuta_step": lambda s, b, d, h, like: LayerMasks(x=bernoulli_mask((s, b, d), 0.3, like),
                                                          g=bernoulli_mask((s, b, h), 0.4, like)),
    "semeniuta_sequence": lambda s, b, d, h, like: LayerMasks(g=bernoulli_mask((b, h), 0.4, like)),
    "zoneout": lambda s, b, d, h, like: LayerMasks(x=bernoulli_mask((s, b, d), 0.3, like),
                                                   zone_c=zoneout(s, b, h, 0.5, like),
                                                   zone_h=zoneout(s, b, h, 0.3, like)),
    "zoneout_c": lambda s, b, d, h, like: LayerMasks(zone_c=zoneout(s, b, h, 0.5, like)),
    "zoneout_h_tied": lambda s, b, d, h, like: LayerMasks(h=bernoulli_mask((b, h), 0.5, like),
                                                          zone_h=zoneout(s, b, h, 0.4, like)),
    "zoneout_expected": lambda s, b, d, h, like: LayerMasks(zone_c=constant_over(torch.empty(s, b, device=DEVICE),
                                                                                 h, 0.5),
                                                            zone_h=constant_over(torch.empty(s, b, device=DEVICE),
                                                                                 h, 0.05)),
}


def random_problem(steps: int, batch: int, inputs: int, hidden: int):
    """Fresh inputs, state and weights."""
    x = torch.randn(steps, batch, inputs, device=DEVICE)
    h0 = torch.randn(batch, hidden, device=DEVICE) * 0.5
    c0 = torch.randn(batch, hidden, device=DEVICE)
    return [t.requires_grad_() for t in (x, h0, c0, *random_weights(4, inputs, hidden))]


def run_with_grads(fn, leaves, masks, weights):
    """Outputs, and the gradients of a random projection of them with respect to ``leaves``: the problem's
    tensors (x, h0, c0, W_ih, W_hh, b_ih, b_hh), then any leaves that ``masks`` were made from."""
    x, h0, c0, *params = leaves[:7]
    y, (h, c) = fn(x, (h0, c0), tuple(params), masks)
    wy, wh, wc = weights
    loss = (y.float() * wy).sum() + (h * wh).sum() + (c * wc).sum()
    grads = torch.autograd.grad(loss, leaves)
    return [y, h, c, *grads]


NAMES = ["y", "h_T", "c_T", "dx", "dh0", "dc0", "dw_ih", "dw_hh", "db_ih", "db_hh"]
# The problem the kernels are compared on: three steps are each case a step of the kernels can be (the first, from h_0;
# one in the middle; the last, whose backward is its own variant), and each more step adds only interpreter time.
STEPS, BATCH, INPUTS = 3, 3, 7


@pytest.mark.parametrize("hidden", [8, 33])
@pytest.mark.parametrize("kind", ["none", "tied", "tied_h_only", "fresh_x_tied_h", "untied", "untied_x_only",
                                  "tied_batch", "untied_batch", "gaussian", "gaussian_untied", "moon", "moon_c"])
def test_fused_matches_reference(kind, hidden, block_plan):
    assert_fused_matches_reference(kind, hidden)


@pytest.mark.parametrize("kind", list(NEW_SCHEME_MASKS))
def test_fused_matches_reference_with_candidate_and_zoneout_masks(kind):
    """Semeniuta's mask on g (fresh per step, or one per sequence) and zoneout's d on c and h (draws, or the
    expectation as a zero-stride view), alone and beside the other masks: forward, and every gradient, h_0's
    included (zoneout's gradient around the first step's update)."""
    assert_fused_matches_reference(kind, hidden=33)


@pytest.mark.parametrize("kind", ["semeniuta_step", "zoneout"])
def test_candidate_and_zoneout_masks_under_split_k(kind, block_plan):
    """The same with the reduction split over programs: the masks are read by the last program of a block."""
    assert_fused_matches_reference(kind, hidden=33)


@pytest.mark.parametrize("kind", ["semeniuta_step", "zoneout", "zoneout_expected"])
def test_candidate_and_zoneout_masks_on_the_inference_path(kind):
    assert inference_error(kind, steps=3, batch=5, inputs=5, hidden=20) < FP32_TOL


@pytest.mark.parametrize("kind", ["tied", "untied", "gaussian_untied"])
def test_fused_with_aligned_products_matches_reference(kind, monkeypatch):
    """The products zero-padded for cuBLAS (vdrnn.gemm, CUDA only) run here too: 7 inputs pad to 8, and the input
    product writes each gate's 33 units as the kernels' 48."""
    monkeypatch.setattr(gemm, "ALIGNED_DEVICES", ("cuda", "cpu"))
    assert_fused_matches_reference(kind, hidden=33)


@pytest.mark.parametrize("multiple,units", [(1, 33), (16, 48)])
@pytest.mark.parametrize("kind", ["tied", "untied", "moon"])
def test_dead_units_change_nothing(kind, multiple, units, monkeypatch):
    """33 units run by the kernels as 48 (15 dead units, launch.UNIT_MULTIPLE 16) or as they are: the same results."""
    runs = kernel_units(monkeypatch, kernels_lstm, multiple)
    assert_fused_matches_reference(kind, hidden=33)
    [(run_units, y)] = runs
    assert run_units == units
    assert y[..., 33:].abs().max().item() == 0 if units > 33 else y.shape[-1] == 33  # dead units stay exactly 0


def test_packed_weight_pads_each_gate_with_zeros():
    """W_hh [4H, H] as the kernels read it: [4 HP, w_cols], each gate's H x H block in place and zeros elsewhere, so
    that a dead unit gets no input and feeds none (its rows and columns are zero)."""
    w = torch.randn(4 * 5, 5)
    plan = launch.Plan(3, 16, torch.device("cpu"))
    packed = launch.pack_weight(w, torch.float32, plan).view(4, 16, plan.w_cols)
    torch.testing.assert_close(packed[:, :5, :5], w.view(4, 5, 5))
    packed[:, :5, :5] = 0
    assert packed.abs().max().item() == 0


@pytest.mark.parametrize("hidden", [5, 16])  # padded, and packed as it is
def test_packed_weight_carries_weight_drops_mask(hidden):
    """AWD's mask multiplies W_hh as it is packed, in the stored dtype; the padding stays zero."""
    w, mask = torch.randn(4 * hidden, hidden), weight_mask((4 * hidden, hidden), 0.5, torch.empty(0))
    plan = launch.Plan(3, 16, torch.device("cpu"))
    packed = launch.pack_weight(w, torch.float16, plan, mask).view(4, 16, plan.w_cols)
    assert packed.dtype == torch.float16
    torch.testing.assert_close(packed[:, :hidden, :hidden], (w * mask.keep * mask.scale).half().view(4, hidden, hidden))
    packed[:, :hidden, :hidden] = 0
    assert packed.abs().max().item() == 0


def assert_fused_matches_reference(kind: str, hidden: int, tol: float = FP32_TOL) -> None:
    steps, batch, inputs = STEPS, BATCH, INPUTS
    leaves = random_problem(steps, batch, inputs, hidden)
    masks = make_masks(kind, steps, batch, inputs, hidden)
    weights = [torch.randn(s, device=DEVICE) for s in ((steps, batch, hidden), (batch, hidden), (batch, hidden))]
    ref = run_with_grads(lstm_reference, leaves, masks, weights)
    out = run_with_grads(lstm_fused, leaves, masks, weights)
    errors = {name: rel(o, r) for name, o, r in zip(NAMES, out, ref, strict=True)}
    assert all(e < tol for e in errors.values()), errors
    assert out[0].dtype == ref[0].dtype and out[1].dtype == torch.float32


@pytest.mark.parametrize("split", [(1, 1), (2, 2)])
@pytest.mark.parametrize("prefetch", [(0, 0), (1, 1), (1, 2)])
@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_w_tiles_loaded_before_the_wait_change_nothing(kind, prefetch, split, monkeypatch):
    """The first W_hh tiles of a program's K chunk loaded before the wait for the step before (launch.PREFETCH_F,
    PREFETCH_B), 16-wide slices of 48 units: a chunk of three tiles with one or two of them ahead of its loop, and
    chunks of two, the second running past H, whose loop is then empty."""
    monkeypatch.setattr(launch, "BLOCK_K", 16)
    monkeypatch.setattr(launch, "FORCE_SPLIT", split)
    monkeypatch.setattr(launch, "PREFETCH_F", prefetch[0])
    monkeypatch.setattr(launch, "PREFETCH_B", prefetch[1])
    assert_fused_matches_reference(kind, hidden=33)


@pytest.mark.parametrize("kind", ["tied", "untied", "moon"])
def test_tf32_products_read_their_operands_stored_in_fp16(kind, block_plan, monkeypatch):
    """With TF32 on, as training's fp32 runs have it, W_hh and the forward's masked h_t are stored in fp16
    (common.stored_dtype): the 10 mantissa bits a TF32 product keeps, in half the bytes. The backward's gradients stay
    fp32, and the results stay within TF32's error of the reference (at most 2-4e-4 on one H200 at 650 and 1500 units,
    where fp32-stored TF32 operands gave 8e-4)."""
    packed = packed_dtypes(monkeypatch)
    with tf32_products(True):
        assert_fused_matches_reference(kind, hidden=33, tol=TF32_TOL)
    assert packed == [torch.float16]


def test_ieee_fp32_products_keep_fp32_operands(monkeypatch):
    packed = packed_dtypes(monkeypatch)
    with tf32_products(False):
        assert_fused_matches_reference("untied", hidden=33)
    assert packed == [torch.float32]


@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_a_detached_initial_state_gets_no_gradient_product(kind, monkeypatch):
    """Training carries h_0 over from the batch before, detached: the backward then skips dh_0's product (a read of
    all of W_hh a layer), and every other gradient is the reference's."""
    calls = []
    real = common.initial_state_grad
    monkeypatch.setattr(common, "initial_state_grad", lambda *args: calls.append(1) or real(*args))
    steps, batch, inputs, hidden = STEPS, BATCH, INPUTS, 33
    x, h0, c0, *params = random_problem(steps, batch, inputs, hidden)
    h0 = h0.detach()
    masks = make_masks(kind, steps, batch, inputs, hidden)

    def grads(fn):
        y, (h, c) = fn(x, (h0, c0), tuple(params), masks)
        return torch.autograd.grad(y.sum() + h.sum() + c.sum(), [x, c0, *params])

    got = grads(lstm_fused)
    assert calls == []
    for g, r in zip(got, grads(lstm_reference), strict=True):
        assert rel(g, r) < FP32_TOL


@pytest.mark.parametrize("hidden", [32, 33])
@pytest.mark.parametrize("used", [("y",), ("h",), ("c",), ("h", "c")])
def test_unused_outputs_get_zero_gradients_made_at_the_kernels_units(used, hidden):
    """Autograd hands the backward None for an output the loss does not use (a training step's h_T and c_T, carried
    on detached): the gradients are the reference's all the same, and the output gradients the caller passed in are
    left as they were (the kernels carry dL/dc back in place, in a buffer of their own)."""
    steps, batch, inputs = STEPS, BATCH, INPUTS
    x, h0, c0, *params = random_problem(steps, batch, inputs, hidden)
    masks = make_masks("tied", steps, batch, inputs, hidden)
    weights = {"y": torch.randn(steps, batch, hidden, device=DEVICE), "h": torch.randn(batch, hidden, device=DEVICE),
               "c": torch.randn(batch, hidden, device=DEVICE)}
    kept = {name: w.clone() for name, w in weights.items()}

    def grads(fn):
        y, (h, c) = fn(x, (h0, c0), tuple(params), masks)
        outputs = {"y": y, "h": h, "c": c}
        return torch.autograd.grad([outputs[n] for n in used], [x, h0, c0, *params],
                                   grad_outputs=[weights[n] for n in used])

    for g, r in zip(grads(lstm_fused), grads(lstm_reference), strict=True):
        assert rel(g, r) < FP32_TOL
    assert all(torch.equal(weights[n], kept[n]) for n in weights)


def with_learned_masks(masks: LayerMasks) -> tuple[LayerMasks, list[torch.Tensor]]:
    """The masks as leaves that want gradients, as learned Gaussian noise (dropout.learn_alpha) makes them."""
    x, h = (m.clone().requires_grad_() for m in (masks.x, masks.h))
    return dataclasses.replace(masks, x=x, h=h), [x, h]


@pytest.mark.parametrize("kind", ["gaussian", "gaussian_untied", "tied_batch", "untied_batch"])
def test_fused_passes_the_masks_gradient(kind, block_plan):
    """dL/dz_h from the kernels' backward (and dL/dz_x through the input product) equals the reference's."""
    steps, batch, inputs, hidden = STEPS, BATCH, INPUTS, 33
    leaves = random_problem(steps, batch, inputs, hidden)
    masks, mask_leaves = with_learned_masks(make_masks(kind, steps, batch, inputs, hidden))
    weights = [torch.randn(s, device=DEVICE) for s in ((steps, batch, hidden), (batch, hidden), (batch, hidden))]
    ref = run_with_grads(lstm_reference, leaves + mask_leaves, masks, weights)
    out = run_with_grads(lstm_fused, leaves + mask_leaves, masks, weights)
    errors = {name: rel(o, r) for name, o, r in zip(NAMES + ["dz_x", "dz_h"], out, ref, strict=True)}
    assert all(e < FP32_TOL for e in errors.values()), errors
    assert out[-1].shape == masks.h.shape and out[-1].abs().sum() > 0


def inference_error(kind: str, steps: int, batch: int, inputs: int, hidden: int) -> float:
    """The no-grad path (saves nothing, as MC evaluation runs it): worst relative error of y, h_T, c_T."""
    leaves = random_problem(steps, batch, inputs, hidden)
    x, h0, c0, *params = leaves
    masks = make_masks(kind, steps, batch, inputs, hidden)
    with torch.no_grad():
        y_ref, (h_ref, c_ref) = lstm_reference(x, (h0, c0), tuple(params), masks)
        y, (h, c) = lstm_fused(x, (h0, c0), tuple(params), masks)
    return max(rel(y, y_ref), rel(h, h_ref), rel(c, c_ref))


@pytest.mark.parametrize("kind", ["untied", "tied"])
def test_many_batch_blocks_and_inference(kind, block_plan):
    """More than one block of batch rows (B > 64, where the forward's programs multiply all four gates, not one), and
    the no-grad path that saves nothing."""
    assert not launch.Plan(70, 32, DEVICE, one_gate_kernel=True).one_gate
    assert inference_error(kind, steps=2, batch=70, inputs=5, hidden=20) < FP32_TOL


def forward_stage_bytes(plan, gates: int, operands: int, op_bytes: int) -> int:
    """What one stage of the forward loop holds: one operand tile and one gate's W tile (one-gate programs), or the
    operand tile(s) and every gate's W tile."""
    if plan.one_gate:
        return (plan.block_b + plan.block_h_f) * plan.block_k_f * op_bytes
    return (operands * plan.block_b + gates * launch.BLOCK_H) * plan.block_k_f * op_bytes


@pytest.mark.parametrize("op_bytes", [4, 2])
@pytest.mark.parametrize("gates,one_gate_kernel", [(4, True), (3, False)])  # the LSTM's plans, the GRU's
@pytest.mark.parametrize("batch", [20, 128, 1000, 5000])
def test_plans_keep_the_forward_pipeline_within_shared_memory(batch, gates, one_gate_kernel, op_bytes, monkeypatch):
    """The pipeline of the forward loop gets no deeper than 227 KB hold (an H100's limit). Untied fp32 masks at MC
    evaluation's wide batches once asked for 240 KB."""
    monkeypatch.setattr(launch, "smem_limit", lambda device: 232448)
    for hidden in (128, 512, 650, 1500):
        for operands in (1, gates):
            plan = launch.Plan(batch, hidden, torch.device("cpu"), gates, operands, op_bytes, one_gate_kernel)
            assert plan.stages_f * forward_stage_bytes(plan, gates, operands, op_bytes) <= 232448, (hidden, operands)
    # Where three stages fit, the plan keeps them: tied, the same wide batch. Where they do not, the cap, not the
    # narrower K slice (turned off here), takes the depth down.
    monkeypatch.setattr(launch, "MIN_BLOCK_K_F", launch.BLOCK_K)
    assert launch.Plan(1000, 512, torch.device("cpu"), 4, 1, 4, one_gate_kernel=True).stages_f == 3
    assert launch.Plan(1000, 512, torch.device("cpu"), 4, 4, 4, one_gate_kernel=True).stages_f == 2


def test_one_gate_programs_at_training_batches_over_the_widest_block_of_units_that_splits_k_at_most_twice(
        monkeypatch):
    """The LSTM's forward programs multiply one gate each for batches of up to 32 rows, over 16 or 32 units: the wider
    block where K then splits at most two ways (1504 units), else the narrower (656 units, where 32 would split K four
    ways), as measured fastest on an H200; tied or untied masks, fp32 or bf16, the same grid. MC evaluation's 1,000
    sequences (64-row blocks) keep four-gate programs of BLOCK_H units."""
    monkeypatch.setattr(launch, "smem_limit", lambda device: 232448)
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    expected = {(20, 656): (True, 16, (41, 8, 1)), (20, 1504): (True, 32, (47, 8, 1)),
                (32, 1504): (True, 32, (47, 8, 1)), (33, 1504): (False, 16, (94, 4, 1)),
                (1000, 656): (False, 16, (41, 1, 16)), (1000, 1504): (False, 16, (94, 1, 16))}
    for (batch, units), (one_gate, block, grid) in expected.items():
        for operands, op_bytes in itertools.product((1, 4), (4, 2)):
            plan = launch.Plan(batch, units, torch.device("cpu"), 4, operands, op_bytes, one_gate_kernel=True)
            assert (plan.one_gate, plan.block_h_f, plan.grid_f) == (one_gate, block, grid), (batch, units, operands)
    # A kernel without one-gate programs (the GRU's) never gets them.
    gru = launch.Plan(20, 1504, torch.device("cpu"), 3, 3, 4)
    assert (gru.one_gate, gru.block_h_f, gru.grid_f[0]) == (False, launch.BLOCK_H, 94)


def test_the_backward_takes_the_widest_block_of_units_that_splits_k_at_most_twice_at_training_batches(monkeypatch):
    """The backward's programs multiply one gate each, LSTM's and GRU's alike: for batches of up to 32 rows their
    block is 32 units where K then splits at most two ways (1504 units), else 16 (656 units, where 32 would split it
    five ways), as measured fastest on an H200. Wider batches (not measured) keep BLOCK_H units. The packed W has
    columns for every block's units."""
    monkeypatch.setattr(launch, "smem_limit", lambda device: 232448)
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    expected = {(20, 656): (16, 41, 2), (20, 1504): (32, 47, 2), (32, 1504): (32, 47, 2), (20, 1152): (32, 36, 2),
                (33, 1504): (16, 94, 1), (128, 1504): (16, 94, 1), (128, 128): (16, 8, 2)}
    for (batch, units), (block, n_j, ks) in expected.items():
        for gates, one_gate_kernel in ((4, True), (3, False)):
            plan = launch.Plan(batch, units, torch.device("cpu"), gates, 1, 4, one_gate_kernel)
            assert (plan.block_h_b, plan.n_j_b, plan.ks) == (block, n_j, ks), (batch, units, gates)
            assert plan.w_cols >= plan.n_j_b * plan.block_h_b


def test_the_steps_are_dependent_launches_on_hopper_and_later_only(monkeypatch):
    """Programmatic dependent launch needs compute capability 9.0 or later: the plans ask for it there (unless
    VDRNN_FUSED_DEPENDENT_LAUNCH=0 turned it off), never on older GPUs or in the interpreter."""
    monkeypatch.setattr(launch, "smem_limit", lambda device: 232448)
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    cuda = torch.device("cuda", 0)
    for capability, expected in (((9, 0), True), ((10, 0), True), ((8, 0), False)):
        monkeypatch.setitem(launch.CAPABILITY, 0, capability)
        assert launch.Plan(20, 656, cuda).gdc is expected, capability
    monkeypatch.setattr(launch, "DEPENDENT_LAUNCH", False)
    assert not launch.Plan(20, 656, cuda).gdc
    monkeypatch.setattr(launch, "DEPENDENT_LAUNCH", True)
    assert not launch.Plan(20, 656, torch.device("cpu")).gdc


def test_the_forward_narrows_its_k_slice_where_its_pipeline_would_crowd_out_programs(monkeypatch):
    """The GRU's untied fp32 masks at 1500 units: 64-wide slices take 36 KB a stage (three operand tiles, three W tiles),
    and three stages would leave two programs per SM; 32-wide ones leave three (PROGRAMS_PER_SM), the rest of the
    forward's plan kept. Where three programs fit already (tied, bf16, or the LSTM's one-gate programs), the slice
    stays BLOCK_K wide; the backward's never changes."""
    monkeypatch.setattr(launch, "smem_limit", lambda device: 232448)
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)

    def plan(gates, operands, op_bytes, one_gate_kernel=False):
        return launch.Plan(20, 1504, torch.device("cpu"), gates, operands, op_bytes, one_gate_kernel)

    untied = plan(3, 3, 4)
    assert (untied.block_k_f, untied.split_f, untied.chunk_f, untied.stages_f) == (32, 4, 384, 3)
    assert untied.stages_f * forward_stage_bytes(untied, 3, 3, 4) * launch.PROGRAMS_PER_SM <= 232448
    for gates, operands, op_bytes, one_gate_kernel in ((3, 1, 4, False), (3, 3, 2, False), (4, 4, 4, True),
                                                       (4, 1, 4, True)):
        assert plan(gates, operands, op_bytes, one_gate_kernel).block_k_f == launch.BLOCK_K
    assert (untied.ks, untied.chunk_b) == (plan(3, 1, 4).ks, plan(3, 1, 4).chunk_b)
    monkeypatch.setattr(launch, "MIN_BLOCK_K_F", launch.BLOCK_K)  # no narrowing: the plan as before
    assert plan(3, 3, 4).block_k_f == launch.BLOCK_K


@pytest.mark.parametrize("kind", ["untied", "tied"])
def test_fused_matches_reference_with_a_narrower_forward_k_slice(kind, monkeypatch):
    """The forward's K slice narrower than the backward's: here a small shared-memory budget makes the plan narrow
    it from 64 to 32."""
    monkeypatch.setattr(launch, "smem_limit", lambda device: 30_000)
    operands = 4 if kind == "untied" else 1
    plan = launch.Plan(3, launch.Units(33).padded, torch.device("cpu"), 4, operands, 4, one_gate_kernel=True)
    assert (plan.one_gate, plan.block_k_f, launch.BLOCK_K) == (True, 32, 64)
    assert_fused_matches_reference(kind, hidden=33)


@gpu
def test_untied_masks_at_a_wide_inference_batch_run_on_the_gpu():
    """MC evaluation's shape: 1,000 sequences, 512 units, untied masks, fp32 (three pipeline stages would need
    240 KB of shared memory)."""
    assert inference_error("untied", steps=3, batch=1000, inputs=64, hidden=512) < FP32_TOL


@gpu
@pytest.mark.parametrize("kind", ["tied", "untied", "moon"])
def test_fused_bf16_autocast_close_to_reference(kind, block_plan):
    steps, batch, inputs, hidden = 7, 20, 48, 72
    leaves = random_problem(steps, batch, inputs, hidden)
    masks = make_masks(kind, steps, batch, inputs, hidden)
    weights = [torch.randn(s, device=DEVICE) for s in ((steps, batch, hidden), (batch, hidden), (batch, hidden))]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ref = run_with_grads(lstm_reference, leaves, masks, weights)
        out = run_with_grads(lstm_fused, leaves, masks, weights)
    assert out[0].dtype == ref[0].dtype == torch.bfloat16  # x_proj's dtype, tied or untied
    errors = {name: rel(o, r) for name, o, r in zip(NAMES, out, ref, strict=True)}
    assert all(e < 3e-2 for e in errors.values()), errors


# ------------------------------------------------------------------- the language model, the schemes' own masks
# What training runs: each scheme draws its masks (vdrnn.dropout), the model hands them to its layers as LayerMasks,
# and the layers pick the kernels or the reference loop by model.impl. The tests above build LayerMasks by hand.
SCHEMES = {
    "zaremba": dict(scheme="zaremba", input=0.4, output=0.3),
    "moon": dict(scheme="moon", cell=0.3),
    "moon_cell_scale_c": dict(scheme="moon", cell=0.3, cell_scale="c"),
    "variational": dict(scheme="variational", embedding=0.2, input=0.4, recurrent=0.3, output=0.3),
    "variational_untied": dict(scheme="variational", embedding=0.2, input=0.4, recurrent=0.3, output=0.3,
                               per_gate=True),
    "variational_batch_masks": dict(scheme="variational", input=0.4, recurrent=0.3, locked_mask="batch"),
    "gaussian_learned": dict(scheme="gaussian", input=0.4, recurrent=0.3, output=0.3, learn_alpha=True),
    "awd": dict(scheme="awd", embedding=0.1, input=0.4, hidden=0.25, weight=0.5, output=0.3),
    "concrete": dict(scheme="concrete", embedding=0.2, input=0.4, recurrent=0.3, output=0.3),
    "zoneout": dict(scheme="zoneout", input=0.3, zoneout_cell=0.5, zoneout_hidden=0.2),
    "semeniuta_sequence": dict(scheme="semeniuta", candidate=0.4, candidate_mask="sequence"),
}


@pytest.mark.parametrize("name", ["zoneout"])
def test_language_model_fast_path_matches_reference_in_evaluation(name):
    """Weight scaling on the kernels too: zoneout's expectation, a mask of z at every step, on both paths."""
    tokens = torch.randint(0, 30, (5, 3), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    logits = {}
    for impl in ("fast", "reference"):
        torch.manual_seed(0)
        model = LanguageModel(30, ModelConfig(num_layers=2, hidden_size=12, impl=impl, init_range=0.1),
                              DropoutConfig(**SCHEMES[name])).to(DEVICE).eval()
        with torch.no_grad():
            logits[impl], _ = model(tokens, model.initial_state(3, DEVICE))
    assert rel(logits["fast"], logits["reference"]) < FP32_TOL


def lm_outputs(impl: str, scheme: dict, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Logits and every parameter's gradient of a 2-layer LM (same init and mask draws for every impl)."""
    torch.manual_seed(0)
    model = LanguageModel(30, ModelConfig(num_layers=2, hidden_size=12, impl=impl, init_range=0.1),
                          DropoutConfig(**scheme)).to(DEVICE).train()
    torch.manual_seed(1)
    logits, _ = model(tokens, model.initial_state(tokens.shape[1], DEVICE))
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.roll(-1, 0).flatten())
    if model.noise_scales is not None:
        loss = loss + model.regularizer(1000)
    loss.backward()
    return {"logits": logits, **{name: p.grad for name, p in model.named_parameters()}}


# Schemes without a recurrent mask: both impls run the plain nn.LSTM layer (cuDNN on CUDA), never the kernels. AWD's
# weight-dropped layers take the kernels under impl=fast (against the stock kernel on the same dropped W_hh).
WITHOUT_KERNELS = ("zaremba",)


@pytest.mark.parametrize("name", list(SCHEMES))
def test_language_model_fast_path_matches_reference(name, monkeypatch):
    """impl=fast and impl=reference give the same logits and gradients, and fast runs the kernels exactly where the
    scheme masks h_{t-1} (else the comparison would be one code path against itself)."""
    calls = []

    def counted(*args):
        calls.append(1)
        return lstm_fused(*args)

    monkeypatch.setattr(kernels_lstm, "lstm_fused", counted)  # the LSTM layer imports it at call time
    tokens = torch.randint(0, 30, (5, 3), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    fast = lm_outputs("fast", SCHEMES[name], tokens)
    assert len(calls) == (0 if name in WITHOUT_KERNELS else 2)  # one per layer
    reference = lm_outputs("reference", SCHEMES[name], tokens)
    assert len(calls) == (0 if name in WITHOUT_KERNELS else 2)  # the reference loop, never the kernels
    assert fast.keys() == reference.keys()
    errors = {key: rel(fast[key], reference[key]) for key in fast}
    assert all(e < FP32_TOL for e in errors.values()), errors


# ----------------------------------------------------------------------------------- graphed step
@dataclasses.dataclass(frozen=True, kw_only=True)
class OnesMasks(Scheme):
    """Recurrent masks of ones: deterministic, yet the recurrence takes the masked (fused) path."""

    per_gate: bool = False

    def layer_masks(self, x, hidden_size, gates, layer=0, noise=None):
        shape = (x.shape[1], gates, hidden_size) if self.per_gate else (x.shape[1], hidden_size)
        return LayerMasks(h=torch.ones(shape, device=x.device), per_gate=self.per_gate)


def train_three_steps(model, graphed: bool, amp: str, seed: int, learned: bool = False):
    vocab, batch, bptt = model.vocab_size, 4, 6
    gen = torch.Generator().manual_seed(7)
    data = torch.randint(0, vocab, (4 * bptt + 1, batch), generator=gen).to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    step = GraphedTrainStep(model, optimizer, clip=0.25, batch_size=batch, bptt=bptt, weight_decay=1e-4, amp=amp,
                            regularizer=(lambda: model.regularizer(1000)) if learned else (lambda: None))
    torch.manual_seed(seed)
    state = model.initial_state(batch, DEVICE)
    losses = []
    for i in range(3):
        if i == 2:  # a new learning rate: the graph must be re-recorded
            optimizer.param_groups[0]["lr"] = 0.5
        inputs, targets = data[i * bptt:(i + 1) * bptt], data[i * bptt + 1:(i + 1) * bptt + 1]
        loss, norm, state = (step if graphed else step.eager_step)(inputs, targets, state)
        losses.append((loss.clone(), norm.clone()))
    # The epoch's last, shorter minibatch takes the eager path.
    loss, norm, state = step(data[3 * bptt:-2], data[3 * bptt + 1:-1], state)
    losses.append((loss.clone(), norm.clone()))
    return torch.tensor([[float(a), float(b)] for a, b in losses]), [p.detach().clone() for p in model.parameters()]


def compare_graphed_with_eager(dropout, impl="fast", amp="off", learned=False, scheme=None):
    """The graphed step against the eager one, on a model of ``dropout`` (a config), or of ``scheme`` (a scheme object
    of the tests' own)."""
    torch.manual_seed(0)
    model = LanguageModel(50, ModelConfig(hidden_size=32, impl=impl, init_range=0.1), dropout).to(DEVICE).train()
    if scheme is not None:
        model.rnn.dropout = scheme
    twin = copy.deepcopy(model)
    eager_losses, eager_weights = train_three_steps(model, graphed=False, amp=amp, seed=123, learned=learned)
    graph_losses, graph_weights = train_three_steps(twin, graphed=True, amp=amp, seed=123, learned=learned)
    assert torch.isfinite(graph_losses).all()
    torch.testing.assert_close(graph_losses, eager_losses, rtol=1e-4, atol=1e-5)
    for a, b in zip(graph_weights, eager_weights, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@gpu
def test_graphed_step_matches_eager_without_masks():
    compare_graphed_with_eager(DropoutConfig(scheme="variational"))


@gpu
@pytest.mark.parametrize("per_gate", [False, True])
def test_graphed_step_matches_eager_on_fused_path(per_gate):
    compare_graphed_with_eager(DropoutConfig(), scheme=OnesMasks(per_gate=per_gate))


@gpu
@pytest.mark.parametrize("per_gate", [False, True])
def test_graphed_step_with_masks_draws_them_in_the_graph(per_gate):
    """Masks drawn on the device inside the graph: fresh per replay, the same stream as eager."""
    cfg = DropoutConfig(scheme="variational", embedding=0.2, input=0.5, recurrent=0.3, output=0.5,
                        per_gate=per_gate)
    compare_graphed_with_eager(cfg)


@gpu
@pytest.mark.parametrize("per_gate", [False, True])
def test_graphed_step_with_learned_noise_matches_eager(per_gate):
    """dropout.learn_alpha: masks from log alpha, the KL term and the alpha <= 1 projection, all inside the graph."""
    cfg = DropoutConfig(scheme="gaussian", learn_alpha=True, input=0.5, recurrent=0.3, output=0.2, per_gate=per_gate)
    compare_graphed_with_eager(cfg, learned=True)


@gpu
def test_graphed_step_bf16_runs():
    torch.manual_seed(0)
    cfg = DropoutConfig(scheme="variational", input=0.5, recurrent=0.3, output=0.5)
    model = LanguageModel(50, ModelConfig(hidden_size=32, impl="fast"), cfg).to(DEVICE).train()
    before = [p.detach().clone() for p in model.parameters()]
    losses, after = train_three_steps(model, graphed=True, amp="bf16", seed=1)
    assert torch.isfinite(losses).all()
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_double_backward_through_the_kernels_is_refused_not_detached():
    leaves = random_problem(3, 2, 5, 8)
    x, h0, c0, *params = leaves
    y, _ = lstm_fused(x, (h0, c0), tuple(params), make_masks("tied", 3, 2, 5, 8))
    # A loss whose gradient depends on y, as a gradient penalty's would: the kernels' backward then sees
    # incoming gradients that require grad.
    (dw_hh,) = torch.autograd.grad(y.pow(2).sum(), params[1], create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        dw_hh.sum().backward()


def test_graphed_step_takes_plain_sgd_only():
    model = LanguageModel(10, ModelConfig(num_layers=1, hidden_size=8), DropoutConfig())
    with pytest.raises(ValueError, match="plain SGD, not Adam"):
        GraphedTrainStep(model, torch.optim.Adam(model.parameters()), 5.0, batch_size=2, bptt=3)
    with pytest.raises(ValueError, match="no momentum"):  # the clip is folded into plain SGD's update
        GraphedTrainStep(model, torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.9), 5.0, batch_size=2, bptt=3)


# ----------------------------------------------------------------------------------- weight drop (AWD)
@pytest.mark.parametrize("hidden", [32, 33])  # run as they are, and as 48 units (dead units padded in)
def test_a_weight_dropped_layer_on_the_fused_path_matches_the_reference(monkeypatch, hidden):
    """model.impl=fast runs AWD's layers (dropped W_hh, locked x mask, no h mask) on the fused kernels, which apply the
    mask to the raw W_hh as they pack it: the same outputs and gradients (the raw W_hh's zero where an entry was
    dropped, h_0's through the dropped W_hh) as the reference loop on the dropped W_hh, in training and inference."""
    calls = []
    monkeypatch.setattr(kernels_lstm, "lstm_fused", lambda *args: calls.append(1) or lstm_fused(*args))
    torch.manual_seed(0)
    layer = Layer("lstm", 7, hidden, impl="fast").to(DEVICE)
    x = torch.randn(5, 3, 7, device=DEVICE)
    state = (torch.randn(3, hidden, device=DEVICE, requires_grad=True),
             torch.randn(3, hidden, device=DEVICE, requires_grad=True))
    masks = LayerMasks(x=bernoulli_mask((3, 7), 0.4, x), w_hh=weight_mask((4 * hidden, hidden), 0.5, x))
    results = []
    for run in ("fast", "reference"):
        w_ih, w_hh, b_ih, b_hh = layer.params()
        if run == "fast":
            y, (h, c) = layer(x, state, masks)
            with torch.no_grad():
                inferred = layer(x, state, masks)[0]
        else:
            dropped = w_hh * masks.w_hh.keep * masks.w_hh.scale
            y, (h, c) = lstm_reference(x, state, (w_ih, dropped, b_ih, b_hh), LayerMasks(x=masks.x))
        grads = torch.autograd.grad(y.square().sum() + h.sum() + c.sum(), (*layer.params(), *state))
        results.append((y, h, c, *grads))
    assert len(calls) == 2  # the layer's calls, with and without gradients
    torch.testing.assert_close(inferred, results[1][0], rtol=FP32_TOL, atol=FP32_TOL)
    assert torch.all(results[0][4][~masks.w_hh.keep] == 0)  # the raw W_hh's gradient
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=FP32_TOL, atol=FP32_TOL)
