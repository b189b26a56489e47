"""Time the public modules as a PyTorch user runs them: a training step of a model built from vdrnn.nn against the
same model on torch.nn's modules without recurrent dropout, eager and recorded as a CUDA graph.

One step = forward, cross-entropy, backward, clip_grad_norm_(5), SGD update of a 2-layer word-level model (an
embedding, the recurrent layers, a linear decoder; vocabulary 10,000), B sequences x 35 steps, written as a user
writes it (no state carried). "graphed" records the whole step once as a CUDA graph and replays it, as
torch.cuda.graph's documentation does for a whole network. The rows, for the LSTM and the GRU:

    torch               torch.nn.LSTM / GRU, no recurrent dropout (cuDNN)           -- the anchor, eager
    none                vdrnn.nn without a scheme (cuDNN, a layer per call)
    variational         Variational(input=0.5, recurrent=0.3, output=0.5) and word types 0.3, tied gates
    variational-untied  the same, a mask per gate
    zoneout             Zoneout(cell=0.25, hidden=0.025, input=0.5, output=0.5) (the GRU: hidden only)
    semeniuta           Semeniuta(candidate=0.25, input=0.5, output=0.5)
    weight-drop         WeightDrop(weight=0.5, input=0.5, output=0.5) (LSTM only; on the kernels when graphed)
    vdrnn-train         vdrnn's own training step of the same variational model (GraphedTrainStep), batch 20

at each size and precision (--hidden, --amp), batch 20 (all rows) and 64 (torch and the variational rows), in
torch's layout and batch_first (650 units, fp32, batch 20). Then MC dropout: vdrnn.nn.mc_predict of 100 samples of
one minibatch, side by side in one call, against a loop of 100 calls of the torch model. Ratios are to the eager
torch row of the same cell, size, batch, precision and layout, in the same run. Writes nn.md and nn.json to --out.

    python scripts/bench_nn.py --out results/bench
    python scripts/bench_nn.py --device cpu --hidden 32 --iters 2 --cells lstm --out /tmp/nn   # a dry run, no GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import build as build_lm  # noqa: E402 (scripts/ is on sys.path when this runs as a script)
from bench import make_step, time_steps  # noqa: E402

import vdrnn.nn as vnn  # noqa: E402

VOCAB, BPTT, CLIP = 10_000, 35, 5.0
SCHEMES = {  # row -> the scheme of the vdrnn.nn rows (None: no scheme); word types 0.3 beside the variational ones
    "none": None,
    "variational": vnn.Variational(input=0.5, recurrent=0.3, output=0.5),
    "variational-untied": vnn.Variational(input=0.5, recurrent=0.3, output=0.5, gates="untied"),
    "zoneout": vnn.Zoneout(cell=0.25, hidden=0.025, input=0.5, output=0.5),
    "semeniuta": vnn.Semeniuta(candidate=0.25, input=0.5, output=0.5),
    "weight-drop": vnn.WeightDrop(weight=0.5, input=0.5, output=0.5),
}
WIDE = ("torch", "variational", "variational-untied")  # the rows also timed at batch 64 and batch_first
MODULES = {"lstm": (nn.LSTM, vnn.LSTM), "gru": (nn.GRU, vnn.GRU)}


class Model(nn.Module):
    """What a user writes: an embedding, two recurrent layers, a decoder; tokens [T, B] ([B, T] batch_first)."""

    def __init__(self, embedding: nn.Embedding, rnn: nn.Module, hidden: int):
        super().__init__()
        self.embedding, self.rnn, self.decoder = embedding, rnn, nn.Linear(hidden, VOCAB)

    def forward(self, tokens):
        output, _ = self.rnn(self.embedding(tokens))
        return self.decoder(output)


def scheme_for(variant: str, cell: str) -> vnn.Scheme | None:
    """The row's scheme on ``cell``: zoneout keeps h alone on the GRU, which has no cell state."""
    scheme = SCHEMES[variant]
    if cell == "gru" and isinstance(scheme, vnn.Zoneout):
        return dataclasses.replace(scheme, cell=0.0)
    return scheme


def build(cell: str, variant: str, hidden: int, batch_first: bool, device: str) -> Model:
    stock, ours = MODULES[cell]
    if variant == "torch":
        return Model(nn.Embedding(VOCAB, hidden), stock(hidden, hidden, 2, batch_first=batch_first), hidden).to(device)
    scheme = scheme_for(variant, cell)
    words = 0.3 if isinstance(scheme, vnn.Variational) else 0.0
    embedding = vnn.Embedding(VOCAB, hidden, dropout=words, batch_first=batch_first)
    rnn = ours(hidden, hidden, 2, batch_first=batch_first, dropout=scheme)
    # AWD's weight drop is faster on the kernels inside a graph, on cuDNN eagerly (vdrnn's trainer chooses so too).
    return Model(embedding, rnn, hidden).to(device)


