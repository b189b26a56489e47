"""One run at a time in a run folder: a lock held while a run writes it.

Two runs in one folder would write the same checkpoints and history over each other. The lock is an ``flock`` on
``<run>/.lock``, which holds the owner's pid: the operating system releases it when the process ends, however it ends
(kill -9 included), so a stale lock never blocks a rerun, and a second start while the first lives is refused with a
line naming it. Whoever holds the lock is the folder's only writer, so temporary files there are leftovers of a
writer that was killed, and go.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from vdrnn.errors import FolderInUse
from vdrnn.files import TEMP_SUFFIX

LOCK = ".lock"


class RunLock:
    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK
        self.file = None

    def acquire(self) -> None:
        """Take the lock, or raise FolderInUse naming the process that holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = open(self.path, "a+")  # noqa: SIM115 (held open for the run's life: the lock lives with the handle)
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip() or "unknown"
            file.close()
            raise FolderInUse(f"{self.path.parent} is in use by another run (pid {holder}, still running): wait for it "
                              f"to finish, stop it (kill {holder}: it saves its state and this command then continues "
                              f"it), or start this run in a new output dir (hydra.run.dir=...)") from None
        file.seek(0)
        file.truncate()
        file.write(f"{os.getpid()}\n")
        file.flush()
        self.file = file
        for leftover in self.path.parent.glob(f".*{TEMP_SUFFIX}"):
            leftover.unlink(missing_ok=True)

    def release(self) -> None:
        if self.file is not None:
            self.file.close()  # closing the handle releases the flock
            self.file = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
