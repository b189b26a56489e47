"""The optimizer's update with the clip folded in, as one Triton kernel over a parameter (:mod:`vdrnn.kernels.update`).

Importing this module imports Triton: :mod:`vdrnn.kernels.update` does so on first use.
"""

import triton
import triton.language as tl


@triton.jit
def clipped_update(p_ptr, g_ptr, ax_ptr, factor_ptr, eta_ptr, mu_ptr, n, lr, decay,
                   AVERAGE: tl.constexpr, BLOCK: tl.constexpr):
    """p <- p - lr (f g + decay p) over ``n`` values, f the clip's factor (a device scalar). With AVERAGE (averaged
    SGD) the learning rate is the device scalar eta at eta_ptr instead of ``lr``, and then ax <- ax + mu (p - ax) on
    the updated p, mu the device scalar at mu_ptr. Arithmetic in fp32."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    factor = tl.load(factor_ptr).to(tl.float32)
    if AVERAGE:
        rate = tl.load(eta_ptr).to(tl.float32)
    else:
        rate = lr
    p = tl.load(p_ptr + offs, mask=live, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=live, other=0.0).to(tl.float32)
    p = p - rate * (factor * g + decay * p)
    tl.store(p_ptr + offs, p.to(p_ptr.dtype.element_ty), mask=live)
    if AVERAGE:
        mu = tl.load(mu_ptr).to(tl.float32)
        ax = tl.load(ax_ptr + offs, mask=live, other=0.0).to(tl.float32)
        tl.store(ax_ptr + offs, (ax + mu * (p - ax)).to(ax_ptr.dtype.element_ty), mask=live)