def step_of(model: Model, amp: str):
    """One training step on (tokens, targets), without zeroing the gradients (a graph writes them afresh)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    device = next(model.parameters()).device.type

    def step(tokens, targets):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp == "bf16"):
            logits = model(tokens)
        F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()

    return step, optimizer


def timed(fn, warmup: int, iters: int, device: str) -> list[float]:
    """fn()'s milliseconds, call by call, issued back to back after ``warmup`` calls (CUDA events; on the CPU the
    wall clock, for the dry run)."""
    for _ in range(warmup):
        fn()
    if device == "cpu":
        times = []
        for _ in range(iters):
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1e3)
        return times
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def graphed(step, optimizer, tokens, targets):
    """The step recorded once as a CUDA graph (after warm-up on a side stream, as PyTorch's whole-network recipe);
    returns its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            step(tokens, targets)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)  # the graph allocates the gradients and writes them at every replay
    with torch.cuda.graph(graph):
        step(tokens, targets)
    return graph.replay


def step_row(cell, variant, hidden, batch, amp, batch_first, mode, args) -> dict:
    """One row: the model's step, eager or graphed, at this size, batch, precision and layout."""
    torch.manual_seed(0)
    model = build(cell, variant, hidden, batch_first, args.device).train()
    if variant == "weight-drop":
        model.rnn.weight_drop_on_kernels = mode == "graphed"
    gen = torch.Generator().manual_seed(0)
    shape = (batch, BPTT) if batch_first else (BPTT, batch)
    tokens, targets = (torch.randint(0, VOCAB, shape, generator=gen).to(args.device) for _ in range(2))
    step, optimizer = step_of(model, amp)
    if mode == "graphed":
        run = graphed(step, optimizer, tokens, targets)
    else:
        def run():
            optimizer.zero_grad(set_to_none=True)
            step(tokens, targets)
    times = timed(run, args.warmup, args.iters if mode == "graphed" else max(2, args.iters // 2), args.device)
    return {"cell": cell, "variant": variant, "hidden": hidden, "batch": batch, "amp": amp,
            "layout": "batch_first" if batch_first else "time", "mode": mode, "ms": statistics.median(times),
            "p10": sorted(times)[len(times) // 10], "p90": sorted(times)[9 * len(times) // 10]}


def vdrnn_train_row(variant, hidden, amp, args) -> dict:
    """vdrnn's own graphed step (the CLI's, GraphedTrainStep) of the same variational LSTM, batch 20."""
    torch.manual_seed(0)
    model, optimizer = build_lm(hidden, "fast-untied" if variant.endswith("untied") else "fast-tied")
    step = make_step(model, optimizer, hidden, "fast-tied", amp)
    gen = torch.Generator().manual_seed(0)
    batches = [tuple(torch.randint(0, VOCAB, (BPTT, 20), generator=gen).cuda() for _ in range(2)) for _ in range(4)]
    times = time_steps(step, batches, warmup=args.warmup, iters=args.iters)
    return {"cell": "lstm", "variant": f"vdrnn-train ({variant})", "hidden": hidden, "batch": 20, "amp": amp,
            "layout": "time", "mode": "graphed", "ms": statistics.median(times),
            "p10": sorted(times)[len(times) // 10], "p90": sorted(times)[9 * len(times) // 10]}


def mc_row(cell, variant, hidden, amp, samples, args) -> dict:
    """vdrnn.nn.mc_predict of ``samples`` samples of one [35 x 20] minibatch (side by side), against a loop of as
    many calls of the torch model; both without gradients, in evaluation, averaging fp32 probabilities."""
    tokens = torch.randint(0, VOCAB, (BPTT, 20), generator=torch.Generator().manual_seed(0)).to(args.device)
    torch.manual_seed(0)
    model, stock = (build(cell, v, hidden, False, args.device).eval() for v in (variant, "torch"))
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=amp == "bf16")

    def ours():
        with autocast:
            vnn.mc_predict(model, tokens, samples, keep_samples=False, probabilities=fp32_softmax)

    @torch.no_grad()
    def loop():
        with autocast:
            total = 0
            for _ in range(samples):
                total = total + fp32_softmax(stock(tokens))

    ms = {name: statistics.median(timed(fn, 1, max(2, args.iters // 10), args.device))
          for name, fn in (("mc_predict", ours), ("torch_loop", loop))}
    return {"cell": cell, "variant": variant, "hidden": hidden, "amp": amp, "samples": samples, **ms}


def fp32_softmax(logits: torch.Tensor) -> torch.Tensor:
    return logits.float().softmax(-1)


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each step row's time over the eager torch row's of the same cell, size, batch, precision and layout."""
    for row in rows:
        same = ("cell", "hidden", "batch", "amp", "layout")
        anchor = next((r["ms"] for r in rows if r["variant"] == "torch" and r["mode"] == "eager"
                       and all(r[k] == row[k] for k in same)), float("nan"))
        row["ratio"] = row["ms"] / anchor
    return rows


def step_table(rows: list[dict]) -> str:
    lines = ["| cell | hidden | batch | precision | layout | model | eager ms (x torch) | graphed ms (x torch) |",
             "|---|---|---|---|---|---|---|---|"]
    keys = dict.fromkeys((r["cell"], r["hidden"], r["batch"], r["amp"], r["layout"], r["variant"]) for r in rows)
    for key in keys:
        cells = []
        for mode in ("eager", "graphed"):
            row = next((r for r in rows if (r["cell"], r["hidden"], r["batch"], r["amp"], r["layout"],
                                            r["variant"]) == key and r["mode"] == mode), None)
            cells.append("–" if row is None else f"{row['ms']:.2f} ({row['ratio']:.2f}x)")
        cell, hidden, batch, amp, layout, variant = key
        precision = "bf16 autocast" if amp == "bf16" else "fp32 (TF32)"
        lines.append(f"| {cell} | {hidden} | {batch} | {precision} | {layout} | {variant} | {' | '.join(cells)} |")
    return "\n".join(lines)


def mc_table(rows: list[dict]) -> str:
    lines = ["| cell | hidden | precision | scheme | samples | mc_predict ms | as many torch calls, ms "
             "| a sample, x a torch call |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per_call = r["torch_loop"] / r["samples"]
        lines.append(f"| {r['cell']} | {r['hidden']} | {'bf16' if r['amp'] == 'bf16' else 'fp32'} | {r['variant']} "
                     f"| {r['samples']} | {r['mc_predict']:.1f} | {r['torch_loop']:.1f} "
                     f"| {r['mc_predict'] / r['samples'] / per_call:.2f}x |")
    return "\n".join(lines)


def plan(args) -> list[tuple]:
    """The step rows to time: (cell, variant, hidden, batch, amp, batch_first, mode)."""
    rows = []
    for cell in args.cells:
        variants = ["torch", *(v for v in SCHEMES if (s := scheme_for(v, cell)) is None or not s.refuses(cell))]
        for hidden in args.hidden:
            for amp in args.amp:
                for batch in args.batch:
                    for variant in variants:
                        if batch == args.batch[0] or variant in WIDE:
                            rows += [(cell, variant, hidden, batch, amp, False, mode) for mode in ("eager", "graphed")]
        rows += [(cell, variant, args.hidden[0], args.batch[0], args.amp[0], True, mode)
                 for variant in WIDE for mode in ("eager", "graphed")]
    return rows if args.device == "cuda" else [r for r in rows if r[-1] == "eager"]  # graphs need CUDA


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/bench"), help="folder for nn.md and nn.json")
    parser.add_argument("--cells", nargs="+", default=["lstm", "gru"], choices=sorted(MODULES))
    parser.add_argument("--hidden", type=int, nargs="+", default=[650, 1500])
    parser.add_argument("--batch", type=int, nargs="+", default=[20, 64])
    parser.add_argument("--amp", nargs="+", default=["off", "bf16"], choices=["off", "bf16"])
    parser.add_argument("--iters", type=int, default=30, help="timed steps per graphed row (eager rows: half)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--samples", type=int, default=100, help="MC dropout samples")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a dry run of the eager rows")
    parser.add_argument("--commit", default=None, help="the commit measured (default: git's HEAD here)")
    args = parser.parse_args()
    if args.iters < 2:
        parser.error(f"--iters {args.iters}: at least 2")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available here (--device cpu for a dry run)")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                           text=True).stdout.strip()
    hardware = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "CPU"
    provenance = (f"`python scripts/bench_nn.py {' '.join(sys.argv[1:])}`; {hardware}, torch {torch.__version__}, "
                  f"Python {platform.python_version()}; commit {commit or 'unknown'}; {datetime.date.today()}")
    print(provenance, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    steps, mc = [], []

    def save() -> None:  # after every row, so that a run cut short keeps what it measured
        text = ["# vdrnn.nn against torch.nn", "", provenance, "",
                f"Training step of a 2-layer model, {BPTT} steps, vocabulary {VOCAB:,}:", "",
                step_table(with_ratios(steps)), ""]
        if mc:
            text += ["MC dropout of one minibatch [35 x 20], in evaluation:", "", mc_table(mc), ""]
        (args.out / "nn.md").write_text("\n".join(text))
        (args.out / "nn.json").write_text(json.dumps({"provenance": provenance, "steps": steps, "mc": mc}, indent=1))

    for row in plan(args):
        steps.append(step_row(*row, args))
        print(f"  {' '.join(map(str, row))}: {steps[-1]['ms']:.2f} ms", flush=True)
        save()
    if args.device == "cuda" and "lstm" in args.cells:
        for hidden in args.hidden:
            for amp in args.amp:
                for variant in ("variational", "variational-untied"):
                    steps.append(vdrnn_train_row(variant, hidden, amp, args))
                    print(f"  vdrnn-train {variant} {hidden} {amp}: {steps[-1]['ms']:.2f} ms", flush=True)
                    save()
    for cell in args.cells:
        for amp in args.amp:
            mc.append(mc_row(cell, "variational", args.hidden[0], amp, args.samples, args))
            print(f"  mc {cell} {amp}: {mc[-1]}", flush=True)
            save()
    print((args.out / "nn.md").read_text())


if __name__ == "__main__":
    main()
