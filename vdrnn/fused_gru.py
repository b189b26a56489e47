"""A fused GRU recurrence for masked recurrences: the fast drop-in for ``gru_reference``.

Why: cuDNN's GRU cannot mask h_{t-1} (Gal, tied or one mask per gate), so those layers run
:func:`vdrnn.recurrent.gru_reference`, a Python loop of ~10 small kernels per step. This is the
GRU twin of :mod:`vdrnn.fused` (read its docstring: the same plan, split-K hand-off, packed W_hh,
precision rules and CUDA-graph safety, and its ``_Plan`` / ``_pack_weight`` are used as they are; the Triton
pieces both kernels share are in :mod:`vdrnn.kernel_parts`).

What runs where (one layer, T steps, batch B, hidden H, gates r, z, n as torch.nn.GRU):

1. Input half, once for all steps: ``fused.input_product`` (one GEMM; x masks and b_ih applied there).
2. Forward, ONE Triton kernel per step (``_gru_fwd_step``). A program owns hidden units j of all
   three gates and keeps the three recurrent products apart, because r multiplies n's product
   AFTER the product:
       a_g = sum_k (h_{t-1}[b, k] * z_h^g[b, k]) * W_hh[g*H + j, k] + b_hh[g*H + j]
       r = sigma(x_r + a_r)    z = sigma(x_z + a_z)    n = tanh(x_n + r * a_n)
       h_t = (1 - z) * n + z * h_{t-1}          (h_{t-1} undropped here, as gru_reference)
   and stores h_t, h_t * z_h (the next step's operand, as the LSTM's ``hz``: one copy tied, three
   untied, in the stored dtype: ``fused._stored_dtype``), y_t and (r, z, n, a_n) for the backward.
3. Backward, ONE kernel per step in reverse (``_gru_bwd_step``), program owning units j:
       dh_t = dy_t + z_{t+1} * dh_{t+1} + sum_g z_h^g * (da_{t+1}^g @ W_g)
   then the cell's backward: da_r, da_z, da_n = dn_pre * r (the recurrent gradients, what the
   product of the step before needs) and dn_pre (n's input-half gradient, which r does not scale).
   z * dh_t, the part of dh_{t-1} that bypasses the product, is carried in place like the LSTM's dc.
   With bf16 products the kernel also stores (da_r, da_z, da_n) in bf16 for the next step's product.
4. After the loop: dW_hh as ONE GEMM over all T*B rows (per-gate for untied masks), db_hh, dh_0,
   and d x_proj = (da_r, da_z, dn_pre), which autograd carries on to x, W_ih and b_ih.

On a CPU without TRITON_INTERPRET=1 (or without Triton) ``gru_fused`` runs the reference loop.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from vdrnn import fused
from vdrnn.dropout import LayerMasks
from vdrnn.fused import (
    _dummy,
    _mask_args,
    _op_dtype,
    _pack_weight,
    _Plan,
    _plan_for,
    _precision,
    _stored_dtype,
    _Units,
    initial_state_grad,
    input_product,
    kernels_or_fallback,
    recurrent_mask_grad,
)
from vdrnn.recurrent import GRU_GATES, gru_reference

_KERNELS = None  # (fwd_step, bwd_step) once built
SAVED = 4  # per unit and step the backward needs r, z, n and a_n (n's recurrent product)


def _build_kernels():
    """Define the two kernels (importing Triton now, so that TRITON_INTERPRET set before is honoured)."""
    global _KERNELS, tl, parts  # module globals: a kernel resolves the names it calls among them
    if _KERNELS is not None:
        return _KERNELS
    import triton
    import triton.language as tl

    from vdrnn import kernel_parts as parts

    @triton.jit(do_not_specialize=["t"])
    def _gru_fwd_step(
        t, xp_ptr, w_ptr, bias_ptr, hz_ptr, zh_ptr, hs_ptr, y_ptr, act_ptr, ws_ptr, cnt_ptr,
        B, stride_w, stride_zb, stride_zg, stride_xg, stride_hzg,
        H: tl.constexpr, HAS_ZH: tl.constexpr, PER_GATE: tl.constexpr, XP_GATE_MAJOR: tl.constexpr,
        SAVE_ACTS: tl.constexpr,
        OP_DTYPE: tl.constexpr, PRECISION: tl.constexpr,
        BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
        K_CHUNK: tl.constexpr, SPLIT: tl.constexpr,
    ):
        """Step t: reads hz[t], hs[t], x_proj[t]; writes hz[t+1], hs[t+1], y[t], acts[t] = (r, z, n, a_n).

        hz: [NZ, T+1, B, H] in OP_DTYPE (gate stride stride_hzg), h_t masked (NZ = 3 copies for untied masks,
        else 1); hs: [T+1, B, H] fp32; x_proj: [T, B, 3H], or [3, T, B, H] (gate stride stride_xg) if
        XP_GATE_MAJOR; acts: [T, B, 4H]; W: [3H, stride_w]; ws: [SPLIT, B, 3H] fp32 partial sums; cnt: one int32
        arrival counter per (b, j) block.
        """
        pid_s = tl.program_id(1)
        t = t.to(tl.int64)
        offs_b, offs_j, mask_b, mask_j, mask_bj = parts.block(B, H, BLOCK_B, BLOCK_H)
        a_prev = hz_ptr + t * B * H + offs_b[:, None] * H
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

        G = 3 * H
        bh = offs_b[:, None] * H + offs_j[None, :]
        # The cell's other inputs, loaded before the split-K hand-off so that their latency overlaps it.
        xp, x_gate = parts.input_rows(xp_ptr, t, B, offs_b, offs_j, stride_xg, H, 3, XP_GATE_MAJOR)
        x_r = tl.load(xp, mask=mask_bj, other=0.0).to(tl.float32)
        x_z = tl.load(xp + x_gate, mask=mask_bj, other=0.0).to(tl.float32)
        x_n = tl.load(xp + 2 * x_gate, mask=mask_bj, other=0.0).to(tl.float32)
        b_r = tl.load(bias_ptr + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
        b_z = tl.load(bias_ptr + H + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
        b_n = tl.load(bias_ptr + 2 * H + offs_j, mask=mask_j, other=0.0).to(tl.float32)[None, :]
        h_prev = tl.load(hs_ptr + t * B * H + bh, mask=mask_bj, other=0.0)
        if HAS_ZH:  # the recurrent masks of units j, for the masked copies of h_t stored below
            z_at = zh_ptr + offs_b[:, None] * stride_zb + offs_j[None, :]
            z_r = tl.load(z_at, mask=mask_bj, other=0.0)
            if PER_GATE:
                z_z = tl.load(z_at + stride_zg, mask=mask_bj, other=0.0)
                z_n = tl.load(z_at + 2 * stride_zg, mask=mask_bj, other=0.0)
        if SPLIT > 1:
            # Split-K as in vdrnn.fused: the last of the SPLIT programs of this block to arrive adds the
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
        h_new = (1.0 - z) * n + z * h_prev
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

    @triton.jit(do_not_specialize=["t"])
    def _gru_bwd_step(
        t, dg_ptr, dgo_ptr, w_ptr, zh_ptr, dy_ptr, act_ptr, hs_ptr, carry_ptr, ws_ptr, cnt_ptr,
        B, stride_w, stride_zb, stride_zg,
        H: tl.constexpr, HAS_NEXT: tl.constexpr, HAS_ZH: tl.constexpr, PER_GATE: tl.constexpr,
        OP_DTYPE: tl.constexpr, OP_COPY: tl.constexpr, PRECISION: tl.constexpr,
        BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
        K_CHUNK: tl.constexpr, KS: tl.constexpr,
    ):
        """Step t in reverse: reads dg[t+1] (if HAS_NEXT), dy[t], acts[t], hs[t] and carry (= z_{t+1} dh_{t+1},
        or dh_T at the last step); writes dg[t] = (da_r, da_z, da_n, dn_pre) and carry = z_t dh_t in place.

        The product sums over 3H = (gate, k): program (j, s, b) takes gate s // KS and k-slice s % KS;
        ws [3*KS, B, H] holds the partial sums, cnt the arrival counters. It reads step t+1's (da_r, da_z, da_n)
        from dgo: with OP_COPY a [T, B, 3H] copy in OP_DTYPE that this kernel writes (as vdrnn.fused's
        backward), else dg itself.
        """
        pid_s = tl.program_id(1)
        t = t.to(tl.int64)
        offs_b, offs_j, mask_b, mask_j, mask_bj = parts.block(B, H, BLOCK_B, BLOCK_H)
        bh = offs_b[:, None] * H + offs_j[None, :]
        D = 4 * H  # row length of dg and acts
        DO = 3 * H if OP_COPY else D  # row length of dgo
        # Saved values and incoming gradients first, so that their latency overlaps the product.
        act = act_ptr + t * B * D + offs_b[:, None] * D + offs_j[None, :]
        r = tl.load(act, mask=mask_bj, other=0.0)
        z = tl.load(act + H, mask=mask_bj, other=0.0)
        n = tl.load(act + 2 * H, mask=mask_bj, other=0.0)
        hn = tl.load(act + 3 * H, mask=mask_bj, other=0.0)
        h_prev = tl.load(hs_ptr + t * B * H + bh, mask=mask_bj, other=0.0)
        dh = tl.load(dy_ptr + t * B * H + bh, mask=mask_bj, other=0.0).to(tl.float32)
        dh += tl.load(carry_ptr + bh, mask=mask_bj, other=0.0)
        if HAS_NEXT:
            # dh_t += sum_g z_h^g * (da_{t+1}^g @ W_g): h_t fed every gate's product of step t+1.
            gate = pid_s // KS
            k_base = (pid_s % KS) * K_CHUNK
            dg_next = dgo_ptr + (t + 1) * B * DO + offs_b[:, None] * DO + gate * H
            z_at = zh_ptr + offs_b[:, None] * stride_zb + offs_j[None, :]
            if HAS_ZH:
                zh = tl.load(z_at + gate * stride_zg, mask=mask_bj, other=0.0)
            part = parts.recurrent_grad_product(dg_next, w_ptr, gate, k_base, offs_j, mask_b, stride_w, H,
                                                OP_DTYPE, PRECISION, BLOCK_B, BLOCK_H, BLOCK_K, K_CHUNK)
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

        # h_t = (1 - z) n + z h_{t-1};  n = tanh(x_n + r a_n)
        dn_pre = dh * (1.0 - z) * (1.0 - n * n)
        da_r = dn_pre * hn * r * (1.0 - r)
        da_z = dh * (h_prev - n) * z * (1.0 - z)
        da_n = dn_pre * r
        tl.store(carry_ptr + bh, dh * z, mask=live)
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

    _KERNELS = (_gru_fwd_step, _gru_bwd_step)
    return _KERNELS


def _forward(x_proj, h0, w_op, b_hh, margs, plan: _Plan, save_acts: bool):
    """Run the T forward steps of the plan's H units; x_proj [T, B, 3, H] is contiguous or gate-major (``_gate_major``).
    Returns y [T,B,H] (x_proj dtype), hs [T+1,B,H] fp32, acts [T,B,4H] or None, and hz [NZ, T+1, B, H]: each step's
    product operand, h_t masked (NZ = 3 copies for untied masks) in W's dtype."""
    fwd, _ = _build_kernels()
    steps, batch = x_proj.shape[:2]
    hidden = plan.hidden
    three_h = GRU_GATES * hidden
    dev = x_proj.device
    zh, szb, szg, has_zh, per_gate = margs
    hs = torch.empty(steps + 1, batch, hidden, device=dev, dtype=torch.float32)
    hs[0].copy_(h0)
    hz = torch.empty(GRU_GATES if per_gate else 1, steps + 1, batch, hidden, device=dev, dtype=w_op.dtype)
    hz[:, 0].copy_(fused._masked_h0(h0, zh if has_zh else None, per_gate))
    y = torch.empty(steps, batch, hidden, device=dev, dtype=x_proj.dtype)
    acts = torch.empty(steps, batch, SAVED * hidden, device=dev, dtype=torch.float32) if save_acts else hs
    if plan.hand_off_f:
        ws = torch.empty(plan.split_f, batch, three_h, device=dev, dtype=torch.float32)
        counters = torch.zeros(plan.n_b * plan.n_j_f, device=dev, dtype=torch.int32)
    else:
        ws = counters = hs
    op = fused._tl_dtype(w_op.dtype)
    precision = _precision(w_op.dtype)
    bias = b_hh.detach()
    gate_major = fused._gate_major(x_proj)  # once, not at each of the T launches
    for t in range(steps):
        fwd[plan.grid_f](  # (unit blocks, K chunks, batch blocks): every gate of BLOCK_H units a program
            t, x_proj, w_op, bias, hz, zh, hs, y, acts, ws, counters,
            batch, w_op.stride(0), szb, szg, x_proj.stride(2), hz.stride(0), H=hidden, HAS_ZH=has_zh,
            PER_GATE=per_gate, XP_GATE_MAJOR=gate_major, SAVE_ACTS=save_acts,
            OP_DTYPE=op, PRECISION=precision, BLOCK_B=plan.block_b, BLOCK_H=plan.block_h_f,
            BLOCK_K=plan.block_k_f, K_CHUNK=plan.chunk_f, SPLIT=plan.split_f,
            num_warps=fused.NUM_WARPS, num_stages=plan.stages_f,
        )
    return y, hs, (acts if save_acts else None), hz


