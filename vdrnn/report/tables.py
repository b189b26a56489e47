"""A table as the report writes it: Markdown for reading, CSV for tools."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from vdrnn.files import write_atomically


def markdown(lines: list[list[str]], columns: list[str]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out) + "\n"


def write_table(lines: list[list[str]], columns: list[str], stem: Path, notes: list[str] = ()) -> str:
    """``stem``.md (with ``notes`` under the table) and ``stem``.csv, each written whole (a failed write is a
    WriteError); returns the Markdown."""
    text = markdown(lines, columns) + "".join(f"\n{note}\n" for note in notes)
    write_atomically(stem.with_suffix(".md"), text)
    rows = io.StringIO(newline="")
    writer = csv.writer(rows)
    writer.writerow(columns)
    writer.writerows(lines)
    write_atomically(stem.with_suffix(".csv"), rows.getvalue())
    return text
