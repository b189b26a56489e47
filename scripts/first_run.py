#!/usr/bin/env python3
"""The README's first run as a newcomer makes it: its command, verbatim, in an empty folder, and each line the README
shows of its output found in what the command prints.

    python scripts/first_run.py     # .ci/run runs it once the suite has passed, on the installed `vdrnn`

The numbers (perplexities, seconds, words/s, the CPU threads) and the estimate's length differ by platform and load;
the README's lines are matched with any number in their place, ``...`` standing for the rest of a line and
``outputs/<date>/<time>`` for the run's folder.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def first_run(readme: str) -> tuple[str, list[str]]:
    """The README's first-run command and the output lines it shows: the first bash block of its "A first run"
    section and the plain block after it."""
    section = re.search(r"^## A first run.*?(?=^## )", readme, flags=re.M | re.S)
    if not section:
        sys.exit("README.md has no '## A first run' section")
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", section[0], flags=re.M | re.S)  # (language, text)
    command = next(text for language, text in blocks if language == "bash").strip()
    shown = next(text for language, text in blocks if not language).strip().splitlines()
    return command, shown


def pattern(line: str) -> re.Pattern:
    """What a README output line matches: itself, with any number for its numbers, any length of time for the
    estimate's, any run folder for ``outputs/<date>/<time>``, and anything for a closing ``...``."""
    text = re.escape(line.removesuffix("...").rstrip())
    text = re.sub(r"about\\ \d+\\ (?:second|minute|hour)s?", r"about\\ [\\d.]+\\ (?:second|minute|hour)s?", text)
    text = re.sub(r"\d[\d,]*(?:\\\.\d+)?", r"[\\d,]+(?:\\.\\d+)?", text)
    text = text.replace(re.escape("outputs/<date>/<time>"), r"\S*outputs/\S+")  # the log names it in full
    return re.compile(text)


def missing(shown: list[str], printed: str) -> list[str]:
    """The README's lines that no printed line holds."""
    lines = printed.splitlines()
    return [line for line in shown if not any(pattern(line).search(out) for out in lines)]


def main() -> None:
    command, shown = first_run(README.read_text())
    print(f"$ {command}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(shlex.split(command), cwd=folder, capture_output=True, text=True)
    printed = done.stdout + done.stderr
    print(printed, end="")
    if done.returncode != 0:
        sys.exit(f"the README's first run failed (exit status {done.returncode})")
    lacking = missing(shown, printed)
    if lacking:
        sys.exit("the README's first run did not print these lines it shows:\n  " + "\n  ".join(lacking))
    print(f"the README's first run printed the {len(shown)} lines it shows")


if __name__ == "__main__":
    main()
