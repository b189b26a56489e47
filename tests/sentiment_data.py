"""Where the tests find the real sentiment data: $VDRNN_DATA_DIR or ../shared/data (as CI has it)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def real_data_dir(name: str, marker: str) -> Path | None:
    """The folder ``name`` (imdb, scale_data) of the first data dir that holds ``name/marker``."""
    for candidate in (os.environ.get("VDRNN_DATA_DIR"), str(REPO.parent / "shared" / "data")):
        if candidate and (Path(candidate) / name / marker).exists():
            return Path(candidate) / name
    return None
