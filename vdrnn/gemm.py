"""Products that cuBLAS runs on its fast kernels whatever the layer sizes.

cuBLAS takes its fast Hopper GEMM kernels only when the operands' dimensions are whole multiples of 16 bytes. The
paper's large model has 1500 units: a row of 1500 bf16 values is 3,000 bytes, and every product that reduces over,
or writes, such rows falls back to older kernels about 3x slower. On one H200 the six bf16 products of a 1500-unit
layer and its decoder took 651 us, against 214 us at 1504 units (``results/bench/align/``); the medium model's 650
fp32 values (2,600 bytes) are misaligned the same way.

So the fast path appends zeros to such a dimension up to the next multiple of 16 bytes: to both operands where it
is the reduced one, to the weight's rows where it is the output's. Zeros add nothing to any sum, so the product is
the same; padded columns of a result are zeros that are sliced off, and autograd slices the padding off the
gradients. Only on CUDA (``ALIGNED_DEVICES``), where the kernels differ.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

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
    """Should a product whose output gains dead units pad that output after the product, rather than the weight's rows
    before it? Where nothing else copies the weight (its own dtype, inputs aligned) and the output has fewer rows than
    the weight has columns (a training step's 700 rows against 1500 inputs): that copy is the smaller, and the weight's
    gradient comes out of its product whole instead of sliced from a padded one and copied (the 1500-unit fp32 step
    4.11 against 4.19 ms tied, one H200). At MC evaluation's 35,000 rows the weight's padding wins."""
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

    The result is a view of gate-major storage [G, ..., B, units]: the masked copies of v are written gate-major and
    the gates' products run as one batched GEMM, so that neither they nor their gradients need a transposing copy
    (the einsum over [..., B, G, D] it replaces made those copies); the kernels read x_proj through its strides. D is
    zero-padded like ``linear``'s. v * z is rounded to the product's dtype once, as F.linear under autocast rounds the
    reference's.
    """
    gates = mask.shape[-2]
    hidden, inputs = weight.shape[0] // gates, weight.shape[1]
    dtype = product_dtype(weight)
    pad_in = padding(inputs, dtype, v.device)
    # [G, B, D'], contiguous (a few KB), so that v * z is laid out [G, ..., B, D'] and flattens without a copy.
    z = pad_last(mask.movedim(-2, 0), pad_in).contiguous()
    z = z.view(gates, *[1] * (v.dim() - 2), *z.shape[1:])  # broadcast over v's leading (time) dimensions
    masked = (pad_last(v, pad_in).unsqueeze(0) * z).to(dtype).flatten(1, -2)  # [G, N, D'], N = v's rows
    # The kernels' dead units: zero rows of the weight and bias, or zeros appended to the output after the product.
    pad_out = pads_output(masked.shape[1], weight, dtype, pad_in)
    dead_rows = 0 if pad_out else units - hidden
    weight = weight.to(dtype).view(gates, hidden, inputs)
    if not pad_out:
        weight = F.pad(weight, (0, pad_in, 0, dead_rows))  # [G, units, D']
    if bias is None:
        out = torch.bmm(masked, weight.transpose(1, 2))
    else:
        bias = pad_last(bias.view(gates, 1, hidden), dead_rows).to(dtype)
        out = torch.baddbmm(bias, masked, weight.transpose(1, 2))
    if pad_out:
        out = pad_last(out, units - hidden)
    return out.unflatten(1, v.shape[:-1]).movedim(0, -2)
