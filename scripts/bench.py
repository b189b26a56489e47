"""Time one training step of the 2-layer PTB language model, cuDNN vs the masked-recurrence paths.

One step = forward, cross-entropy, backward, clip_grad_norm_, SGD update, at batch 20 x BPTT 35
(700 tokens), vocabulary 10,000, for hidden 650 and 1500, in fp32 (TF32 products) and bf16 autocast:

    cudnn      nn.LSTM (cuDNN), Zaremba dropout p=0.5, eager      -- the anchor
    cudnn-graphed  the same step in a GraphedTrainStep (what cuDNN gives without host launch costs)
    reference  vdrnn's Python step loop (impl=reference), variational tied / untied, eager
    fast       the fused Triton recurrence (impl=fast) in a GraphedTrainStep, tied / untied
    fast-eager the fused recurrence without the graph (to show what the graph buys)
    fast-zoneout, fast-semeniuta   the schemes after the paper on the same graphed fused path: zoneout
               (z_c 0.25, z_h 0.025) and Semeniuta's candidate dropout (p 0.25, fresh per step), each beside
               Zaremba's p=0.5 on the non-recurrent connections, as their presets

Times are CUDA-event medians over many steps after warm-up. Writes bench.md and bench.json to --out.

    python scripts/bench.py --check --out results/bench          # correctness on the GPU, then the table
    python scripts/bench.py --mc --data $VDRNN_DATA_DIR/ptb --no-steps   # MC-dropout evaluation time only
    python scripts/bench.py --gru --no-steps                      # one masked GRU layer, fused vs reference
    python scripts/bench.py --amp off --variants cudnn fast-tied fast-zoneout fast-semeniuta --out results/bench/schemes
    python scripts/bench.py --sweep --diag --profile              # tuning: block shapes, where time goes

--sweep times one fused layer per block shape and runs the table with the fastest shape per size.

Imports vdrnn's model and training-step modules, so the machine needs vdrnn's dependencies (omegaconf
among them, through vdrnn.config), though not hydra.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vdrnn.config import ModelConfig  # noqa: E402
from vdrnn.dropout import LayerMasks, bernoulli_mask  # noqa: E402
from vdrnn.dropout.config import DropoutConfig  # noqa: E402
from vdrnn.kernels import launch  # noqa: E402
from vdrnn.kernels.graph import GraphedTrainStep  # noqa: E402
from vdrnn.kernels.lstm import lstm_fused  # noqa: E402
from vdrnn.tasks.lm.model import LanguageModel  # noqa: E402

VOCAB, BATCH, BPTT = 10_000, 20, 35
TOKENS = BATCH * BPTT
CLIP = {650: 5.0, 1500: 10.0}
INIT = {650: 0.05, 1500: 0.04}


STEP_VARIANTS = ("cudnn", "cudnn-graphed", "reference-tied", "reference-untied", "fast-tied", "fast-untied",
                 "fast-eager-tied", "fast-zoneout", "fast-semeniuta")
GRAPHED_VARIANTS = ("cudnn-graphed", "fast-tied", "fast-untied", "fast-zoneout", "fast-semeniuta")
MIN_ITERS = 4  # the reference and eager paths are timed over iters // 4 steps


def dropout_for(variant: str) -> DropoutConfig:
    if variant.startswith("cudnn"):
        return DropoutConfig(scheme="zaremba", input=0.5, output=0.5)
    if variant == "fast-zoneout":
        return DropoutConfig(scheme="zoneout", zoneout_cell=0.25, zoneout_hidden=0.025, input=0.5, output=0.5)
    if variant == "fast-semeniuta":
        return DropoutConfig(scheme="semeniuta", candidate=0.25, input=0.5, output=0.5)
    per_gate = variant.endswith("untied")
    return DropoutConfig(scheme="variational", embedding=0.3, input=0.5, recurrent=0.3, output=0.5,
                         per_gate=per_gate)


def build(hidden: int, variant: str) -> tuple[LanguageModel, torch.optim.Optimizer]:
    impl = "reference" if variant.startswith("reference") else "fast"
    model = LanguageModel(VOCAB, ModelConfig(hidden_size=hidden, init_range=INIT[hidden], impl=impl),
                          dropout_for(variant)).cuda().train()
    return model, torch.optim.SGD(model.parameters(), lr=1.0)


def time_steps(step_fn, batches, warmup: int, iters: int) -> list[float]:
    """Per-step milliseconds from CUDA events, steps issued back to back as in training."""
    state = None
    for i in range(warmup):
        state = step_fn(*batches[i % len(batches)], state)
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for i, (start, end) in enumerate(events):
        start.record()
        state = step_fn(*batches[i % len(batches)], state)
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events]


def make_step(model, optimizer, hidden: int, variant: str, amp: str):
    """A closure (tokens, targets, state) -> state running one full training step."""
    if variant in GRAPHED_VARIANTS:
        graphed = GraphedTrainStep(model, optimizer, clip=CLIP[hidden], batch_size=BATCH, bptt=BPTT, amp=amp)

        def step(tokens, targets, state):
            state = state or model.initial_state(BATCH, "cuda")
            return graphed(tokens, targets, state)[2]
        return step

    dtype = torch.bfloat16 if amp == "bf16" else None

    def step(tokens, targets, state):  # the eager step (as LanguageModelTrainer.train_step)
        state = state or model.initial_state(BATCH, "cuda")
        state = [(h.detach(), c.detach()) for h, c in state]
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            logits, state = model(tokens, state)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP[hidden])
        optimizer.step()
        return state
    return step



def bench_configs(args, best: dict) -> list[dict]:
    rows = []
    gen = torch.Generator().manual_seed(0)
    batches = [tuple(torch.randint(0, VOCAB, (BPTT, BATCH), generator=gen).cuda() for _ in range(2))
               for _ in range(8)]

    default = tuple(getattr(launch, k) for k in KNOBS)
    for hidden in args.hidden:
        for amp in args.amp:
            # The sweep's fastest block shape for this size and precision; without one, the defaults (not the
            # shape the size before ran with).
            with block_shape(best.get((hidden, amp), default)):
                for variant in STEP_VARIANTS:
                    if variant not in args.variants:
                        continue
                    torch.manual_seed(0)
                    model, optimizer = build(hidden, variant)
                    step = make_step(model, optimizer, hidden, variant, amp)
                    slow = variant.startswith("reference") or variant.startswith("fast-eager")
                    iters = args.iters // 4 if slow else args.iters
                    started = time.perf_counter()
                    try:
                        times = time_steps(step, batches, warmup=args.warmup, iters=iters)
                    except Exception as err:  # report and go on: one broken path must not hide the others
                        print(f"  {hidden:5d} {amp:4s} {variant:18s} FAILED: {err!r}"[:500], flush=True)
                        times = [float("nan")]
                    ms = statistics.median(times)
                    rows.append({"hidden": hidden, "amp": amp, "variant": variant, "ms": ms,
                                 "fused_config": {k: getattr(launch, k) for k in KNOBS},
                                 "p10": sorted(times)[len(times) // 10], "p90": sorted(times)[9 * len(times) // 10],
                                 "iters": iters, "wps": TOKENS / ms * 1e3})
                    print(f"  {hidden:5d} {amp:4s} {variant:18s} {ms:8.3f} ms/step  "
                          f"({time.perf_counter() - started:.1f}s)", flush=True)
                    del model, optimizer, step
                    torch.cuda.empty_cache()
    return with_ratios(rows)


def with_ratios(rows: list[dict], key: str = "ms", ratio: str = "ratio") -> list[dict]:
    """Each row's ``ratio``: its time ``key`` over the cuDNN row's of the same size and precision (nan if none)."""
    for row in rows:
        anchor = next((r[key] for r in rows if r["variant"] == "cudnn" and r["hidden"] == row["hidden"]
                       and r["amp"] == row["amp"]), float("nan"))
        row[ratio] = row[key] / anchor
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| hidden | precision | path | ms/step (p10-p90) | words/s | x cuDNN |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        precision = "bf16 autocast" if r["amp"] == "bf16" else "fp32 (TF32)"
        lines.append(f"| {r['hidden']} | {precision} | {r['variant']} | {r['ms']:.2f} ({r['p10']:.2f}-{r['p90']:.2f}) "
                     f"| {r['wps']:,.0f} | {r['ratio']:.2f} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- --gru
GRU_VARIANTS = ("cudnn", "reference-tied", "reference-untied", "fast-tied", "fast-untied")


def gru_layer_step(hidden: int, variant: str, amp: str, device: str = "cuda"):
    """A closure running forward + backward of one GRU layer (batch 20 x 35) with ``variant``'s masks.

    cudnn: vdrnn.nn.GRU without a scheme, cuDNN's (the anchor); reference / fast: Gal's masks (x 0.5, h 0.3), tied or
    one per gate, through gru_reference or the fused kernels. Fresh masks every call, as a training step draws them.
    """
    from vdrnn.nn import GRU, Variational

    scheme = None if variant == "cudnn" else Variational(
        input=0.5, recurrent=0.3, gates="untied" if variant.endswith("untied") else "tied")
    layer = GRU(hidden, hidden, dropout=scheme, impl="reference" if variant.startswith("reference") else "fast")
    layer = layer.to(device).train()
    x = torch.randn(BPTT, BATCH, hidden, device=device)
    h0 = torch.zeros(1, BATCH, hidden, device=device)
    dtype = torch.bfloat16 if amp == "bf16" else None

    def step(*_):
        layer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
            y, h = layer(x, h0)
        (y.float().sum() + h.float().sum()).backward()
    return step


def gru_rows(hidden_sizes, amps, iters: int, warmup: int) -> list[dict]:
    """Each path timed twice: issued eagerly (host launch costs included, as an eager training step pays them)
    and replayed as one CUDA graph (device time only, as the graphed training step pays it)."""
    rows = []
    for hidden in hidden_sizes:
        for amp in amps:
            for variant in GRU_VARIANTS:
                torch.manual_seed(0)
                step = gru_layer_step(hidden, variant, amp)
                times = time_steps(step, [()], warmup=warmup,
                                   iters=iters // 4 if variant.startswith("reference") else iters)
                rows.append({"hidden": hidden, "amp": amp, "variant": variant, "ms": statistics.median(times),
                             "graph_ms": graph_ms(step)})
                print(f"  GRU layer {hidden:5d} {amp:4s} {variant:18s} {rows[-1]['ms']:8.3f} ms eager, "
                      f"{rows[-1]['graph_ms']:8.3f} ms graphed", flush=True)
    return with_ratios(with_ratios(rows), key="graph_ms", ratio="graph_ratio")


def gru_table(rows: list[dict]) -> str:
    lines = [f"One GRU layer, forward + backward, batch {BATCH} x {BPTT} (no decoder, no update); eager: issued from "
             "Python, host launch costs included; graphed: one CUDA graph replay, device time only:", "",
             "| hidden | precision | path | eager ms | x cuDNN (unmasked) | graphed ms | x cuDNN (unmasked) |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['hidden']} | {'bf16 autocast' if r['amp'] == 'bf16' else 'fp32 (TF32)'} | {r['variant']} "
              f"| {r['ms']:.2f} | {r['ratio']:.2f} | {r['graph_ms']:.2f} | {r['graph_ratio']:.2f} |" for r in rows]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- --check
def check(hidden_sizes) -> list[dict]:
    """Fast vs reference on fresh random inputs at the benchmark's sizes: relative errors."""
    from vdrnn.cells.lstm import lstm_reference

    results = []
    names = ["y", "h_T", "c_T", "dx", "dh0", "dc0", "dw_ih", "dw_hh", "db_ih", "db_hh"]
    for hidden in hidden_sizes:
        for kind in ("tied", "untied", "moon"):
            for amp in ("fp32", "tf32", "bf16"):
                torch.backends.cuda.matmul.allow_tf32 = amp == "tf32"
                leaves = [torch.randn(BPTT, BATCH, hidden, device="cuda"),
                          torch.randn(BATCH, hidden, device="cuda") * 0.5, torch.randn(BATCH, hidden, device="cuda"),
                          torch.empty(4 * hidden, hidden, device="cuda").uniform_(-0.05, 0.05),
                          torch.empty(4 * hidden, hidden, device="cuda").uniform_(-0.05, 0.05),
                          torch.randn(4 * hidden, device="cuda") * 0.05, torch.randn(4 * hidden, device="cuda") * 0.05]
                leaves = [t.requires_grad_() for t in leaves]
                like = leaves[0]
                if kind == "tied":
                    masks = LayerMasks(x=bernoulli_mask((BATCH, hidden), 0.5, like),
                                       h=bernoulli_mask((BATCH, hidden), 0.3, like))
                elif kind == "untied":
                    masks = LayerMasks(x=bernoulli_mask((BATCH, 4, hidden), 0.5, like),
                                       h=bernoulli_mask((BATCH, 4, hidden), 0.3, like), per_gate=True)
                else:
                    masks = LayerMasks(c=torch.empty(BATCH, hidden, device="cuda").bernoulli_(0.5), c_scale=2.0)
                weights = [torch.randn(s, device="cuda") for s in ((BPTT, BATCH, hidden), (BATCH, hidden), (BATCH, hidden))]
                outs = []
                for fn in (lstm_reference, lstm_fused):
                    x, h0, c0, *params = leaves
                    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp == "bf16"):
                        y, (h, c) = fn(x, (h0, c0), tuple(params), masks)
                    loss = (y.float() * weights[0]).sum() + (h * weights[1]).sum() + (c * weights[2]).sum()
                    outs.append([y, h, c, *torch.autograd.grad(loss, leaves)])
                errs = {n: ((o.float() - r.float()).norm() / r.float().norm()).item()
                        for n, o, r in zip(names, outs[1], outs[0], strict=True)}
                worst = max(errs, key=errs.get)
                print(f"  check H={hidden} {kind:6s} {amp}: max rel err {errs[worst]:.2e} ({worst}); "
                      + " ".join(f"{n}={e:.1e}" for n, e in errs.items()), flush=True)
                results.append({"hidden": hidden, "kind": kind, "precision": amp, "errors": errs})
    torch.backends.cuda.matmul.allow_tf32 = True
    return results


