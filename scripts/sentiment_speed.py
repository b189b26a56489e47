#!/usr/bin/env python3
"""Training steps per second of the sentiment presets' model on this machine (batch 128 x 200 tokens).

    python scripts/sentiment_speed.py --steps 3          # every cell x scheme, a few steps each
    python scripts/sentiment_speed.py --impls fast reference --steps 20   # fused kernels vs the step loop (GPU)

Used to size the presets' epochs for a GPU budget: multiply by the steps of an epoch (IMDB: 176,
scale: about 75) and add the evaluation passes.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from vdrnn.dropout.config import DropoutConfig
from vdrnn.tasks.sentiment.config import SentimentModelConfig
from vdrnn.tasks.sentiment.model import SentimentModel

SCHEMES = {
    "none": DropoutConfig(scheme="none"),
    "zaremba": DropoutConfig(scheme="zaremba", input=0.5, output=0.5),
    "variational": DropoutConfig(scheme="variational", embedding=0.5, input=0.5, recurrent=0.5, output=0.5),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps, after one of warm-up (at least 1)")
    parser.add_argument("--cells", nargs="+", default=["lstm", "gru"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--impls", nargs="+", default=["auto"], choices=["auto", "fast", "reference"],
                        help="model.impl for the masked recurrences (fast: the fused LSTM/GRU kernels)")
    args = parser.parse_args()
    if args.steps < 1:  # the time per step is taken over the steps after the warm-up one
        parser.error(f"--steps {args.steps}: at least 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: CUDA is not available here; leave --device out to time the CPU")
    batch, length, vocab = 128, 200, 20_000
    for cell, impl in ((c, i) for c in args.cells for i in args.impls):
        for name, dropout in SCHEMES.items():
            config = SentimentModelConfig(cell=cell, impl=impl)
            model = SentimentModel(vocab, 2, config, dropout).to(args.device).train()
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            tokens = torch.randint(0, vocab, (length, batch), device=args.device)
            lengths = torch.full((batch,), length, device=args.device)
            labels = torch.randint(0, 2, (batch,), device=args.device)
            for step in range(args.steps + 1):  # the first step warms up
                if step == 1:
                    if args.device != "cpu":
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                loss = F.cross_entropy(model(tokens, lengths), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            if args.device != "cpu":
                torch.cuda.synchronize()
            seconds = (time.perf_counter() - start) / args.steps
            print(f"{cell:5s} {impl:9s} {name:12s} {seconds * 1000:8.0f} ms/step  {1 / seconds:6.2f} steps/s", flush=True)


if __name__ == "__main__":
    main()
