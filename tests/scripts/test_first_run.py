"""The README's first run (scripts/first_run.py, which CI runs): its command is the first run vdrnn suggests, and
each line it shows is matched in a real run's output, with the numbers and lengths of time of any platform."""

import sys

import pytest

from tests.helpers import REPO
from vdrnn.tasks import TASKS

sys.path.insert(0, str(REPO / "scripts"))
import first_run  # noqa: E402

sys.path.remove(str(REPO / "scripts"))

# What the command printed on 2 CPU cores beside other work (stdout and stderr), the folder's name its own.
PRINTED = """\
[2026-12-06 00:15:48,146][vdrnn][WARNING] - CUDA is not available: running on the CPU (2 threads), which is slow for all but the smallest models
[2026-12-06 00:15:51,990][vdrnn][INFO] - model: 2 x 200 lstm (tied gates), sizes [200, 200, 200], 4.65M parameters; dropout variational; device cpu; output /tmp/fr/outputs/2026-12-06/00-15-43
[2026-12-06 00:15:59,465][vdrnn][INFO] - on the CPU a step takes 1.97 s: this run's training (150 steps, trainer.max_steps) takes about 5 minutes here
[2026-12-06 00:20:23,164][vdrnn][INFO] - epoch 1/1  lr 1  train ppl 1140.64  valid ppl 769.27  390 words/s  270s  (best)
[2026-12-06 00:20:43,912][vdrnn][INFO] - test ppl 726.36 (valid 769.27), ECE 0.1532
[2026-12-06 00:20:43,963][vdrnn][INFO] - finished: test ppl 726.36 (valid 769.27); /tmp/fr/outputs/2026-12-06/00-15-43 holds metrics.json, best.pt and the TensorBoard events
"""


def test_the_readme_s_first_run_is_the_one_vdrnn_suggests_and_shows_what_it_prints():
    command, shown = first_run.first_run((REPO / "README.md").read_text())
    assert command == TASKS["lm"].first_run("ptb")
    assert len(shown) == 6 and not first_run.missing(shown, PRINTED)


@pytest.mark.parametrize("changed", ["ECE 0.1532", "(best)", "finished: "])
def test_a_line_the_run_no_longer_prints_is_named(changed):
    _, shown = first_run.first_run((REPO / "README.md").read_text())
    lacking = first_run.missing(shown, PRINTED.replace(changed, ""))
    assert len(lacking) == 1 and changed.split()[0] in lacking[0]