def layer_problem(hidden: int, requires_grad: bool = True, device: str = "cuda"):
    """One fused LSTM layer at the benchmark's shape (T 35, B 20, H inputs and units): x, (h0, c0), the
    weights (U(+-0.05), zero biases) and a tied recurrent mask, p 0.3. --sweep, --diag and --ncu-target time it."""
    x = torch.randn(BPTT, BATCH, hidden, device=device, requires_grad=requires_grad)
    params = (torch.empty(4 * hidden, hidden, device=device).uniform_(-0.05, 0.05),
              torch.empty(4 * hidden, hidden, device=device).uniform_(-0.05, 0.05),
              torch.zeros(4 * hidden, device=device), torch.zeros(4 * hidden, device=device))
    state = (torch.randn(BATCH, hidden, device=device), torch.randn(BATCH, hidden, device=device))
    masks = LayerMasks(h=bernoulli_mask((BATCH, hidden), 0.3, x))
    return x, state, tuple(t.requires_grad_(requires_grad) for t in params), masks


# ------------------------------------------------------------------------------------- --sweep
# (BLOCK_H, BLOCK_K, num_warps, num_stages, PROGRAMS_PER_SM)
SWEEP = [(16, 64, 4, 3, 3), (16, 64, 4, 3, 2), (16, 64, 4, 3, 4), (16, 64, 4, 3, 6), (16, 32, 4, 3, 3),
         (16, 128, 4, 3, 3), (32, 64, 4, 3, 3)]
