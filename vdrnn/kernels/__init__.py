"""The fast path: fused recurrences for masked LSTM and GRU layers, aligned products, and the graphed training step.

Why: cuDNN cannot apply a mask to h_{t-1} (Gal), one per gate (untied) or a mask on c_t (Moon), so those layers would
run the reference loop of :mod:`vdrnn.cells`, ~10 small kernels per time step. At batch 20 the work is tiny (a
[20, H] x [H, 4H] product per step), so the time is launch latency and re-reading W_hh, not arithmetic. These modules
do the same computation with as few launches as the math allows:

- :mod:`~vdrnn.kernels.lstm` and :mod:`~vdrnn.kernels.gru`: per layer, the input half as one product for all steps,
  then ONE Triton kernel per time step forward (the recurrent product of the masked h_{t-1}, split over K across the
  programs of one launch, and the cell in the last program to arrive) and one per step backward, then the weight
  gradient as one product over all steps. Their Triton code is in ``lstm_steps``/``gru_steps`` and the parts both
  share in :mod:`~vdrnn.kernels.triton_parts`; :mod:`~vdrnn.kernels.launch` sizes the launches and
  :mod:`~vdrnn.kernels.common` holds the host-side pieces both use.
- :mod:`~vdrnn.kernels.gemm`: products padded to 16-byte rows, which cuBLAS's fast kernels need.
- :mod:`~vdrnn.kernels.graph`: a whole language-model training step as one replayed CUDA graph.

docs/speed.md explains the design and gives the measured speed. Triton is imported on first use, not with this
package: tests on a CPU set ``TRITON_INTERPRET=1`` first, which runs the same kernels in Triton's interpreter.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

log = logging.getLogger("vdrnn")

WARNED: set[str] = set()  # the layers that have said their reference loop runs instead of the kernels


def interpreting() -> bool:
    """Is Triton's CPU interpreter on (``TRITON_INTERPRET=1``)?"""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def available(device: torch.device) -> bool:
    """Can the Triton kernels run on tensors of ``device``?"""
    if device.type != "cuda" and not interpreting():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def kernels_or_fallback(device: torch.device, who: str) -> bool:
    """True where the Triton kernels can run; otherwise ``who`` (a layer) says, once, that its reference loop runs."""
    if available(device):
        return True
    if who not in WARNED:
        log.warning("%s: the Triton kernels need CUDA (or TRITON_INTERPRET=1), so the reference loop runs instead "
                    "(impl='auto' picks it on the CPU without this line)", who)
        WARNED.add(who)
    return False
