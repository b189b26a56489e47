"""Products that cuBLAS runs on its fast kernels whatever the layer sizes.

cuBLAS takes its fast Hopper GEMM kernels only when the operands' dimensions are whole multiples of 16 bytes. The
paper's large model has 1500 units: a row of 1500 bf16 values is 3,000 bytes, and every product that reduces over,
or writes, such rows falls back to older kernels about 3x slower; the medium model's 650 fp32 values (2,600 bytes) are
misaligned the same way.

So the fast path appends zeros to such a dimension up to the next multiple of 16 bytes: to both operands where it
is the reduced one, to the weight's rows where it is the output's. Zeros add nothing to any sum, so the product is
the same; padded columns of a result are zeros that are sliced off, and autograd slices the padding off the
gradients. Only on CUDA (``ALIGNED_DEVICES``), where the kernels differ.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

ALIGNED_DEVICES = ("cuda",)  # tests add "cpu" to run the padded products where they can compare them
ROW_BYTES = 16


def product_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype a product of ``t`` runs in: autocast's where autocast is on, else ``t``'s own."""
    if torch.is_autocast_enabled(t.device.type):
        return torch.get_autocast_dtype(t.device.type)
    return t.dtype


def padding(size: int, dtype: torch.dtype, device: torch.device) -> int:
    """How many zeros make ``size`` values of ``dtype`` a whole number of 16 bytes (0 off ``ALIGNED_DEVICES``)."""
    if device.type not in ALIGNED_DEVICES:
        return 0
    return -size % max(1, ROW_BYTES // dtype.itemsize)


def pad_last(t: torch.Tensor, pad: int) -> torch.Tensor:
    """``t`` with ``pad`` zeros appended to its last dimension."""
    return F.pad(t, (0, pad)) if pad else t


def pads_output(rows: int, weight: torch.Tensor, dtype: torch.dtype, pad_in: int) -> bool:
    """Should ``linear`` pad an output that gains dead units after the product, rather than the weight's rows before
    it? Where nothing else copies the weight (its own dtype, inputs aligned) and the output has fewer rows than the
    weight has columns (a training step's 700 tokens against 1500 inputs): that copy is the smaller, and the weight's
    gradient comes out of its product whole instead of sliced from a padded one and copied. At MC evaluation's 35,000
    rows the weight's padding is the smaller copy."""
    return not pad_in and dtype == weight.dtype and rows < weight.shape[1]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, gates: int = 1,
           units: int | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, its dimensions zero-padded where cuBLAS needs it.

    The operands are cast to the product's dtype before they are padded, so that the padding copies half as many
    bytes under bf16 autocast (autocast would cast them anyway). The same padding aligns the backward's two
    products: dx has the padded width, dW the padded rows and row length.

    With ``units``, the weight's rows are ``gates`` blocks of H (a cell's gates) and each block is padded to ``units``
    rows: the result is [..., gates * units], each gate's H values followed by zeros, as the fused kernels read
    x_proj (their dead units), written so by the product itself rather than copied after it.
    """
    dtype = product_dtype(weight)
    pad_in = padding(weight.shape[1], dtype, x.device)
    gates = gates if units is not None else 1  # without units, the output's whole width is padded as one block
    rows = weight.shape[0] // gates
    pad_out = padding(rows, dtype, x.device) if units is None else units - rows
    if not pad_in and not pad_out:
        return F.linear(x, weight, bias)
    if units is not None and pads_output(x.numel() // x.shape[-1], weight, dtype, pad_in):
        y = F.linear(x, weight, bias).unflatten(-1, (gates, rows))
        return F.pad(y, (0, pad_out)).flatten(-2)
    weight = F.pad(weight.to(dtype).view(gates, rows, -1), (0, pad_in, 0, pad_out)).flatten(0, 1)
    if bias is not None:
        bias = pad_last(bias.view(gates, rows), pad_out).flatten()
    y = F.linear(pad_last(x.to(dtype), pad_in), weight, bias)
    return y[..., :y.shape[-1] - pad_out] if pad_out and units is None else y


def per_gate_linear(v: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, mask: torch.Tensor,
                    units: int) -> torch.Tensor:
    """Gal's untied input product, W_g (v * z_g) + b_g for every gate g: v [..., B, D], weight [G*H, D], mask [B, G, D]
    -> [..., B, G, units], each gate's H outputs followed by ``units - H`` zeros (the fused kernels' dead units).

    The result is a view of gate-major storage [G, ..., B, units], which the kernels read through its strides; how it
    is made, and why, is :class:`_PerGateLinear`'s.
    """
    out = _PerGateLinear.apply(v, weight, bias, mask, units)  # [G, N, units], N = v's rows
    return out.unflatten(1, v.shape[:-1]).movedim(0, -2)


class _PerGateLinear(torch.autograd.Function):
    """The gates' products as one batched GEMM over gate-major operands, differentiable in v, W, b and the mask (a
    learned one: Kingma's adaptive Gaussian dropout).

    Forward: the masked copies of v are written gate-major, [G, N, D'] (D zero-padded like ``linear``'s), and rounded
    to the product's dtype once, as F.linear under autocast rounds the reference's. The GEMM writes its rows straight
    into the [G, N, units] result (cuBLAS takes its row stride): each gate's H outputs where H values are whole 16-byte
    rows (fp32 at 1500 units), so that neither the weight nor the output is padded by a copy and only the dead columns
    are zeroed; else all ``units``, the weight's rows zero-padded, because a misaligned N or K sends cuBLAS to its slow
    kernels (about half the speed).

    Backward, with d the output's gradient in the columns the GEMM wrote:
    - dv = sum_g z_g * (d_g W_g), the gates' gradients summed in fp32 as they are multiplied by their masks;
    - dW_g = d_g^T (v * z_g), written [G, H, D'], which is W's own layout [G*H, D]: autograd's bmm backward made
      it [G, D', H] and a 36 MB transposing copy per 1500-unit layer to give it back;
    - db_g = sum over rows of d_g; dz_g = sum over time of (d_g W_g) * v, when the mask is learned.
    All read the output's gradient through its strides (the kernels hand it over [T, B, G, units], no copy).
    """

    @staticmethod
    def forward(ctx, v, weight, bias, mask, units):
        gates = mask.shape[-2]
        hidden, inputs = weight.shape[0] // gates, weight.shape[1]
        dtype = product_dtype(weight)
        pad_in = padding(inputs, dtype, v.device)
        # [G, B, D'], contiguous (a few KB), so that v * z is laid out [G, ..., B, D'] and flattens without a copy.
        z = pad_last(mask.movedim(-2, 0), pad_in).contiguous()
        z = z.view(gates, *[1] * (v.dim() - 2), *z.shape[1:])  # broadcast over v's leading (time) dimensions
        v_padded = pad_last(v, pad_in)
        masked = (v_padded.unsqueeze(0) * z).to(dtype).flatten(1, -2)  # [G, N, D']
        rows = units if padding(hidden, dtype, v.device) else hidden  # the GEMM's output rows per gate
        w = weight.to(dtype).view(gates, hidden, inputs)
        if pad_in or rows > hidden:
            w = F.pad(w, (0, pad_in, 0, rows - hidden))  # [G, rows, D']
        out = torch.empty(gates, masked.shape[1], units, device=v.device, dtype=dtype)
        out[..., rows:].zero_()
        with torch.autocast(v.device.type, enabled=False):  # the operands are in the product's dtype already
            if bias is None:
                torch.bmm(masked, w.transpose(1, 2), out=out[..., :rows])
            else:
                b = pad_last(bias.view(gates, 1, hidden), rows - hidden).to(dtype)
                torch.baddbmm(b, masked, w.transpose(1, 2), out=out[..., :rows])
        ctx.save_for_backward(masked, w, z, v_padded if ctx.needs_input_grad[3] else None)
        ctx.shapes = (v.shape, v.dtype, hidden, inputs, weight.dtype, None if bias is None else bias.dtype,
                      mask.shape, mask.dtype)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        masked, w, z, v_padded = ctx.saved_tensors
        v_shape, v_dtype, hidden, inputs, w_dtype, b_dtype, mask_shape, mask_dtype = ctx.shapes
        gates, rows = w.shape[:2]
        d = d_out[..., :rows]  # the columns the GEMM wrote; the rest are dead units
        dv = dw = db = dmask = None
        with torch.autocast(d_out.device.type, enabled=False):  # a CPU backward runs on the caller's thread
            if ctx.needs_input_grad[0] or ctx.needs_input_grad[3]:
                d_masked = torch.bmm(d, w).view(gates, *v_shape[:-1], -1)  # [G, ..., B, D']
                if ctx.needs_input_grad[0]:
                    dv = (d_masked * z).sum(0)[..., :inputs].to(v_dtype)
                if ctx.needs_input_grad[3]:
                    dz = (d_masked * v_padded).sum_to_size(z.shape).flatten(1, -2)  # [G, B, D']
                    dmask = dz[..., :inputs].movedim(0, -2).sum_to_size(mask_shape).to(mask_dtype)
            if ctx.needs_input_grad[1]:
                dw = torch.bmm(d.transpose(1, 2), masked)[:, :hidden, :inputs].reshape(gates * hidden, inputs)
                dw = dw.to(w_dtype)
            if ctx.needs_input_grad[2]:
                db = d.sum(1)[:, :hidden].flatten().to(b_dtype)
        return dv, dw, db, dmask, None
