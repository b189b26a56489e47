"""User-facing errors: each names the problem and the fix; the CLI prints them without a traceback and exits with
the error's ``exit_status`` (README, "Exit status").

    0          the run finished (metrics.json says "status": "finished")
    2          refused: a bad config, data or checkpoint, or a run folder in use
    3          the training diverged (a NaN or infinite loss); metrics.json says "failed" and why
    4          a file could not be written (disk full, quota, permissions); the last checkpoint is intact
    128 + N    stopped by signal N (143 SIGTERM, 130 Ctrl-C, 138 SIGUSR1, 140 SIGUSR2) after writing a checkpoint
               of the step it was on: the same command continues from there
"""


class VdrnnError(Exception):
    """Base class for errors caused by input (configuration, data, checkpoints), not by bugs."""

    exit_status = 2


class ConfigError(VdrnnError, ValueError):
    """A configuration value is invalid or inconsistent."""


class DataError(VdrnnError):
    """Data files are missing, unreadable or not the expected corpus."""


class CheckpointError(VdrnnError):
    """A checkpoint is missing, unreadable or does not fit the model."""


class FolderInUse(VdrnnError):
    """Another live run holds the run folder's lock."""


class TrainingDiverged(VdrnnError):
    """The loss became NaN or infinite."""

    exit_status = 3


class WriteError(VdrnnError):
    """A file could not be written: the disk or quota is full, or the folder is not writable."""

    exit_status = 4


class RunStopped(Exception):
    """A signal stopped the run (preemption, a scheduler's warning before the time limit, Ctrl-C) after its state
    was saved; not a VdrnnError, since nothing was wrong with the input. ``message`` says what was kept."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum
