"""The paths a user gives a run (data.root, checkpoint, resume, init_from, a data.reader file, ood_root), read from
the folder the command was launched in, as the user typed them there.

Hydra runs a job in its output folder under ``hydra.job.chdir=true``; a relative path would then be looked for there.
Under Hydra's default (the job runs where it was launched) the paths stay as given, and so does the config a run
records.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

PATH_KEYS = ("data.root", "checkpoint", "resume", "init_from", "data.reader", "ood_root")


def is_reader_file(reader: str | None) -> bool:
    """Does ``data.reader`` name a file (``readers/wiki.py``) rather than a module (``mypackage.wiki``)?"""
    return bool(reader) and reader.endswith(".py")


def from_launch_dir(raw: dict[str, Any], launch_dir: str | Path) -> dict[str, Any]:
    """``raw`` (a composed config, plain containers) with each relative path of PATH_KEYS made absolute from
    ``launch_dir`` where the job runs elsewhere; a data.reader module name is not a path and stays."""
    launch_dir = Path(launch_dir)
    if Path.cwd() == launch_dir:
        return raw
    raw = {key: dict(value) if isinstance(value, dict) else value for key, value in raw.items()}
    for key in PATH_KEYS:
        group, _, leaf = key.rpartition(".")
        section = raw.get(group) if group else raw
        value = section.get(leaf) if isinstance(section, dict) else None
        if not isinstance(value, str) or not value or (leaf == "reader" and not is_reader_file(value)):
            continue
        path = Path(value).expanduser()
        if not path.is_absolute():
            section[leaf] = str(launch_dir / path)
    return raw


def importable_from(launch_dir: str | Path) -> None:
    """Let a data.reader module in the launch folder be imported, as ``python -m`` would (the `vdrnn` command's own
    folder is on the path instead); after everything else on the path, so that it shadows no installed module."""
    folder = str(Path(launch_dir).resolve())
    if folder not in sys.path:
        sys.path.append(folder)
