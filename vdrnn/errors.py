"""User-facing errors: each names the problem and the fix; the CLI prints them without a traceback and exits with
the error's ``exit_status`` (README, "Exit status").

    0          the run finished (metrics.json says "status": "finished")
    1          the run crashed (a bug, in vdrnn or in code the run imported); metrics.json says "failed" and why,
               and the run's vdrnn.log holds the traceback
    2          refused: a bad config, data, checkpoint or run record, or a run folder in use
    3          the training diverged (a NaN or infinite loss); metrics.json says "failed" and why
    4          a file or folder could not be written (disk full, quota, permissions, a read-only disk, a name too
               long); the last checkpoint is intact
    128 + N    stopped by signal N (143 SIGTERM, 130 Ctrl-C, 129 SIGHUP, 138 SIGUSR1, 140 SIGUSR2) after writing a
               checkpoint of the step it was on: the same command continues from there
"""

from __future__ import annotations


class VdrnnError(Exception):
    """Base class of the errors vdrnn reports in one line: those caused by input (configuration, data, checkpoints,
    run records) or by the system (a write that failed), and a crash (:class:`Crashed`)."""

    exit_status = 2


class ConfigError(VdrnnError, ValueError):
    """A configuration value is invalid or inconsistent."""


class DataError(VdrnnError):
    """Data files are missing, unreadable or not the expected corpus."""


class CheckpointError(VdrnnError):
    """A checkpoint is missing, unreadable or does not fit the model."""


class RecordError(VdrnnError):
    """A run's own record (metrics.json, metrics.jsonl, eval.json) is damaged, or not one vdrnn wrote."""


class FolderInUse(VdrnnError):
    """Another live run holds the run folder's lock."""


class TrainingDiverged(VdrnnError):
    """The loss became NaN or infinite."""

    exit_status = 3


class WriteError(VdrnnError):
    """A file could not be written: the disk or quota is full, or the folder is not writable."""

    exit_status = 4


class Crashed(VdrnnError):
    """A crash that no input explains: a bug, in vdrnn or in code the run imported (a ``data.reader``). The run's
    metrics.json says "failed" with this line, and its vdrnn.log holds the traceback."""

    exit_status = 1

    @classmethod
    def of(cls, err: BaseException) -> Crashed:
        said = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        return cls(f"crashed with {type(err).__name__}{f': {said}' if said else ''}")


class RunStopped(Exception):
    """A signal stopped the run (preemption, a scheduler's warning before the time limit, Ctrl-C) after its state
    was saved; not a VdrnnError, since nothing was wrong with the input. ``message`` says what was kept."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum
