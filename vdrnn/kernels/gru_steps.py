"""The GRU's two step kernels, one Triton launch per time step each way (:mod:`vdrnn.kernels.gru` says what they
compute). Importing this module imports Triton: :mod:`vdrnn.kernels.gru` does so on first use."""

import triton
import triton.language as tl

from vdrnn.kernels import triton_parts as parts


# One launch per time step is the design (vdrnn.kernels.gru), so the whole step is one function.
@triton.jit(do_not_specialize=["t"])
def fwd_step(
    t, xp_ptr, w_ptr, bias_ptr, hz_ptr, zh_ptr, g_ptr, zone_ptr, hs_ptr, y_ptr, act_ptr, ws_ptr, cnt_ptr,
    B, stride_w, stride_zb, stride_zg, stride_xg, stride_hzg, stride_gt, stride_gb, stride_dt, stride_db,
    H: tl.constexpr, HAS_ZH: tl.constexpr, PER_GATE: tl.constexpr, HAS_ZG: tl.constexpr, HAS_ZONE: tl.constexpr,
    XP_GATE_MAJOR: tl.constexpr, SAVE_ACTS: tl.constexpr,
    OP_DTYPE: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
    K_CHUNK: tl.constexpr, SPLIT: tl.constexpr, GDC: tl.constexpr,
):
    """Step t: reads hz[t], hs[t], x_proj[t]; writes hz[t+1], hs[t+1], y[t], acts[t] = (r, z, n, a_n).

    hz: [NZ, T+1, B, H] in OP_DTYPE (gate stride stride_hzg), h_t masked (NZ = 3 copies for untied masks,
    else 1); hs: [T+1, B, H] fp32; x_proj: [T, B, 3H], or [3, T, B, H] (gate stride stride_xg) if
    XP_GATE_MAJOR; acts: [T, B, 4H] (n un-masked); W: [3H, stride_w]; ws: [SPLIT, B, 3H] fp32 partial sums; cnt:
    one int32 arrival counter per (b, j) block. With HAS_ZG, Semeniuta's mask m_t on n at g_ptr + t * stride_gt +
    b * stride_gb + j; with HAS_ZONE, zoneout's d_t at zone_ptr, strides (stride_dt, stride_db): fp32, a zero
    stride reads one row for every step or sample.
    """
    pid_s = tl.program_id(1)
    t = t.to(tl.int64)
    offs_b, offs_j, mask_b, mask_j, mask_bj = parts.block(B, H, BLOCK_B, BLOCK_H)
    a_prev = hz_ptr + t * B * H + offs_b[:, None] * H
    G = 3 * H
    bh = offs_b[:, None] * H + offs_j[None, :]
    # The cell's inputs that no step writes, loaded first: their latency overlaps the wait for step t-1, the
    # product and the split-K hand-off.
    xp, x_gate = parts.input_rows(xp_ptr, t, B, offs_b, offs_j, stride_xg, H, 3, XP_GATE_MAJOR)
    x_r = tl.load(xp, mask=mask_bj, other=0.0).to(tl.float32)
    x_z = tl.load(xp + x_gate, mask=mask_bj, other=0.0).to(tl.float32)
    x_n = tl.load(xp + 2 * x_gate, mask=mask_bj, other=0.0).to(tl.float32)
    b_r = tl.load(bias_ptr + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
    b_z = tl.load(bias_ptr + H + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
    b_n = tl.load(bias_ptr + 2 * H + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
    if HAS_ZH:  # the recurrent masks of units j, for the masked copies of h_t stored below
        z_at = zh_ptr + offs_b[:, None] * stride_zb + offs_j[None, :]
        z_r = tl.load(z_at, mask=mask_bj, other=0.0)
        if PER_GATE:
            z_z = tl.load(z_at + stride_zg, mask=mask_bj, other=0.0)
            z_n = tl.load(z_at + 2 * stride_zg, mask=mask_bj, other=0.0)
    if HAS_ZG:
        m = parts.unit_mask(g_ptr, t, stride_gt, stride_gb, offs_b, offs_j, mask_bj)
    if HAS_ZONE:
        d = parts.unit_mask(zone_ptr, t, stride_dt, stride_db, offs_b, offs_j, mask_bj)
    parts.after_previous_step(GDC)  # from here on, what step t-1 wrote
    h_prev = tl.load(hs_ptr + t * B * H + bh, mask=mask_bj, other=0.0)
    acc_r = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
    acc_z = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
    acc_n = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
    for kk in range(0, K_CHUNK, BLOCK_K):
        offs_k = pid_s * K_CHUNK + kk + tl.arange(0, BLOCK_K)
        mask_bk = mask_b[:, None] & (offs_k < H)[None, :]
        # W^T tiles of the three gates' rows for units j; packed rows are zero-padded, so no k mask.
        w_rows = w_ptr + offs_j[None, :] * stride_w + offs_k[:, None]
        w_r = tl.load(w_rows, mask=mask_j[None, :], other=0.0)
        w_z = tl.load(w_rows + H * stride_w, mask=mask_j[None, :], other=0.0)
        w_n = tl.load(w_rows + 2 * H * stride_w, mask=mask_j[None, :], other=0.0)
        a_at = a_prev + offs_k[None, :]
        a_r = tl.load(a_at, mask=mask_bk, other=0.0)
        if PER_GATE:  # untied: each gate sees its own masked copy of h_{t-1}
            a_z = tl.load(a_at + stride_hzg, mask=mask_bk, other=0.0)
            a_n = tl.load(a_at + 2 * stride_hzg, mask=mask_bk, other=0.0)
        else:  # tied (or no mask): one operand for the three gates
            a_z = a_r
            a_n = a_r
        acc_r = tl.dot(a_r, w_r, acc_r, input_precision=PRECISION)
        acc_z = tl.dot(a_z, w_z, acc_z, input_precision=PRECISION)
        acc_n = tl.dot(a_n, w_n, acc_n, input_precision=PRECISION)

    if SPLIT > 1:
        # Split-K as in the LSTM's kernels: the last of the SPLIT programs of this block to arrive adds the
        # partial sums in a fixed order (deterministic) and runs the cell; nobody waits.
        part = ws_ptr + offs_b[:, None] * G + offs_j[None, :]
        mine = part + pid_s * B * G
        tl.store(mine, acc_r, mask=mask_bj)
        tl.store(mine + H, acc_z, mask=mask_bj)
        tl.store(mine + 2 * H, acc_n, mask=mask_bj)
        counter, last = parts.arrive(cnt_ptr, SPLIT)
        live = mask_bj & last
        zero = tl.zeros((BLOCK_B, BLOCK_H), dtype=tl.float32)
        acc_r = parts.partials_sum(zero, part, live, B * G, SPLIT)
        acc_z = parts.partials_sum(zero, part + H, live, B * G, SPLIT)
        acc_n = parts.partials_sum(zero, part + 2 * H, live, B * G, SPLIT)
        tl.store(counter, 0, mask=last)  # reset for the next step's launch
    else:
        live = mask_bj

    # The cell, in fp32. n's recurrent product is scaled by r after the product, hence kept apart.
    r = tl.sigmoid(x_r + acc_r + b_r)
    z = tl.sigmoid(x_z + acc_z + b_z)
    hn = acc_n + b_n
    n = 2.0 * tl.sigmoid(2.0 * (x_n + r * hn)) - 1.0  # tanh
    if HAS_ZG:  # Semeniuta: the candidate dropped; acts keep n un-masked, the backward reads m again
        n_d = n * m
    else:
        n_d = n
    h_new = (1.0 - z) * n_d + z * h_prev
    if HAS_ZONE:  # zoneout: units with d = 1 keep h_{t-1}
        h_new = d * h_prev + (1.0 - d) * h_new
    tl.store(hs_ptr + (t + 1) * B * H + bh, h_new, mask=live)
    tl.store(y_ptr + t * B * H + bh, h_new.to(y_ptr.dtype.element_ty), mask=live)
    hz_next = hz_ptr + (t + 1) * B * H + bh  # the next step's operand
    if HAS_ZH:
        tl.store(hz_next, (h_new * z_r).to(OP_DTYPE), mask=live)
        if PER_GATE:
            tl.store(hz_next + stride_hzg, (h_new * z_z).to(OP_DTYPE), mask=live)
            tl.store(hz_next + 2 * stride_hzg, (h_new * z_n).to(OP_DTYPE), mask=live)
    else:
        tl.store(hz_next, h_new.to(OP_DTYPE), mask=live)
    if SAVE_ACTS:
        act = act_ptr + t * B * (4 * H) + offs_b[:, None] * (4 * H) + offs_j[None, :]
        tl.store(act, r, mask=live)
        tl.store(act + H, z, mask=live)
        tl.store(act + 2 * H, n, mask=live)
        tl.store(act + 3 * H, hn, mask=live)


# One launch per time step is the design (vdrnn.kernels.gru), so the whole step is one function.
@triton.jit(do_not_specialize=["t"])
def bwd_step(
    t, dg_ptr, dgo_ptr, w_ptr, zh_ptr, g_ptr, zone_ptr, dy_ptr, act_ptr, hs_ptr, carry_ptr, ws_ptr, cnt_ptr,
    B, stride_w, stride_zb, stride_zg, stride_gt, stride_gb, stride_dt, stride_db,
    H: tl.constexpr, HAS_NEXT: tl.constexpr, HAS_ZH: tl.constexpr, PER_GATE: tl.constexpr,
    HAS_ZG: tl.constexpr, HAS_ZONE: tl.constexpr,
    OP_DTYPE: tl.constexpr, OP_COPY: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
    K_CHUNK: tl.constexpr, KS: tl.constexpr, GDC: tl.constexpr, PREFETCH_W: tl.constexpr,
):
    """Step t in reverse: reads dg[t+1] (if HAS_NEXT), dy[t], acts[t], hs[t], the masks m_t and d_t (as the
    forward, if HAS_ZG / HAS_ZONE) and carry (the part of dh_t that bypasses step t+1's product, or dh_T at the last
    step); writes dg[t] = (da_r, da_z, da_n, dn_pre) and, in place, carry = (z_t (1 - d_t) + d_t) dh_t.

    The product sums over 3H = (gate, k): program (j, s, b) takes gate s // KS and k-slice s % KS;
    ws [3*KS, B, H] holds the partial sums, cnt the arrival counters. It reads step t+1's (da_r, da_z, da_n)
    from dgo: with OP_COPY a [T, B, 3H] copy in OP_DTYPE that this kernel writes (as the LSTM's
    backward), else dg itself.
    """
    pid_s = tl.program_id(1)
    t = t.to(tl.int64)
    offs_b, offs_j, mask_b, mask_j, mask_bj = parts.block(B, H, BLOCK_B, BLOCK_H)
    bh = offs_b[:, None] * H + offs_j[None, :]
    D = 4 * H  # row length of dg and acts
    DO = 3 * H if OP_COPY else D  # row length of dgo
    # Saved values, dy_t and the masks, which no step writes, first, so that their latency overlaps the wait for
    # step t+1 and the product.
    act = act_ptr + t * B * D + offs_b[:, None] * D + offs_j[None, :]
    r = tl.load(act, mask=mask_bj, other=0.0)
    z = tl.load(act + H, mask=mask_bj, other=0.0)
    n = tl.load(act + 2 * H, mask=mask_bj, other=0.0)
    hn = tl.load(act + 3 * H, mask=mask_bj, other=0.0)
    h_prev = tl.load(hs_ptr + t * B * H + bh, mask=mask_bj, other=0.0)
    dh = tl.load(dy_ptr + t * B * H + bh, mask=mask_bj, other=0.0).to(tl.float32)
    if HAS_ZG:
        m = parts.unit_mask(g_ptr, t, stride_gt, stride_gb, offs_b, offs_j, mask_bj)
    if HAS_ZONE:
        d = parts.unit_mask(zone_ptr, t, stride_dt, stride_db, offs_b, offs_j, mask_bj)
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
    dh += tl.load(carry_ptr + bh, mask=mask_bj, other=0.0)
    if HAS_NEXT:
        # dh_t += sum_g z_h^g * (da_{t+1}^g @ W_g): h_t fed every gate's product of step t+1.
        dg_next = dgo_ptr + (t + 1) * B * DO + offs_b[:, None] * DO + gate * H
        z_at = zh_ptr + offs_b[:, None] * stride_zb + offs_j[None, :]
        if HAS_ZH:
            zh = tl.load(z_at + gate * stride_zg, mask=mask_bj, other=0.0)
        part = parts.recurrent_grad_product(dg_next, w_ptr, w_first, w_second, gate, k_base, offs_j, mask_b, stride_w, H,
                                            OP_DTYPE, PRECISION, BLOCK_B, BLOCK_H, BLOCK_K, K_CHUNK, PREFETCH_W)
        if HAS_ZH:
            part = part * zh
        slot = ws_ptr + bh
        tl.store(slot + pid_s * B * H, part, mask=mask_bj)
        counter, last = parts.arrive(cnt_ptr, 3 * KS)
        live = mask_bj & last
        dh = parts.partials_sum(dh, slot, live, B * H, 3 * KS)
        tl.store(counter, 0, mask=last)
    else:  # the last step (one program per block): no product of a later step
        live = mask_bj

    # h_t = d h_{t-1} + (1 - d) h~;  h~ = (1 - z) n m + z h_{t-1};  n = tanh(x_n + r a_n)
    if HAS_ZONE:
        dht = (1.0 - d) * dh
    else:
        dht = dh
    if HAS_ZG:
        n_d = n * m
        dn = dht * (1.0 - z) * m
    else:
        n_d = n
        dn = dht * (1.0 - z)
    dn_pre = dn * (1.0 - n * n)
    da_r = dn_pre * hn * r * (1.0 - r)
    da_z = dht * (h_prev - n_d) * z * (1.0 - z)
    da_n = dn_pre * r
    carry = dht * z
    if HAS_ZONE:  # a zoned-out unit's gradient passes to h_{t-1} whole
        carry += d * dh
    tl.store(carry_ptr + bh, carry, mask=live)
    dg = dg_ptr + t * B * D + offs_b[:, None] * D + offs_j[None, :]
    tl.store(dg, da_r, mask=live)
    tl.store(dg + H, da_z, mask=live)
    tl.store(dg + 2 * H, da_n, mask=live)
    tl.store(dg + 3 * H, dn_pre, mask=live)
    if OP_COPY:
        dgo = dgo_ptr + t * B * DO + offs_b[:, None] * DO + offs_j[None, :]
        tl.store(dgo, da_r.to(OP_DTYPE), mask=live)
        tl.store(dgo + H, da_z.to(OP_DTYPE), mask=live)
        tl.store(dgo + 2 * H, da_n.to(OP_DTYPE), mask=live)
