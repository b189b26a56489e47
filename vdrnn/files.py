"""Files: written so that a crash leaves either the old file or the new one, never half of one; and the data files a
dataset needs, checked before reading."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from vdrnn.errors import DataError


@contextmanager
def replaced_atomically(path: str | Path) -> Iterator[BinaryIO]:
    """Yield a binary file to write ``path``'s new contents to. They go to a temporary file in the same folder,
    reach the disk (fsync), and only then replace ``path`` in one ``os.replace``; if the writer raises, ``path``
    is untouched and the temporary file removed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path``'s contents so that a crash leaves either the old file or the new one."""
    with replaced_atomically(path) as f:
        f.write(text.encode())


def require_files(folder: Path, names: list[str], origin: str, subfolder: str) -> None:
    """A DataError unless ``folder`` (named by ``origin``, e.g. ``data.root=...``) holds every file of ``names``,
    saying what is wrong: no such folder, a data folder given for the dataset's own (``subfolder``, e.g. ``ptb``,
    is inside it), or which files are missing."""
    missing = [name for name in names if not (folder / name).is_file()]
    if not missing:
        return
    lacks = f"holds none of {', '.join(names)}" if len(missing) == len(names) else f"lacks {', '.join(missing)}"
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        problem = f"{what}; point it at a folder holding {', '.join(names)}"
    elif (folder / subfolder).is_dir():
        problem = f"{lacks}, but holds a {subfolder}/ folder: pass data.root={folder / subfolder}"
    else:
        problem = lacks
    raise DataError(f"{origin}: {folder} {problem}")
