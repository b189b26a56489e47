"""The fused LSTM recurrence for masked layers: :func:`lstm_fused`, the fast drop-in for ``lstm_reference``.

One layer, T steps, batch B, hidden H:

1. the input half once for all steps, ``common.input_product`` (one product; x's masks applied there, b_ih added with
   b_hh in step 2);
2. forward, one launch of ``lstm_steps.fwd_step`` per step;
3. backward, one launch of ``lstm_steps.bwd_step`` per step in reverse;
4. after the loop, the products that need no loop: dW_hh as ONE product over all T*B rows (dgates^T @ hz, the operands
   the forward used; one per gate, batched, for untied masks), db = sum of dgates (b = b_ih + b_hh: autograd hands it to
   both), d x_proj = dgates (autograd carries it on to x and W_ih), dh_0 from one more small product.

The kernels run H units as HP, H rounded up to 16 (:class:`~vdrnn.kernels.launch.Units`), and read W_hh packed once
per forward into the stored dtype (:func:`~vdrnn.kernels.launch.pack_weight`), a copy the backward reuses. No host
sync and no allocation whose size depends on data: a whole training step with this layer can be captured in a CUDA
graph (:mod:`vdrnn.kernels.graph`).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from vdrnn.dropout import LayerMasks
from vdrnn.kernels import common, launch

LSTM_GATES = 4  # i, f, g, o


def _steps():
    """The Triton step kernels (:mod:`vdrnn.kernels.lstm_steps`), imported on first use: Triton reads
    TRITON_INTERPRET when it is first imported."""
    from vdrnn.kernels import lstm_steps

    return lstm_steps


def _forward(x_proj, h0, c0, w_op, bias, margs, step_margs, plan: launch.Plan, save_acts: bool):
    """Run the T forward steps of the plan's H units; x_proj [T, B, 4, H] is contiguous or gate-major (``gate_major``).
    Returns y [T,B,H] (x_proj dtype), h_T [B,H] and cs [T+1,B,H] fp32, acts or None, and hz [NZ, T+1, B, H]: each
    step's product operand, h_t masked (NZ = 4 copies for untied masks) in W's dtype."""
    fwd = _steps().fwd_step
    steps, batch = x_proj.shape[:2]
    hidden = plan.hidden
    four_h = LSTM_GATES * hidden
    dev = x_proj.device
    zh, szb, szg, has_zh, per_gate, zc, has_zc, c_scale = margs
    (zg, sgt, sgb, has_g), (zone_c, szct, szcb, has_zone_c), (zone_h, szht, szhb, has_zone_h) = step_margs
    # h_T; with zoneout on h also h_{t-1} on entry to step t, so it starts as h_0.
    h_last = h0.float().clone() if has_zone_h else torch.empty(batch, hidden, device=dev, dtype=torch.float32)
    cs = torch.empty(steps + 1, batch, hidden, device=dev, dtype=torch.float32)
    cs[0].copy_(c0)
    # Gate-major, so that each gate's operands for the weight gradient are one [T*B, H] matrix.
    hz = torch.empty(LSTM_GATES if per_gate else 1, steps + 1, batch, hidden, device=dev, dtype=w_op.dtype)
    hz[:, 0].copy_(common.masked_h0(h0, zh if has_zh else None, per_gate))
    y = torch.empty(steps, batch, hidden, device=dev, dtype=x_proj.dtype)
    acts = torch.empty(steps, batch, four_h, device=dev, dtype=torch.float32) if save_acts else cs
    if plan.hand_off_f:
        ws = torch.empty(plan.split_f, batch, four_h, device=dev, dtype=torch.float32)
        counters = torch.zeros(plan.n_b * plan.n_j_f, device=dev, dtype=torch.int32)
    else:
        ws = counters = cs
    op = common.tl_dtype(w_op.dtype)
    precision = common.precision(w_op.dtype)
    bias = bias.detach()
    gate_major = common.gate_major(x_proj)  # once, not at each of the T launches
    for t in range(steps):
        fwd[plan.grid_f](
            t, x_proj, w_op, bias, hz, zh, zc, c_scale, zg, zone_c, zone_h, h_last, cs, y, acts, ws, counters,
            batch, w_op.stride(0), szb, szg, x_proj.stride(2), hz.stride(0) if per_gate else 0,
            sgt, sgb, szct, szcb, szht, szhb, H=hidden,
            HAS_ZH=has_zh, PER_GATE=per_gate, HAS_ZC=has_zc, XP_GATE_MAJOR=gate_major,
            HAS_G=has_g, HAS_ZONE_C=has_zone_c, HAS_ZONE_H=has_zone_h, SAVE_ACTS=save_acts,
            OP_DTYPE=op, PRECISION=precision, BLOCK_B=plan.block_b, BLOCK_H=plan.block_h_f, BLOCK_K=plan.block_k_f,
            K_CHUNK=plan.chunk_f, SPLIT=plan.split_f, ONE_GATE=plan.one_gate, num_warps=launch.NUM_WARPS,
            num_stages=plan.stages_f, GDC=plan.gdc, launch_pdl=plan.gdc,
            PREFETCH_W=min(launch.PREFETCH_F, plan.chunk_f // plan.block_k_f),
        )
    return y, h_last, cs, (acts if save_acts else None), hz


def _padded_forward(x_proj, h0, c0, w_hh, w_mask, bias, zh, zc, c_scale: float, step_masks, op_dtype: torch.dtype,
                    save_acts: bool):
    """The T forward steps at the kernels' HP units (:class:`Units`): the one place that pads a layer's inputs, for
    training and inference alike. ``w_mask``: weight drop's mask on W_hh, or None; ``step_masks`` are (g, zone_c,
    zone_h), each None or a mask read at every step.
    Returns (units, plan, w_op, margs, step_margs, h0 padded, ``_forward``'s results), all at HP. x_proj
    [T, B, 4, HP] comes padded from ``input_product``."""
    units = launch.Units(h0.shape[-1])
    bias, h0, c0, zh, zc = units.pad(bias, LSTM_GATES), units.pad(h0), units.pad(c0), units.pad(zh), units.pad(zc)
    stored = common.stored_dtype(op_dtype)
    plan = launch.plan_for(x_proj, units.padded, zh, stored, LSTM_GATES, one_gate_kernel=True)
    w_op = launch.pack_weight(w_hh, stored, plan, w_mask)
    dummy = common.dummy(x_proj)
    margs = common.mask_args(zh, zc, c_scale, dummy)
    # Dead units get d = 0 and m = 0: they take their new value, zero, as without these masks.
    step_margs = tuple((*common.unit_mask(m, units, x_proj), m is not None) for m in step_masks)
    return (units, plan, w_op, margs, step_margs, h0,
            _forward(x_proj, h0, c0, w_op, bias, margs, step_margs, plan, save_acts))


class _FusedLSTM(torch.autograd.Function):
    """Differentiable in x_proj, h0, c0, w_hh (the raw parameter where weight drop's mask w_mask multiplies it), the
    bias (b_ih + b_hh), and in the recurrent mask z_h where that is learned."""

    @staticmethod
    def forward(ctx, x_proj, h0, c0, w_hh, w_mask, bias, zh, zc, c_scale, zg, zone_c, zone_h, op_dtype):
        ctx.dtypes = (x_proj.dtype, h0.dtype, c0.dtype, w_hh.dtype, bias.dtype)
        # From here on the kernels' HP units; the results are sliced back to H on the way out.
        units, plan, w_op, margs, step_margs, h0, (y, h_last, cs, acts, hz) = _padded_forward(
            x_proj, h0, c0, w_hh, w_mask, bias, zh, zc, c_scale, (zg, zone_c, zone_h), op_dtype, save_acts=True)
        ctx.save_for_backward(w_op, w_hh, hz, cs, acts, margs[0], margs[5], h0, y, *(m[0] for m in step_margs))
        ctx.w_mask = w_mask  # a WeightMask (its tensors made for this minibatch, neither inputs nor outputs) or None
        # An unused output's gradient stays None (a training step's h_T and c_T, carried on detached): the backward
        # makes its zeros at the kernels' units itself, rather than autograd's at H units padded and copied.
        ctx.set_materialize_grads(False)
        ctx.margs = margs[1:5] + margs[6:]
        ctx.step_strides = tuple(m[1:] for m in step_margs)
        ctx.plan = plan
        ctx.units = units
        ctx.device_type = x_proj.device.type
        ctx.op_dtype = op_dtype
        return (units.unpad(y).contiguous(), units.unpad(h_last).contiguous(),
                units.unpad(cs[-1]).clone(memory_format=torch.contiguous_format))

    @staticmethod
    @once_differentiable  # no double backward through the kernels: raise rather than detach silently
    def backward(ctx, dy, dh_t, dc_t):
        # The products below pick their dtypes explicitly; an autocast still active on the calling
        # thread (CPU backward runs there) must not recast them.
        with torch.autocast(ctx.device_type, enabled=False):
            return _FusedLSTM._backward(ctx, dy, dh_t, dc_t)

    @staticmethod
    def _backward(ctx, dy, dh_t, dc_t):
        bwd = _steps().bwd_step
        w_op, w_hh, hz, cs, acts, zh, zc, h0, y, zg, zone_c, zone_h = ctx.saved_tensors
        w_mask = ctx.w_mask
        szb, szg, has_zh, per_gate, has_zc, c_scale = ctx.margs
        (sgt, sgb, has_g), (szct, szcb, has_zone_c), (szht, szhb, has_zone_h) = ctx.step_strides
        plan, units = ctx.plan, ctx.units
        xp_dtype, h0_dtype, c0_dtype, w_dtype, b_dtype = ctx.dtypes
        steps, batch, hidden = y.shape  # hidden: the kernels' HP units
        dev = y.device
        dy, dh_t = units.padded_grad(dy, y), units.padded_grad(dh_t, y[0])
        dc = units.padded_grad(dc_t, y[0], writable=True)  # dL/dc_t, carried back in place by the kernels
        dgates = torch.empty(steps, batch, LSTM_GATES * hidden, device=dev, dtype=torch.float32)
        # The backward's products run in the forward's product dtype (TF32 on fp32 operands, or bf16), W converted
        # to it as it is loaded where it is stored in fp16 (``stored_dtype``); gradients are never stored in fp16.
        op_dtype = ctx.op_dtype
        op_copy = op_dtype != torch.float32
        dg_op = torch.empty_like(dgates, dtype=op_dtype) if op_copy else dgates  # the products' operand
        ws = torch.empty(LSTM_GATES * plan.ks, batch, hidden, device=dev, dtype=torch.float32)
        counters = torch.zeros(plan.n_b * plan.n_j_b, device=dev, dtype=torch.int32)
        # Zoneout on h: the gradient that reaches h_{t-1} around step t's update, carried back in place.
        carry = torch.zeros(batch, hidden, device=dev, dtype=torch.float32) if has_zone_h else dc
        op = common.tl_dtype(op_dtype)
        precision = common.precision(op_dtype)
        for t in reversed(range(steps)):
            has_next = t < steps - 1
            grid = (plan.n_j_b, LSTM_GATES * plan.ks if has_next else 1, plan.n_b)
            bwd[grid](
                t, dgates, dg_op, w_op, zh, zc, c_scale, zg, zone_c, zone_h, dy, dh_t, acts, cs, dc, carry, ws,
                counters, batch, w_op.stride(0), szb, szg, sgt, sgb, szct, szcb, szht, szhb, H=hidden,
                HAS_NEXT=has_next, HAS_ZH=has_zh, PER_GATE=per_gate, HAS_ZC=has_zc, HAS_G=has_g,
                HAS_ZONE_C=has_zone_c, HAS_ZONE_H=has_zone_h, OP_DTYPE=op, OP_COPY=op_copy,
                PRECISION=precision, BLOCK_B=plan.block_b, BLOCK_H=plan.block_h_b, BLOCK_K=launch.BLOCK_K,
                K_CHUNK=plan.chunk_b, KS=plan.ks, GDC=plan.gdc,
                PREFETCH_W=min(launch.PREFETCH_B, plan.chunk_b // launch.BLOCK_K),
                num_warps=launch.NUM_WARPS, num_stages=plan.stages_b, launch_pdl=plan.gdc,
            )
        # Whole-sequence products, one library call each (no loop over t).
        # Each step's operand, h_{t-1} masked, for t = 0..T-1, as the forward used it: [NZ, T*B, H].
        hz = hz[:, :steps].reshape(hz.shape[0], steps * batch, hidden).to(op_dtype)
        if per_gate:  # untied: gate g saw h * z_h^g, so dW_g is a per-gate product
            # One batched GEMM over the gates, dW_g = dgates_g^T @ hz_g, on strided views (no copies).
            dw = torch.bmm(dg_op.view(steps * batch, LSTM_GATES, hidden).permute(1, 2, 0), hz)
        else:
            dw = dg_op.view(steps * batch, -1).t() @ hz[0]
        dh0 = None
        if ctx.needs_input_grad[1]:  # not in training: h_0 is the state carried from the batch before, detached
            w_used = w_hh if w_mask is None else w_mask.apply(w_hh)  # the W_hh the forward ran: weight-dropped
            dh0 = common.initial_state_grad(dg_op[0], w_op, w_used, zh if has_zh else None, per_gate, units, op_dtype)
            if has_zone_h:  # what reached h_0 around the first step's update
                dh0 = dh0 + units.unpad(carry)
            dh0 = dh0.to(h0_dtype)
        # x_proj's gradient is dgates, as a [T, B, 4, HP] view (x_proj may be gate-major storage: the product that
        # made it takes the gradient through its strides), in x_proj's dtype: the bf16 copy if the kernels made one.
        d_xproj = (dg_op if dg_op.dtype == xp_dtype else dgates).view(steps, batch, LSTM_GATES, hidden).to(xp_dtype)
        db = units.unpad(dgates.sum((0, 1)), LSTM_GATES).to(b_dtype)
        # The raw W_hh's gradient: the dropped W_hh's times the mask (zero where an entry was dropped).
        dw = units.unpad_weight(dw.reshape(LSTM_GATES * hidden, hidden), LSTM_GATES, w_mask).to(w_dtype)
        dzh = None
        if ctx.needs_input_grad[6]:
            h_prev = torch.cat((h0.unsqueeze(0).to(y.dtype), y[:-1]))
            dzh = units.unpad(common.recurrent_mask_grad(dg_op, w_op[:, :hidden].to(op_dtype), h_prev, zh, per_gate))
        return (d_xproj, dh0, units.unpad(dc).to(c0_dtype), dw, None, db, dzh, None, None, None, None, None, None)


# torch.compile runs the fused recurrence as it is, around a graph break: its 2T step launches, each with a plan made
# on the host, are no graph for dynamo to trace (a CUDA graph holds them instead, vdrnn.kernels.graph).
@torch.compiler.disable
def lstm_fused(
    x: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor],
    params: tuple[torch.Tensor, ...],
    masks: LayerMasks,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Drop-in for :func:`vdrnn.cells.lstm.lstm_reference`: same arguments, same results (within the products'
    precision), on CUDA tensors or in Triton's interpreter. Weight drop's ``masks.w_hh`` multiplies the raw W_hh of
    ``params`` here, as the kernels' copy of it is packed (the reference takes W_hh already dropped)."""
    w_ih, w_hh, b_ih, b_hh = params
    # b_ih joins b_hh in the kernels' sum (every LSTM gate adds both): the input product runs without a bias to
    # broadcast into its output, and the kernels' db serves both biases (no second sum over T*B rows).
    x_proj = common.input_product(x, w_ih, None, masks, LSTM_GATES, launch.Units(w_hh.shape[1]).padded)
    bias = b_ih + b_hh
    h0, c0 = state
    zh = masks.h if masks.h is not None and (masks.h.dim() == 2 or masks.per_gate) else None
    if masks.h is not None and zh is None:
        raise ValueError("a [B, G, H] recurrent mask needs masks.per_gate=True")
    op_dtype = common.recurrent_product_dtype(x.device)
    tensors = (x_proj, h0, c0, w_hh, bias)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        y, h_t, c_t = _FusedLSTM.apply(x_proj, h0, c0, w_hh, masks.w_hh, bias, zh, masks.c, masks.c_scale, masks.g,
                                       masks.zone_c, masks.zone_h, op_dtype)
        return y, (h_t, c_t)
    # Inference (e.g. MC dropout evaluation): the same kernels, nothing saved for backward.
    units, *_, (y, h_last, cs, _, _) = _padded_forward(x_proj, h0, c0, w_hh, masks.w_hh, bias, zh, masks.c,
                                                       masks.c_scale, (masks.g, masks.zone_c, masks.zone_h),
                                                       op_dtype, save_acts=False)
    return units.unpad(y), (units.unpad(h_last), units.unpad(cs[-1]))
