"""Time AWD-LSTM's training step and evaluation on one GPU: the eager step against the graphed ones.

    python scripts/bench_awd.py --check --steps 40      # graphed == eager first, then results/bench/awd.{md,json}
    python scripts/bench_awd.py --out /tmp/b             # the table only, elsewhere

The model, data and step are those of `vdrnn train experiment=awd_ptb` (3 LSTM layers of 1150/1150/400 units, batch
20, random BPTT lengths around 70, weight drop 0.5 and locked dropout, AR/TAR, clip 0.25), on the PTB of
$VDRNN_DATA_DIR. The step variants, each under SGD and under averaged SGD (NT-ASGD after its switch):

    eager          trainer.cuda_graph=off: cuDNN on the dropped W_hh, launched from Python   -- the anchor
    graphed        the default: the step recorded once per minibatch length (vdrnn.training.graphs), the dropped
                   W_hh on vdrnn's fused recurrence
    cudnn-graphed  model.impl=reference: the same graphs with cuDNN inside
    fused-eager    model.impl=fast without graphs

Words per second over the same minibatches (one seed's lengths), timed after a pass that records every length's
graph; the ratio is against the eager row measured in the same run. Then validation (batch 10) and test (batch 1)
perplexity of the trained model, eager and graphed, with their seconds.

--check first trains ``--check-steps`` steps eagerly and graphed from the same weights and seed, through NT-ASGD's
switch: the losses, gradient norms and weights must agree (TF32 products; tolerance 1e-3 relative).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vdrnn.config import to_container  # noqa: E402
from vdrnn.help import composed  # noqa: E402
from vdrnn.tasks import task_of  # noqa: E402
from vdrnn.tasks.lm.data import variable_minibatches  # noqa: E402
from vdrnn.tasks.lm.evaluate import perplexity  # noqa: E402

VARIANTS = {  # name -> overrides
    "eager": ["trainer.cuda_graph=off"],
    "graphed": [],
    "cudnn-graphed": ["model.impl=reference"],
    "fused-eager": ["model.impl=fast", "trainer.cuda_graph=off"],
}
SAME_KERNELS = (("graphed", "fused-eager"), ("cudnn-graphed", "eager"))  # --check: graphed against eager


def awd_trainer(data_root: str, run_dir: Path, overrides: list[str]):
    """The trainer `vdrnn train experiment=awd_ptb <overrides>` sets up, data loaded and model built."""
    cfg, _ = composed(["experiment=awd_ptb", "device=cuda", f"data.root={data_root}", "trainer.progress=false",
                       *overrides])
    raw = to_container(cfg)
    task = task_of(raw)
    trainer = task.trainer()(task, task.parse(raw), run_dir, raw)
    trainer.setup()
    return trainer


def some_minibatches(trainer, steps: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first ``steps`` minibatches of an epoch, their lengths drawn with ``seed``."""
    torch.manual_seed(seed)
    batches = []
    for batch in variable_minibatches(trainer.train_data, trainer.cfg.data.bptt):
        batches.append(batch)
        if len(batches) == steps:
            break
    return batches


def run(trainer, batches, lr: float) -> list[tuple[float, float]]:
    """The steps over ``batches`` from a zero state: each one's (loss, gradient norm), read after all."""
    trainer.model.train()
    trainer.next_row, trainer.carried = 0, trainer.model.initial_state(trainer.cfg.data.batch_size, trainer.device)
    out = [trainer.advance(inputs, targets, lr) for inputs, targets in batches]
    return [(loss.item(), norm.item()) for loss, norm in out]


def words_per_second(trainer, batches, lr: float, repeats: int) -> tuple[float, float]:
    """(words/s median over ``repeats`` passes, ms per step), after one pass that records the graphs."""
    run(trainer, batches, lr)
    seconds = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        run(trainer, batches, lr)
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    words = sum(inputs.numel() for inputs, _ in batches)
    best = statistics.median(seconds)
    return words / best, best / len(batches) * 1e3


def check(data_root: str, scratch: Path, steps: int) -> list[str]:
    """Graphed (cuDNN and fused) against eager over ``steps`` SGD then ``steps`` averaged-SGD steps; the lines say
    the largest differences. Raises AssertionError where they are off."""
    lines = []
    for graphed, eager in SAME_KERNELS:
        results = {}
        for name in (graphed, eager):
            t = awd_trainer(data_root, scratch / f"check-{name}", VARIANTS[name])
            batches = some_minibatches(t, steps)
            torch.cuda.manual_seed(7)
            sgd = run(t, batches, t.cfg.trainer.lr)
            t.optimization.switch_to_averaging()
            asgd = run(t, batches, t.cfg.trainer.lr)
            ax = [t.optimization.optimizer.state[p]["ax"].clone() for p in t.model.parameters()]
            results[name] = (torch.tensor(sgd + asgd), [p.detach().clone() for p in t.model.parameters()], ax)
        (g_steps, g_weights, g_ax), (e_steps, e_weights, e_ax) = results[graphed], results[eager]
        step_diff = ((g_steps - e_steps).abs() / e_steps.abs()).max().item()
        weight_diff = max(((g - e).abs().max() / e.abs().max()).item() for g, e in zip(g_weights, e_weights, strict=True))
        ax_diff = max(((g - e).abs().max() / e.abs().max().clamp(min=1e-12)).item() for g, e in zip(g_ax, e_ax, strict=True))
        lines.append(f"{graphed} vs {eager}: {2 * steps} steps (SGD, then averaged SGD); largest relative difference "
                     f"in loss / grad norm {step_diff:.2e}, weights {weight_diff:.2e}, averages {ax_diff:.2e}")
        assert step_diff < 1e-3 and weight_diff < 1e-3 and ax_diff < 1e-3, lines[-1]
    return lines


