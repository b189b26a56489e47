"""One epoch's steps (vdrnn.training.loop): the CPU estimate a run gives after its first steps."""

import pytest

from vdrnn.training import loop


@pytest.mark.parametrize("step_seconds,steps,epochs,said", [
    (0.5, 100, 1, "takes about 1 minute here"),
    (0.5, 1_000, 3, "takes about 8 minutes here"),
    (2.0, 50_000, 39, "takes about 27.8 hours here"),
])
def test_the_cpu_estimate_is_said_once_from_the_steps_after_the_first(monkeypatch, step_seconds, steps, epochs, said):
    clock = iter([10.0, 10.0 + loop.RunEstimate.TIMED * step_seconds])
    monkeypatch.setattr(loop.time, "perf_counter", lambda: next(clock))
    estimate = loop.RunEstimate(steps, f"{epochs} epochs", "vdrnn train first")
    lines = [estimate.step() for _ in range(8)]
    assert lines[: loop.RunEstimate.TIMED] == [None] * loop.RunEstimate.TIMED and lines[-4:] == [None] * 4
    line = lines[loop.RunEstimate.TIMED]
    assert line.startswith(f"on the CPU a step takes {step_seconds:.2f} s: this run's training ({epochs} epochs)")
    assert said in line and line.endswith("A first run that ends in about a minute: vdrnn train first")
