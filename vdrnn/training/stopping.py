"""Stopping a run on a signal without losing more than the step in progress.

Schedulers stop jobs with signals: SIGTERM on preemption or cancellation, a user signal some time before the time
limit (SLURM's ``--signal``, SIGUSR2 under submitit), Ctrl-C is SIGINT, and closing the terminal sends SIGHUP.
While the run trains, a signal only raises a flag: the step in progress finishes, the trainer writes a mid-epoch
checkpoint of everything the rest of the epoch depends on (weights, optimizer, random states, the data position, the
carried hidden state, the loss sums), and the run stops with status 128 + the signal's number. The same command
then continues from that step, and ends with the numbers an uninterrupted run gives.

A handler someone installed before the run (submitit's, which requeues the job on its signal and lets SIGTERM pass)
is honoured: once the checkpoint is written it is called in place of stopping, and if it returns the run goes on.
Outside the steps (loading data, the final test) nothing is lost by stopping at once, so a signal stops there
directly. While a checkpoint is being written every signal waits for the write to end; a second Ctrl-C during the
steps stops without a checkpoint (the previous one stays).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from vdrnn.errors import RunStopped

log = logging.getLogger("vdrnn")

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class StopSignals:
    """Installs handlers for SIGNALS while it is entered (in the main thread only: Python runs handlers there)."""

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        self.received: int | None = None  # a signal not yet acted on
        self.training = False  # within the steps: only raise the flag
        self.writing = False  # within a checkpoint write: wait for it

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.previous = {signum: signal.signal(signum, self._handle) for signum in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def _handle(self, signum: int, frame) -> None:
        if self.writing:
            self.received = self.received or signum
        elif self.training:
            if self.received == signal.SIGINT and signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: now, from the last checkpoint
            self.received = self.received or signum
        else:
            self.pass_on(signum, "outside the training steps (every finished epoch is saved)")

    @contextmanager
    def during_steps(self) -> Iterator[None]:
        self.training = True
        try:
            yield
        finally:
            self.training = False

    @contextmanager
    def held(self) -> Iterator[None]:
        """Signals wait while the block (a checkpoint write) runs."""
        was, self.writing = self.writing, True
        try:
            yield
        finally:
            self.writing = was

    def take(self) -> int | None:
        """The signal received since the last call, if any (it is then acted on)."""
        signum, self.received = self.received, None
        return signum

    def pass_on(self, signum: int, kept: str) -> None:
        """Act on ``signum`` once the run's state is safe: call the handler installed before the run, if it is one of
        Python code (submitit's requeue), and return where it does; else raise RunStopped, saying what was ``kept``."""
        previous = self.previous.get(signum)
        if callable(previous) and previous is not signal.default_int_handler:
            log.info("%s came %s; handing the signal on to the handler installed before the run (%s)",
                     signal_name(signum), kept, getattr(previous, "__qualname__", previous))
            previous(signum, None)
            return
        raise RunStopped(signum, f"stopped by {signal_name(signum)} {kept}")