KNOBS = ("BLOCK_H", "BLOCK_K", "NUM_WARPS", "NUM_STAGES", "PROGRAMS_PER_SM")


@contextlib.contextmanager
def block_shape(shape: tuple):
    """vdrnn.kernels.launch's block-shape knobs (KNOBS, in that order) set to ``shape`` inside the block, and back to what
    they were after it, so that no later stage runs with a shape it did not ask for."""

    saved = tuple(getattr(launch, k) for k in KNOBS)
    for knob, value in zip(KNOBS, shape, strict=True):
        setattr(launch, knob, value)
    try:
        yield
    finally:
        for knob, value in zip(KNOBS, saved, strict=True):
            setattr(launch, knob, value)


def sweep_best(rows: list[dict]) -> dict[tuple[int, str], tuple]:
    """The fastest block shape (KNOBS' values) per (hidden, amp) among --sweep's rows."""
    best = {}
    for key in dict.fromkeys((r["hidden"], r["amp"]) for r in rows):
        fastest = min((r for r in rows if (r["hidden"], r["amp"]) == key), key=lambda r: r["ms_fwd_bwd_layer"])
        best[key] = tuple(fastest["config"][k] for k in KNOBS)
    return best


def sweep(hidden_sizes, amps) -> list[dict]:
    """One layer's fused forward+backward (tied masks, T=35, B=20), replayed as a CUDA graph, per
    block shape. ms / 70 bounds the time of one step kernel."""

    rows = []
    for hidden in hidden_sizes:
        for amp in amps:
            x, state, params, masks = layer_problem(hidden)
            grad_y = torch.randn(BPTT, BATCH, hidden, device="cuda")
            for cfg in SWEEP:
                def fwd_bwd(x=x, state=state, params=params, masks=masks, grad_y=grad_y, amp=amp):
                    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp == "bf16"):
                        y, _ = lstm_fused(x, state, params, masks)
                    y.backward(grad_y)
                with block_shape(cfg):
                    try:
                        ms = graph_ms(fwd_bwd, replays=30)
                    except Exception as err:  # a block shape the compiler refuses: report, go on
                        print(f"  sweep H={hidden} {amp} {cfg}: failed: {err!r}"[:300], flush=True)
                        continue
                    plan = launch.Plan(BATCH, hidden, x.device)
                    rows.append({"hidden": hidden, "amp": amp, "config": dict(zip(KNOBS, cfg, strict=True)),
                                 "split_fwd": plan.split_f, "split_bwd": 4 * plan.ks, "ms_fwd_bwd_layer": ms})
                    print(f"  sweep H={hidden:5d} {amp:4s} {','.join(map(str, cfg)):16s} splits {plan.split_f}/"
                          f"{4 * plan.ks}: {ms:.3f} ms per layer fwd+bwd ({ms / (2 * BPTT) * 1e3:.1f} us per step "
                          f"kernel at most)", flush=True)
    return rows


