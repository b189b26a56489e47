"""What the LSTM's and the GRU's fused recurrences share on the host: product dtypes, the masks as kernel
arguments, the input product, and the gradients computed outside the step kernels."""

from __future__ import annotations

import torch

from vdrnn.dropout import LayerMasks
from vdrnn.kernels import gemm
from vdrnn.kernels.launch import Units, untied


def tl_dtype(dtype: torch.dtype):
    """Triton's name for a product dtype (imported here: Triton reads TRITON_INTERPRET when first imported)."""
    import triton.language as tl

    return {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[dtype]


def recurrent_product_dtype(device: torch.device) -> torch.dtype:
    """The dtype of the recurrent product: autocast's if it is on (as F.linear in the reference)."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return torch.float32


def precision(op_dtype: torch.dtype) -> str:
    # Follow torch's own switch for fp32 products, so `allow_tf32 = False` gives IEEE fp32 here too.
    if op_dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return "ieee"
    return "tf32"


def stored_dtype(op_dtype: torch.dtype) -> torch.dtype:
    """The dtype W_hh and the forward's operands h_t * z_h are stored in for products in ``op_dtype``.

    TF32 products keep 10 mantissa bits of each fp32 operand, and fp16 holds exactly 10: stored in fp16, the operands
    lose nothing a TF32 product keeps, in half the bytes that every step streams. Only the range differs: values
    under 6.1e-5 (a weight that small, or a masked h_t) keep an absolute error under 3e-8, and none can exceed 65,504
    (no weight of a trained recurrence comes near). IEEE fp32 (``allow_tf32 = False``) and bf16 store their own dtype.
    """
    if op_dtype == torch.float32 and precision(op_dtype) == "tf32":
        return torch.float16
    return op_dtype


def mask_args(zh: torch.Tensor | None, zc: torch.Tensor | None, c_scale: float, dummy: torch.Tensor):
    """(z_h, stride_b, stride_g, has_zh, per_gate, z_c, has_zc, c_scale) for the kernels."""
    per_gate = untied(zh)
    if zh is not None:
        zh = zh.float().contiguous()
        # A mask shared by the batch ([1, H] or [1, G, H], drawn per="batch") is read with a zero batch
        # stride, so that every row of the batch reads that one row.
        stride_b = 0 if zh.shape[0] == 1 else zh.stride(0)
        stride_g = zh.stride(1) if per_gate else 0
    else:
        zh, stride_b, stride_g = dummy, 0, 0
    has_zc = zc is not None
    zc = zc.float().contiguous() if has_zc else dummy
    return zh, stride_b, stride_g, zh is not dummy, per_gate, zc, has_zc, float(c_scale)


def unit_mask(mask: torch.Tensor | None, units: Units, like: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """A mask on a cell's units that the kernels read at every step, [T, B, H] (one a step: Semeniuta's per-step mask,
    zoneout's draws) or [B, H] (fixed over time), as kernel arguments: (the mask at HP units, time stride, batch
    stride), or (a dummy, 0, 0) for None. A broadcast dimension (one of size 1, or a
    zero stride: zoneout's expectation is one row expanded) is read through a zero stride and padded as that one row,
    never copied out to T * B rows."""
    if mask is None:
        return dummy(like), 0, 0
    full = (*like.shape[:2], units.hidden)  # [T, B, H]
    if mask.dim() not in (2, 3) or mask.shape[-1] != units.hidden or any(
            size not in (1, want) for size, want in zip(mask.shape, full[-mask.dim():], strict=True)):
        raise ValueError(f"a mask on the units must be [T, B, H] or [B, H], {full} here, not {tuple(mask.shape)}")
    m = mask if mask.dim() == 3 else mask.unsqueeze(0)
    m = m[tuple(slice(0, 1) if m.shape[i] == 1 or m.stride(i) == 0 else slice(None) for i in range(2))]
    m = units.pad(m.float()).contiguous()  # copies only what is padded or not unit-contiguous
    return m, *(0 if m.shape[i] == 1 else m.stride(i) for i in range(2))


def dummy(like: torch.Tensor) -> torch.Tensor:
    """A valid pointer for kernel arguments that a constexpr switch leaves unused."""
    return torch.empty(1, device=like.device, dtype=torch.float32)


def masked_h0(h0: torch.Tensor, zh: torch.Tensor | None, per_gate: bool) -> torch.Tensor:
    """h_0 as the first step's product operand: [NZ, B, H], masked (per gate for untied masks)."""
    if zh is None:
        return h0.unsqueeze(0)
    if per_gate:
        return (h0.unsqueeze(1) * zh).transpose(0, 1)
    return (h0 * zh).unsqueeze(0)


def input_product(x: torch.Tensor, w_ih: torch.Tensor, b_ih: torch.Tensor | None, masks: LayerMasks, gates: int,
                  units: int) -> torch.Tensor:
    """W_ih (x * z_x) + b_ih for all steps and gates at once, as :func:`vdrnn.cells.common.masked_linear`, through
    aligned products (:mod:`vdrnn.kernels.gemm`): [T, B, G, units], each gate's H values followed by zeros for the
    kernels' dead units (:class:`~vdrnn.kernels.launch.Units`), written so by the product (zero rows of W_ih) rather than
    copied after it, a copy that would cost a tenth of an MC evaluation. With untied masks it is a view of gate-major
    storage, which the kernels read through its strides. ``b_ih`` None: no bias (the LSTM adds it in its kernels)."""
    if masks.x is not None and masks.per_gate:
        return gemm.per_gate_linear(x, w_ih, b_ih, masks.x, units)
    v = x if masks.x is None else x * masks.x.to(x.dtype)
    return gemm.linear(v, w_ih, b_ih, gates, units).unflatten(-1, (gates, units))


def gate_major(x_proj: torch.Tensor) -> bool:
    """Is x_proj [T, B, G, H] a view of gate-major storage [G, T, B, H] (``gemm.per_gate_linear``'s), rather than
    contiguous? The kernels address the two layouts apart, the contiguous one with constant strides, which the
    compiler addresses faster."""
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
                       per_gate: bool, units: Units, op_dtype: torch.dtype) -> torch.Tensor:
    """dL/dh_0 through the first step's recurrent product a_0 = (h_0 * z_h) W^T: (dL/da_0 W) * z_h, gate by gate with
    per-gate masks, at the layer's H units. ``d_first`` [B, G*HP] is dL/da_0 at the kernels' units, ``w_op`` the packed
    W_hh, ``w_hh`` the parameter [G*H, H], ``zh`` z_h at HP units or None.

    The product runs in the kernels' dtype: on the packed W where it is stored in that dtype (a view), else on the fp32
    parameter, W being stored in fp16 for TF32 products (``stored_dtype``). Converting the packed copy to fp32 would
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
