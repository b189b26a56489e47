"""What the fused-kernel tests share: Triton's interpreter on CPU-only machines, the device, exact fp32, and the
random problems and mask sets both cells' kernels are compared on.

Import this module before anything that imports Triton: on a machine without CUDA it sets
TRITON_INTERPRET=1 first, so the same kernels run in Triton's interpreter on CPU tensors; on a GPU the
tests run the compiled kernels.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest
import torch

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
gpu = pytest.mark.skipif(not CUDA, reason="needs CUDA")

if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

triton = pytest.importorskip("triton")

if not CUDA:
    from triton.runtime.interpreter import InterpretedFunction

    # Triton decides at its first import whether kernels are interpreted; if another test module
    # imported it earlier without TRITON_INTERPRET, the kernels cannot run on this CPU machine.
    if not isinstance(triton.language.sigmoid, InterpretedFunction):
        pytest.skip("Triton was imported before TRITON_INTERPRET=1 was set; run this file on its own",
                    allow_module_level=True)


from vdrnn import kernels  # noqa: E402 (after TRITON_INTERPRET is set)
from vdrnn.dropout import LayerMasks, bernoulli_mask, gaussian_mask  # noqa: E402
from vdrnn.kernels import launch  # noqa: E402

# Where the kernels cannot run the layers take the reference loop (warning once): the tests would then compare the
# reference with itself and pass whatever the kernels do.
if not kernels.available(DEVICE):
    pytest.fail(f"the Triton kernels cannot run on {DEVICE} here (TRITON_INTERPRET="
                f"{os.environ.get('TRITON_INTERPRET')!r})", pytrace=False)

# Fast path against the reference in IEEE fp32 (exact_fp32 below): the kernels sum in another order, so they differ by
# rounding only, a few 1e-7 relative; a wrong mask, gate or gradient is off by far more.
FP32_TOL = 1e-5
# With TF32 products (training's fp32 runs turn them on) the bound for fast against reference: a TF32 product
# keeps 10 mantissa bits of each operand, about 5e-4 relative.
TF32_TOL = 1e-3


def packed_dtypes(monkeypatch) -> list[torch.dtype]:
    """The dtypes the LSTM's or the GRU's kernels are given W_hh packed in (launch.pack_weight), call by call."""
    packed = []
    real = launch.pack_weight
    monkeypatch.setattr(launch, "pack_weight",
                        lambda w, dtype, plan, mask=None: packed.append(dtype) or real(w, dtype, plan, mask))
    return packed


@contextmanager
def tf32_products(on: bool):
    """TF32 products on or off inside the block (torch's switch, which the fused kernels follow). Set and restored by
    hand: pytest 9.2's monkeypatch takes the switch (served by torch's module object, not stored on it) for a missing
    attribute, and its undo then fails, in the teardown of whichever test comes next."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


@pytest.fixture(autouse=True)
def exact_fp32():
    """Compare in IEEE fp32: TF32 products would differ from the reference by ~1e-3 on their own."""
    if not CUDA:
        yield
        return
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def random_weights(gates: int, inputs: int, hidden: int) -> list[torch.Tensor]:
    """W_ih, W_hh, b_ih, b_hh of a cell with ``gates`` gates, scaled so the gates are neither saturated nor linear."""
    return [torch.randn(gates * hidden, inputs, device=DEVICE) / inputs**0.5,
            torch.randn(gates * hidden, hidden, device=DEVICE) / hidden**0.5,
            torch.randn(gates * hidden, device=DEVICE) * 0.1,
            torch.randn(gates * hidden, device=DEVICE) * 0.1]


def shared_masks(kind: str, gates: int, steps: int, batch: int, inputs: int, hidden: int) -> LayerMasks | None:
    """The mask sets both cells are tested with, for a cell of ``gates`` gates; None for a kind of one cell only."""
    like = torch.empty(0, device=DEVICE)
    if kind == "tied":
        return LayerMasks(x=bernoulli_mask((batch, inputs), 0.4, like), h=bernoulli_mask((batch, hidden), 0.5, like))
    if kind == "fresh_x_tied_h":  # Zaremba's per-step x mask [T, B, D] with a recurrent mask
        return LayerMasks(x=bernoulli_mask((steps, batch, inputs), 0.5, like),
                          h=bernoulli_mask((batch, hidden), 0.5, like))
    if kind == "untied":
        return LayerMasks(x=bernoulli_mask((batch, gates, inputs), 0.4, like),
                          h=bernoulli_mask((batch, gates, hidden), 0.5, like), per_gate=True)
    if kind == "untied_x_only":
        return LayerMasks(x=bernoulli_mask((batch, gates, inputs), 0.5, like), per_gate=True)
    if kind == "tied_batch":  # dropout.locked_mask=batch: one mask row shared by every sequence
        return LayerMasks(x=bernoulli_mask((1, inputs), 0.4, like), h=bernoulli_mask((1, hidden), 0.5, like))
    if kind == "untied_batch":
        return LayerMasks(x=bernoulli_mask((1, gates, inputs), 0.4, like),
                          h=bernoulli_mask((1, gates, hidden), 0.5, like), per_gate=True)
    if kind == "gaussian_untied":  # Kingma's N(1, p/(1-p)) entries: real-valued, some negative
        return LayerMasks(x=gaussian_mask((batch, gates, inputs), 0.4, like),
                          h=gaussian_mask((batch, gates, hidden), 0.5, like), per_gate=True)
    return None


def kernel_units(monkeypatch, module, multiple: int) -> list[tuple[int, torch.Tensor]]:
    """Set ``launch.UNIT_MULTIPLE`` to ``multiple``; the list returned fills with (units, y) for each call of
    ``module._forward`` (the LSTM's or the GRU's kernel loop): the units it ran and its output y [T, B, units], dead
    units included."""
    monkeypatch.setattr(launch, "UNIT_MULTIPLE", multiple)
    seen: list[tuple[int, torch.Tensor]] = []
    real_forward = module._forward

    def forward(*args, **kwargs):
        out = real_forward(*args, **kwargs)
        seen.append((out[0].shape[-1], out[0].detach().clone()))
        return out
    monkeypatch.setattr(module, "_forward", forward)
    return seen
