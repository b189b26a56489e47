"""Compile the fused LSTM and GRU step kernels, and the graphed steps' update, for a Hopper GPU (sm_90) on any machine,
GPU or not.

Triton's interpreter (what the CPU tests run) checks what the kernels compute, not that the GPU compiler
accepts them: a kernel can pass every CPU test and still fail to compile on the GPU. This script runs the
real compiler, down to PTX and cubin with the ptxas that ships in the triton wheel, for every kernel
variant the training paths launch (tied, untied and no recurrent mask; Moon's cell mask; TF32 products on
fp16-stored operands, bf16 products, and, for tied masks, IEEE fp32; with and without split-K), for the units
the layers run (650 and 1500 as 656 and 1504, ``vdrnn.kernels.launch.Units``) with the block shapes, splits and pipeline
depths ``vdrnn.kernels.launch.Plan`` picks for a 132-SM H100/H200 at batch 20, plus MC evaluation's untied forward at
1,000 sequences a pass (the widest operand tiles), and the update with the clip folded in (SGD's and averaged SGD's,
``vdrnn.kernels.update``). It prints each kernel's shared memory and a hash of its PTX.

    python scripts/kernel_ptx.py                      # compile all; exit 1 if any fails
    python scripts/kernel_ptx.py --out /tmp/ptx/new   # also write the PTX (debug info stripped)

Comparing two --out folders (e.g. before and after a refactor of the kernels) shows whether the GPU code
changed at all; tests/kernels/test_compile.py runs this script in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import re
import sys
from pathlib import Path

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("kernel_ptx.py compiles for the GPU: unset TRITON_INTERPRET")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vdrnn.kernels import gru_steps, launch, lstm_steps, update, update_kernel  # noqa: E402
from vdrnn.kernels.gru import GRU_GATES  # noqa: E402
from vdrnn.kernels.lstm import LSTM_GATES  # noqa: E402

SM_COUNT, BATCH, MC_BATCH = 132, 20, 1000  # H100 / H200, the benchmark's batch, MC evaluation's
SHARED_LIMIT = 232_448  # bytes of shared memory one program may use on sm_90
# The kernels' scalar arguments by type. Pointers are the arguments named *_ptr; any other name is an error, so
# that a new scalar argument is given its type here instead of being compiled as a pointer.
INTS = {"t", "B", "stride_w", "stride_zb", "stride_zg", "stride_xg", "stride_hzg",
        "stride_gt", "stride_gb", "stride_zct", "stride_zcb", "stride_zht", "stride_zhb", "stride_dt", "stride_db", "n"}
# The schemes after Gal's, off unless a case turns them on: Semeniuta's candidate mask and zoneout.
LSTM_CELL_MASKS = {"HAS_G": False, "HAS_ZONE_C": False, "HAS_ZONE_H": False}
GRU_CELL_MASKS = {"HAS_ZG": False, "HAS_ZONE": False}
FLOATS = {"c_scale", "lr", "decay"}
WARPS = {update_kernel.clipped_update: update.NUM_WARPS}  # kernels launched with other than launch.NUM_WARPS
# A layer's precisions, as vdrnn.kernels launches them: (product dtype, dtype W_hh and the forward's operand are stored
# in, PRECISION). TF32 products read fp16-stored operands (vdrnn.kernels.common.stored_dtype); the backward converts W as it loads it.
MODES = {"tf32": ("fp32", "fp16", "tf32"), "bf16": ("bf16", "bf16", "tf32"), "ieee": ("fp32", "fp32", "ieee")}
STORED_POINTERS = {"w_ptr", "hz_ptr"}  # in the stored dtype
PRODUCT_POINTERS = {"xp_ptr", "y_ptr", "dgo_ptr"}  # bf16 under autocast, else fp32
INT_POINTERS = {"cnt_ptr"}
TL = {"fp32": tl.float32, "fp16": tl.float16, "bf16": tl.bfloat16}


def signature(kernel, mode: str, constexprs: dict) -> dict:
    """Argument types as a launch from vdrnn.kernels.lstm / vdrnn.kernels.gru in ``mode`` (one of MODES) would give them."""
    product, stored, _ = MODES[mode]
    types = {}
    for param in kernel.params:
        name = param.name
        if name in constexprs:
            types[name] = "constexpr"
        elif name in INTS:
            types[name] = "i32"
        elif name in FLOATS:
            types[name] = "fp32"
        elif name in INT_POINTERS:
            types[name] = "*i32"
        elif name in STORED_POINTERS:
            types[name] = f"*{stored}"
        elif name in PRODUCT_POINTERS:
            types[name] = f"*{product}"
        elif name.endswith("_ptr"):
            types[name] = "*fp32"
        else:
            raise ValueError(f"{kernel.__name__}: argument {name!r} is no pointer (*_ptr), not in INTS or FLOATS "
                             "and not a constexpr of the case: give it its type in kernel_ptx.py")
    return types


def cases(hidden_sizes):
    """(name, kernel, mode, constexprs, num_stages) for every variant the layers launch."""
    lstm_fwd, lstm_bwd = lstm_steps.fwd_step, lstm_steps.bwd_step
    gru_fwd, gru_bwd = gru_steps.fwd_step, gru_steps.bwd_step
    launch.SM_COUNT[0] = SM_COUNT  # plan as on the GPU, without asking a driver
    launch.SMEM[0] = SHARED_LIMIT
    launch.CAPABILITY[0] = (9, 0)  # sm_90: the steps are launched as programmatic dependents

    def plan_and_shapes(batch, hidden, op, mask, gates):
        product, stored, precision = MODES[op]
        operands = gates if mask == "untied" else 1
        units = launch.Units(hidden).padded  # the layers launch the kernels for H rounded up to 16 (dead units)
        lstm = gates == LSTM_GATES  # the LSTM's forward kernel can run one gate per program
        plan = launch.Plan(batch, units, torch.device("cuda", 0), gates, operands, 4 if stored == "fp32" else 2, lstm)
        shape = dict(H=units, BLOCK_B=plan.block_b, PRECISION=precision, GDC=plan.gdc,
                     HAS_ZH=mask in ("tied", "untied"), PER_GATE=mask == "untied")
        # The forward multiplies in the stored dtype, the backward in the product's. Untied input masks give
        # gate-major x_proj (gemm.per_gate_linear).
        fwd = dict(shape, OP_DTYPE=TL[stored], SAVE_ACTS=True, BLOCK_H=plan.block_h_f, BLOCK_K=plan.block_k_f,
                   K_CHUNK=plan.chunk_f, SPLIT=plan.split_f, XP_GATE_MAJOR=mask == "untied")
        if lstm:
            fwd.update(ONE_GATE=plan.one_gate, PREFETCH_W=min(launch.PREFETCH_F, plan.chunk_f // plan.block_k_f))
        bwd = dict(shape, OP_DTYPE=TL[product], HAS_NEXT=True, BLOCK_H=plan.block_h_b, BLOCK_K=launch.BLOCK_K,
                   K_CHUNK=plan.chunk_b, KS=plan.ks, OP_COPY=product != "fp32",
                   PREFETCH_W=min(launch.PREFETCH_B, plan.chunk_b // launch.BLOCK_K))
        return plan, fwd, bwd

    for hidden, op, mask in itertools.product(hidden_sizes, ("tf32", "bf16"), ("none", "tied", "untied", "moon")):
        tag = f"H{hidden}_{op}_{mask}"
        plan, fwd, bwd = plan_and_shapes(BATCH, hidden, op, mask, LSTM_GATES)
        fwd, bwd = {**fwd, **LSTM_CELL_MASKS}, {**bwd, **LSTM_CELL_MASKS}
        yield f"lstm_fwd_{tag}", lstm_fwd, op, dict(fwd, HAS_ZC=mask == "moon"), plan.stages_f
        yield f"lstm_bwd_{tag}", lstm_bwd, op, dict(bwd, HAS_ZC=mask == "moon"), plan.stages_b
        if op == "tf32" and mask == "tied":  # the last backward step, inference (nothing saved), and IEEE fp32
            yield f"lstm_bwd_last_{tag}", lstm_bwd, op, dict(bwd, HAS_ZC=False, HAS_NEXT=False), plan.stages_b
            yield f"lstm_fwd_infer_{tag}", lstm_fwd, op, dict(fwd, HAS_ZC=False, SAVE_ACTS=False), plan.stages_f
            ieee, fwd_ieee, bwd_ieee = plan_and_shapes(BATCH, hidden, "ieee", mask, LSTM_GATES)
            yield f"lstm_fwd_H{hidden}_ieee_tied", lstm_fwd, "ieee", dict(fwd_ieee, HAS_ZC=False, **LSTM_CELL_MASKS), ieee.stages_f
            yield f"lstm_bwd_H{hidden}_ieee_tied", lstm_bwd, "ieee", dict(bwd_ieee, HAS_ZC=False, **LSTM_CELL_MASKS), ieee.stages_b
        if mask == "untied":  # MC evaluation: inference on many sequences a pass
            wide, fwd_mc, _ = plan_and_shapes(MC_BATCH, hidden, op, mask, LSTM_GATES)
            yield f"lstm_fwd_mc_{tag}", lstm_fwd, op, dict(fwd_mc, HAS_ZC=False, SAVE_ACTS=False, **LSTM_CELL_MASKS), wide.stages_f
        if mask == "moon":  # a GRU has no cell state
            continue
        plan, fwd, bwd = plan_and_shapes(BATCH, hidden, op, mask, GRU_GATES)
        fwd, bwd = {**fwd, **GRU_CELL_MASKS}, {**bwd, **GRU_CELL_MASKS}
        yield f"gru_fwd_{tag}", gru_fwd, op, fwd, plan.stages_f
        yield f"gru_bwd_{tag}", gru_bwd, op, bwd, plan.stages_b
        if mask == "untied":
            wide, fwd_mc, _ = plan_and_shapes(MC_BATCH, hidden, op, mask, GRU_GATES)
            yield f"gru_fwd_mc_{tag}", gru_fwd, op, dict(fwd_mc, SAVE_ACTS=False, **GRU_CELL_MASKS), wide.stages_f
    # Zoneout's and Semeniuta's masks on their presets' path (TF32, no h mask), at the last size (1500 by default,
    # the nearest the shared-memory limit).
    for hidden in hidden_sizes[-1:]:
        tag = f"H{hidden}_tf32"
        plan, fwd, bwd = plan_and_shapes(BATCH, hidden, "tf32", "none", LSTM_GATES)
        zoneout = dict(HAS_ZC=False, HAS_G=False, HAS_ZONE_C=True, HAS_ZONE_H=True)
        semeniuta = dict(HAS_ZC=False, HAS_G=True, HAS_ZONE_C=False, HAS_ZONE_H=False)
        yield f"lstm_fwd_{tag}_zoneout", lstm_fwd, "tf32", dict(fwd, **zoneout), plan.stages_f
        yield f"lstm_bwd_{tag}_zoneout", lstm_bwd, "tf32", dict(bwd, **zoneout), plan.stages_b
        yield f"lstm_fwd_{tag}_semeniuta", lstm_fwd, "tf32", dict(fwd, **semeniuta), plan.stages_f
        yield f"lstm_bwd_{tag}_semeniuta", lstm_bwd, "tf32", dict(bwd, **semeniuta), plan.stages_b
        plan, fwd, bwd = plan_and_shapes(BATCH, hidden, "tf32", "none", GRU_GATES)
        yield f"gru_fwd_{tag}_zoneout_semeniuta", gru_fwd, "tf32", dict(fwd, HAS_ZG=True, HAS_ZONE=True), plan.stages_f
        yield f"gru_bwd_{tag}_zoneout_semeniuta", gru_bwd, "tf32", dict(bwd, HAS_ZG=True, HAS_ZONE=True), plan.stages_b
    for name, averaging in (("sgd", False), ("asgd", True)):
        yield (f"update_{name}", update_kernel.clipped_update, "tf32",
               dict(AVERAGE=averaging, BLOCK=update.BLOCK), launch.NUM_STAGES)


def stripped_ptx(ptx: str) -> str:
    """PTX without debug locations and files, so that equal code compares equal."""
    ptx = re.sub(r"\.section\s+\.debug.*", "", ptx, flags=re.S)
    return "\n".join(line for line in ptx.splitlines() if line.strip() and not line.lstrip().startswith((".loc", ".file")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, nargs="+", default=[650, 1500])
    parser.add_argument("--out", help="write each kernel's PTX here")
    args = parser.parse_args()
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    target = GPUTarget("cuda", 90, 32)
    failed = 0
    for name, kernel, op, constexprs, stages in cases(args.hidden):
        try:
            compiled = triton.compile(ASTSource(fn=kernel, signature=signature(kernel, op, constexprs),
                                                constexprs=constexprs),
                                      target=target, options={"num_warps": WARPS.get(kernel, launch.NUM_WARPS),
                                                              "num_stages": stages})
        except Exception as err:  # report every failing variant, not just the first
            failed += 1
            print(f"{name}: FAILED {err!r}"[:2000], flush=True)
            continue
        ptx = stripped_ptx(compiled.asm["ptx"])
        shared = compiled.metadata.shared
        status = "ok" if shared <= SHARED_LIMIT else "FAILED: too much shared memory"
        failed += status != "ok"
        print(f"{name}: {status}, shared {shared} B, PTX {hashlib.sha1(ptx.encode()).hexdigest()[:12]}", flush=True)
        if out:
            (out / f"{name}.ptx").write_text(ptx + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
