"""The fused GRU recurrence for masked layers: :func:`gru_fused`, the fast drop-in for ``gru_reference``.

Why: cuDNN's GRU cannot mask h_{t-1} (Gal, tied or one mask per gate), n_t (Semeniuta) or the update (zoneout),
so those layers run :func:`vdrnn.cells.gru.gru_reference`, a Python loop of ~10 small kernels per step. This is the
GRU twin of :mod:`vdrnn.kernels.lstm` (the same launch plan, split-K hand-off, packed W_hh, precision rules and
CUDA-graph safety, from :mod:`vdrnn.kernels.launch` and :mod:`vdrnn.kernels.common`; the Triton code is in
``gru_steps``).

What runs where (one layer, T steps, batch B, hidden H, gates r, z, n as torch.nn.GRU):

1. Input half, once for all steps: ``common.input_product`` (one GEMM; x masks and b_ih applied there).
2. Forward, ONE Triton kernel per step (``gru_steps.fwd_step``). A program owns hidden units j of all
   three gates and keeps the three recurrent products apart, because r multiplies n's product
   AFTER the product:
       a_g = sum_k (h_{t-1}[b, k] * z_h^g[b, k]) * W_hh[g*H + j, k] + b_hh[g*H + j]
       r = sigma(x_r + a_r)    z = sigma(x_z + a_z)    n = tanh(x_n + r * a_n)
       h~ = (1 - z) * n * m_t + z * h_{t-1}      (h_{t-1} undropped here, as gru_reference)
       h_t = d_t * h_{t-1} + (1 - d_t) * h~
   with Semeniuta's mask m_t (``masks.g``) and zoneout's d_t (``masks.zone_h``) where given (constexpr
   switches: without them the kernels are the plain cell's). It stores h_t, h_t * z_h (the next step's
   operand, as the LSTM's ``hz``: one copy tied, three untied, in the stored dtype: ``common.stored_dtype``),
   y_t and (r, z, n, a_n) for the backward, n un-masked: the backward reads m_t and d_t again.
3. Backward, ONE kernel per step in reverse (``gru_steps.bwd_step``), program owning units j:
       dh_t = dy_t + (z_{t+1} (1 - d_{t+1}) + d_{t+1}) * dh_{t+1} + sum_g z_h^g * (da_{t+1}^g @ W_g)
   then the cell's backward: da_r, da_z, da_n = dn_pre * r (the recurrent gradients, what the
   product of the step before needs) and dn_pre (n's input-half gradient, which r does not scale).
   The middle term, the part of dh_{t-1} that bypasses the product, is carried in place like the LSTM's dc.
   With bf16 products the kernel also stores (da_r, da_z, da_n) in bf16 for the next step's product.
4. After the loop: dW_hh as ONE GEMM over all T*B rows (per-gate for untied masks), db_hh, dh_0,
   and d x_proj = (da_r, da_z, dn_pre), which autograd carries on to x, W_ih and b_ih.

"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from vdrnn.dropout import LayerMasks
from vdrnn.kernels import common, launch

GRU_GATES = 3  # r, z, n
SAVED = 4  # per unit and step the backward needs r, z, n and a_n (n's recurrent product); the masks it reads again


def _steps():
    """The Triton step kernels (:mod:`vdrnn.kernels.gru_steps`), imported on first use: Triton reads
    TRITON_INTERPRET when it is first imported."""
    from vdrnn.kernels import gru_steps

    return gru_steps


def _forward(x_proj, h0, w_op, b_hh, margs, cargs, plan: launch.Plan, save_acts: bool):
    """Run the T forward steps of the plan's H units; x_proj [T, B, 3, H] is contiguous or gate-major (``gate_major``),
    cargs ``_cell_mask_args``'s. Returns y [T,B,H] (x_proj dtype), hs [T+1,B,H] fp32, acts [T,B,4H] or None, and hz
    [NZ, T+1, B, H]: each step's product operand, h_t masked (NZ = 3 copies for untied masks) in W's dtype."""
    fwd = _steps().fwd_step
    steps, batch = x_proj.shape[:2]
    hidden = plan.hidden
    three_h = GRU_GATES * hidden
    dev = x_proj.device
    zh, szb, szg, has_zh, per_gate = margs
    g, zone, cstrides, has_g, has_zone = cargs
    hs = torch.empty(steps + 1, batch, hidden, device=dev, dtype=torch.float32)
    hs[0].copy_(h0)
    hz = torch.empty(GRU_GATES if per_gate else 1, steps + 1, batch, hidden, device=dev, dtype=w_op.dtype)
    hz[:, 0].copy_(common.masked_h0(h0, zh if has_zh else None, per_gate))
    y = torch.empty(steps, batch, hidden, device=dev, dtype=x_proj.dtype)
    acts = torch.empty(steps, batch, SAVED * hidden, device=dev, dtype=torch.float32) if save_acts else hs
    if plan.hand_off_f:
        ws = torch.empty(plan.split_f, batch, three_h, device=dev, dtype=torch.float32)
        counters = torch.zeros(plan.n_b * plan.n_j_f, device=dev, dtype=torch.int32)
    else:
        ws = counters = hs
    op = common.tl_dtype(w_op.dtype)
    precision = common.precision(w_op.dtype)
    bias = b_hh.detach()
    gate_major = common.gate_major(x_proj)  # once, not at each of the T launches
    for t in range(steps):
        fwd[plan.grid_f](  # (unit blocks, K chunks, batch blocks): every gate of BLOCK_H units a program
            t, x_proj, w_op, bias, hz, zh, g, zone, hs, y, acts, ws, counters,
            batch, w_op.stride(0), szb, szg, x_proj.stride(2), hz.stride(0), *cstrides, H=hidden, HAS_ZH=has_zh,
            PER_GATE=per_gate, HAS_ZG=has_g, HAS_ZONE=has_zone, XP_GATE_MAJOR=gate_major, SAVE_ACTS=save_acts,
            OP_DTYPE=op, PRECISION=precision, BLOCK_B=plan.block_b, BLOCK_H=plan.block_h_f,
            BLOCK_K=plan.block_k_f, K_CHUNK=plan.chunk_f, SPLIT=plan.split_f,
            num_warps=launch.NUM_WARPS, num_stages=plan.stages_f, GDC=plan.gdc, launch_pdl=plan.gdc,
        )
    return y, hs, (acts if save_acts else None), hz


def _padded_forward(x_proj, h0, w_hh, b_hh, zh, g, zone, op_dtype: torch.dtype, save_acts: bool):
    """The T forward steps at the kernels' HP units (:class:`~vdrnn.kernels.launch.Units`): the one place that pads a layer's inputs, for
    training and inference alike. Returns (units, plan, w_op, margs, cargs, ``_forward``'s results), all at HP. x_proj
    [T, B, 3, HP] comes padded from ``common.input_product``."""
    units = launch.Units(h0.shape[-1])
    b_hh, h0, zh = units.pad(b_hh, GRU_GATES), units.pad(h0), units.pad(zh)
    stored = common.stored_dtype(op_dtype)
    plan = launch.plan_for(x_proj, units.padded, zh, stored, GRU_GATES)
    w_op = launch.pack_weight(w_hh, stored, plan)
    margs = _gru_mask_args(zh, x_proj)
    cargs = _cell_mask_args(g, zone, units, x_proj)
    return units, plan, w_op, margs, cargs, _forward(x_proj, h0, w_op, b_hh, margs, cargs, plan, save_acts)


def _gru_mask_args(zh: torch.Tensor | None, like: torch.Tensor):
    """(z_h, stride_b, stride_g, has_zh, per_gate): common.mask_args less the LSTM's c-mask."""
    return common.mask_args(zh, None, 1.0, common.dummy(like))[:5]


def _cell_mask_args(g: torch.Tensor | None, zone: torch.Tensor | None, units: launch.Units, like: torch.Tensor):
    """(g, zone, (g's time and batch strides, zone's), has_g, has_zone): Semeniuta's mask m_t and zoneout's d_t
    (:func:`~vdrnn.kernels.common.unit_mask`) for the kernels."""
    g_arg, *g_strides = common.unit_mask(g, units, like)
    zone_arg, *zone_strides = common.unit_mask(zone, units, like)
    return g_arg, zone_arg, (*g_strides, *zone_strides), g is not None, zone is not None


class _FusedGRU(torch.autograd.Function):
    """Differentiable in x_proj, h0, w_hh, b_hh, and in the recurrent mask z_h where that is learned."""

    @staticmethod
    def forward(ctx, x_proj, h0, w_hh, b_hh, zh, g, zone, op_dtype):
        ctx.dtypes = (x_proj.dtype, h0.dtype, w_hh.dtype, b_hh.dtype)
        # From here on the kernels' HP units; the results are sliced back to H on the way out.
        units, plan, w_op, margs, cargs, (y, hs, acts, hz) = _padded_forward(x_proj, h0, w_hh, b_hh, zh, g, zone,
                                                                             op_dtype, save_acts=True)
        ctx.save_for_backward(w_op, w_hh, hs, hz, acts, margs[0], *cargs[:2])
        # An unused output's gradient stays None (a classifier's y, a language model's carried h_T): the backward makes
        # its zeros at the kernels' units itself, as the LSTM's.
        ctx.set_materialize_grads(False)
        ctx.device_type = x_proj.device.type
        ctx.margs = margs[1:]
        ctx.cargs = cargs[2:]
        ctx.plan = plan
        ctx.units = units
        ctx.op_dtype = op_dtype
        return units.unpad(y).contiguous(), units.unpad(hs[-1]).clone(memory_format=torch.contiguous_format)

    @staticmethod
    @once_differentiable  # no double backward through the kernels: raise rather than detach silently
    def backward(ctx, dy, dh_t):
        # The products below pick their dtypes explicitly; an autocast still active on the calling
        # thread (CPU backward runs there) must not recast them.
        with torch.autocast(ctx.device_type, enabled=False):
            return _FusedGRU._backward(ctx, dy, dh_t)

    @staticmethod
    def _backward(ctx, dy, dh_t):
        bwd = _steps().bwd_step
        w_op, w_hh, hs, hz, acts, zh, g, zone = ctx.saved_tensors
        szb, szg, has_zh, per_gate = ctx.margs
        cstrides, has_g, has_zone = ctx.cargs
        plan, units = ctx.plan, ctx.units
        xp_dtype, h0_dtype, w_dtype, b_dtype = ctx.dtypes
        dy = units.padded_grad(dy, hs[1:])
        # (z_{t+1} (1 - d_{t+1}) + d_{t+1}) * dL/dh_{t+1}, carried back in place; dL/dh_T to start
        carry = units.padded_grad(dh_t, hs[0], writable=True)
        steps, batch, hidden = dy.shape  # hidden: the kernels' HP units
        three_h = GRU_GATES * hidden
        dev = dy.device
        dg = torch.empty(steps, batch, SAVED * hidden, device=dev, dtype=torch.float32)
        op_dtype = ctx.op_dtype  # the forward's product dtype, as in the LSTM's backward
        op_copy = op_dtype != torch.float32
        # The products' operand (da_r, da_z, da_n): a copy in the product dtype, or dg itself in fp32.
        dgo = torch.empty(steps, batch, three_h, device=dev, dtype=op_dtype) if op_copy else dg
        ws = torch.empty(GRU_GATES * plan.ks, batch, hidden, device=dev, dtype=torch.float32)
        counters = torch.zeros(plan.n_b * plan.n_j_b, device=dev, dtype=torch.int32)
        op = common.tl_dtype(op_dtype)
        precision = common.precision(op_dtype)
        for t in reversed(range(steps)):
            has_next = t < steps - 1
            grid = (plan.n_j_b, GRU_GATES * plan.ks if has_next else 1, plan.n_b)
            bwd[grid](
                t, dg, dgo, w_op, zh, g, zone, dy, acts, hs, carry, ws, counters,
                batch, w_op.stride(0), szb, szg, *cstrides, H=hidden, HAS_NEXT=has_next, HAS_ZH=has_zh,
                PER_GATE=per_gate, HAS_ZG=has_g, HAS_ZONE=has_zone, OP_DTYPE=op, OP_COPY=op_copy,
                PRECISION=precision,
                BLOCK_B=plan.block_b, BLOCK_H=plan.block_h_b, BLOCK_K=launch.BLOCK_K,
                K_CHUNK=plan.chunk_b, KS=plan.ks, GDC=plan.gdc,
                PREFETCH_W=min(launch.PREFETCH_B, plan.chunk_b // launch.BLOCK_K),
                num_warps=launch.NUM_WARPS, num_stages=plan.stages_b, launch_pdl=plan.gdc,
            )
        # Whole-sequence products, one library call each. da = the gradients of the recurrent products.
        # Each step's operand, h_{t-1} masked, for t = 0..T-1, as the forward used it: [NZ, T*B, H].
        hz = hz[:, :steps].reshape(hz.shape[0], steps * batch, hidden).to(op_dtype)
        da = dgo[..., :three_h]
        if per_gate:  # launch.untied: gate g saw h * z_h^g, so dW_g is a per-gate product
            da3 = da.unflatten(-1, (GRU_GATES, hidden))
            dw = torch.bmm(da3.flatten(0, 1).permute(1, 2, 0), hz)  # dW_g = da_g^T @ hz_g, on strided views
        else:
            dw = da.reshape(steps * batch, three_h).t() @ hz[0]
        dh0 = None
        if ctx.needs_input_grad[1]:  # not in training: h_0 is the state carried from the batch before, detached
            dh0 = common.initial_state_grad(da[0], w_op, w_hh, zh if has_zh else None, per_gate, units, op_dtype)
            dh0 = (dh0 + units.unpad(carry)).to(h0_dtype)  # carry: the part past the product (z_0 h_0, d_0 h_0)
        # x_proj's n part is not scaled by r: its gradient is dn_pre, not da_n.
        d_xproj = torch.cat((dg[..., :2 * hidden], dg[..., three_h:]), dim=-1).unflatten(-1, (GRU_GATES, hidden))
        d_xproj = d_xproj.to(xp_dtype)
        db = units.unpad(dg[..., :three_h].sum((0, 1)), GRU_GATES).to(b_dtype)
        dw = units.unpad_weight(dw.reshape(three_h, hidden), GRU_GATES).to(w_dtype)
        dzh = None
        if ctx.needs_input_grad[4]:
            dzh = units.unpad(common.recurrent_mask_grad(da, w_op[:, :hidden].to(op_dtype), hs[:steps], zh, per_gate))
        return d_xproj, dh0, dw, db, dzh, None, None, None


@torch.compiler.disable  # as lstm_fused: torch.compile runs the recurrence around a graph break
def gru_fused(x: torch.Tensor, h0: torch.Tensor, params: tuple[torch.Tensor, ...],
              masks: LayerMasks) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for :func:`vdrnn.cells.gru.gru_reference`: same arguments, same results (within the products'
    precision), on CUDA tensors or in Triton's interpreter. ``masks.g`` and ``masks.zone_h`` are data, not
    differentiated."""
    w_ih, w_hh, b_ih, b_hh = params
    x_proj = common.input_product(x, w_ih, b_ih, masks, GRU_GATES, launch.Units(w_hh.shape[1]).padded)
    zh = masks.h if masks.h is not None and (masks.h.dim() == 2 or masks.per_gate) else None
    if masks.h is not None and zh is None:
        raise ValueError("a [B, G, H] recurrent mask needs masks.per_gate=True")
    if masks.zone_h is not None and masks.zone_h.dim() != 3:
        raise ValueError("zoneout's masks.zone_h is [T, B, H], one d_t a step")
    op_dtype = common.recurrent_product_dtype(x.device)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x_proj, h0, w_hh, b_hh)):
        return _FusedGRU.apply(x_proj, h0, w_hh, b_hh, zh, masks.g, masks.zone_h, op_dtype)
    # Inference (e.g. MC dropout evaluation): the same kernels, nothing saved for backward.
    units, *_, (y, hs, _, _) = _padded_forward(x_proj, h0, w_hh, b_hh, zh, masks.g, masks.zone_h, op_dtype,
                                               save_acts=False)
    return units.unpad(y), units.unpad(hs[-1])
