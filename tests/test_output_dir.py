"""A run folder that cannot be made or written as the command starts: one line naming it and the fix, status 4, in
`vdrnn train` and `vdrnn eval` alike (Hydra would otherwise end them with its traceback and status 1)."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from tests.helpers import TINY, run_in_process


def assert_write_refused(result, *words: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 4 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "cannot write" in lines[0] and all(word in lines[0] for word in words), lines[0]


@pytest.mark.parametrize("command", ["train", "eval"])
@pytest.mark.parametrize("folder,fix", [
    ("/dev/null", "A file stands where a folder should be"),
    ("x" * 300, "longer than the file system allows"),
], ids=["a-file", "name-too-long"])
def test_a_run_folder_that_cannot_be_made_ends_in_one_line_with_status_4(tmp_path, tiny_corpus, command, folder,
                                                                          fix):
    args = [*TINY, f"data.root={tiny_corpus}"] if command == "train" else ["checkpoint=best.pt"]
    assert_write_refused(run_in_process(command, *args, f"hydra.run.dir={folder}", cwd=tmp_path, check=False), fix)


def test_a_sweep_folder_that_cannot_be_made_ends_in_one_line_with_status_4(tmp_path, tiny_corpus):
    result = run_in_process("train", "-m", *TINY, f"data.root={tiny_corpus}", "seed=1,2",
                            "hydra.sweep.dir=/dev/null/sweep", cwd=tmp_path, check=False)
    assert_write_refused(result, "/dev/null/sweep", "A file stands where a folder should be")


@pytest.fixture
def unwritable(monkeypatch):
    """Files that cannot be opened for writing, as in a read-only folder (root writes through permission bits, so
    the tests cannot make one with chmod)."""
    def refused(self):
        raise PermissionError(errno.EACCES, "Permission denied", self.baseFilename)

    monkeypatch.setattr(logging.FileHandler, "_open", refused)


def test_a_read_only_run_folder_ends_in_one_line_with_status_4(tmp_path, tiny_corpus, unwritable):
    result = run_in_process("train", *TINY, f"data.root={tiny_corpus}", "hydra.run.dir=run", cwd=tmp_path,
                            check=False)
    assert_write_refused(result, str(tmp_path / "run" / "vdrnn.log"), "Make the folder writable")
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_disk_that_fills_as_tensorboard_opens_its_file_ends_in_one_line_with_status_4(tmp_path, tiny_corpus,
                                                                                       monkeypatch):
    from vdrnn.training import tracking

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "events.out.tfevents"))

    monkeypatch.setattr(tracking, "SummaryWriter", full)
    result = run_in_process("train", *TINY, f"data.root={tiny_corpus}", "hydra.run.dir=run", cwd=tmp_path,
                            check=False)
    assert_write_refused(result, "events.out.tfevents", "Free space on that disk")
    assert "cannot write" in (tmp_path / "run" / "vdrnn.log").read_text()


def test_a_disk_that_fills_as_the_log_opens_ends_in_one_line_with_status_4(tmp_path, tiny_corpus, monkeypatch):
    def full(self):
        raise OSError(errno.ENOSPC, "No space left on device", self.baseFilename)

    monkeypatch.setattr(logging.FileHandler, "_open", full)
    result = run_in_process("eval", f"checkpoint={tmp_path / 'best.pt'}", "hydra.run.dir=eval", cwd=tmp_path,
                            check=False)
    assert_write_refused(result, str(tmp_path / "eval" / "vdrnn.log"), "Free space on that disk")
    assert os.listdir(tmp_path / "eval") == []
