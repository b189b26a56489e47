"""The optimizer's step with the gradient-norm clip folded in: one pass over each parameter, for the graphed training
steps (:mod:`vdrnn.kernels.graph`, and AWD's steps recorded by :mod:`vdrnn.training.graphs`).

    f = min(1, max_norm / (|g| + 1e-6))                     clip_grad_norm_'s factor, kept on the device
    SGD:           p <- p - lr (f g + wd p)
    averaged SGD:  p <- p - eta (f g + (wd + lambd) p)      torch.optim.ASGD's update, its eta and mu from its state,
                   ax <- ax + mu (p - ax)                   which moves on afterwards as torch's does

Why: eagerly, clip_grad_norm_ scales every gradient in place (a read and a write of all of them), SGD's L2 term makes
a new gradient g + wd p, and averaged SGD runs five passes of foreach ops over the weights. Here each parameter is
read once with its gradient (and its running mean) and written once: averaged SGD moves a third of the bytes it
moved, SGD under half (docs/speed.md). The factor and ASGD's eta and mu stay on the device: no host sync, so a CUDA
graph holds the whole step. The eager step keeps torch's own clip and optimizer, the reference this one is tested
against.
"""

from __future__ import annotations

import torch

from vdrnn.kernels import launch

BLOCK = 4096  # values per program
NUM_WARPS = 8


def _kernel():
    """The Triton kernel (:mod:`vdrnn.kernels.update_kernel`), imported on first use: Triton reads TRITON_INTERPRET
    when it is first imported."""
    from vdrnn.kernels.update_kernel import clipped_update as kernel

    return kernel


def require_foldable(optimizer: torch.optim.Optimizer) -> None:
    """Refuse what :func:`clipped_update` cannot step: only SGD without momentum and averaged SGD with its state made
    up front (``vdrnn.training.optim.start_averaging_state``), neither maximizing."""
    if type(optimizer) not in (torch.optim.SGD, torch.optim.ASGD):
        raise ValueError(f"the clip is folded into SGD's or averaged SGD's update, not {type(optimizer).__name__}'s")
    for group in optimizer.param_groups:
        if group.get("momentum") or group.get("maximize"):
            raise ValueError("the clip is folded into plain SGD's update: SGD with no momentum, no maximize")
    if isinstance(optimizer, torch.optim.ASGD):
        if any("ax" not in optimizer.state[p] for group in optimizer.param_groups for p in group["params"]):
            raise ValueError("averaged SGD's state must exist before its first folded step: make the optimizer with "
                             "capturable=True (vdrnn.training.optim.make_optimizer)")


@torch.no_grad()
def clipped_update(optimizer: torch.optim.Optimizer, max_norm: float) -> torch.Tensor:
    """``clip_grad_norm_`` over the optimizer's parameters, then ``optimizer.step()``, in one pass (module docstring).
    Returns the norm before clipping, as clip_grad_norm_ does; the gradients are left unclipped."""
    require_foldable(optimizer)
    averaging = isinstance(optimizer, torch.optim.ASGD)
    grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    factor = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    kernel = _kernel()
    for group in optimizer.param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            continue
        decay = group["weight_decay"] + (group["lambd"] if averaging else 0.0)
        states = [optimizer.state[p] for p in params] if averaging else []
        if averaging:
            torch._foreach_add_([s["step"] for s in states], 1)
        for i, p in enumerate(params):
            if not (p.is_contiguous() and p.grad.is_contiguous()):
                raise ValueError("the folded update reads parameters and gradients as flat, contiguous memory")
            n = p.numel()
            # SGD reads no running mean, eta or mu: any tensor stands in for their pointers.
            ax, eta, mu = (states[i][k] for k in ("ax", "eta", "mu")) if averaging else (p, factor, factor)
            kernel[(launch.cdiv(n, BLOCK),)](p, p.grad, ax, factor, eta, mu, n, float(group["lr"]), float(decay),
                                             AVERAGE=averaging, BLOCK=BLOCK, num_warps=NUM_WARPS)
        if averaging:
            _next_eta_and_mu(group, states)
    return norm


def _next_eta_and_mu(group: dict, states: list[dict]) -> None:
    """Averaged SGD's schedule after a step, on the device as torch.optim.ASGD's capturable step computes it:
    mu = 1 / max(1, step - t0), eta = lr / (1 + lambd lr step)^alpha."""
    steps = [s["step"] for s in states]
    mus = torch._foreach_sub(steps, group["t0"])
    torch._foreach_maximum_(mus, 1.0)
    torch._foreach_reciprocal_(mus)
    torch._foreach_copy_([s["mu"] for s in states], mus)
    etas = torch._foreach_mul(steps, group["lambd"] * group["lr"])
    torch._foreach_add_(etas, 1)
    torch._foreach_pow_(etas, group["alpha"])
    torch._foreach_reciprocal_(etas)
    torch._foreach_mul_(etas, group["lr"])
    torch._foreach_copy_([s["eta"] for s in states], etas)
