"""Files: written so that a crash leaves either the old file or the new one, never half of one (every file vdrnn
writes goes through :func:`replaced_atomically`, but for its log and TensorBoard's event streams, which only grow);
folders made with a failure named as a :class:`WriteError`; and the data files a dataset needs, checked before
reading."""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TypeVar

from vdrnn.distribution import install_line
from vdrnn.errors import DataError, WriteError

T = TypeVar("T")


@contextmanager
def replaced_atomically(path: str | Path) -> Iterator[BinaryIO]:
    """Yield a binary file to write ``path``'s new contents to. They go to a temporary file of a name no other writer
    uses, in the same folder, reach the disk (fsync), and only then replace ``path`` in one ``os.replace``; if the
    writer raises, ``path`` is untouched and the temporary file removed. A failed write (disk full, quota, read-only
    folder) is a :class:`WriteError` naming the file and the fix."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}")
    try:
        with open(tmp, "xb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        cause = os_error_in(err)
        if cause is not None:
            raise write_error(path, cause) from err
        raise


TEMP_SUFFIX = ".tmp"  # what a writer killed mid-write leaves behind (RunLock removes them)


def os_error_in(err: BaseException) -> OSError | None:
    """The OSError behind ``err``: itself, or the one a library's error was raised while handling (torch's zip writer
    turns a failed write into a RuntimeError whose context is the OSError)."""
    while err is not None:
        if isinstance(err, OSError):
            return err
        err = err.__cause__ or err.__context__
    return None


# What to do about a failed write, by errno.
WRITE_FIXES = {
    errno.ENOSPC: "free space on that disk",
    errno.EDQUOT: "free space in your quota there",
    errno.EFBIG: "the file is larger than this process may write (ulimit -f): raise the limit",
    errno.EACCES: "make the folder writable, or choose another output dir (hydra.run.dir=...)",
    errno.EROFS: "the disk is read-only: choose another output dir (hydra.run.dir=...)",
    errno.EPERM: "make the folder writable, or choose another output dir (hydra.run.dir=...)",
    errno.ENAMETOOLONG: "a name in the path is longer than the file system allows: choose a shorter one",
    errno.EEXIST: "a file stands where a folder should be: choose another output dir (hydra.run.dir=...)",
    errno.ENOTDIR: "a file stands where a folder should be: choose another output dir (hydra.run.dir=...)",
    errno.EISDIR: "a folder stands where the file should be: move it aside",
}


def write_error(path: Path, err: OSError, kept: str = "; what the file held before is intact") -> WriteError:
    """The WriteError of a failed write of ``path``: what the system said, the fix, and what is ``kept``."""
    fix = WRITE_FIXES.get(err.errno, "fix what the system says")
    return WriteError(f"cannot write {path}: {err.strerror or err}. {fix[0].upper()}{fix[1:]}, then run the same "
                      f"command again{kept}")


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path``'s contents so that a crash leaves either the old file or the new one."""
    with replaced_atomically(path) as f:
        f.write(text.encode())


def append_line(path: Path, line: str) -> None:
    """Add one line to ``path`` (a JSON-lines history), replacing the file whole: a crash leaves every line
    whole."""
    try:
        before = path.read_bytes() if path.exists() else b""
    except OSError as err:
        raise write_error(path, err) from err
    with replaced_atomically(path) as f:
        f.write(before + line.encode() + b"\n")


def make_folder(path: Path) -> None:
    """``path`` and its parents, made where missing; a :class:`WriteError` naming the fix where they cannot be (a
    read-only disk, a file in the way, a name over the file system's limit)."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise write_error(Path(path), err, kept="") from err


def read_utf8(path: Path, fix: str) -> str:
    """``path``'s text, or a DataError naming the first byte that is not UTF-8 (its line and column) and ``fix``."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise DataError(f"{path} is not UTF-8 text: byte 0x{data[err.start]:02x} at line {line}, column {column}; "
                        f"{fix}") from None


def data_folder(root: str | None, name: str) -> tuple[Path, str]:
    """Where dataset ``name``'s files are, and how a message names the place: ``data.root`` where given, else
    ``$VDRNN_DATA_DIR/<name>``; a DataError saying how to give either where neither is set."""
    if root:
        return Path(root).expanduser(), f"data.root={root}"
    env = os.environ.get("VDRNN_DATA_DIR")
    if not env:
        raise DataError(f"{name}: no data.root given and $VDRNN_DATA_DIR is not set; pass data.root=/path/to/folder, "
                        f"or set VDRNN_DATA_DIR to a folder holding {name}/")
    return Path(env).expanduser() / name, f"$VDRNN_DATA_DIR/{name}"


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


def load_from_hub(load: Callable[[], T], name: str, call: str, put: str) -> T:
    """``load()``, which loads dataset ``name`` through Hugging Face's datasets (``call``, as the message spells it),
    or a DataError that says to ``put`` the files in place instead ("put X in Y, or pass data.root=..."): without
    datasets, with the install line of the hub extra; with it, with why the load failed (its first line)."""
    try:
        return load()
    except ImportError as err:
        raise DataError(f"{name} not found: {put}; or, with internet, install Hugging Face's datasets to load its copy: "
                        f"{install_line('hub')}") from err
    except Exception as err:  # no internet, no datasets cache, hub errors: all mean "not here"
        why = str(err).splitlines()[0][:200] if str(err) else ""
        raise DataError(f"{name} not found and {call} failed ({type(err).__name__}: {why}). "
                        f"{put[0].upper()}{put[1:]}.") from err