# ------------------------------------------------------------------------------------- --profile
def profile(hidden_sizes, amps, out: Path) -> None:
    """Device time per kernel name over 3 eager training steps of the fast path (no graph)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    gen = torch.Generator().manual_seed(1)
    batch = tuple(torch.randint(0, VOCAB, (BPTT, BATCH), generator=gen).cuda() for _ in range(2))
    lines = []
    for hidden in hidden_sizes:
        for amp in amps:
            model, optimizer = build(hidden, "fast-eager-tied")
            step = make_step(model, optimizer, hidden, "fast-eager-tied", amp)
            state = None
            for _ in range(3):
                state = step(*batch, state)
            torch.cuda.synchronize()
            with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    state = step(*batch, state)
                torch.cuda.synchronize()
            events = sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)
            total = sum(e.self_device_time_total for e in events) / 3
            lines.append(f"profile H={hidden} {amp}: {total / 1e3:.3f} ms device time per step (kernels only)")
            for e in events[:14]:
                lines.append(f"  {e.self_device_time_total / 3 / 1e3:7.3f} ms/step {e.count // 3:5d}x "
                             f"{e.self_device_time_total / max(e.count, 1):8.1f} us  {e.key[:90]}")
            print("\n".join(lines[-15:]), flush=True)
            del model, optimizer, step
    (out / "profile.txt").write_text("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------- --diag
def graph_ms(fn, replays: int = 20) -> float:
    """Median ms of one replay of a CUDA graph holding fn() (warmed up on a side stream first)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def diag(hidden_sizes) -> list[str]:
    """Where the time of one step kernel goes: a trivial kernel of the same grid, cuBLAS's product of
    the same shape, and the fused forward alone for several splits of the reduction (35 launches each)."""
    import triton
    import triton.language as tl


    @triton.jit
    def _touch(x_ptr, BLOCK: tl.constexpr):
        offs = (tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1.0)

    lines = []
    for hidden in hidden_sizes:
        first = len(lines)  # this size's lines, printed when they are all in
        grid = (triton.cdiv(hidden, 16), 8)
        buf = torch.randn(grid[0] * grid[1] * 16, device="cuda")
        ms = graph_ms(lambda buf=buf, grid=grid: [_touch[grid](buf, BLOCK=16) for _ in range(BPTT)])
        lines.append(f"diag H={hidden}: trivial kernel, grid {grid}: {ms / BPTT * 1e3:.1f} us/launch")
        for dtype in (torch.float32, torch.bfloat16):
            h = torch.randn(BATCH, hidden, device="cuda", dtype=dtype)
            w = torch.randn(4 * hidden, hidden, device="cuda", dtype=dtype)
            out = torch.empty(BATCH, 4 * hidden, device="cuda", dtype=dtype)
            ms = graph_ms(lambda h=h, w=w, out=out: [torch.mm(h, w.t(), out=out) for _ in range(BPTT)])
            lines.append(f"diag H={hidden}: cuBLAS [B,H]x[H,4H] {str(dtype)[6:]}: {ms / BPTT * 1e3:.1f} us/step")
        x, state, params, masks = layer_problem(hidden, requires_grad=False)
        tiles = triton.cdiv(hidden, launch.BLOCK_K)
        for split in sorted({1, 2, 4, 8, tiles}):
            launch.FORCE_SPLIT = (split, 1)
            with torch.no_grad():
                ms = graph_ms(lambda x=x, s=state, p=params, m=masks: lstm_fused(x, s, p, m))
            lines.append(f"diag H={hidden}: fused forward only (no grad), split {split}: {ms:.3f} ms per 35 steps "
                         f"= {ms / BPTT * 1e3:.1f} us/step")
        launch.FORCE_SPLIT = None
        print("\n".join(lines[first:]), flush=True)
    return lines