def _padded_forward(x_proj, h0, w_hh, b_hh, zh, op_dtype: torch.dtype, save_acts: bool):
    """The T forward steps at the kernels' HP units (``fused._Units``): the one place that pads a layer's inputs, for
    training and inference alike. Returns (units, plan, w_op, margs, ``_forward``'s results), all at HP. x_proj
    [T, B, 3, HP] comes padded from ``fused.input_product``."""
    units = _Units(h0.shape[-1])
    b_hh, h0, zh = units.pad(b_hh, GRU_GATES), units.pad(h0), units.pad(zh)
    stored = _stored_dtype(op_dtype)
    plan = _plan_for(x_proj, units.padded, zh, stored, GRU_GATES)
    w_op = _pack_weight(w_hh, stored, plan)
    margs = _gru_mask_args(zh, x_proj)
    return units, plan, w_op, margs, _forward(x_proj, h0, w_op, b_hh, margs, plan, save_acts)


def _gru_mask_args(zh: torch.Tensor | None, like: torch.Tensor):
    """(z_h, stride_b, stride_g, has_zh, per_gate): vdrnn.fused's mask arguments less the LSTM's c-mask."""
    return _mask_args(zh, None, 1.0, _dummy(like))[:5]


class _FusedGRU(torch.autograd.Function):
    """Differentiable in x_proj, h0, w_hh, b_hh, and in the recurrent mask z_h where that is learned."""

    @staticmethod
    def forward(ctx, x_proj, h0, w_hh, b_hh, zh, op_dtype):
        ctx.dtypes = (x_proj.dtype, h0.dtype, w_hh.dtype, b_hh.dtype)
        # From here on the kernels' HP units; the results are sliced back to H on the way out.
        units, plan, w_op, margs, (y, hs, acts, hz) = _padded_forward(x_proj, h0, w_hh, b_hh, zh, op_dtype,
                                                                      save_acts=True)
        ctx.save_for_backward(w_op, w_hh, hs, hz, acts, margs[0])
        ctx.margs = margs[1:]
        ctx.plan = plan
        ctx.units = units
        ctx.op_dtype = op_dtype
        return units.unpad(y).contiguous(), units.unpad(hs[-1]).clone(memory_format=torch.contiguous_format)

    @staticmethod
    @once_differentiable  # no double backward through the kernels: raise rather than detach silently
    def backward(ctx, dy, dh_t):
        # The products below pick their dtypes explicitly; an autocast still active on the calling
        # thread (CPU backward runs there) must not recast them.
        with torch.autocast(dy.device.type, enabled=False):
            return _FusedGRU._backward(ctx, dy, dh_t)

    @staticmethod
    def _backward(ctx, dy, dh_t):
        _, bwd = _build_kernels()
        w_op, w_hh, hs, hz, acts, zh = ctx.saved_tensors
        szb, szg, has_zh, per_gate = ctx.margs
        plan, units = ctx.plan, ctx.units
        xp_dtype, h0_dtype, w_dtype, b_dtype = ctx.dtypes
        dy = units.pad(dy).contiguous()
        carry = units.pad(dh_t).float().clone()  # z_{t+1} * dL/dh_{t+1}, carried back in place; dL/dh_T to start
        steps, batch, hidden = dy.shape  # hidden: the kernels' HP units
        three_h = GRU_GATES * hidden
        dev = dy.device
        dg = torch.empty(steps, batch, SAVED * hidden, device=dev, dtype=torch.float32)
        op_dtype = ctx.op_dtype  # the forward's product dtype, as in vdrnn.fused's backward
        op_copy = op_dtype != torch.float32
        # The products' operand (da_r, da_z, da_n): a copy in the product dtype, or dg itself in fp32.
        dgo = torch.empty(steps, batch, three_h, device=dev, dtype=op_dtype) if op_copy else dg
        ws = torch.empty(GRU_GATES * plan.ks, batch, hidden, device=dev, dtype=torch.float32)
        counters = torch.zeros(plan.n_b * plan.n_j_b, device=dev, dtype=torch.int32)
        op = fused._tl_dtype(op_dtype)
        precision = _precision(op_dtype)
        for t in reversed(range(steps)):
            has_next = t < steps - 1
            grid = (plan.n_j_b, GRU_GATES * plan.ks if has_next else 1, plan.n_b)
            bwd[grid](
                t, dg, dgo, w_op, zh, dy, acts, hs, carry, ws, counters,
                batch, w_op.stride(0), szb, szg, H=hidden, HAS_NEXT=has_next, HAS_ZH=has_zh,
                PER_GATE=per_gate, OP_DTYPE=op, OP_COPY=op_copy, PRECISION=precision,
                BLOCK_B=plan.block_b, BLOCK_H=plan.block_h_b, BLOCK_K=fused.BLOCK_K,
                K_CHUNK=plan.chunk_b, KS=plan.ks, num_warps=fused.NUM_WARPS, num_stages=plan.stages_b,
            )
        # Whole-sequence products, one library call each. da = the gradients of the recurrent products.
        # Each step's operand, h_{t-1} masked, for t = 0..T-1, as the forward used it: [NZ, T*B, H].
        hz = hz[:, :steps].reshape(hz.shape[0], steps * batch, hidden).to(op_dtype)
        da = dgo[..., :three_h]
        if per_gate:  # untied: gate g saw h * z_h^g, so dW_g is a per-gate product
            da3 = da.unflatten(-1, (GRU_GATES, hidden))
            dw = torch.bmm(da3.flatten(0, 1).permute(1, 2, 0), hz)  # dW_g = da_g^T @ hz_g, on strided views
        else:
            dw = da.reshape(steps * batch, three_h).t() @ hz[0]
        dh0 = None
        if ctx.needs_input_grad[1]:  # not in training: h_0 is the state carried from the batch before, detached
            dh0 = initial_state_grad(da[0], w_op, w_hh, zh if has_zh else None, per_gate, units, op_dtype)
            dh0 = (dh0 + units.unpad(carry)).to(h0_dtype)  # carry: the part through z_0 * h_0
        # x_proj's n part is not scaled by r: its gradient is dn_pre, not da_n.
        d_xproj = torch.cat((dg[..., :2 * hidden], dg[..., three_h:]), dim=-1).unflatten(-1, (GRU_GATES, hidden))
        d_xproj = d_xproj.to(xp_dtype)
        db = units.unpad(dg[..., :three_h].sum((0, 1)), GRU_GATES).to(b_dtype)
        dw = units.unpad_weight(dw.reshape(three_h, hidden), GRU_GATES).to(w_dtype)
        dzh = None
        if ctx.needs_input_grad[4]:
            dzh = units.unpad(recurrent_mask_grad(da, w_op[:, :hidden].to(op_dtype), hs[:steps], zh, per_gate))
        return d_xproj, dh0, dw, db, dzh, None


def gru_fused(x: torch.Tensor, h0: torch.Tensor, params: tuple[torch.Tensor, ...],
              masks: LayerMasks) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for :func:`vdrnn.recurrent.gru_reference`: same arguments, same results."""
    if not kernels_or_fallback(x.device, "vdrnn.fused_gru"):
        return gru_reference(x, h0, params, masks)
    w_ih, w_hh, b_ih, b_hh = params
    x_proj = input_product(x, w_ih, b_ih, masks, GRU_GATES, _Units(w_hh.shape[1]).padded)
    zh = masks.h if masks.h is not None and (masks.h.dim() == 2 or masks.per_gate) else None
    if masks.h is not None and zh is None:
        raise ValueError("a [B, G, H] recurrent mask needs masks.per_gate=True")
    op_dtype = _op_dtype(x.device)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x_proj, h0, w_hh, b_hh)):
        return _FusedGRU.apply(x_proj, h0, w_hh, b_hh, zh, op_dtype)
    # Inference (e.g. MC dropout evaluation): the same kernels, nothing saved for backward.
    units, *_, (y, hs, _, _) = _padded_forward(x_proj, h0, w_hh, b_hh, zh, op_dtype, save_acts=False)
    return units.unpad(y), units.unpad(hs[-1])
