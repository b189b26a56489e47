"""Progress bars: a training epoch's (vdrnn.training.loop), an evaluation pass's and MC dropout's, drawn on stderr
as ``trainer.progress`` says."""

from __future__ import annotations

import sys

from tqdm import tqdm


def bars_shown(progress: bool | str) -> bool:
    """Whether a run draws progress bars (``trainer.progress``): true, false, or auto: only where stderr is a
    terminal, so that a log file or a cluster job's .err gets the log lines without the bars' redraws."""
    return progress is True or (progress == "auto" and sys.stderr.isatty())


def pass_bar(label: str, minibatches: int, progress: bool | str) -> tqdm:
    """The bar of one pass over a split without dropout (validation, the weight-scaling test), minibatches done."""
    return tqdm(total=minibatches, desc=label, unit="batch", disable=not bars_shown(progress), leave=False,
                dynamic_ncols=True)


def mc_progress(samples: int, parts: int, progress: bool | str) -> tqdm:
    """The bar of an MC-dropout evaluation of ``samples`` passes, each of ``parts`` pieces (its minibatches, or the
    reviews), updated by whole pieces: it shows samples done and time left, and ends at its total."""
    return tqdm(total=samples * parts, unit_scale=1 / parts, desc="MC dropout", disable=not bars_shown(progress),
                leave=False, dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} samples [{elapsed}<{remaining}]")


def finish(bar: tqdm) -> None:
    """Draw a bar's end (tqdm redraws at most ten times a second, so its last update may not show) and close it."""
    bar.refresh()
    bar.close()
