"""A command's output folder and its log file, made and opened by vdrnn, so that one that cannot be written ends the
command in one line with status 4 (a WriteError) rather than in Hydra's traceback.

Hydra makes a job's folder and opens its log before the job's code runs. :class:`MakeOutputDir`, a Hydra callback
(conf/config.yaml, ``hydra.callbacks``), makes the folder first; the log file is opened late (``delay`` in
``hydra.job_logging``), by :func:`open_log` as the command starts.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from vdrnn.errors import WriteError
from vdrnn.files import make_folder, write_error


class MakeOutputDir(Callback):
    """Makes ``hydra.run.dir`` (a run) or ``hydra.sweep.dir`` (a sweep) before Hydra would."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        make_or_exit(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        make_or_exit(config, "hydra.sweep.dir")


def make_or_exit(config: DictConfig, key: str) -> None:
    """Make the folder ``key`` names, or print why it cannot be made and exit with status 4 (a SystemExit passes
    through Hydra, which would print any Exception with its traceback)."""
    folder = OmegaConf.select(config, key)
    try:
        make_folder(Path(folder))
    except WriteError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(err.exit_status) from None


def open_log() -> None:
    """Open the run's log file (vdrnn.log), a WriteError where it cannot be; the handler then goes, so that no later
    line tries it again."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and handler.stream is None:
            try:
                handler.stream = handler._open()
            except OSError as err:
                root.removeHandler(handler)
                raise write_error(Path(handler.baseFilename), err, kept="") from err


def log_file() -> Path | None:
    """The run's log file, where one is open."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler.stream is not None:
            return Path(handler.baseFilename)
    return None
