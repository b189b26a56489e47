"""A fused LSTM recurrence for masked recurrences: the fast drop-in for ``lstm_reference``.

Why this exists. cuDNN's LSTM cannot apply a mask to h_{t-1} (Gal), one per gate (untied) or a
mask on c_t (Moon), so those layers fall back to :func:`vdrnn.recurrent.lstm_reference`, a Python
loop of ~10 small kernels per time step: 6x slower than cuDNN. At batch 20 the work is tiny
(a [20, H] x [H, 4H] product per step), so the time is all launch latency and re-reading W_hh, not
arithmetic. This module does the same computation with as few launches as the math allows.

What runs where (one layer, T steps, batch B, hidden H):

1. Input half, once for all steps: ``input_product`` (one GEMM, x masks applied there; b_ih is
   added with b_hh in step 2).
   x_t does not depend on h, so it never needs to be inside the loop.
2. Forward, ONE Triton kernel per time step (``_fwd_step``). At training batches a program multiplies
   one gate g for a block of hidden units j (and a slice of k, below):
       gates_g[b, j] = sum_k (h_{t-1}[b, k] * z_h[b, g, k]) * W_hh[g*H + j, k] + x_proj[t, b, g*H + j] + b
   and the last of the block's programs to finish has all four gates' sums, so it runs the cell (at
   MC evaluation's wide batches a program multiplies all four gates: ``_Plan``).
   The operand h_{t-1} * z_h comes ready: the step before stored it, masked and in the stored
   dtype (``hz``: one copy for tied masks, one per gate for untied), so the programs reading
   each slice of it load one tensor instead of h and z and multiplying (measured 7-16% off the
   step at H=1500, results/bench/NOTES.md). Then the cell (sigmoid/tanh, c_t = f*c + i*g, Moon's
   c_t *= m and h_t *= 1/(1-p)) runs on the accumulators in fp32, and the program stores h_t,
   h_t * z_h (the next step's operand), c_t, y_t and the four gate activations (what backward
   needs). One launch per step is the minimum: step t+1 needs all of h_t, i.e. the results of
   every program of step t, and a launch boundary is the cheapest grid-wide barrier that a CUDA
   graph can hold (a persistent kernel handing h_t over through global memory measured slower).
3. Backward, ONE Triton kernel per time step in reverse (``_bwd_step``). A program owns hidden
   units j and computes
       dh_t[b, j] = dy_t[b, j] + sum_g z_h[b, g, j] * sum_k dgates_{t+1}[b, g*H + k] * W_hh[g*H + k, j]
   (the recurrent GEMM of the step after, the mask again applied where its operand is used),
   then the cell's backward for units j of all four gates: dgates_t and dc_{t-1}. Fusing the GEMM
   with the pointwise saves one launch and one round trip of dh per step (a cuBLAS GEMM plus a
   pointwise kernel would be two launches per step). With bf16 products the kernel also stores
   dgates_t in bf16, the operand the next step's programs stream (12% off the bf16 step at H=1500).
4. After the loop, whole-sequence products that need no loop: dW_hh as ONE GEMM over all T*B rows
   (dgates^T @ hz, the operands the forward used; a per-gate batched GEMM for untied masks), db = sum of dgates
   (b = b_ih + b_hh: autograd hands it to both), d x_proj = dgates (autograd carries it on to x and w_ih), dh_0
   from one more small GEMM.

With untied input masks x_proj is gate-major, [4, T, B, H] storage (:func:`vdrnn.gemm.per_gate_linear`), and so is hz:
each gate's input product and weight gradient is then one matrix of a batched GEMM, with no transposing copies
(5.54 -> 4.88 ms for the 1500-unit fp32 step, results/bench/untied/; one gate per forward program then took it to
4.51 ms, results/bench/one_gate/; the product's own backward, 4.01 -> 3.62 ms with this module's b_ih and dh_0
changes, results/bench/untied_product/).

Split-K inside the one launch. At batch 20 a step has only H / 16 or H / 32 blocks of output (41 at
H=650, 47 at H=1500), too few to keep 132 SMs busy pulling W_hh through memory. So each kernel also
splits the reduction over k among several programs of the same launch; each writes its partial
sums to a small workspace and increments an arrival counter for its block (an atomic), and the
program that arrives last adds the partial sums in a fixed order (results are deterministic, not
dependent on arrival order) and runs the cell. No program ever waits for another, so the launch
cannot deadlock however the programs are scheduled, and the last one resets the counter for the
next step. Both products are split over (gate, k): the forward's sums over k for each gate, the
backward's over 4H = (gate, k). Everything
else the cell needs (x_proj, c_{t-1}, saved activations, dy) is loaded before the hand-off, so
that its latency overlaps it. How finely to split: ``_Plan`` (about PROGRAMS_PER_SM programs per
SM, i.e. one wave). The hand-off, the backward product and the block offsets are written once, in
:mod:`vdrnn.kernel_parts`, for these kernels and the GRU's.

Precision: the recurrent product runs in autocast's dtype when autocast is on (bf16 operands, as
F.linear in the reference), else in fp32 with TF32 when ``torch.backends.cuda.matmul.allow_tf32``
is on and IEEE fp32 otherwise; it accumulates in fp32, and gate sums, c_t, h_t and every gradient
carried through time stay fp32. y is returned in x_proj's dtype, as the reference does. For TF32 products
W_hh and the forward's operand h_t * z_h are stored in fp16, which holds the 10 mantissa bits TF32 keeps
(``_stored_dtype``): the forward multiplies fp16 by fp16, the backward converts W to TF32 as it loads it
(the 1500-unit fp32 step 3.94 -> 3.62 ms, and fast against reference 2-4e-4 instead of 8e-4; one H200,
results/bench/fp16_stored/).

The kernels run H units as HP, H rounded up to 16 (:class:`_Units`: 1500 as 1504, with 4 dead units that stay
zero), so that every block of units is whole and every row aligned (7-20% off the step kernels at H=1500). The
backward's dW_hh product then has aligned rows too, as cuBLAS's fast kernels want (:mod:`vdrnn.gemm`).

W_hh is copied once per forward into a buffer in the stored dtype, [G*HP, w_cols]: each gate's rows padded to HP,
each row zero-padded to a whole number of K slices. Every row starts aligned and the kernels read whole slices of
a row without masks, so the weight loads are full-width whatever H is. The copy is reused by the backward pass.

CUDA graphs: no host syncs and no allocation whose size depends on data, so a whole training step
with this layer can be captured (:mod:`vdrnn.graphed`).

Triton is imported on first use, not with this module: tests on a CPU set ``TRITON_INTERPRET=1``
before that, which makes the same kernels run in Triton's interpreter on CPU tensors. On a CPU
without the interpreter (or without Triton) ``lstm_fused`` runs the reference loop instead.
"""

from __future__ import annotations

import logging
import os

import torch
from torch.autograd.function import once_differentiable

from vdrnn import gemm
from vdrnn.dropout import LayerMasks
from vdrnn.recurrent import GATES, lstm_reference

log = logging.getLogger("vdrnn")

_KERNELS = None  # (fwd_step, bwd_step) once built
_WARNED: set[str] = set()  # modules that have said they fall back to the reference loop
_SM_COUNT: dict[int, int] = {}
_SMEM: dict[int, int] = {}

