"""Writing a file so that a crash leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


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
