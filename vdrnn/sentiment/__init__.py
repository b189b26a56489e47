"""Sentiment analysis (IMDB classification, Pang & Lee scale regression) with any dropout scheme and cell.

`vdrnn train dataset=imdb|scale` and `vdrnn eval` on such a run's checkpoint land here
(:func:`vdrnn.cli.task`): ``run(raw, run_dir, accepted)`` trains and tests, ``evaluate(raw, path, payload)`` evaluates.
"""

from vdrnn.sentiment.trainer import evaluate, run

__all__ = ["evaluate", "run"]
