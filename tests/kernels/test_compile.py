"""The fused kernels compile for the GPU (sm_90), on this CPU machine: scripts/kernel_ptx.py runs Triton's real
compiler and ptxas for every variant the layers launch. The interpreter tests (test_fused*.py) check what the
kernels compute; only a compiler can reject a construct the interpreter accepts (or run out of shared memory)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

# Looked up, not imported: importing Triton in this process before triton_setup.py sets TRITON_INTERPRET would
# leave the interpreter tests unable to run.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

SCRIPT = REPO / "scripts" / "kernel_ptx.py"


@pytest.mark.slow
def test_every_fused_kernel_variant_compiles_for_hopper(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the compiler, not the interpreter
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")  # compile for real, not from an earlier run's cache
    result = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "ptx")], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    # 650 and 1500 units x TF32 / bf16 x {none, tied, untied, moon}: LSTM forward and backward, GRU too
    # (no Moon), plus the last backward step, inference and IEEE fp32 (tied), and MC's untied forward at 1,000
    # sequences (it asked for more shared memory than sm_90 has until the plan capped the pipeline); and zoneout's and
    # Semeniuta's masks (TF32, 1500 units): the LSTM's forward and backward for each, the GRU's for both at once; and
    # the graphed steps' update, SGD's and averaged SGD's.
    assert len(lines) == 2 * 2 * (4 * 2 + 3 * 2) + 2 * 4 + 2 * 2 * 2 + 6 + 2, result.stdout
    assert all(": ok, shared " in line for line in lines), result.stdout
    ptx = {name: (tmp_path / "ptx" / f"lstm_{name}.ptx").read_text()
           for name in ("fwd_H1500_tf32_untied", "bwd_H1500_tf32_untied", "fwd_H1500_ieee_tied")}
    assert all(".target sm_90" in p for p in ptx.values())
    # Tensor-core products for TF32: the forward multiplies the fp16-stored operands, the backward fp32 gradients by W
    # converted to TF32. IEEE fp32 products are no tensor-core products at all.
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx["fwd_H1500_tf32_untied"]
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx["bwd_H1500_tf32_untied"]
    assert "mma.sync" not in ptx["fwd_H1500_ieee_tied"]
    # Each step waits for the step before inside the kernel (programmatic dependent launch), not at its launch.
    assert all("griddepcontrol.wait" in p and "griddepcontrol.launch_dependents" in p for p in ptx.values())
