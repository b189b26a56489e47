"""vdrnn as an installed distribution: its name on an index (the import package and the command are `vdrnn`), its
version, and the `pip install` line that adds one of its extras to the environment it runs in."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from vdrnn import __version__

# PyPI's `vdrnn` is an unrelated project, which an install by that name would get.
DISTRIBUTION = "vdrnn-experiments"


def version_line() -> str:
    return f"vdrnn {__version__} (distribution {DISTRIBUTION})"


def install_line(extra: str) -> str:
    """The command that installs ``extra``: from the checkout vdrnn runs from (the README's editable install), else
    the extra's own requirements, which resolve on PyPI whatever this distribution's name is there."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file():
        return f"pip install -e '{checkout}[{extra}]'"
    marker = f'extra == "{extra}"'
    requirements = [r.split(";")[0].strip() for r in metadata.requires(DISTRIBUTION) or [] if marker in r]
    return "pip install " + " ".join(f"'{requirement}'" for requirement in requirements)