def bench(data_root: str, scratch: Path, steps: int, repeats: int, variants: list[str]) -> list[dict]:
    rows = []
    for name in variants:
        t = awd_trainer(data_root, scratch / name, VARIANTS[name])
        batches = some_minibatches(t, steps)
        for optimizer in ("sgd", "asgd"):
            if optimizer == "asgd":
                t.optimization.switch_to_averaging()
            wps, ms = words_per_second(t, batches, t.cfg.trainer.lr, repeats)
            graphs = len(t._graphed) if hasattr(t._graphed, "__len__") else 0
            rows.append({"variant": name, "optimizer": optimizer, "wps": wps, "ms": ms, "graphs": graphs})
            print(f"{name:14s} {optimizer:5s} {wps:10,.0f} words/s  {ms:7.2f} ms/step  ({graphs} graphs)", flush=True)
        t.model.eval()
        for split, batch in (("valid", t.cfg.data.eval_batch_size), ("test", t.cfg.data.test_batch_size)):
            stream = getattr(t.data, split)
            for graphed in (False, True):
                torch.cuda.synchronize()
                start = time.perf_counter()
                ppl = perplexity(t.model, stream, batch, t.cfg.data.bptt, graphed=graphed)
                seconds = time.perf_counter() - start
                rows.append({"variant": name, "eval": split, "batch": batch, "graphed": graphed, "ppl": ppl,
                             "seconds": seconds})
                print(f"{name:14s} {split} at batch {batch}, {'graphed' if graphed else 'eager'}: ppl {ppl:.3f} "
                      f"in {seconds:.2f} s", flush=True)
        del t
        torch.cuda.empty_cache()
    return rows


def table(rows: list[dict]) -> str:
    steps = [r for r in rows if "optimizer" in r]
    anchor = {r["optimizer"]: r["wps"] for r in steps if r["variant"] == "eager"}
    lines = ["| step | optimizer | words/s | ms / step | vs eager |", "|---|---|---:|---:|---:|"]
    for r in steps:
        ratio = f"{r['wps'] / anchor[r['optimizer']]:.2f}x" if r["optimizer"] in anchor else "–"
        lines.append(f"| {r['variant']} | {r['optimizer']} | {r['wps']:,.0f} | {r['ms']:.2f} | {ratio} |")
    lines += ["", "| evaluation | variant | batch | eager s | graphed s | ppl eager / graphed |", "|---|---|---:|---:|---:|---|"]
    evals = [r for r in rows if "eval" in r]
    for r in evals:
        if r["graphed"]:
            continue
        g = next(x for x in evals if x["variant"] == r["variant"] and x["eval"] == r["eval"] and x["graphed"])
        lines.append(f"| {r['eval']} | {r['variant']} | {r['batch']} | {r['seconds']:.2f} | {g['seconds']:.2f} | "
                     f"{r['ppl']:.3f} / {g['ppl']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/bench"), help="folder for awd.md and awd.json")
    parser.add_argument("--data", default=str(Path(os.environ.get("VDRNN_DATA_DIR", ".")) / "ptb"),
                        help="the PTB folder (default: $VDRNN_DATA_DIR/ptb)")
    parser.add_argument("--steps", type=int, default=60, help="minibatches timed per pass")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--check", action="store_true", help="graphed against eager first")
    parser.add_argument("--check-steps", type=int, default=6)
    parser.add_argument("--commit", default=None, help="the commit measured (default: git's HEAD here)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_awd.py times CUDA steps: run it on a machine with a GPU")
    if not (Path(args.data) / "ptb.train.txt").is_file():
        sys.exit(f"no PTB in {args.data}: set VDRNN_DATA_DIR or give --data")
    data_root = args.data
    with tempfile.TemporaryDirectory() as scratch:
        checks = check(data_root, Path(scratch), args.check_steps) if args.check else []
        for line in checks:
            print(line, flush=True)
        rows = bench(data_root, Path(scratch), args.steps, args.repeats, args.variants)
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                           text=True).stdout.strip()
    options = [*(["--check"] if args.check else []), f"--steps {args.steps}", f"--repeats {args.repeats}",
               *([f"--variants {' '.join(args.variants)}"] if args.variants != list(VARIANTS) else [])]
    provenance = (f"`python scripts/bench_awd.py {' '.join(options)}`; "
                  f"{torch.cuda.get_device_name()}, torch {torch.__version__}, Python {platform.python_version()}; "
                  f"commit {commit or 'unknown'}; {datetime.date.today()}")
    text = "\n".join(["# AWD-LSTM step and evaluation", "", provenance, "", *checks, "", table(rows), ""])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "awd.md").write_text(text)
    (args.out / "awd.json").write_text(json.dumps({"provenance": provenance, "checks": checks, "rows": rows},
                                                        indent=1))
    print(text)


if __name__ == "__main__":
    main()
