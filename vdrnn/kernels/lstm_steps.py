"""The LSTM's two step kernels: one Triton launch per time step forward, one per step backward.

Forward, step t (``fwd_step``). At training batches a program multiplies one gate g for a block of hidden units j and
a slice of k,

    gates_g[b, j] = sum_k (h_{t-1}[b, k] * z_h[b, g, k]) * W_hh[g*H + j, k] + x_proj[t, b, g*H + j] + b

and the last of the block's programs to finish has all four gates' sums, so it runs the cell (at MC evaluation's wide
batches a program multiplies all four gates: :class:`~vdrnn.kernels.launch.Plan`). The operand h_{t-1} * z_h comes
ready: the step before stored it, masked and in the stored dtype (``hz``: one copy for tied masks, one per gate for
untied), so the programs reading a slice of it load one tensor instead of h and z. The cell (sigmoid/tanh, c_t =
f*c + i*g, Moon's c_t *= m and h_t *= 1/(1-p), Semeniuta's g *= m, zoneout's c_t = d c_{t-1} + (1-d) c_t and the
same for h_t) runs on the accumulators in fp32, and the program stores h_t, h_t * z_h
(the next step's operand), c_t, y_t and the four gate activations (what backward needs). One launch per step is the
minimum: step t+1 needs all of h_t, the results of every program of step t, and a launch boundary is the cheapest
grid-wide barrier that a CUDA graph can hold.

Backward, step t in reverse (``bwd_step``). A program owns hidden units j and computes

    dh_t[b, j] = dy_t[b, j] + sum_g z_h[b, g, j] * sum_k dgates_{t+1}[b, g*H + k] * W_hh[g*H + k, j]

(the recurrent product of the step after, its mask applied where its operand is used), then the cell's backward for
units j of all four gates: dgates_t and dc_{t-1}. Fusing the product with the pointwise saves a launch and a round
trip of dh per step. With bf16 products the kernel also stores dgates_t in bf16, the operand the next step streams.

Split-K inside the one launch: at batch 20 a step has only H / 16 or H / 32 blocks of output, too few to keep the SMs
busy pulling W_hh through memory, so the reduction over k is split among several programs of the same launch; each
stores its partial sums and counts itself in at its block's counter, and the one that arrives last adds them in a
fixed order and runs the cell (:mod:`~vdrnn.kernels.triton_parts`). Nobody waits, so a launch cannot deadlock.

Precision: the product runs in autocast's dtype when autocast is on (bf16 operands, as F.linear in the reference), else
in TF32 (``torch.backends.cuda.matmul.allow_tf32``) or IEEE fp32; it accumulates in fp32, and gate sums, c_t, h_t and
every gradient carried through time stay fp32. For TF32 products W_hh and h_t * z_h are stored in fp16, which holds the
10 mantissa bits TF32 keeps (:func:`~vdrnn.kernels.common.stored_dtype`).

Importing this module imports Triton: :mod:`vdrnn.kernels.lstm` does so on first use.
"""

import triton
import triton.language as tl

from vdrnn.kernels import triton_parts as parts


