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


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, its dimensions zero-padded where cuBLAS needs it.

    The operands are cast to the product's dtype before they are padded, so that the padding copies half as many
    bytes under bf16 autocast (autocast would cast them anyway). The same padding aligns the backward's two
    products: dx has the padded width, dW the padded rows and row length.
    """
    dtype = product_dtype(weight)
    pad_in = padding(weight.shape[1], dtype, x.device)
    pad_out = padding(weight.shape[0], dtype, x.device)
    if not pad_in and not pad_out:
        return F.linear(x, weight, bias)
    weight = F.pad(weight.to(dtype), (0, pad_in, 0, pad_out))
    if bias is not None:
        bias = pad_last(bias, pad_out)
    y = F.linear(pad_last(x.to(dtype), pad_in), weight, bias)
    return y[..., :y.shape[-1] - pad_out] if pad_out else y
