"""A table as the report writes it: Markdown for reading, CSV for tools."""

from __future__ import annotations

import csv
from pathlib import Path


def markdown(lines: list[list[str]], columns: list[str]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out) + "\n"


def write_table(lines: list[list[str]], columns: list[str], stem: Path, notes: list[str] = ()) -> str:
    """``stem``.md (with ``notes`` under the table) and ``stem``.csv; returns the Markdown."""
    text = markdown(lines, columns) + "".join(f"\n{note}\n" for note in notes)
    stem.with_suffix(".md").write_text(text)
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(lines)
    return text