# One launch per time step is the design (module docstring), so the whole step is one function.
@triton.jit(do_not_specialize=["t"])
def fwd_step(
    t, xp_ptr, w_ptr, bias_ptr, hz_ptr, zh_ptr, zc_ptr, c_scale, zg_ptr, zone_c_ptr, zone_h_ptr,
    h_last_ptr, cs_ptr, y_ptr, act_ptr, ws_ptr, cnt_ptr,
    B, stride_w, stride_zb, stride_zg, stride_xg, stride_hzg,
    stride_gt, stride_gb, stride_zct, stride_zcb, stride_zht, stride_zhb,
    H: tl.constexpr, HAS_ZH: tl.constexpr, PER_GATE: tl.constexpr, HAS_ZC: tl.constexpr, XP_GATE_MAJOR: tl.constexpr,
    HAS_G: tl.constexpr, HAS_ZONE_C: tl.constexpr, HAS_ZONE_H: tl.constexpr,
    SAVE_ACTS: tl.constexpr, OP_DTYPE: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
    K_CHUNK: tl.constexpr, SPLIT: tl.constexpr, ONE_GATE: tl.constexpr, GDC: tl.constexpr,
    PREFETCH_W: tl.constexpr,
):
    """Step t: reads hz[t], cs[t], x_proj[t]; writes hz[t+1], h_last, cs[t+1], y[t], acts[t].

    hz: [NZ, T+1, B, H] in OP_DTYPE (gate stride stride_hzg; 0 for tied masks), h_t already masked (NZ = 4 masked
    copies for untied masks, else 1), the product's operand as the previous step stored it; h_last: [B, H] fp32,
    h_t in full precision, overwritten every step (read back only by zoneout, as h_{t-1}); cs: [T+1, B, H]
    fp32; x_proj: [T, B, 4H], or [4, T, B, H] (gate stride stride_xg) if XP_GATE_MAJOR; acts: [T, B, 4H]; y:
    [T, B, H]; W: [4H, stride_w]; ws: [SPLIT, B, 4H] fp32 partial sums; cnt: one int32 arrival counter per
    (b, j) block. Program (j, s, b) sums k in [s*K_CHUNK, (s+1)*K_CHUNK) of the four gates for hidden units j,
    batch rows b; with ONE_GATE program (j, gate * SPLIT + s, b) sums gate ``gate`` only. The last of a block's
    programs to arrive runs the cell. zg (Semeniuta's mask on g), zone_c and zone_h (zoneout's d) are read at
    step t through their (time, batch) strides: a time stride of 0 for a mask fixed over time, both 0 for
    zoneout's expectation.
    """
    pid_s = tl.program_id(1)
    t = t.to(tl.int64)
    offs_b, offs_j, mask_b, mask_j, mask_bj = parts.block(B, H, BLOCK_B, BLOCK_H)
    a_prev = hz_ptr + t * B * H + offs_b[:, None] * H
    G = 4 * H
    bh = offs_b[:, None] * H + offs_j[None, :]
    # The cell's inputs that no step writes, loaded first: their latency overlaps the wait for step t-1 and the
    # product (every program loads them; only the last one of a block uses them).
    xp, x_gate = parts.input_rows(xp_ptr, t, B, offs_b, offs_j, stride_xg, H, 4, XP_GATE_MAJOR)
    x_i = tl.load(xp, mask=mask_bj, other=0.0).to(tl.float32)
    x_f = tl.load(xp + x_gate, mask=mask_bj, other=0.0).to(tl.float32)
    x_g = tl.load(xp + 2 * x_gate, mask=mask_bj, other=0.0).to(tl.float32)
    x_o = tl.load(xp + 3 * x_gate, mask=mask_bj, other=0.0).to(tl.float32)
    x_i += tl.load(bias_ptr + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
    x_f += tl.load(bias_ptr + H + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
    x_g += tl.load(bias_ptr + 2 * H + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
    x_o += tl.load(bias_ptr + 3 * H + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
    if HAS_ZC:
        keep = tl.load(zc_ptr + bh, mask=mask_bj, other=0.0)
    if HAS_G:
        m_g = parts.unit_mask(zg_ptr, t, stride_gt, stride_gb, offs_b, offs_j, mask_bj)
    if HAS_ZONE_C:
        d_c = parts.unit_mask(zone_c_ptr, t, stride_zct, stride_zcb, offs_b, offs_j, mask_bj)
    if HAS_ZONE_H:
        d_h = parts.unit_mask(zone_h_ptr, t, stride_zht, stride_zhb, offs_b, offs_j, mask_bj)
    if HAS_ZH:  # the recurrent masks of units j, for the masked copies of h_t stored below
        z_at = zh_ptr + offs_b[:, None] * stride_zb + offs_j[None, :]
        z_i = tl.load(z_at, mask=mask_bj, other=0.0)
        if PER_GATE:
            z_f = tl.load(z_at + stride_zg, mask=mask_bj, other=0.0)
            z_g = tl.load(z_at + 2 * stride_zg, mask=mask_bj, other=0.0)
            z_o = tl.load(z_at + 3 * stride_zg, mask=mask_bj, other=0.0)
    if ONE_GATE:
        gate = pid_s // SPLIT
        k_first = (pid_s % SPLIT) * K_CHUNK
        a_at = a_prev + gate * stride_hzg
        w_rows = w_ptr + (gate * H + offs_j[None, :]) * stride_w
        if PREFETCH_W:  # W_hh is written by no step: its first tile too loads during the wait
            w_first = tl.load(w_rows + (k_first + tl.arange(0, BLOCK_K))[:, None], mask=mask_j[None, :], other=0.0)
    parts.after_previous_step(GDC)  # from here on, what step t-1 wrote
    c_prev = tl.load(cs_ptr + t * B * H + bh, mask=mask_bj, other=0.0)
    if HAS_ZONE_H:
        h_prev = tl.load(h_last_ptr + bh, mask=mask_bj, other=0.0)
    if ONE_GATE:
        # One gate per program: a stage of the loop holds one operand tile and one W tile, whether the gates
        # share the operand (tied masks) or not, and the loop is four times longer than a four-gate program's
        # over the same units; the faster at training batches (docs/speed.md).
        acc = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
        if PREFETCH_W:
            offs_k = k_first + tl.arange(0, BLOCK_K)
            a = tl.load(a_at + offs_k[None, :], mask=mask_b[:, None] & (offs_k < H)[None, :], other=0.0)
            acc = tl.dot(a, w_first, acc, input_precision=PRECISION)
        for kk in range(BLOCK_K * PREFETCH_W, K_CHUNK, BLOCK_K):
            offs_k = k_first + kk + tl.arange(0, BLOCK_K)
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
    g_in = g * m_g if HAS_G else g  # Semeniuta: the candidate update dropped
    c = f * c_prev + i * g_in
    if HAS_ZC:  # Moon: a dropped cell unit is zero for the whole sequence
        c = c * keep
    h_new = o * (2.0 * tl.sigmoid(2.0 * c) - 1.0)
    if HAS_ZC:
        h_new = h_new * c_scale
    # Zoneout: units keep their previous values where d = 1; h_t's update above read the cell before zoneout.
    if HAS_ZONE_C:
        c = d_c * c_prev + (1.0 - d_c) * c
    if HAS_ZONE_H:
        h_new = d_h * h_prev + (1.0 - d_h) * h_new
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


# One launch per time step is the design (module docstring), so the whole step is one function.
@triton.jit(do_not_specialize=["t"])
def bwd_step(
    t, dg_ptr, dgo_ptr, w_ptr, zh_ptr, zc_ptr, c_scale, zg_ptr, zone_c_ptr, zone_h_ptr,
    dy_ptr, dh_last_ptr, act_ptr, cs_ptr, dc_ptr, carry_ptr, ws_ptr, cnt_ptr,
    B, stride_w, stride_zb, stride_zg, stride_gt, stride_gb, stride_zct, stride_zcb, stride_zht, stride_zhb,
    H: tl.constexpr, HAS_NEXT: tl.constexpr, HAS_ZH: tl.constexpr, PER_GATE: tl.constexpr,
    HAS_ZC: tl.constexpr, HAS_G: tl.constexpr, HAS_ZONE_C: tl.constexpr, HAS_ZONE_H: tl.constexpr,
    OP_DTYPE: tl.constexpr, OP_COPY: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
    K_CHUNK: tl.constexpr, KS: tl.constexpr, GDC: tl.constexpr, PREFETCH_W: tl.constexpr,
):
    """Step t in reverse: reads dgates[t+1] (if HAS_NEXT, else dh_T), dy[t], acts[t], cs[t], cs[t+1]
    and dc (= dL/dc_t); writes dgates[t] and dc (= dL/dc_{t-1}, in place: one program owns each j).

    dgates: [T, B, 4H] fp32. The product reads step t+1's from dgo, a copy in OP_DTYPE that this kernel
    also writes when OP_COPY (bf16 products: half the bytes that every program streams); in fp32 dgo
    is dgates itself.

    The recurrent product sums over 4H = (gate, k): program (j, s, b) takes gate s // KS and the
    k-slice s % KS; ws [4*KS, B, H] holds the partial sums, cnt the arrival counters.

    Zoneout on h: carry holds d_{t+1} * dh_{t+1}, the gradient that reached h_t around step t+1's update, and
    is overwritten with d_t * dh_t for step t-1 (in place, as dc). Zoneout on c: dc_{t-1} gains d_t * dc_t, and
    the cell's value before zoneout (what tanh read) is recomputed from the saved gates.
    """
    pid_s = tl.program_id(1)
    t = t.to(tl.int64)
    offs_b, offs_j, mask_b, mask_j, mask_bj = parts.block(B, H, BLOCK_B, BLOCK_H)
    bh = offs_b[:, None] * H + offs_j[None, :]
    G = 4 * H
    # The cell's saved values, dy_t and the masks, which no step writes, loaded first so that their latency
    # overlaps the wait for step t+1, the product and the split-K hand-off (only a block's last program uses them).
    act = act_ptr + t * B * G + offs_b[:, None] * G + offs_j[None, :]
    i = tl.load(act, mask=mask_bj, other=0.0)
    f = tl.load(act + H, mask=mask_bj, other=0.0)
    g = tl.load(act + 2 * H, mask=mask_bj, other=0.0)
    o = tl.load(act + 3 * H, mask=mask_bj, other=0.0)
    c_prev = tl.load(cs_ptr + t * B * H + bh, mask=mask_bj, other=0.0)
    c = tl.load(cs_ptr + (t + 1) * B * H + bh, mask=mask_bj, other=0.0)
    dh = tl.load(dy_ptr + t * B * H + bh, mask=mask_bj, other=0.0).to(tl.float32)
    if HAS_ZC:
        keep = tl.load(zc_ptr + bh, mask=mask_bj, other=0.0)
    if HAS_G:
        m_g = parts.unit_mask(zg_ptr, t, stride_gt, stride_gb, offs_b, offs_j, mask_bj)
    if HAS_ZONE_C:
        d_c = parts.unit_mask(zone_c_ptr, t, stride_zct, stride_zcb, offs_b, offs_j, mask_bj)
    if HAS_ZONE_H:
        d_h = parts.unit_mask(zone_h_ptr, t, stride_zht, stride_zhb, offs_b, offs_j, mask_bj)
    w_first = w_ptr  # unused without PREFETCH_W
    w_second = w_ptr
    if HAS_NEXT:
        gate = pid_s // KS
        k_base = (pid_s % KS) * K_CHUNK
        if PREFETCH_W >= 1:  # W_hh is written by no step: its first tile too loads during the wait
            w_first = parts.grad_w_tile(w_ptr, gate, k_base + tl.arange(0, BLOCK_K), offs_j, stride_w, H)
        if PREFETCH_W >= 2:
            w_second = parts.grad_w_tile(w_ptr, gate, k_base + BLOCK_K + tl.arange(0, BLOCK_K), offs_j, stride_w, H)
    parts.after_previous_step(GDC)  # from here on, what step t+1 wrote
    dc_in = tl.load(dc_ptr + bh, mask=mask_bj, other=0.0)
    if HAS_ZONE_H:
        dh += tl.load(carry_ptr + bh, mask=mask_bj, other=0.0)
    if HAS_NEXT:
        # dh_t += sum_g z_h^g * (dgates_{t+1}^g @ W_g): step t's output fed every gate of step t+1.
        dg_next = dgo_ptr + (t + 1) * B * G + offs_b[:, None] * G + gate * H
        z_at = zh_ptr + offs_b[:, None] * stride_zb + offs_j[None, :]
        if HAS_ZH:
            z = tl.load(z_at + gate * stride_zg, mask=mask_bj, other=0.0)
        part = parts.recurrent_grad_product(dg_next, w_ptr, w_first, w_second, gate, k_base, offs_j, mask_b, stride_w, H,
                                            OP_DTYPE, PRECISION, BLOCK_B, BLOCK_H, BLOCK_K, K_CHUNK, PREFETCH_W)
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

    g_in = g * m_g if HAS_G else g
    if HAS_ZONE_H:  # h_t = d h_{t-1} + (1 - d) h~_t
        tl.store(carry_ptr + bh, d_h * dh, mask=live)
        dh = (1.0 - d_h) * dh
    if HAS_ZONE_C:  # c_t = d c_{t-1} + (1 - d) c~_t: tanh read c~_t, recomputed here
        c = f * c_prev + i * g_in
        if HAS_ZC:
            c = c * keep
        dc_direct = d_c * dc_in
        dc_in = (1.0 - d_c) * dc_in
    tc = 2.0 * tl.sigmoid(2.0 * c) - 1.0
    if HAS_ZC:
        dh = dh * c_scale
    d_o = dh * tc
    dc = dc_in + dh * o * (1.0 - tc * tc)
    if HAS_ZC:  # c_t = m * (f*c + i*g)
        dc = dc * keep
    dc_prev = dc * f
    if HAS_ZONE_C:
        dc_prev += dc_direct
    tl.store(dc_ptr + bh, dc_prev, mask=live)
    dg_i = dc * g_in * i * (1.0 - i)
    dg_f = dc * c_prev * f * (1.0 - f)
    dg_g = dc * i * (1.0 - g * g)
    if HAS_G:
        dg_g = dg_g * m_g
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
