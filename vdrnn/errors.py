"""User-facing errors: each names the problem and the fix; the CLI prints them without a traceback."""


class VdrnnError(Exception):
    """Base class for errors caused by input (configuration, data, checkpoints), not by bugs."""


class ConfigError(VdrnnError, ValueError):
    """A configuration value is invalid or inconsistent."""


class DataError(VdrnnError):
    """Data files are missing, unreadable or not the expected corpus."""


class CheckpointError(VdrnnError):
    """A checkpoint is missing, unreadable or does not fit the model."""


class TrainingDiverged(VdrnnError):
    """The loss became NaN or infinite."""
