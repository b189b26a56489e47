"""The GPU scripts' parts that need no GPU: bench.py's ratios, table, choice of block shape and option checks,
sentiment_speed.py's, and kernel_ptx.py's argument types. Fake timings stand in for measured ones."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO

SCRIPTS = REPO / "scripts"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return load("bench")


def exit_of(main, monkeypatch, *args: str):
    """``main()`` on the command line ``args``: the SystemExit it raised."""
    monkeypatch.setattr(sys, "argv", ["script.py", *args])
    with pytest.raises(SystemExit) as exit:
        main()
    return exit.value


def step_row(hidden: int, amp: str, variant: str, ms: float) -> dict:
    """A row of the training-step table as bench_configs makes it (700 tokens a step), before its ratio."""
    return {"hidden": hidden, "amp": amp, "variant": variant, "ms": ms, "p10": ms * 0.9, "p90": ms * 1.1,
            "wps": 700 / ms * 1e3}


def test_ratios_are_against_the_cudnn_row_of_the_same_size_and_precision(bench):
    rows = bench.with_ratios([step_row(650, "off", "cudnn", 10.0), step_row(650, "bf16", "cudnn", 5.0),
                              step_row(1500, "off", "cudnn", 40.0), step_row(650, "bf16", "fast-tied", 7.5),
                              step_row(1500, "off", "fast-tied", 20.0), step_row(1500, "bf16", "fast-tied", 30.0)])
    assert [r["ratio"] for r in rows[:5]] == [1.0, 1.0, 1.0, 1.5, 0.5]
    assert math.isnan(rows[5]["ratio"])  # no cuDNN row at 1500 in bf16 to compare with
    # Another time and ratio key, as the GRU table's graphed times use.
    rows = bench.with_ratios([{"hidden": 650, "amp": "off", "variant": "cudnn", "graph_ms": 2.0},
                              {"hidden": 650, "amp": "off", "variant": "fast-tied", "graph_ms": 3.0}],
                             key="graph_ms", ratio="graph_ratio")
    assert [r["graph_ratio"] for r in rows] == [1.0, 1.5]


def test_the_step_table_has_a_column_per_measure(bench):
    rows = bench.with_ratios([step_row(650, "off", "cudnn", 10.0), step_row(650, "off", "fast-tied", 5.0)])
    lines = bench.table(rows).splitlines()
    assert lines[0] == "| hidden | precision | path | ms/step (p10-p90) | words/s | x cuDNN |"
    assert lines[1] == "|---|---|---|---|---|---|"
    assert lines[2] == "| 650 | fp32 (TF32) | cudnn | 10.00 (9.00-11.00) | 70,000 | 1.00 |"
    assert lines[3] == "| 650 | fp32 (TF32) | fast-tied | 5.00 (4.50-5.50) | 140,000 | 0.50 |"


def test_the_sweep_picks_the_fastest_block_shape_per_size_and_precision(bench):
    def row(hidden, amp, shape, ms):
        return {"hidden": hidden, "amp": amp, "config": dict(zip(bench.KNOBS, shape, strict=True)),
                "ms_fwd_bwd_layer": ms}

    a, b, c = bench.SWEEP[:3]
    rows = [row(650, "off", a, 2.0), row(650, "off", b, 1.0), row(650, "off", c, 3.0),
            row(650, "bf16", a, 1.0), row(650, "bf16", b, 1.5), row(1500, "off", c, 4.0)]
    assert bench.sweep_best(rows) == {(650, "off"): b, (650, "bf16"): a, (1500, "off"): c}


def test_a_size_the_sweep_has_no_shape_for_runs_with_the_default_shape_and_the_defaults_stay(bench, monkeypatch):
    """The training-step table, timed with fake steps: it runs on the CPU."""
    from vdrnn.kernels import launch

    default = tuple(getattr(launch, k) for k in bench.KNOBS)
    swept = next(shape for shape in bench.SWEEP if shape != default)
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *args, **kwargs: self)
    monkeypatch.setattr(bench, "build", lambda hidden, variant: (None, None))
    monkeypatch.setattr(bench, "make_step", lambda *args: None)
    monkeypatch.setattr(bench, "time_steps", lambda step, batches, warmup, iters: [1.0] * iters)
    args = argparse.Namespace(hidden=[650, 1500], amp=["off"], variants=["fast-tied"], iters=8, warmup=1)
    rows = bench.bench_configs(args, best={(650, "off"): swept})
    assert [tuple(r["fused_config"].values()) for r in rows] == [swept, default]
    assert tuple(getattr(launch, k) for k in bench.KNOBS) == default  # for the stages after the table


def test_a_block_shape_is_undone_even_when_its_stage_fails(bench):
    from vdrnn.kernels import launch

    default = tuple(getattr(launch, k) for k in bench.KNOBS)
    swept = next(shape for shape in bench.SWEEP if shape != default)
    with pytest.raises(RuntimeError), bench.block_shape(swept):
        assert tuple(getattr(launch, k) for k in bench.KNOBS) == swept
        raise RuntimeError("a block shape the compiler refuses")
    assert tuple(getattr(launch, k) for k in bench.KNOBS) == default


def test_too_few_timed_steps_are_refused_with_the_minimum(bench, monkeypatch, capsys):
    # bench.py times the slow paths over a quarter of --iters: fewer than 4 would leave them no step.
    assert exit_of(bench.main, monkeypatch, "--iters", "3").code == 2
    assert "--iters 3: at least 4" in capsys.readouterr().err
    # sentiment_speed.py times the steps after its warm-up step: --steps 0 would time none.
    assert exit_of(load("sentiment_speed").main, monkeypatch, "--steps", "0").code == 2
    assert "--steps 0: at least 1" in capsys.readouterr().err


def test_sentiment_speed_refuses_cuda_where_there_is_none(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert exit_of(load("sentiment_speed").main, monkeypatch, "--device", "cuda").code == 2
    assert "--device cuda: CUDA is not available here" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_kernel_ptx_types_pointers_by_name_and_refuses_an_argument_it_cannot_type():
    # In a subprocess: kernel_ptx imports Triton for the compiler, which must not happen in this process before
    # the interpreter tests set TRITON_INTERPRET (see test_kernel_compile.py).
    code = """if True:
        import json
        from types import SimpleNamespace as Fake
        import kernel_ptx
        names = ("t", "w_ptr", "xp_ptr", "cnt_ptr", "act_ptr", "c_scale", "H")
        kernel = Fake(__name__="_step", params=[Fake(name=n) for n in names])
        print(json.dumps(kernel_ptx.signature(kernel, "bf16", {"H": 650})))
        print(json.dumps(kernel_ptx.signature(kernel, "tf32", {"H": 650})))
        kernel.params.append(Fake(name="alpha"))  # a new scalar argument, in no list
        try:
            kernel_ptx.signature(kernel, "bf16", {"H": 650})
        except ValueError as err:
            print(err)
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", code], cwd=SCRIPTS, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    bf16, tf32, refused = result.stdout.splitlines()
    assert json.loads(bf16) == {"t": "i32", "w_ptr": "*bf16", "xp_ptr": "*bf16", "cnt_ptr": "*i32", "act_ptr": "*fp32",
                                "c_scale": "fp32", "H": "constexpr"}
    # TF32 products: W_hh stored in fp16, x_proj fp32.
    assert json.loads(tf32) == dict(json.loads(bf16), w_ptr="*fp16", xp_ptr="*fp32")
    assert refused.startswith("_step: argument 'alpha' is no pointer"), refused


def test_bench_awds_ratios_are_against_the_eager_row_of_the_same_optimizer(monkeypatch):
    bench_awd = load("bench_awd")
    rows = [{"variant": v, "optimizer": o, "wps": wps, "ms": 1.0, "graphs": 0}
            for v, o, wps in (("eager", "sgd", 100.0), ("eager", "asgd", 50.0), ("graphed", "sgd", 250.0),
                              ("graphed", "asgd", 150.0))]
    rows += [{"variant": "graphed", "eval": "test", "batch": 1, "graphed": g, "ppl": 60.0, "seconds": s}
             for g, s in ((False, 4.0), (True, 2.0))]
    text = bench_awd.table(rows)
    assert "| graphed | sgd | 250 | 1.00 | 2.50x |" in text and "| graphed | asgd | 150 | 1.00 | 3.00x |" in text
    assert "| test | graphed | 1 | 4.00 | 2.00 | 60.000 / 60.000 |" in text
    if not torch.cuda.is_available():
        assert "run it on a machine with a GPU" in str(exit_of(bench_awd.main, monkeypatch).code)
