"""A sentence classifier with variational dropout, and what MC dropout says about its predictions.

A batch-first LSTM classifier (vdrnn.nn.Embedding, vdrnn.nn.LSTM, a linear head) trained on Pang & Lee's movie
review snippets. At test time, vdrnn.nn.mc_predict runs 50 stochastic passes side by side in one call and returns
their average and every sample, from which the uncertainty of each prediction splits into the data's (the expected
entropy of the samples) and the model's own (their mutual information with the prediction: what the sampled models
disagree on). The snippets the model is least sure of are printed with both.

    python examples/sentiment_uncertainty.py                 # $VDRNN_DATA_DIR/rt-polarity
    python examples/sentiment_uncertainty.py --data path/to/rt-polarity --epochs 10

About a minute on a CPU (on a GPU where there is one).
"""

import argparse
import os
import random
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import vdrnn.nn as vnn

PAD, UNK = 0, 1


class Classifier(nn.Module):
    def __init__(self, vocab_size: int, size: int):
        super().__init__()
        self.embedding = vnn.Embedding(vocab_size, size, dropout=0.3, batch_first=True, padding_idx=PAD)
        self.lstm = vnn.LSTM(size, size, batch_first=True,
                             dropout=vnn.Variational(input=0.3, recurrent=0.3, output=0.3))
        self.head = nn.Linear(size, 2)

    def forward(self, tokens, lengths):
        """tokens [B, T] (padded after each snippet's end), lengths [B] -> logits [B, 2], read at each snippet's
        last word (the padding after it never reaches that step)."""
        output, _ = self.lstm(self.embedding(tokens))
        return self.head(output[torch.arange(len(lengths), device=lengths.device), lengths - 1])


def load(folder: Path, vocab_size: int, seed: int):
    """Tokenized snippets, labels (1 positive), a vocabulary of the training part's most frequent words, and the
    texts: a random 90% / 10% split."""
    snippets = [(line.split(), label) for label, name in ((1, "pos"), (0, "neg"))
                for line in (folder / f"rt-polarity.{name}").read_text(encoding="cp1252").splitlines()]
    random.Random(seed).shuffle(snippets)
    cut = len(snippets) * 9 // 10
    counts = Counter(w for words, _ in snippets[:cut] for w in words)
    vocab = {w: i + 2 for i, (w, _) in enumerate(counts.most_common(vocab_size - 2))}

    def tensors(part):
        lengths = torch.tensor([max(1, len(words)) for words, _ in part])
        tokens = torch.zeros(len(part), int(lengths.max()), dtype=torch.long)
        for i, (words, _) in enumerate(part):
            tokens[i, : len(words)] = torch.tensor([vocab.get(w, UNK) for w in words] or [UNK])
        return tokens, lengths, torch.tensor([label for _, label in part]), [" ".join(w) for w, _ in part]

    return tensors(snippets[:cut]), tensors(snippets[cut:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("VDRNN_DATA_DIR", "data")) / "rt-polarity",
                        help="the folder of rt-polarity.pos and rt-polarity.neg (default: $VDRNN_DATA_DIR/rt-polarity)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--samples", type=int, default=50, help="MC dropout samples")
    parser.add_argument("--limit", type=int, default=None, help="train on the first LIMIT snippets only")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if not (args.data / "rt-polarity.pos").exists():
        parser.error(f"no rt-polarity.pos in {args.data}: pass --data, or set VDRNN_DATA_DIR to a folder holding "
                     f"rt-polarity/")
    torch.manual_seed(args.seed)
    (tokens, lengths, labels, _), (test_tokens, test_lengths, test_labels, texts) = load(args.data, 8000, args.seed)
    if args.limit:
        tokens, lengths, labels = tokens[: args.limit], lengths[: args.limit], labels[: args.limit]
    tokens, lengths, labels, test_tokens, test_lengths, test_labels = (
        t.to(args.device) for t in (tokens, lengths, labels, test_tokens, test_lengths, test_labels))
    model = Classifier(8000, 64).to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    started = time.time()
    for epoch in range(args.epochs):
        model.train()
        for batch in torch.randperm(len(labels), device=args.device).split(64):
            loss = F.cross_entropy(model(tokens[batch], lengths[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch + 1}  train loss {loss.item():.3f}  {time.time() - started:.0f} s", flush=True)

    model.eval()
    with torch.no_grad():
        scaled = model(test_tokens, test_lengths).softmax(-1)  # weight scaling
    mc = vnn.mc_predict(model, (test_tokens, test_lengths), samples=args.samples, batch_dim=0)
    print(f"test accuracy {(scaled.argmax(-1) == test_labels).float().mean():.3f} (weight scaling), "
          f"{(mc.mean.argmax(-1) == test_labels).float().mean():.3f} (MC dropout, {args.samples} samples)")
    total, aleatoric, epistemic = mc.predictive_entropy(), mc.expected_entropy(), mc.mutual_information()
    right = mc.mean.argmax(-1) == test_labels
    print(f"mutual information, mean: {epistemic[right].mean():.4f} nats where MC is right, "
          f"{epistemic[~right].mean():.4f} where it is wrong")
    print("least sure (total = data's + model's uncertainty, in nats):")
    for i in total.argsort(descending=True)[:5].tolist():
        print(f"  {total[i]:.3f} = {aleatoric[i]:.3f} + {epistemic[i]:.3f}  p(positive) {mc.mean[i, 1]:.2f}  "
              f"label {'positive' if test_labels[i] else 'negative'}: {texts[i][:70]}")
    print(f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
