"""A run's paths read from the launch folder where Hydra runs the job elsewhere (hydra.job.chdir=true)."""

from pathlib import Path

from vdrnn.paths import from_launch_dir

RAW = {"data": {"root": "ptbdata", "reader": "readers/corpus.py"}, "checkpoint": "run/best.pt", "resume": None,
       "init_from": "/abs/best.pt", "ood_root": "wikitext-2", "model": {"hidden_size": 8}}


def test_relative_paths_are_the_launch_folder_s_when_the_job_runs_in_another(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    resolved = from_launch_dir(RAW, "/launch")
    assert resolved["data"] == {"root": "/launch/ptbdata", "reader": "/launch/readers/corpus.py"}
    assert resolved["checkpoint"] == "/launch/run/best.pt" and resolved["init_from"] == "/abs/best.pt"
    assert resolved["ood_root"] == "/launch/wikitext-2"
    assert resolved["resume"] is None and RAW["data"]["root"] == "ptbdata"  # the composed config is left as it was
    module = {**RAW, "data": {"root": None, "reader": "mypackage.corpus"}}
    assert from_launch_dir(module, "/launch")["data"] == {"root": None, "reader": "mypackage.corpus"}


def test_paths_stay_as_given_where_the_job_runs_in_the_launch_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert from_launch_dir(RAW, Path.cwd()) is RAW