def ncu_target(hidden: int) -> None:
    """A few eager forward+backward passes of one fused layer, for `ncu` to sample."""

    x, state, params, masks = layer_problem(hidden)
    for _ in range(3):
        y, _ = lstm_fused(x, state, params, masks)
        y.sum().backward()
    torch.cuda.synchronize()


# ------------------------------------------------------------------------------------- --mc
def mc_timing(data_dir: str, samples: int, batch: int, impls: list[str], amps: list[str],
              masks: tuple[str, ...] = ("tied",)) -> dict:
    """Seconds for ``samples``-sample MC perplexity of the PTB test set, medium variational model (untrained), per
    implementation, precision and mask (``tied``, or ``untied``: one per gate). Keyed "impl amp" for tied masks,
    "impl amp untied" otherwise."""
    from vdrnn.tasks.lm.datasets import tokenize
    from vdrnn.tasks.lm.evaluate import mc_perplexity

    folder = Path(data_dir)
    read = lambda split: tokenize((folder / f"ptb.{split}.txt").read_text().splitlines())  # noqa: E731
    vocab = {w: i for i, w in enumerate(dict.fromkeys(read("train")))}
    test = torch.tensor([vocab.get(w, vocab.get("<unk>", 0)) for w in read("test")], dtype=torch.long)
    results = {}
    for impl, amp, mask in ((i, a, m) for i in impls for a in amps for m in masks):
        torch.manual_seed(0)
        cfg = DropoutConfig(scheme="variational", embedding=0.2, input=0.5, recurrent=0.2, output=0.5,
                            per_gate=mask == "untied")
        model = LanguageModel(len(vocab), ModelConfig(hidden_size=650, impl=impl), cfg).cuda().eval()
        mc_perplexity(model, test[:2000], samples=batch, batch=batch, bptt=BPTT, amp=amp)  # warm-up / compile
        torch.cuda.synchronize()
        started = time.perf_counter()
        n = test if impl == "fast" else test[: len(test) // 10]  # the reference gets a tenth, scaled up
        ppl = mc_perplexity(model, n, samples=samples, batch=batch, bptt=BPTT, amp=amp)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - started) * len(test) / len(n)
        key = f"{impl} {amp}" + (" untied" if mask == "untied" else "")
        results[key] = {"seconds": seconds, "ppl_untrained": ppl, "measured_on_tokens": len(n)}
        print(f"  MC {samples} samples, batch {batch}, {impl}, amp {amp}, {mask}: {seconds:.1f} s for the test set "
              f"({len(test):,} tokens{'' if n is test else ', extrapolated from a tenth'})", flush=True)
        del model
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/bench", help="folder for bench.md and bench.json")
    parser.add_argument("--hidden", type=int, nargs="+", default=[650, 1500], choices=sorted(CLIP),
                        help="model sizes (the medium and large models' clip and init are known)")
    parser.add_argument("--amp", nargs="+", default=["off", "bf16"], choices=["off", "bf16"])
    parser.add_argument("--variants", nargs="+", default=list(STEP_VARIANTS), choices=STEP_VARIANTS)
    parser.add_argument("--iters", type=int, default=200,
                        help=f"timed steps per path (at least {MIN_ITERS}: the slow paths get a quarter)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--check", action="store_true", help="compare fast vs reference on the GPU first")
    parser.add_argument("--mc", action="store_true", help="also time MC-dropout evaluation (1,000 samples)")
    parser.add_argument("--mc-batch", type=int, default=1000)
    parser.add_argument("--mc-impls", nargs="+", default=["fast", "reference"], choices=["fast", "reference"])
    parser.add_argument("--mc-amp", nargs="+", default=["off"], choices=["off", "bf16"])
    parser.add_argument("--mc-masks", nargs="+", default=["tied"], choices=["tied", "untied"])
    parser.add_argument("--data", default=str(Path(os.environ.get("VDRNN_DATA_DIR", ".")) / "ptb"),
                        help="folder holding ptb.{train,test}.txt, for --mc (default: $VDRNN_DATA_DIR/ptb)")
    parser.add_argument("--no-steps", action="store_true", help="skip the training-step table")
    parser.add_argument("--gru", action="store_true", help="also time one masked GRU layer, fused vs reference")
    parser.add_argument("--sweep", action="store_true", help="also time the fused layer per block shape")
    parser.add_argument("--profile", action="store_true", help="device time per kernel, eager fast path")
    parser.add_argument("--diag", action="store_true", help="time a trivial kernel, cuBLAS and forward splits")
    parser.add_argument("--ncu-target", type=int, default=0, help="only run one fused layer of this size (for ncu)")
    args = parser.parse_args()
    if args.iters < MIN_ITERS:  # fewer, and a quarter of them would time no step at all
        parser.error(f"--iters {args.iters}: at least {MIN_ITERS}")
    if not torch.cuda.is_available():
        sys.exit("bench.py needs CUDA")
    if args.mc and not (Path(args.data) / "ptb.test.txt").exists():  # fail now, not after the step table
        sys.exit(f"--mc needs the PTB files in --data {args.data} (ptb.train.txt, ptb.test.txt)")
    import triton

    torch.backends.cuda.matmul.allow_tf32 = True
    if args.ncu_target:
        ncu_target(args.ncu_target)
        return
    torch.backends.cudnn.allow_tf32 = True
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "batch": BATCH, "bptt": BPTT, "vocab": VOCAB}
    print(f"{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, CUDA {meta['cuda']}", flush=True)
    report: dict = {"meta": meta}
    md = [f"{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, CUDA {meta['cuda']}, {meta['date']}", ""]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every stage, so a run cut short still leaves what it measured
        (out / "bench.md").write_text("\n".join(md) + "\n")
        (out / "bench.json").write_text(json.dumps(report, indent=1) + "\n")

    if args.check:
        report["check"] = check(args.hidden)
        torch.backends.cuda.matmul.allow_tf32 = True
        save()
    if args.diag:
        report["diag"] = diag(args.hidden)
        (out / "diag.txt").write_text("\n".join(report["diag"]) + "\n")
    if args.profile:
        profile(args.hidden, args.amp, out)
    best = {}
    if args.sweep:  # before the steps: they then run with the fastest block shape per size and precision
        report["sweep"] = sweep(args.hidden, args.amp)
        best = sweep_best(report["sweep"])
        report["sweep_best"] = {f"{h} {a}": c for (h, a), c in best.items()}
        print("sweep best:", report["sweep_best"], flush=True)
        save()
    if not args.no_steps:
        rows = bench_configs(args, best)
        report["steps"] = rows
        md += [f"Training step, 2-layer LM, batch {BATCH} x BPTT {BPTT}, vocab {VOCAB:,}:", "", table(rows)]
        save()
    if args.gru:
        report["gru"] = gru_rows(args.hidden, args.amp, args.iters, args.warmup)
        md += ["", gru_table(report["gru"])]
        save()
    if args.mc:
        report["mc"] = mc_timing(args.data, 1000, args.mc_batch, args.mc_impls, args.mc_amp, tuple(args.mc_masks))
        md += ["", "MC dropout, 1,000 samples, medium model, PTB test: "
               + ", ".join(f"{k} {v['seconds']:.1f} s" for k, v in report["mc"].items())]
        save()
    print("\n".join(md))


if __name__ == "__main__":
    main()
