"""`vdrnn train` of one run: its task's trainer set up, trained and tested in the run's folder, which the run
holds alone (:mod:`.lock`) and stops in safely on a signal (:mod:`.stopping`); a run that ends without its
result, stopped, refused mid-way or crashed, says so in its metrics.json.

Nothing here imports torch: a config error comes back before the task's trainer loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vdrnn.errors import Crashed, RunStopped, VdrnnError
from vdrnn.training.lock import RunLock

if TYPE_CHECKING:
    from vdrnn.tasks.base import Task


def train(task: Task, raw: dict[str, Any], run_dir: Path,
          accepted: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """`vdrnn train` of ``task`` under its composed config ``raw`` (plain containers): setup, then
    ``accepted()`` (the start is not refused: its settings valid, and a resume's those its checkpoint allows),
    then train and test; metrics.json's contents."""
    cfg = task.parse(raw)  # a config error comes back before the trainer imports torch
    trainer = task.trainer()(task, cfg, run_dir, raw)
    with RunLock(run_dir), trainer.stops:
        trainer.setup()
        accepted()
        try:
            return trainer.train()
        except (RunStopped, KeyboardInterrupt, SystemExit) as stop:
            # SystemExit: a launcher's own handler (submitit's) ending the job to requeue it
            trainer.record_end("stopped", str(stop) if isinstance(stop, RunStopped) else
                               f"stopped ({type(stop).__name__}); {trainer.folder.last} holds the last saved step")
            raise
        except Exception as err:
            # Whatever ends a run without its result, a fault of its input or a bug, leaves it marked failed, why.
            trainer.record_end("failed", str(err if isinstance(err, VdrnnError) else Crashed.of(err)))
            raise
        finally:
            trainer.cleanup()
