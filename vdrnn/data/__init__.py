"""Datasets: each module loads one corpus from a local folder (or downloads it) and checks it."""

from pathlib import Path

from vdrnn.errors import DataError


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
