"""A word-level language model with Gal's variational dropout: torch.nn.LSTM swapped for vdrnn.nn.LSTM.

The model is pytorch/examples' word_language_model with three lines changed (marked "vdrnn"): the embedding drops
whole word types, and the LSTM drops its inputs, h_{t-1} and its output with one mask per sequence, fixed over the
time steps (Gal & Ghahramani 2016). Evaluation is weight scaling (model.eval()); MC dropout averages the predictive
probabilities of several stochastic passes, each keeping its masks for the whole stream.

    python examples/word_language_model.py                      # Penn Treebank from $VDRNN_DATA_DIR/ptb
    python examples/word_language_model.py --data path/to/ptb --steps 300

About a minute on a CPU: 200 steps of a 2 x 200 model, then the first 3,000 validation tokens (on a GPU where there
is one).
"""

import argparse
import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import vdrnn.nn as vnn


class RNNModel(nn.Module):
    def __init__(self, vocab_size: int, size: int, layers: int):
        super().__init__()
        self.embedding = vnn.Embedding(vocab_size, size, dropout=0.2)  # vdrnn: word types dropped per sequence
        dropout = vnn.Variational(input=0.3, recurrent=0.2, output=0.3)  # vdrnn: Gal's masks
        self.rnn = vnn.LSTM(size, size, layers, dropout=dropout)  # vdrnn: was nn.LSTM(size, size, layers)
        self.decoder = nn.Linear(size, vocab_size)
        for p in self.parameters():  # Zaremba's and Gal's init
            nn.init.uniform_(p, -0.1, 0.1)

    def forward(self, tokens, state=None):
        output, state = self.rnn(self.embedding(tokens), state)
        return self.decoder(output), state


def read(path: Path, vocab: dict[str, int]) -> torch.Tensor:
    """A file's words, and an <eos> for every line, as one stream of ids (new words enter ``vocab``)."""
    words = [w for line in path.read_text().splitlines() for w in line.split() + ["<eos>"]]
    return torch.tensor([vocab.setdefault(w, len(vocab)) for w in words])


def batchify(stream: torch.Tensor, batch: int) -> torch.Tensor:
    """[N] -> [N // batch, batch]: ``batch`` columns, each a contiguous part of the stream, read top to bottom:

        a b c d e f g h i j k l   ->   a e i
                                       b f j
                                       c g k
                                       d h l
    """
    rows = stream.numel() // batch
    return stream[: rows * batch].view(batch, rows).t().contiguous()


def minibatches(data: torch.Tensor, bptt: int):
    """(inputs, targets) of ``bptt`` rows each; targets are the inputs one row down (the next word)."""
    for i in range(0, data.shape[0] - 1, bptt):
        n = min(bptt, data.shape[0] - 1 - i)
        yield data[i : i + n], data[i + 1 : i + 1 + n]


def detach(state):
    return tuple(s.detach() for s in state)


@torch.no_grad()
def perplexity(model: RNNModel, data: torch.Tensor, bptt: int) -> float:
    """Weight scaling: every mask at its mean, one deterministic pass."""
    model.eval()
    total, count, state = 0.0, 0, None
    for inputs, targets in minibatches(data, bptt):
        logits, state = model(inputs, state)
        total += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").item()
        count += targets.numel()
    return math.exp(total / count)


@torch.no_grad()
def mc_perplexity(model: RNNModel, stream: torch.Tensor, samples: int, bptt: int) -> float:
    """MC dropout over one stream: ``samples`` copies read it side by side, each with its own masks kept for the
    whole stream (vnn.fixed_masks), and each word's probability averaged over the copies."""
    model.eval()
    data = stream.unsqueeze(1).expand(-1, samples)  # every column the whole stream
    log_probs, state = [], None
    with vnn.fixed_masks(model), vnn.mc_dropout(model, embedding=False):  # Gal's MC test: no word-type dropout
        for inputs, targets in minibatches(data, bptt):
            logits, state = model(inputs, state)
            p = logits.double().softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [T, samples]
            log_probs.append(p.mean(dim=1).log())
    return math.exp(-torch.cat(log_probs).mean().item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("VDRNN_DATA_DIR", "data")) / "ptb",
                        help="a folder with ptb.train.txt and ptb.valid.txt (default: $VDRNN_DATA_DIR/ptb)")
    parser.add_argument("--size", type=int, default=200, help="embedding and hidden units")
    parser.add_argument("--steps", type=int, default=200, help="training steps (minibatches of 20 x 35 words)")
    parser.add_argument("--eval-tokens", type=int, default=3000, help="validation words scored at the end")
    parser.add_argument("--samples", type=int, default=10, help="MC dropout samples")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if not (args.data / "ptb.train.txt").exists():
        parser.error(f"no ptb.train.txt in {args.data}: pass --data, or set VDRNN_DATA_DIR to a folder holding ptb/")
    torch.manual_seed(args.seed)
    vocab: dict[str, int] = {}
    train, valid = read(args.data / "ptb.train.txt", vocab), read(args.data / "ptb.valid.txt", vocab)
    train, valid = train.to(args.device), valid.to(args.device)
    model = RNNModel(len(vocab), args.size, layers=2).to(args.device)  # on CUDA the masked layers run fused kernels
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    started, state = time.time(), None
    model.train()
    for step, (inputs, targets) in enumerate(minibatches(batchify(train, 20), 35)):
        if step == args.steps:
            break
        state = None if state is None else detach(state)  # truncated BPTT: the state is carried, its graph cut
        logits, state = model(inputs, state)  # training mode: new masks for this minibatch
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        (loss * inputs.shape[0]).backward()  # Zaremba's and Gal's objective: summed over the steps
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step:4d}  train ppl {math.exp(loss.item()):8.1f}  {time.time() - started:5.1f} s", flush=True)
    valid = valid[: args.eval_tokens]
    print(f"valid ppl {perplexity(model, batchify(valid, 10), 35):.1f} (weight scaling), "
          f"{mc_perplexity(model, valid, args.samples, 35):.1f} (MC dropout, {args.samples} samples) "
          f"on the first {len(valid):,} validation words; {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