# Block shapes, overridable through the environment for tuning without editing the code.
# BLOCK_H: hidden units per program (the smallest tile a tensor-core product takes is 16);
# BLOCK_K: width of one slice of the reduction; PROGRAMS_PER_SM: how finely the reduction is split
# across programs (see "split-K" in the module docstring).
BLOCK_H = int(os.environ.get("VDRNN_FUSED_BLOCK_H", "16"))
# The LSTM's forward kernel can run one gate per program; its plans do so for batches of at most ONE_GATE_MAX_ROWS
# rows, over the widest of ONE_GATE_BLOCKS units whose K splits at most MAX_ONE_GATE_SPLIT ways (see _Plan). The
# backward kernels' programs always multiply one gate; at such batches their block of units is chosen the same way.
ONE_GATE_MAX_ROWS = 32
ONE_GATE_BLOCKS = (32, 16)
MAX_ONE_GATE_SPLIT = 2
BLOCK_K = int(os.environ.get("VDRNN_FUSED_BLOCK_K", "64"))
NUM_WARPS = int(os.environ.get("VDRNN_FUSED_WARPS", "4"))
NUM_STAGES = int(os.environ.get("VDRNN_FUSED_STAGES", "3"))
PROGRAMS_PER_SM = float(os.environ.get("VDRNN_FUSED_PROGRAMS_PER_SM", "3"))
# The kernels run H units as H rounded up to a multiple of this (see _Units); 1 runs them as they are.
UNIT_MULTIPLE = int(os.environ.get("VDRNN_FUSED_UNIT_MULTIPLE", "16"))
MIN_BLOCK_K_F = 32  # the narrowest K slice the forward narrows to for occupancy (see _Plan)
FORCE_SPLIT: tuple[int, int] | None = None  # (forward splits, backward splits per gate); for tests


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def available(device: torch.device) -> bool:
    """Can the Triton kernels run on tensors of ``device``?"""
    if device.type != "cuda" and not _interpreting():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def kernels_or_fallback(device: torch.device, module: str) -> bool:
    """True where the Triton kernels can run; otherwise ``module`` warns, once, that its reference loop runs."""
    if available(device):
        return True
    if module not in _WARNED:
        log.warning("%s: the Triton kernels need CUDA (or TRITON_INTERPRET=1), so the reference loop runs instead "
                    "(model.impl=auto picks it on the CPU without this line)", module)
        _WARNED.add(module)
    return False


