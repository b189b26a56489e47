"""`vdrnn report DIR...`: Table 1 from finished runs, beside the paper's numbers, plus validation curves.

Runs are found by their ``metrics.json`` anywhere under the given folders (a run dir, a sweep dir, or
several). Runs that differ only by seed form one row, reported as mean ± std over seeds. A row is named
after its experiment preset's Table 1 row (``paper.row``) or, for ad-hoc runs, after its dropout scheme.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vdrnn.tracking import read_jsonl

# Table 1's order, top to bottom; ad-hoc rows follow in name order.
ROW_ORDER = ["Non-regularized (early stopping)", "Moon et al. 2015", "Moon et al. + emb dropout",
             "Zaremba et al. 2014", "Variational (tied weights)", "Variational (untied weights)"]
SIZE_NAMES = {200: "small", 650: "medium", 1500: "large"}


@dataclass
class Row:
    name: str
    size: str
    paper: dict[str, Any] | None
    runs: list[dict[str, Any]] = field(default_factory=list)
    curves: list[list[float]] = field(default_factory=list)

    def values(self, key: str) -> list[float]:
        return [r[key] for r in self.runs if r.get(key) is not None]


def row_identity(metrics: dict[str, Any]) -> tuple[str, str]:
    config = metrics.get("config") or {}
    paper = metrics.get("paper")
    hidden = config.get("model", {}).get("hidden_size")
    size = paper["size"] if paper else SIZE_NAMES.get(hidden, f"{hidden} units")
    if paper:
        return paper["row"], size
    dropout = config.get("dropout", {})
    gates = config.get("cell", {}).get("gates", "tied")
    name = dropout.get("scheme", "?") + (" (untied)" if gates == "untied" and dropout.get("scheme") == "variational" else "")
    return name, size


def collect(folders: list[Path]) -> list[Row]:
    rows: dict[tuple[str, str], Row] = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob("metrics.json")):
            metrics = json.loads(path.read_text())
            key = row_identity(metrics)
            row = rows.setdefault(key, Row(name=key[0], size=key[1], paper=metrics.get("paper")))
            row.runs.append(metrics)
            history = path.parent / "metrics.jsonl"
            if history.exists():
                row.curves.append([r["valid_ppl"] for r in read_jsonl(history)])
    size_rank = {"small": 0, "medium": 1, "large": 2}

    def order(row: Row):
        rank = ROW_ORDER.index(row.name) if row.name in ROW_ORDER else len(ROW_ORDER)
        return size_rank.get(row.size, 3), rank, row.name

    return sorted(rows.values(), key=order)


def mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def paper_value(row: Row, key: str) -> str:
    value = (row.paper or {}).get(key)
    return "–" if value is None else f"{value:.1f}"


COLUMNS = ["row", "size", "seeds", "valid", "test", "MC test", "paper valid", "paper test", "paper MC test",
           "words/s", "wall time (min)"]


def table(rows: list[Row]) -> list[list[str]]:
    lines = []
    for row in rows:
        wps = row.values("wps")
        wall = [(r.get("train_seconds") or 0) + (r.get("eval_seconds") or 0) for r in row.runs]
        lines.append([
            row.name, row.size, str(len(row.runs)),
            mean_std(row.values("valid_ppl")), mean_std(row.values("test_ppl")), mean_std(row.values("test_ppl_mc")),
            paper_value(row, "valid"), paper_value(row, "test"), paper_value(row, "test_mc"),
            f"{statistics.mean(wps):,.0f}" if wps else "–", f"{statistics.mean(wall) / 60:.1f}",
        ])
    return lines


def markdown(lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out) + "\n"


def plot(rows: list[Row], path: Path) -> None:
    """Validation perplexity per epoch, one line per row (mean over seeds, over the epochs all seeds reached)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r.size for r in rows if r.curves}, key=lambda s: ["small", "medium", "large"].index(s)
                   if s in ("small", "medium", "large") else 3)
    fig, axes = plt.subplots(1, max(1, len(sizes)), figsize=(6.5 * max(1, len(sizes)), 4.5), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=False):
        for row in (r for r in rows if r.size == size and r.curves):
            epochs = min(len(c) for c in row.curves)
            mean = [statistics.mean(c[e] for c in row.curves) for e in range(epochs)]
            ax.plot(range(1, epochs + 1), mean, marker="." if epochs < 30 else None,
                    label=f"{row.name} (n={len(row.curves)})")
        finite = [v for line in ax.get_lines() for v in line.get_ydata() if math.isfinite(v)]
        if finite:
            ax.set_ylim(min(finite) * 0.95, min(max(finite), min(finite) * 2.0))
        ax.set(title=f"PTB {size}: validation perplexity", xlabel="epoch", ylabel="perplexity")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(folders: list[Path], out: Path) -> str:
    rows = collect(folders)
    if not rows:
        raise SystemExit(f"error: no metrics.json under {', '.join(map(str, folders))}; point at run or sweep dirs")
    out.mkdir(parents=True, exist_ok=True)
    lines = table(rows)
    text = markdown(lines)
    (out / "table.md").write_text(text)
    with open(out / "table.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        writer.writerows(lines)
    plot(rows, out / "valid_ppl.png")
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="vdrnn report", description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run or sweep dirs holding metrics.json files")
    parser.add_argument("--out", type=Path, default=None, help="where table.md, table.csv and valid_ppl.png go "
                                                               "(default: the first folder)")
    args = parser.parse_args(argv)
    out = args.out or args.folders[0]
    print(write_report(args.folders, out), end="")
    print(f"\nwrote {out / 'table.md'}, {out / 'table.csv'}, {out / 'valid_ppl.png'}")
