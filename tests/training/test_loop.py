"""One epoch's steps (vdrnn.training.loop): the CPU estimate a run gives after its first steps."""

import pytest

from vdrnn.tasks import TASKS
from vdrnn.training import loop


@pytest.fixture
def estimate_of(monkeypatch):
    """A RunEstimate whose TIMED steps take ``step_seconds`` each, as the first of this process."""
    monkeypatch.setattr(loop.RunEstimate, "said", False)

    def made(step_seconds: float, steps: int, length: str):
        clock = iter([10.0, 10.0 + loop.RunEstimate.TIMED * step_seconds])
        monkeypatch.setattr(loop.time, "perf_counter", lambda: next(clock))
        return loop.RunEstimate(steps, length, "vdrnn train first")

    return made


@pytest.mark.parametrize("step_seconds,steps,epochs,said", [
    (0.5, 100, 1, "takes about 50 seconds here"),
    (0.5, 1_000, 3, "takes about 8 minutes here"),
    (2.0, 50_000, 39, "takes about 27.8 hours here"),
])
def test_the_cpu_estimate_is_said_once_from_the_steps_after_the_first(estimate_of, step_seconds, steps, epochs, said):
    estimate = estimate_of(step_seconds, steps, f"{epochs} epochs")
    lines = [estimate.step() for _ in range(8)]
    assert lines[: loop.RunEstimate.TIMED] == [None] * loop.RunEstimate.TIMED and lines[-4:] == [None] * 4
    line = lines[loop.RunEstimate.TIMED]
    assert line.startswith(f"on the CPU a step takes {step_seconds:.2f} s: this run's training ({epochs} epochs)")
    assert said in line
    # a run of about a minute is what the suggestion would be: it is made only to a longer one
    assert line.endswith("A first run that ends in about a minute: vdrnn train first") == (steps * step_seconds > 120)


def test_the_jobs_after_the_first_of_a_sweep_in_one_process_say_no_estimate(estimate_of):
    first = estimate_of(0.5, 1_000, "3 epochs")
    said = [first.step() for _ in range(loop.RunEstimate.TIMED + 1)]
    second = estimate_of(0.5, 1_000, "3 epochs")
    assert said[-1] and not any(second.step() for _ in range(8))


def test_the_first_run_suggested_is_on_the_run_s_own_dataset():
    lm, sentiment = TASKS["lm"], TASKS["sentiment"]
    assert lm.first_run("ptb") == "vdrnn train model=small trainer.epochs=1 trainer.max_steps=150 " \
                                  "data.eval_max_tokens=10000"
    assert lm.first_run("wikitext2").startswith("vdrnn train dataset=wikitext2 model=small ")
    assert sentiment.first_run("scale").startswith("vdrnn train dataset=scale data.limit=500 ")
    assert sentiment.first_run("imdb").startswith("vdrnn train dataset=imdb ")


def test_bars_are_drawn_on_a_terminal_unless_asked(monkeypatch):
    from vdrnn.training import bars

    for terminal in (True, False):
        monkeypatch.setattr(bars.sys.stderr, "isatty", lambda terminal=terminal: terminal)
        assert bars.bars_shown("auto") is terminal
        assert bars.bars_shown(True) and not bars.bars_shown(False)


def test_a_capped_run_is_suggested_no_first_run(estimate_of, monkeypatch):
    """A smoke run (trainer.max_steps, capped data) is capped already: on a slow machine the README's first run itself
    would otherwise be told to run itself."""
    monkeypatch.setattr(loop.time, "perf_counter", iter([10.0, 10.0 + loop.RunEstimate.TIMED * 2.0]).__next__)
    estimate = loop.RunEstimate(150, "150 steps, trainer.max_steps", None)
    line = [estimate.step() for _ in range(loop.RunEstimate.TIMED + 1)][-1]
    assert line.endswith("takes about 5 minutes here")