def _build_kernels():
    """Define the two kernels (importing Triton now, so that TRITON_INTERPRET set before is honoured)."""
    global _KERNELS, triton, tl, parts  # module globals: a kernel resolves the names it calls among them
    if _KERNELS is not None:
        return _KERNELS
    import triton
    import triton.language as tl

    from vdrnn import kernel_parts as parts

    @triton.jit(do_not_specialize=["t"])
    def _fwd_step(
        t, xp_ptr, w_ptr, bias_ptr, hz_ptr, zh_ptr, zc_ptr, c_scale,
        h_last_ptr, cs_ptr, y_ptr, act_ptr, ws_ptr, cnt_ptr,
        B, stride_w, stride_zb, stride_zg, stride_xg, stride_hzg,
        H: tl.constexpr, HAS_ZH: tl.constexpr, PER_GATE: tl.constexpr, HAS_ZC: tl.constexpr, XP_GATE_MAJOR: tl.constexpr,
        SAVE_ACTS: tl.constexpr, OP_DTYPE: tl.constexpr, PRECISION: tl.constexpr,
        BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
        K_CHUNK: tl.constexpr, SPLIT: tl.constexpr, ONE_GATE: tl.constexpr,
    ):
        """Step t: reads hz[t], cs[t], x_proj[t]; writes hz[t+1], h_last, cs[t+1], y[t], acts[t].

        hz: [NZ, T+1, B, H] in OP_DTYPE (gate stride stride_hzg; 0 for tied masks), h_t already masked (NZ = 4 masked
        copies for untied masks, else 1), the product's operand as the previous step stored it; h_last: [B, H] fp32,
        h_t in full precision, overwritten every step (nothing reads it but the caller, for h_T); cs: [T+1, B, H]
        fp32; x_proj: [T, B, 4H], or [4, T, B, H] (gate stride stride_xg) if XP_GATE_MAJOR; acts: [T, B, 4H]; y:
        [T, B, H]; W: [4H, stride_w]; ws: [SPLIT, B, 4H] fp32 partial sums; cnt: one int32 arrival counter per
        (b, j) block. Program (j, s, b) sums k in [s*K_CHUNK, (s+1)*K_CHUNK) of the four gates for hidden units j,
        batch rows b; with ONE_GATE program (j, gate * SPLIT + s, b) sums gate ``gate`` only. The last of a block's
        programs to arrive runs the cell.
        """
        pid_s = tl.program_id(1)
        t = t.to(tl.int64)
        offs_b, offs_j, mask_b, mask_j, mask_bj = parts.block(B, H, BLOCK_B, BLOCK_H)
        a_prev = hz_ptr + t * B * H + offs_b[:, None] * H
        G = 4 * H
        if ONE_GATE:
            # One gate per program: a stage of the loop holds one operand tile and one W tile, whether the gates
            # share the operand (tied masks) or not, and the loop is four times longer than a four-gate program's
            # over the same units. At batch 20, per forward step of one layer (one H200, results/bench/one_gate/):
            # untied masks at 1500 units 24.5 -> 19.0 us in fp32, 16.8 -> 13.7 in bf16, at 650 units 11.8 -> 9.9
            # and 8.7 -> 7.5; tied masks at 650 units in bf16 10.1 -> 7.5, elsewhere 1-2% faster.
            gate = pid_s // SPLIT
            a_at = a_prev + gate * stride_hzg
            w_rows = w_ptr + (gate * H + offs_j[None, :]) * stride_w
            acc = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
            for kk in range(0, K_CHUNK, BLOCK_K):
                offs_k = (pid_s % SPLIT) * K_CHUNK + kk + tl.arange(0, BLOCK_K)
                # The W^T tile [BLOCK_K, BLOCK_H] of this gate's rows for units j. The packed rows are zero-padded
                # to SPLIT * K_CHUNK columns, so k needs no mask here (full-width loads).
                w = tl.load(w_rows + offs_k[:, None], mask=mask_j[None, :], other=0.0)
                a = tl.load(a_at + offs_k[None, :], mask=mask_b[:, None] & (offs_k < H)[None, :], other=0.0)
                acc = tl.dot(a, w, acc, input_precision=PRECISION)
        else:
            acc_i = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
            acc_f = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
            acc_g = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
            acc_o = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
            for kk in range(0, K_CHUNK, BLOCK_K):
                offs_k = pid_s * K_CHUNK + kk + tl.arange(0, BLOCK_K)
                mask_bk = mask_b[:, None] & (offs_k < H)[None, :]
                # W^T tiles [BLOCK_K, BLOCK_H] of the four gates' rows for units j (full-width loads, as above).
                w_rows = w_ptr + offs_j[None, :] * stride_w + offs_k[:, None]
                w_i = tl.load(w_rows, mask=mask_j[None, :], other=0.0)
                w_f = tl.load(w_rows + H * stride_w, mask=mask_j[None, :], other=0.0)
                w_g = tl.load(w_rows + 2 * H * stride_w, mask=mask_j[None, :], other=0.0)
                w_o = tl.load(w_rows + 3 * H * stride_w, mask=mask_j[None, :], other=0.0)
                a_at = a_prev + offs_k[None, :]
                a_i = tl.load(a_at, mask=mask_bk, other=0.0)
                if PER_GATE:  # untied: each gate sees its own masked copy of h_{t-1}
                    a_f = tl.load(a_at + stride_hzg, mask=mask_bk, other=0.0)
                    a_g = tl.load(a_at + 2 * stride_hzg, mask=mask_bk, other=0.0)
                    a_o = tl.load(a_at + 3 * stride_hzg, mask=mask_bk, other=0.0)
                else:  # tied (or no mask): one operand for all four gates
                    a_f = a_i
                    a_g = a_i
                    a_o = a_i
                acc_i = tl.dot(a_i, w_i, acc_i, input_precision=PRECISION)
                acc_f = tl.dot(a_f, w_f, acc_f, input_precision=PRECISION)
                acc_g = tl.dot(a_g, w_g, acc_g, input_precision=PRECISION)
                acc_o = tl.dot(a_o, w_o, acc_o, input_precision=PRECISION)

        bh = offs_b[:, None] * H + offs_j[None, :]
        # The cell's other inputs, loaded before the split-K hand-off below so that their latency
        # overlaps it (every program loads them; only the last one uses them).
        xp, x_gate = parts.input_rows(xp_ptr, t, B, offs_b, offs_j, stride_xg, H, 4, XP_GATE_MAJOR)
        x_i = tl.load(xp, mask=mask_bj, other=0.0).to(tl.float32)
        x_f = tl.load(xp + x_gate, mask=mask_bj, other=0.0).to(tl.float32)
        x_g = tl.load(xp + 2 * x_gate, mask=mask_bj, other=0.0).to(tl.float32)
        x_o = tl.load(xp + 3 * x_gate, mask=mask_bj, other=0.0).to(tl.float32)
        x_i += tl.load(bias_ptr + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
        x_f += tl.load(bias_ptr + H + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
        x_g += tl.load(bias_ptr + 2 * H + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
        x_o += tl.load(bias_ptr + 3 * H + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
        c_prev = tl.load(cs_ptr + t * B * H + bh, mask=mask_bj, other=0.0)
        if HAS_ZC:
            keep = tl.load(zc_ptr + bh, mask=mask_bj, other=0.0)
        if HAS_ZH:  # the recurrent masks of units j, for the masked copies of h_t stored below
            z_at = zh_ptr + offs_b[:, None] * stride_zb + offs_j[None, :]
            z_i = tl.load(z_at, mask=mask_bj, other=0.0)
            if PER_GATE:
                z_f = tl.load(z_at + stride_zg, mask=mask_bj, other=0.0)
                z_g = tl.load(z_at + 2 * stride_zg, mask=mask_bj, other=0.0)
                z_o = tl.load(z_at + 3 * stride_zg, mask=mask_bj, other=0.0)
        if SPLIT > 1 or ONE_GATE:
            # Split-K: publish the partial sums; the last of the programs of this (j, b) block to arrive adds them
            # up in a fixed order and runs the cell (see kernel_parts.arrive).
            part = ws_ptr + offs_b[:, None] * G + offs_j[None, :]
            if ONE_GATE:
                tl.store(part + (pid_s % SPLIT) * B * G + gate * H, acc, mask=mask_bj)
                counter, last = parts.arrive(cnt_ptr, 4 * SPLIT)
            else:
                mine = part + pid_s * B * G
                tl.store(mine, acc_i, mask=mask_bj)
                tl.store(mine + H, acc_f, mask=mask_bj)
                tl.store(mine + 2 * H, acc_g, mask=mask_bj)
                tl.store(mine + 3 * H, acc_o, mask=mask_bj)
                counter, last = parts.arrive(cnt_ptr, SPLIT)
            live = mask_bj & last  # only the last program loads and stores from here on
            zero = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
            acc_i = parts.partials_sum(zero, part, live, B * G, SPLIT)
            acc_f = parts.partials_sum(zero, part + H, live, B * G, SPLIT)
            acc_g = parts.partials_sum(zero, part + 2 * H, live, B * G, SPLIT)
            acc_o = parts.partials_sum(zero, part + 3 * H, live, B * G, SPLIT)
            tl.store(counter, 0, mask=last)  # reset for the next step's launch
        else:
            live = mask_bj

        # The cell, in fp32 on the accumulators.
        i = tl.sigmoid(acc_i + x_i)
        f = tl.sigmoid(acc_f + x_f)
        g = 2.0 * tl.sigmoid(2.0 * (acc_g + x_g)) - 1.0  # tanh
        o = tl.sigmoid(acc_o + x_o)
        c = f * c_prev + i * g
        if HAS_ZC:  # Moon: a dropped cell unit is zero for the whole sequence
            c = c * keep
        h_new = o * (2.0 * tl.sigmoid(2.0 * c) - 1.0)
        if HAS_ZC:
            h_new = h_new * c_scale
        tl.store(cs_ptr + (t + 1) * B * H + bh, c, mask=live)
        tl.store(h_last_ptr + bh, h_new, mask=live)
        tl.store(y_ptr + t * B * H + bh, h_new.to(y_ptr.dtype.element_ty), mask=live)
        # The next step's operand, masked and cast once here rather than by each of the next step's programs
        # that reads it (n_j of them per k slice, loading h and z and multiplying).
        hz_next = hz_ptr + (t + 1) * B * H + bh
        if HAS_ZH:
            tl.store(hz_next, (h_new * z_i).to(OP_DTYPE), mask=live)
            if PER_GATE:
                tl.store(hz_next + stride_hzg, (h_new * z_f).to(OP_DTYPE), mask=live)
                tl.store(hz_next + 2 * stride_hzg, (h_new * z_g).to(OP_DTYPE), mask=live)
                tl.store(hz_next + 3 * stride_hzg, (h_new * z_o).to(OP_DTYPE), mask=live)
        else:
            tl.store(hz_next, h_new.to(OP_DTYPE), mask=live)
        if SAVE_ACTS:
            act = act_ptr + t * B * G + offs_b[:, None] * G + offs_j[None, :]
            tl.store(act, i, mask=live)
            tl.store(act + H, f, mask=live)
            tl.store(act + 2 * H, g, mask=live)
            tl.store(act + 3 * H, o, mask=live)

    @triton.jit(do_not_specialize=["t"])
    def _bwd_step(
        t, dg_ptr, dgo_ptr, w_ptr, zh_ptr, zc_ptr, c_scale,
        dy_ptr, dh_last_ptr, act_ptr, cs_ptr, dc_ptr, ws_ptr, cnt_ptr,
        B, stride_w, stride_zb, stride_zg,
        H: tl.constexpr, HAS_NEXT: tl.constexpr, HAS_ZH: tl.constexpr, PER_GATE: tl.constexpr,
        HAS_ZC: tl.constexpr, OP_DTYPE: tl.constexpr, OP_COPY: tl.constexpr, PRECISION: tl.constexpr,
        BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
        K_CHUNK: tl.constexpr, KS: tl.constexpr,
    ):
        """Step t in reverse: reads dgates[t+1] (if HAS_NEXT, else dh_T), dy[t], acts[t], cs[t], cs[t+1]
        and dc (= dL/dc_t); writes dgates[t] and dc (= dL/dc_{t-1}, in place: one program owns each j).

        dgates: [T, B, 4H] fp32. The product reads step t+1's from dgo, a copy in OP_DTYPE that this kernel
        also writes when OP_COPY (bf16 products: half the bytes that every program streams); in fp32 dgo
        is dgates itself.

        The recurrent product sums over 4H = (gate, k): program (j, s, b) takes gate s // KS and the
        k-slice s % KS; ws [4*KS, B, H] holds the partial sums, cnt the arrival counters.
        """
        pid_s = tl.program_id(1)
        t = t.to(tl.int64)
        offs_b, offs_j, mask_b, mask_j, mask_bj = parts.block(B, H, BLOCK_B, BLOCK_H)
        bh = offs_b[:, None] * H + offs_j[None, :]
        G = 4 * H
        # The cell's saved values and incoming gradients, loaded first so that their latency overlaps
        # the product and the split-K hand-off (only the last program of a block uses them).
        act = act_ptr + t * B * G + offs_b[:, None] * G + offs_j[None, :]
        i = tl.load(act, mask=mask_bj, other=0.0)
        f = tl.load(act + H, mask=mask_bj, other=0.0)
        g = tl.load(act + 2 * H, mask=mask_bj, other=0.0)
        o = tl.load(act + 3 * H, mask=mask_bj, other=0.0)
        c_prev = tl.load(cs_ptr + t * B * H + bh, mask=mask_bj, other=0.0)
        c = tl.load(cs_ptr + (t + 1) * B * H + bh, mask=mask_bj, other=0.0)
        dc_in = tl.load(dc_ptr + bh, mask=mask_bj, other=0.0)
        dh = tl.load(dy_ptr + t * B * H + bh, mask=mask_bj, other=0.0).to(tl.float32)
        if HAS_ZC:
            keep = tl.load(zc_ptr + bh, mask=mask_bj, other=0.0)
        if HAS_NEXT:
            # dh_t += sum_g z_h^g * (dgates_{t+1}^g @ W_g): step t's output fed every gate of step t+1.
            gate = pid_s // KS
            k_base = (pid_s % KS) * K_CHUNK
            dg_next = dgo_ptr + (t + 1) * B * G + offs_b[:, None] * G + gate * H
            z_at = zh_ptr + offs_b[:, None] * stride_zb + offs_j[None, :]
            if HAS_ZH:
                z = tl.load(z_at + gate * stride_zg, mask=mask_bj, other=0.0)
            part = parts.recurrent_grad_product(dg_next, w_ptr, gate, k_base, offs_j, mask_b, stride_w, H,
                                                OP_DTYPE, PRECISION, BLOCK_B, BLOCK_H, BLOCK_K, K_CHUNK)
            if HAS_ZH:  # z_h^g times gate g's product (tied: the same mask for every gate)
                part = part * z
            # Split-K as in the forward kernel: the last program to arrive sums in a fixed order.
            slot = ws_ptr + bh
            tl.store(slot + pid_s * B * H, part, mask=mask_bj)
            counter, last = parts.arrive(cnt_ptr, 4 * KS)
            live = mask_bj & last
            dh = parts.partials_sum(dh, slot, live, B * H, 4 * KS)
            tl.store(counter, 0, mask=last)
        else:  # the last step (launched with one program per block): the gradient of the returned h_T
            live = mask_bj
            dh += tl.load(dh_last_ptr + bh, mask=live, other=0.0).to(tl.float32)

        tc = 2.0 * tl.sigmoid(2.0 * c) - 1.0
        if HAS_ZC:
            dh = dh * c_scale
        d_o = dh * tc
        dc = dc_in + dh * o * (1.0 - tc * tc)
        if HAS_ZC:  # c_t = m * (f*c + i*g)
            dc = dc * keep
        tl.store(dc_ptr + bh, dc * f, mask=live)
        dg_i = dc * g * i * (1.0 - i)
        dg_f = dc * c_prev * f * (1.0 - f)
        dg_g = dc * i * (1.0 - g * g)
        dg_o = d_o * o * (1.0 - o)
        at = t * B * G + offs_b[:, None] * G + offs_j[None, :]
        tl.store(dg_ptr + at, dg_i, mask=live)
        tl.store(dg_ptr + at + H, dg_f, mask=live)
        tl.store(dg_ptr + at + 2 * H, dg_g, mask=live)
        tl.store(dg_ptr + at + 3 * H, dg_o, mask=live)
        if OP_COPY:
            tl.store(dgo_ptr + at, dg_i.to(OP_DTYPE), mask=live)
            tl.store(dgo_ptr + at + H, dg_f.to(OP_DTYPE), mask=live)
            tl.store(dgo_ptr + at + 2 * H, dg_g.to(OP_DTYPE), mask=live)
            tl.store(dgo_ptr + at + 3 * H, dg_o.to(OP_DTYPE), mask=live)

    _KERNELS = (_fwd_step, _bwd_step)
    return _KERNELS


# ------------------------------------------------------------------------------------------ helpers
def _tl_dtype(dtype: torch.dtype):
    """Triton's name for a product dtype. Called only after a kernel builder has imported Triton (the LSTM's or
    the GRU's), so this import does not decide the interpreter question too early."""
    import triton.language as tl

    return {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[dtype]


def _precision(op_dtype: torch.dtype) -> str:
    # Follow torch's own switch for fp32 products, so `allow_tf32 = False` gives IEEE fp32 here too.
    if op_dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return "ieee"
    return "tf32"


def _stored_dtype(op_dtype: torch.dtype) -> torch.dtype:
    """The dtype W_hh and the forward's operands h_t * z_h are stored in for products in ``op_dtype``.

    TF32 products keep 10 mantissa bits of each fp32 operand, and fp16 holds exactly 10: stored in fp16, the operands
    lose nothing a TF32 product keeps, in half the bytes that every step streams. Only the range differs: values
    under 6.1e-5 (a weight that small, or a masked h_t) keep an absolute error under 3e-8, and none can exceed 65,504
    (no weight of a trained recurrence comes near). IEEE fp32 (``allow_tf32 = False``) and bf16 store their own dtype.
    """
    if op_dtype == torch.float32 and _precision(op_dtype) == "tf32":
        return torch.float16
    return op_dtype


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # the interpreter: any number does
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


def _smem_limit(device: torch.device) -> int:
    """Bytes of shared memory one program may use: 227 KB on an H100 or H200 (the limit Triton checks)."""
    if device.type != "cuda":
        return 1 << 30  # the interpreter: no limit
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SMEM:
        from triton.runtime import driver

        _SMEM[index] = driver.active.utils.get_device_properties(index)["max_shared_mem"]
    return _SMEM[index]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Plan:
    """Grid and split-K shape for one (batch, hidden, device): ~PROGRAMS_PER_SM programs per SM.

    At batch 20 there are only H / BLOCK_H blocks of output (41 at H=650): without splitting the
    reduction most SMs would idle while a few stream all of W_hh through long loops. ``gates``,
    ``operands`` (1, or one masked copy of h per gate for untied masks) and ``op_bytes`` (the size of the
    stored operands' dtype, ``_stored_dtype``) say how much shared memory a stage of the forward loop takes;
    ``one_gate_kernel``, that the forward kernel can run one gate per program (the LSTM's), which the plan then
    decides.
    """

    def __init__(self, batch: int, hidden: int, device: torch.device, gates: int = GATES, operands: int = 1,
                 op_bytes: int = 4, one_gate_kernel: bool = False):
        self.hidden = hidden
        self.block_b = min(64, max(16, 1 << (batch - 1).bit_length()))
        self.n_b = _cdiv(batch, self.block_b)
        target = PROGRAMS_PER_SM * _sm_count(device)
        # The forward's programs: each multiplies all the gates of BLOCK_H units, or, where the kernel can
        # (``one_gate_kernel``: the LSTM's), one gate, the last of a block's programs to arrive running the cell
        # (``_fwd_step``). At batch 20 one gate a program was as fast or faster in every case measured, tied or
        # untied, 650 or 1500 units, fp32 or bf16 (the untied step at 1500 units 4.89 -> 4.51 ms in fp32); at MC
        # evaluation's 1,000 sequences, 64-row blocks, the four gates' shared operand tile counts for more and MC
        # took 16.1 -> 19.9 s with tied masks (one H200, results/bench/one_gate/). Hence the row limit. Wider blocks
        # of units read each gate's operand fewer times, but leave fewer blocks, so K splits more ways to fill the
        # SMs and the last program sums more partial tiles: the widest block whose K splits at most two ways was
        # the fastest at 650 and 1500 units (16 and 32 units).
        self.one_gate = one_gate_kernel and self.block_b <= ONE_GATE_MAX_ROWS
        self.gate_programs = gates if self.one_gate else 1
        blocks = ONE_GATE_BLOCKS if self.one_gate else (BLOCK_H,)
        self.block_h_f, want_f = _block_of_units(blocks, hidden, self.gate_programs * self.n_b, target)
        self.n_j_f = _cdiv(hidden, self.block_h_f)
        # The backward's programs multiply one gate's dgates into a block of units over a K chunk; the same choice of
        # block at batches of at most ONE_GATE_MAX_ROWS rows: 32 units at 1500 (the LSTM step with tied masks 4.08 ->
        # 3.92 ms in fp32, 3.15 -> 3.03 in bf16), 16 at 650, where 32 would split K five ways and was slower (2.07 ->
        # 2.12 ms; one H200, results/bench/bwd_block/). Wider batches, not measured, keep BLOCK_H.
        blocks = ONE_GATE_BLOCKS if self.block_b <= ONE_GATE_MAX_ROWS else (BLOCK_H,)
        self.block_h_b, want_b = _block_of_units(blocks, hidden, 4 * self.n_b, target)
        self.n_j_b = _cdiv(hidden, self.block_h_b)
        if FORCE_SPLIT is not None:
            want_f, want_b = FORCE_SPLIT
        tiles = _cdiv(hidden, BLOCK_K)
        per_b = _cdiv(tiles, min(want_b, tiles))  # K tiles per program
        self.ks, self.chunk_b = _cdiv(tiles, per_b), per_b * BLOCK_K
        self.stages_b = max(1, min(NUM_STAGES, per_b))
        # The forward's K slice: BLOCK_K, or narrower where its pipeline would leave room for fewer than
        # PROGRAMS_PER_SM programs on an SM. A stage holds the operand tile(s) [BLOCK_B, K slice] and the gates' W
        # tiles [K slice, BLOCK_H]; the GRU's untied fp32 masks at 1500 units take 36 KB a stage at 64 wide, so three
        # stages would leave two programs per SM (for the LSTM's, before one-gate programs, the forward step ran
        # 31.5 us against 24.5 us at 32 wide; one H200, results/bench/untied/).
        smem = _smem_limit(device)
        self.block_k_f = BLOCK_K
        while True:
            stage = self._plan_forward(want_f, gates, operands, op_bytes, smem)
            if self.stages_f * stage * PROGRAMS_PER_SM <= smem or self.block_k_f <= MIN_BLOCK_K_F:
                break
            self.block_k_f //= 2
        # Columns of the packed W: whole chunks for the forward, whole blocks of units for the backward.
        self.w_cols = max(self.split_f * self.chunk_f, self.n_j_b * self.block_h_b)
        # The forward's grid: (unit blocks, gate programs x K chunks, batch blocks); every program of a block of units
        # arrives at its counter.
        self.grid_f = (self.n_j_f, self.gate_programs * self.split_f, self.n_b)
        # Do a block's forward programs hand partial sums to the last of them (K split, or one gate a program)? Then
        # the forward needs a workspace and arrival counters.
        self.hand_off_f = self.grid_f[1] > 1

    def _plan_forward(self, want_f: int, gates: int, operands: int, op_bytes: int, smem: int) -> int:
        """The forward's split, chunk and pipeline depth for its K slice ``block_k_f``; returns a stage's bytes."""
        tiles = _cdiv(self.hidden, self.block_k_f)
        per_f = _cdiv(tiles, min(want_f, tiles))  # K slices per program
        self.split_f, self.chunk_f = _cdiv(tiles, per_f), per_f * self.block_k_f
        # Software-pipelining depth: no deeper than the loop is long (deeper only costs shared memory,
        # hence fewer programs resident per SM), and none for a forward loop of one or two K slices, too short
        # to repay the pipeline's prologue (H=650 on an H100: LSTM step in fp32 2.74 -> 2.50 ms tied, bf16
        # within 3%; GRU layer 1-6% faster; results/bench/NOTES.md).
        stages = 1 if per_f <= 2 else min(NUM_STAGES, per_f)
        # ... and no deeper than shared memory holds. Untied fp32 at BLOCK_B 64 (MC evaluation's wide batches) takes
        # 80 KB a stage at 64 wide, and three overflow an H100's 227 KB.
        if self.one_gate:  # one operand tile and one gate's W tile
            stage = (self.block_b + self.block_h_f) * self.block_k_f * op_bytes
        else:
            stage = (operands * self.block_b + gates * BLOCK_H) * self.block_k_f * op_bytes
        self.stages_f = max(1, min(stages, smem // stage))
        return stage


def _block_of_units(blocks: tuple[int, ...], hidden: int, programs_per_block: int, target: float) -> tuple[int, int]:
    """The widest of ``blocks`` (widest first) whose K need split at most MAX_ONE_GATE_SPLIT ways for ``target``
    programs, where each block of units takes ``programs_per_block`` programs per K chunk (the last of ``blocks`` if
    none does), and how many ways that is."""
    for block in blocks:
        splits = max(1, round(target / (programs_per_block * _cdiv(hidden, block))))
        if splits <= MAX_ONE_GATE_SPLIT:
            break
    return block, splits


def _untied(zh: torch.Tensor | None) -> bool:
    """Is the recurrent mask one per gate ([B, G, H], untied), rather than shared by the gates ([B, H])?"""
    return zh is not None and zh.dim() == 3


def _plan_for(x_proj: torch.Tensor, hidden: int, zh: torch.Tensor | None, stored: torch.dtype, gates: int,
              one_gate_kernel: bool = False) -> _Plan:
    """The plan of a layer's T steps: x_proj [T, B, gates, H], the recurrent mask zh ([B, G, H] when untied), the
    forward's operands in ``stored`` (``_stored_dtype``); ``one_gate_kernel`` for a forward kernel that can run one gate
    per program (the LSTM's)."""
    operands = gates if _untied(zh) else 1
    return _Plan(x_proj.shape[1], hidden, x_proj.device, gates, operands, stored.itemsize, one_gate_kernel)


def _pack_weight(w_hh: torch.Tensor, dtype: torch.dtype, plan: _Plan) -> torch.Tensor:
    """W_hh [G*H, H] in ``dtype`` (``_stored_dtype``'s) as [G*HP, w_cols]: each gate's rows zero-padded to the plan's
    HP units (:class:`_Units`) and every row to ``plan.w_cols`` columns.

    Aligned rows give full-width loads, and the zero tail lets the kernels read whole blocks of a
    row without masking the columns.
    """
    rows, hidden = w_hh.shape
    gates = rows // hidden
    if plan.w_cols == hidden and plan.hidden == hidden:
        return w_hh.detach().to(dtype).contiguous()
    out = torch.empty(gates, plan.hidden, plan.w_cols, device=w_hh.device, dtype=dtype)
    out[:, :hidden, :hidden].copy_(w_hh.detach().view(gates, hidden, hidden))
    # Only the tails: zeroing all of it first would write W_hh's size twice.
    out[:, :hidden, hidden:].zero_()
    out[:, hidden:].zero_()
    return out.view(gates * plan.hidden, plan.w_cols)


class _Units:
    """A layer's H units as the kernels run them: HP, H rounded up to a multiple of ``UNIT_MULTIPLE`` (16).

    Why: with HP a multiple of 16 every block of units is whole and every row of the kernels' buffers starts on a
    16-value boundary, so the loads are full width. At H=1500 the step kernels ran 7% (forward) and 20% (backward)
    faster at 1504 units on an H200 (results/bench/align/).

    The extra units are dead. Their weights in and out, inputs, biases and initial state are zeros, so each of their
    gate pre-activations is 0, c stays f*0 + i*tanh(0) = 0 and h = o*tanh(0) = 0 at every step (the GRU's: h = z*0 +
    (1-z)*tanh(0) = 0). A zero h adds nothing to any product, and their gradients are zero in the same way. Inputs are
    zero-padded on the way in and results sliced on the way out: callers see H units.
    """

    def __init__(self, hidden: int):
        self.hidden = hidden
        self.padded = _cdiv(hidden, UNIT_MULTIPLE) * UNIT_MULTIPLE

    def pad(self, t: torch.Tensor | None, gates: int = 1) -> torch.Tensor | None:
        """[..., gates*H] -> [..., gates*HP], each gate's H values followed by zeros."""
        if t is None or self.padded == self.hidden:
            return t
        return torch.nn.functional.pad(t.unflatten(-1, (gates, self.hidden)), (0, self.padded - self.hidden)).flatten(-2)

    def unpad(self, t: torch.Tensor, gates: int = 1) -> torch.Tensor:
        """[..., gates*HP] -> [..., gates*H]: the live units of each gate."""
        if self.padded == self.hidden:
            return t
        return t.unflatten(-1, (gates, self.padded))[..., :self.hidden].flatten(-2)

    def unpad_weight(self, w: torch.Tensor, gates: int) -> torch.Tensor:
        """[gates*HP, HP] -> [gates*H, H]: each gate's rows and the columns of the live units."""
        return self.unpad(w, 1).unflatten(0, (gates, self.padded))[:, :self.hidden].flatten(0, 1)


def _mask_args(zh: torch.Tensor | None, zc: torch.Tensor | None, c_scale: float, dummy: torch.Tensor):
    """(z_h, stride_b, stride_g, has_zh, per_gate, z_c, has_zc, c_scale) for the kernels."""
    per_gate = _untied(zh)
    if zh is not None:
        zh = zh.float().contiguous()
        # A mask shared by the batch ([1, H] or [1, G, H], dropout.locked_mask=batch) is read with a zero batch
        # stride, so that every row of the batch reads that one row.
        stride_b = 0 if zh.shape[0] == 1 else zh.stride(0)
        stride_g = zh.stride(1) if per_gate else 0
    else:
        zh, stride_b, stride_g = dummy, 0, 0
    has_zc = zc is not None
    zc = zc.float().contiguous() if has_zc else dummy
    return zh, stride_b, stride_g, zh is not dummy, per_gate, zc, has_zc, float(c_scale)


def _dummy(like: torch.Tensor) -> torch.Tensor:
    """A valid pointer for kernel arguments that a constexpr switch leaves unused."""
    return torch.empty(1, device=like.device, dtype=torch.float32)


def _masked_h0(h0: torch.Tensor, zh: torch.Tensor | None, per_gate: bool) -> torch.Tensor:
    """h_0 as the first step's product operand: [NZ, B, H], masked (per gate for untied masks)."""
    if zh is None:
        return h0.unsqueeze(0)
    if per_gate:
        return (h0.unsqueeze(1) * zh).transpose(0, 1)
    return (h0 * zh).unsqueeze(0)


def input_product(x: torch.Tensor, w_ih: torch.Tensor, b_ih: torch.Tensor | None, masks: LayerMasks, gates: int,
                  units: int) -> torch.Tensor:
    """W_ih (x * z_x) + b_ih for all steps and gates at once, as :func:`vdrnn.recurrent.masked_linear`, through aligned
    products (:mod:`vdrnn.gemm`): [T, B, G, units], each gate's H values followed by zeros for the kernels' dead units
    (:class:`_Units`), written so by the product (zero rows of W_ih) rather than copied after it: at MC evaluation's
    1,000 sequences that copy took 1.7 of 17.8 s (one H200). With untied masks it is a view of gate-major storage,
    which the kernels read through its strides. ``b_ih`` None: no bias (the LSTM adds it in its kernels)."""
    if masks.x is not None and masks.per_gate:
        return gemm.per_gate_linear(x, w_ih, b_ih, masks.x, units)
    v = x if masks.x is None else x * masks.x.to(x.dtype)
    return gemm.linear(v, w_ih, b_ih, gates, units).unflatten(-1, (gates, units))


def _gate_major(x_proj: torch.Tensor) -> bool:
    """Is x_proj [T, B, G, H] a view of gate-major storage [G, T, B, H] (``gemm.per_gate_linear``'s), rather than
    contiguous? The kernels address the two layouts apart, the contiguous one with constant strides: through runtime
    strides the 650-unit fp32 forward step took 11.4 instead of 9.6 us (one H200)."""
    steps, batch, gates, hidden = x_proj.shape
    if x_proj.is_contiguous():
        return False
    if x_proj.stride() == (batch * hidden, hidden, steps * batch * hidden, 1):
        return True
    raise ValueError(f"x_proj {tuple(x_proj.shape)} with strides {x_proj.stride()}: neither [T, B, G, H] contiguous "
                     "nor a view of [G, T, B, H]")


def recurrent_mask_grad(d_products: torch.Tensor, w: torch.Tensor, h_prev: torch.Tensor, zh: torch.Tensor,
                        per_gate: bool) -> torch.Tensor:
    """dL/dz_h, for a recurrent mask that is itself learned (Kingma's adaptive Gaussian dropout).

    Every step's recurrent product is a_t = (h_{t-1} * z_h) W^T, so dL/dz_h = sum_t h_{t-1} * (dL/da_t W), gate by
    gate with per-gate masks. ``d_products`` [T, B, G*H] holds dL/da_t, ``w`` is W_hh [G*H, H], ``h_prev``
    [T, B, H] is h_0 .. h_{T-1}; the result has z_h's shape ([B, H], [B, G, H], or one row shared by the batch).
    """
    steps, batch, _ = d_products.shape
    hidden = w.shape[1]
    if per_gate:
        gates = w.shape[0] // hidden
        d_operand = torch.einsum("tbgk,gkj->tbgj", d_products.reshape(steps, batch, gates, hidden),
                                 w.reshape(gates, hidden, hidden))
        grad = (d_operand.float() * h_prev.float().unsqueeze(2)).sum(0)
    else:
        d_operand = (d_products.reshape(steps * batch, -1) @ w).view(steps, batch, hidden)
        grad = (d_operand.float() * h_prev.float()).sum(0)
    return grad.sum(0, keepdim=True) if zh.shape[0] == 1 else grad


def initial_state_grad(d_first: torch.Tensor, w_op: torch.Tensor, w_hh: torch.Tensor, zh: torch.Tensor | None,
                       per_gate: bool, units: _Units, op_dtype: torch.dtype) -> torch.Tensor:
    """dL/dh_0 through the first step's recurrent product a_0 = (h_0 * z_h) W^T: (dL/da_0 W) * z_h, gate by gate with
    per-gate masks, at the layer's H units. ``d_first`` [B, G*HP] is dL/da_0 at the kernels' units, ``w_op`` the packed
    W_hh, ``w_hh`` the parameter [G*H, H], ``zh`` z_h at HP units or None.

    The product runs in the kernels' dtype: on the packed W where it is stored in that dtype (a view), else on the fp32
    parameter, W being stored in fp16 for TF32 products (``_stored_dtype``). Converting the packed copy to fp32 would
    write 36 MB a 1500-unit layer for a 20-row product; TF32 keeps of the parameter's values what fp16 holds of them.
    """
    gates = w_hh.shape[0] // w_hh.shape[1]
    live = w_op.dtype != op_dtype  # fp16-stored: the parameter, at H units
    if live:
        d_first, w = units.unpad(d_first, gates), w_hh.detach()
        zh = None if zh is None else units.unpad(zh)
    else:
        w = w_op[:, :units.padded]
    size = w.shape[1]
    if per_gate:
        dh0 = torch.einsum("bgk,gkj->bgj", d_first.reshape(-1, gates, size), w.reshape(gates, size, size)).float()
        dh0 = (dh0 * zh).sum(1)
    else:
        dh0 = (d_first @ w).float()
        if zh is not None:
            dh0 = dh0 * zh
    return dh0 if live else units.unpad(dh0)


def _forward(x_proj, h0, c0, w_op, bias, margs, plan: _Plan, save_acts: bool):
    """Run the T forward steps of the plan's H units; x_proj [T, B, 4, H] is contiguous or gate-major (``_gate_major``).
    Returns y [T,B,H] (x_proj dtype), h_T [B,H] and cs [T+1,B,H] fp32, acts or None, and hz [NZ, T+1, B, H]: each
    step's product operand, h_t masked (NZ = 4 copies for untied masks) in W's dtype."""
    fwd, _ = _build_kernels()
    steps, batch = x_proj.shape[:2]
    hidden = plan.hidden
    four_h = GATES * hidden
    dev = x_proj.device
    zh, szb, szg, has_zh, per_gate, zc, has_zc, c_scale = margs
    h_last = torch.empty(batch, hidden, device=dev, dtype=torch.float32)
    cs = torch.empty(steps + 1, batch, hidden, device=dev, dtype=torch.float32)
    cs[0].copy_(c0)
    # Gate-major, so that each gate's operands for the weight gradient are one [T*B, H] matrix.
    hz = torch.empty(GATES if per_gate else 1, steps + 1, batch, hidden, device=dev, dtype=w_op.dtype)
    hz[:, 0].copy_(_masked_h0(h0, zh if has_zh else None, per_gate))
    y = torch.empty(steps, batch, hidden, device=dev, dtype=x_proj.dtype)
    acts = torch.empty(steps, batch, four_h, device=dev, dtype=torch.float32) if save_acts else cs
    if plan.hand_off_f:
        ws = torch.empty(plan.split_f, batch, four_h, device=dev, dtype=torch.float32)
        counters = torch.zeros(plan.n_b * plan.n_j_f, device=dev, dtype=torch.int32)
    else:
        ws = counters = cs
    op = _tl_dtype(w_op.dtype)
    precision = _precision(w_op.dtype)
    bias = bias.detach()
    gate_major = _gate_major(x_proj)  # once, not at each of the T launches
    for t in range(steps):
        fwd[plan.grid_f](
            t, x_proj, w_op, bias, hz, zh, zc, c_scale, h_last, cs, y, acts, ws, counters,
            batch, w_op.stride(0), szb, szg, x_proj.stride(2), hz.stride(0) if per_gate else 0, H=hidden,
            HAS_ZH=has_zh, PER_GATE=per_gate, HAS_ZC=has_zc, XP_GATE_MAJOR=gate_major, SAVE_ACTS=save_acts,
            OP_DTYPE=op, PRECISION=precision, BLOCK_B=plan.block_b, BLOCK_H=plan.block_h_f, BLOCK_K=plan.block_k_f,
            K_CHUNK=plan.chunk_f, SPLIT=plan.split_f, ONE_GATE=plan.one_gate, num_warps=NUM_WARPS,
            num_stages=plan.stages_f,
        )
    return y, h_last, cs, (acts if save_acts else None), hz


def _padded_forward(x_proj, h0, c0, w_hh, bias, zh, zc, c_scale: float, op_dtype: torch.dtype, save_acts: bool):
    """The T forward steps at the kernels' HP units (:class:`_Units`): the one place that pads a layer's inputs, for
    training and inference alike. Returns (units, plan, w_op, margs, h0 padded, ``_forward``'s results), all at HP.
    x_proj [T, B, 4, HP] comes padded from ``input_product``."""
    units = _Units(h0.shape[-1])
    bias, h0, c0, zh, zc = units.pad(bias, GATES), units.pad(h0), units.pad(c0), units.pad(zh), units.pad(zc)
    stored = _stored_dtype(op_dtype)
    plan = _plan_for(x_proj, units.padded, zh, stored, GATES, one_gate_kernel=True)
    w_op = _pack_weight(w_hh, stored, plan)
    margs = _mask_args(zh, zc, c_scale, _dummy(x_proj))
    return units, plan, w_op, margs, h0, _forward(x_proj, h0, c0, w_op, bias, margs, plan, save_acts)


def _op_dtype(device: torch.device) -> torch.dtype:
    """The dtype of the recurrent product: autocast's if it is on (as F.linear in the reference)."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return torch.float32


class _FusedLSTM(torch.autograd.Function):
    """Differentiable in x_proj, h0, c0, w_hh, the bias (b_ih + b_hh), and in the recurrent mask z_h where that is
    learned."""

    @staticmethod
    def forward(ctx, x_proj, h0, c0, w_hh, bias, zh, zc, c_scale, op_dtype):
        ctx.dtypes = (x_proj.dtype, h0.dtype, c0.dtype, w_hh.dtype, bias.dtype)
        # From here on the kernels' HP units; the results are sliced back to H on the way out.
        units, plan, w_op, margs, h0, (y, h_last, cs, acts, hz) = _padded_forward(
            x_proj, h0, c0, w_hh, bias, zh, zc, c_scale, op_dtype, save_acts=True)
        ctx.save_for_backward(w_op, w_hh, hz, cs, acts, margs[0], margs[5], h0, y)
        ctx.margs = margs[1:5] + margs[6:]
        ctx.plan = plan
        ctx.units = units
        ctx.op_dtype = op_dtype
        return (units.unpad(y).contiguous(), units.unpad(h_last).contiguous(),
                units.unpad(cs[-1]).clone(memory_format=torch.contiguous_format))

    @staticmethod
    @once_differentiable  # no double backward through the kernels: raise rather than detach silently
    def backward(ctx, dy, dh_t, dc_t):
        # The products below pick their dtypes explicitly; an autocast still active on the calling
        # thread (CPU backward runs there) must not recast them.
        with torch.autocast(dy.device.type, enabled=False):
            return _FusedLSTM._backward(ctx, dy, dh_t, dc_t)

    @staticmethod
    def _backward(ctx, dy, dh_t, dc_t):
        _, bwd = _build_kernels()
        w_op, w_hh, hz, cs, acts, zh, zc, h0, y = ctx.saved_tensors
        szb, szg, has_zh, per_gate, has_zc, c_scale = ctx.margs
        plan, units = ctx.plan, ctx.units
        xp_dtype, h0_dtype, c0_dtype, w_dtype, b_dtype = ctx.dtypes
        dy, dh_t = units.pad(dy).contiguous(), units.pad(dh_t).contiguous()
        dc = units.pad(dc_t).float().clone()  # dL/dc_t, carried back in place by the kernels
        steps, batch, hidden = dy.shape  # hidden: the kernels' HP units
        dev = dy.device
        dgates = torch.empty(steps, batch, GATES * hidden, device=dev, dtype=torch.float32)
        # The backward's products run in the forward's product dtype (TF32 on fp32 operands, or bf16), W converted
        # to it as it is loaded where it is stored in fp16 (``_stored_dtype``); gradients are never stored in fp16.
        op_dtype = ctx.op_dtype
        op_copy = op_dtype != torch.float32
        dg_op = torch.empty_like(dgates, dtype=op_dtype) if op_copy else dgates  # the products' operand
        ws = torch.empty(GATES * plan.ks, batch, hidden, device=dev, dtype=torch.float32)
        counters = torch.zeros(plan.n_b * plan.n_j_b, device=dev, dtype=torch.int32)
        op = _tl_dtype(op_dtype)
        precision = _precision(op_dtype)
        for t in reversed(range(steps)):
            has_next = t < steps - 1
            grid = (plan.n_j_b, GATES * plan.ks if has_next else 1, plan.n_b)
            bwd[grid](
                t, dgates, dg_op, w_op, zh, zc, c_scale, dy, dh_t, acts, cs, dc, ws, counters,
                batch, w_op.stride(0), szb, szg, H=hidden,
                HAS_NEXT=has_next, HAS_ZH=has_zh, PER_GATE=per_gate, HAS_ZC=has_zc, OP_DTYPE=op, OP_COPY=op_copy,
                PRECISION=precision, BLOCK_B=plan.block_b, BLOCK_H=plan.block_h_b, BLOCK_K=BLOCK_K,
                K_CHUNK=plan.chunk_b, KS=plan.ks, num_warps=NUM_WARPS, num_stages=plan.stages_b,
            )
        # Whole-sequence products, one library call each (no loop over t).
        # Each step's operand, h_{t-1} masked, for t = 0..T-1, as the forward used it: [NZ, T*B, H].
        hz = hz[:, :steps].reshape(hz.shape[0], steps * batch, hidden).to(op_dtype)
        if per_gate:  # untied: gate g saw h * z_h^g, so dW_g is a per-gate product
            # One batched GEMM over the gates, dW_g = dgates_g^T @ hz_g, on strided views (no copies).
            dw = torch.bmm(dg_op.view(steps * batch, GATES, hidden).permute(1, 2, 0), hz)
        else:
            dw = dg_op.view(steps * batch, -1).t() @ hz[0]
        dh0 = None
        if ctx.needs_input_grad[1]:  # not in training: h_0 is the state carried from the batch before, detached
            dh0 = initial_state_grad(dg_op[0], w_op, w_hh, zh if has_zh else None, per_gate, units, op_dtype)
            dh0 = dh0.to(h0_dtype)
        # x_proj's gradient is dgates, as a [T, B, 4, HP] view (x_proj may be gate-major storage: the product that
        # made it takes the gradient through its strides), in x_proj's dtype: the bf16 copy if the kernels made one.
        d_xproj = (dg_op if dg_op.dtype == xp_dtype else dgates).view(steps, batch, GATES, hidden).to(xp_dtype)
        db = units.unpad(dgates.sum((0, 1)), GATES).to(b_dtype)
        dw = units.unpad_weight(dw.reshape(GATES * hidden, hidden), GATES).to(w_dtype)
        dzh = None
        if ctx.needs_input_grad[5]:
            h_prev = torch.cat((h0.unsqueeze(0).to(y.dtype), y[:-1]))
            dzh = units.unpad(recurrent_mask_grad(dg_op, w_op[:, :hidden].to(op_dtype), h_prev, zh, per_gate))
        return (d_xproj, dh0, units.unpad(dc).to(c0_dtype), dw, db, dzh, None, None, None)


def lstm_fused(
    x: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor],
    params: tuple[torch.Tensor, ...],
    masks: LayerMasks,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Drop-in for :func:`vdrnn.recurrent.lstm_reference`: same arguments, same results."""
    if not kernels_or_fallback(x.device, "vdrnn.fused"):
        return lstm_reference(x, state, params, masks)
    w_ih, w_hh, b_ih, b_hh = params
    # b_ih joins b_hh in the kernels' sum (every LSTM gate adds both): the input product runs without a bias to
    # broadcast into its output, and the kernels' db serves both biases (no second sum over T*B rows).
    x_proj = input_product(x, w_ih, None, masks, GATES, _Units(w_hh.shape[1]).padded)
    bias = b_ih + b_hh
    h0, c0 = state
    zh = masks.h if masks.h is not None and (masks.h.dim() == 2 or masks.per_gate) else None
    if masks.h is not None and zh is None:
        raise ValueError("a [B, G, H] recurrent mask needs masks.per_gate=True")
    op_dtype = _op_dtype(x.device)
    tensors = (x_proj, h0, c0, w_hh, bias)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        y, h_t, c_t = _FusedLSTM.apply(x_proj, h0, c0, w_hh, bias, zh, masks.c, masks.c_scale, op_dtype)
        return y, (h_t, c_t)
    # Inference (e.g. MC dropout evaluation): the same kernels, nothing saved for backward.
    units, *_, (y, h_last, cs, _, _) = _padded_forward(x_proj, h0, c0, w_hh, bias, zh, masks.c, masks.c_scale,
                                                       op_dtype, save_acts=False)
    return units.unpad(y), (units.unpad(h_last), units.unpad(cs[-1]))
