"""What `vdrnn report` reads of run folders: a record that is damaged, not vdrnn's or not a file is refused in one line
naming it, with status 2; an --out it cannot write with status 4; never a traceback or a hang."""

from __future__ import annotations

import errno
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import run_in_process
from tests.report.test_report import end_run, fake_ptb_run

PAPER = {"table": 1, "row": "Variational (tied weights)", "size": "medium", "valid": 81.8, "test": 79.7,
         "test_mc": 79.0}


def report(tmp_path, *args):
    return run_in_process("report", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), *args, cwd=tmp_path,
                          check=False)


def assert_refused(result, status: int, *words: str) -> None:
    """One line on stderr, the status, no traceback."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == status and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(word in lines[0] for word in words), lines[0]


@pytest.mark.parametrize("content,problem", [
    (b"[]", "it holds [], not a JSON object"),
    (b"null", "it holds null, not a JSON object"),
    (b'{"valid_ppl": 1}\xff\xfe', "is not UTF-8 text"),
    (b'{"config": "x"}', "its config is not a run's config"),
    (b'{"paper": "x", "config": {}}', "paper"),
    (b'{"status": "done"}', "its status is 'done'"),
    (b"", "is not valid JSON"),  # what a full disk left of a file written in place
], ids=["list", "null", "not-utf8", "config-string", "paper-string", "unknown-status", "empty"])
def test_a_metrics_json_that_is_no_run_record_is_refused_naming_it(tmp_path, content, problem):
    fake_ptb_run(tmp_path / "runs" / "s1", 1, [])
    path = tmp_path / "runs" / "s1" / "metrics.json"
    path.write_bytes(content)
    assert_refused(report(tmp_path), 2, str(path), problem, "move its run out of the folders reported")


def test_an_empty_eval_json_is_refused_naming_it(tmp_path):
    fake_ptb_run(tmp_path / "runs" / "s1", 1, [])
    (tmp_path / "runs" / "e1").mkdir()
    (tmp_path / "runs" / "e1" / "eval.json").write_text("")
    assert_refused(report(tmp_path), 2, str(tmp_path / "runs" / "e1" / "eval.json"), "is not valid JSON")


@pytest.mark.parametrize("make", [os.mkdir, os.mkfifo], ids=["folder", "fifo"])
def test_a_metrics_json_that_is_no_file_is_refused_without_reading_it(tmp_path, make):
    """A FIFO would block the read until something wrote to it."""
    fake_ptb_run(tmp_path / "runs" / "s1", 1, [])
    (tmp_path / "runs" / "s2").mkdir()
    make(tmp_path / "runs" / "s2" / "metrics.json")
    assert_refused(report(tmp_path), 2, str(tmp_path / "runs" / "s2" / "metrics.json"), "is not a file")


def test_a_run_trained_with_paper_a_string_is_refused_not_a_crash(tmp_path):
    fake_ptb_run(tmp_path / "runs" / "s1", 1, [], paper="Table 1")
    assert_refused(report(tmp_path), 2, "paper", str(tmp_path / "runs" / "s1" / "metrics.json"))


def test_a_crashed_run_is_counted_as_failed_with_its_reason(tmp_path):
    runs = tmp_path / "runs"
    fake_ptb_run(runs / "s1", 1, [])
    fake_ptb_run(runs / "s2", 2, [])
    end_run(runs / "s2", "failed", "crashed with ZeroDivisionError: division by zero")
    result = report(tmp_path)
    assert result.returncode == 0 and "| 1 + 1 failed |" in result.stdout
    assert f"{runs / 's2'}: crashed with ZeroDivisionError" in result.stderr


@pytest.mark.parametrize("out,fix", [("/dev/null/out", "A file stands where a folder should be"),
                                     ("full", "Free space on that disk")], ids=["not-a-folder", "full-disk"])
def test_an_out_folder_that_cannot_be_written_ends_in_a_line_with_status_4(tmp_path, monkeypatch, out, fix):
    fake_ptb_run(tmp_path / "runs" / "s1", 1, [])
    if out == "full":
        def full(fd):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", full)
    result = run_in_process("report", str(tmp_path / "runs"), "--out", out, cwd=tmp_path, check=False)
    assert_refused(result, 4, "cannot write", fix)
    assert not list(tmp_path.rglob(".*.tmp"))  # no half-written table left behind


# A valid record's entries, and values of every JSON type to put in their place.
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=4),
                   st.just([]), st.just({}), st.just([1, "x"]), st.just({"a": "b"}))
TOP_KEYS = ["config", "paper", "status", "reason", "epochs", "valid_ppl", "test_ppl", "wps", "train_seconds",
            "noise", "smoke", "time_limited", "test_reliability", "start_epoch"]
CONFIG_KEYS = ["data", "model", "dropout", "cell", "trainer", "eval", "seed", "init_from", "paper"]


@st.composite
def damaged_record(draw) -> tuple[str, bytes | None]:
    """(what was done, the bytes of metrics.json, or None for no file): a valid record with entries dropped,
    retyped or replaced, at the top or in its config; or bytes that are no JSON object."""
    metrics = {"valid_ppl": 83.0, "test_ppl": 80.0, "epochs": 3, "train_seconds": 60.0, "wps": 100.0,
               "status": "finished", "paper": dict(PAPER),
               "config": {"data": {"name": "ptb", "task": "lm"}, "model": {"hidden_size": 650},
                          "dropout": {"scheme": "variational", "input": 0.3}, "cell": {"type": "lstm"},
                          "trainer": {"epochs": 3}, "eval": {"mode": "scale"}, "seed": 1}}
    changes = []
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "config", "bytes"]))
        if where == "bytes":
            raw = draw(st.sampled_from([b"", b"[", b"\xff", b"0", b'"x"', b"[1]", b"null"]))
            return f"bytes {raw!r}", raw
        if where == "config" and not isinstance(metrics.get("config"), dict):
            continue  # an earlier change already dropped or replaced the config
        tree, keys = (metrics, TOP_KEYS) if where == "top" else (metrics["config"], CONFIG_KEYS)
        key = draw(st.sampled_from(keys))
        if draw(st.booleans()):
            tree.pop(key, None)
            changes.append(f"drop {where}.{key}")
        else:
            tree[key] = draw(VALUES)
            changes.append(f"{where}.{key}={tree[key]!r}")
    return "; ".join(changes), json.dumps(metrics).encode()


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=damaged_record())
def test_any_run_folder_is_reported_or_refused_in_one_line(tmp_path_factory, record):
    what, content = record
    tmp_path = tmp_path_factory.mktemp("report")
    fake_ptb_run(tmp_path / "runs" / "s1", 1, [])
    (tmp_path / "runs" / "s2").mkdir()
    (tmp_path / "runs" / "s2" / "metrics.json").write_bytes(content)
    result = report(tmp_path)
    assert "Traceback" not in result.stderr, (what, result.stderr)
    if result.returncode != 0:
        assert_refused(result, 2, str(tmp_path / "runs" / "s2" / "metrics.json"))
