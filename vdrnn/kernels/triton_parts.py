"""Triton pieces shared by the LSTM's and the GRU's step kernels (``lstm_steps``, ``gru_steps``).

The two cells differ only in their gates and pointwise math; how a program finds its block, multiplies the masked
h_{t-1} into one gate's rows of W_hh, and hands its split-K partial sums to the last program of its block is the same,
and lives here once. Each function is inlined into the kernels that call it. Importing this module imports Triton.
"""

import triton
import triton.language as tl


@triton.jit
def block(B, H, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr):
    """This program's batch rows and hidden units (grid axes 2 and 0), with their bounds masks."""
    offs_b = tl.program_id(2) * BLOCK_B + tl.arange(0, BLOCK_B)
    offs_j = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_b = offs_b < B
    mask_j = offs_j < H
    return offs_b, offs_j, mask_b, mask_j, mask_b[:, None] & mask_j[None, :]


@triton.jit
def after_previous_step(GDC: tl.constexpr):
    """With GDC (programmatic dependent launch, ``launch.Plan.gdc``): wait until the launch before this one in the
    stream, step t-1, has finished and its stores are visible, then let the next step's programs be scheduled.

    A step kernel reads above this call only what no step writes (W_hh, x_proj, biases, masks, the forward's saved
    values) and from it on what step t-1 wrote (h_{t-1}, c_{t-1}, the carried gradients), and writes nothing before
    it: the split-K workspace and counters are reused by every step. Without GDC each launch starts only after the
    one before has finished, and this is nothing.
    """
    if GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def input_rows(xp_ptr, t, B, offs_b, offs_j, stride_xg, H: tl.constexpr, GATES: tl.constexpr,
               GATE_MAJOR: tl.constexpr):
    """Pointers to step t's input half x_proj[t, b, 0, j] for this block, and the offset from one gate to the next.

    x_proj is [T, B, GATES * H], or with GATE_MAJOR a view of [GATES, T, B, H] storage (untied input masks), whose
    gate stride (T * B * H) is the one runtime stride: the contiguous layout's are constants, which the compiler
    addresses faster.
    """
    if GATE_MAJOR:
        return xp_ptr + t * B * H + offs_b[:, None] * H + offs_j[None, :], stride_xg
    return xp_ptr + t * B * (GATES * H) + offs_b[:, None] * (GATES * H) + offs_j[None, :], H


@triton.jit
def grad_w_tile(w_ptr, gate, offs_k, offs_j, stride_w, H):
    """W_hh[gate*H + k, j] for this program's units j and the k of ``offs_k``: [BLOCK_K, BLOCK_H].

    Columns j < stride_w always exist (rows are zero-padded past H), so only the row (k) needs a mask, which also
    keeps gate g's k from reading gate g+1's rows: the loads stay full-width along j.
    """
    return tl.load(w_ptr + (gate * H + offs_k[:, None]) * stride_w + offs_j[None, :], mask=(offs_k < H)[:, None],
                   other=0.0)


@triton.jit
def recurrent_grad_product(dg_rows, w_ptr, w_first, w_second, gate, k_base, offs_j, mask_b, stride_w, H,
                           OP_DTYPE: tl.constexpr, PRECISION: tl.constexpr, BLOCK_B: tl.constexpr,
                           BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, K_CHUNK: tl.constexpr,
                           PREFETCHED: tl.constexpr):
    """sum_k dgates_{t+1}[b, gate*H + k] * W_hh[gate*H + k, j] over this program's k chunk: [BLOCK_B, BLOCK_H].

    dg_rows: [BLOCK_B, 1] pointers to gate ``gate``'s first column of step t+1's gate gradients, one per row b;
    with PREFETCHED, ``w_first`` is the chunk's first W tile (``grad_w_tile``), loaded before the wait.
    """
    part = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
    if PREFETCHED >= 1:
        part = _grad_slice(part, dg_rows, w_first, k_base + tl.arange(0, BLOCK_K), mask_b, H, OP_DTYPE, PRECISION)
    if PREFETCHED >= 2:
        part = _grad_slice(part, dg_rows, w_second, k_base + BLOCK_K + tl.arange(0, BLOCK_K), mask_b, H, OP_DTYPE,
                           PRECISION)
    for kk in range(BLOCK_K * PREFETCHED, K_CHUNK, BLOCK_K):
        offs_k = k_base + kk + tl.arange(0, BLOCK_K)
        w = grad_w_tile(w_ptr, gate, offs_k, offs_j, stride_w, H)
        part = _grad_slice(part, dg_rows, w, offs_k, mask_b, H, OP_DTYPE, PRECISION)
    return part


@triton.jit
def _grad_slice(part, dg_rows, w, offs_k, mask_b, H, OP_DTYPE: tl.constexpr, PRECISION: tl.constexpr):
    """part + dgates_{t+1}[:, gate, offs_k] @ w, the product of one k slice."""
    a = tl.load(dg_rows + offs_k[None, :], mask=mask_b[:, None] & (offs_k < H)[None, :], other=0.0)
    # W may be stored narrower than the product (fp16 for TF32 products: common.stored_dtype).
    return tl.dot(a.to(OP_DTYPE), w.to(OP_DTYPE), part, input_precision=PRECISION)


@triton.jit
def arrive(cnt_ptr, ARRIVALS: tl.constexpr):
    """Split-K hand-off, after this program stored its partial sums: count it in at its block's counter.

    Returns (counter, last): ``last`` is true for the one program of the block that arrives last, which then
    adds the partial sums (``partials_sum``), runs the cell and resets the counter. Nobody waits, so a launch
    cannot deadlock however its programs are scheduled.
    """
    tl.debug_barrier()  # all threads' stores come before the release of the atomic below
    counter = cnt_ptr + tl.program_id(2) * tl.num_programs(0) + tl.program_id(0)
    arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    return counter, arrived == ARRIVALS - 1


@triton.jit
def partials_sum(acc, src, live, stride, PARTS: tl.constexpr):
    """acc + the PARTS partial sums at src, src + stride, ...: in that fixed order, so results do not depend on
    the programs' arrival order. Unrolled, so that all the loads are in flight at once; .cg reads them through
    L2, where the other programs' stores are."""
    for s in tl.static_range(PARTS):
        acc += tl.load(src + s * stride, mask=live, other=0.0, cache_modifier=".cg")
    return acc


@triton.jit
def unit_mask(ptr, t, stride_t, stride_b, offs_b, offs_j, mask_bj):
    """This block of step t's mask on the units (Semeniuta's m_t, zoneout's d_t), read through its strides: a zero
    stride reads the same row at every step or sample."""
    return tl.load(ptr + t * stride_t + offs_b[:, None] * stride_b + offs_j[None, :], mask=mask_bj, other=0.0)
