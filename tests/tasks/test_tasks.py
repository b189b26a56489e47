"""The tasks as a user meets them: every preset composes and its task accepts it, each task trains, evaluates and
reports end to end on tiny data, and a new dataset is exactly one module and one YAML."""

from __future__ import annotations

import json
import os
import textwrap
from importlib import resources

import pytest
import yaml
from tensorboard.plugins.hparams import plugin_data_pb2

from tests.helpers import composed, events_of, run_cli
from vdrnn.config import to_container
from vdrnn.tasks import TASKS, task_of

PRESETS = sorted(p.name.removesuffix(".yaml") for p in resources.files("vdrnn.conf").joinpath("experiment").iterdir()
                 if p.name.endswith(".yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_composes_and_its_task_accepts_it(preset):
    raw = to_container(composed(f"experiment={preset}"))
    cfg = task_of(raw).parse(raw)
    assert cfg.data.task == raw["data"]["task"] in TASKS


# The smallest run of each task: a tiny model on tiny data, two epochs, MC with a few samples.
SMOKE = {
    "lm": ["dataset=ptb", "model=small", "model.hidden_size=16", "data.batch_size=4", "data.bptt=6",
           "data.eval_batch_size=4", "data.allow_custom_corpus=true", "eval=mc", "eval.samples=2"],
    "sentiment": ["dataset=imdb", "model.hidden_size=8", "data.batch_size=8", "data.valid_fraction=0.25", "eval=mc",
                  "eval.samples=3", "eval.batch=3"],
}


def test_every_task_has_a_smoke_run():
    assert set(SMOKE) == set(TASKS)


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(SMOKE))
def test_each_task_trains_evaluates_and_reports_end_to_end(task, tmp_path, tiny_corpus, fake_imdb):
    root = {"lm": tiny_corpus, "sentiment": fake_imdb}[task]
    common = [*SMOKE[task], f"data.root={root}", "trainer.progress=false", "device=cpu"]
    run_cli("train", *common, "trainer.epochs=2", "hydra.run.dir=run", cwd=tmp_path)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and metrics["config"]["data"]["task"] == task
    test_key = "test_ppl" if task == "lm" else "test_accuracy"
    assert metrics[test_key] > 0 and f"{test_key}_mc" in metrics
    run_cli("eval", "checkpoint=run/best.pt", f"data.root={root}", "hydra.run.dir=evaluated", cwd=tmp_path)
    evaluated = json.loads((tmp_path / "evaluated" / "eval.json").read_text())
    assert evaluated[test_key] == pytest.approx(metrics[test_key], rel=1e-5)  # the run's own test, repeated
    report = run_cli("report", "run", "evaluated", "--out", "report", cwd=tmp_path)
    table = "ptb_table.md" if task == "lm" else "imdb_table.md"
    assert (tmp_path / "report" / table).exists() and "evaluated" in report.stdout


# A corpus kept outside vdrnn: its reader module (data.reader) on the Python path, its YAML in a config folder that
# hydra.searchpath adds. A corpus inside vdrnn is the same two files at vdrnn/tasks/lm/datasets/<name>.py and
# conf/dataset/<name>.yaml (then data.reader stays null).
CORPUS_READER = '''
    """A word-level corpus of three files, train.txt, valid.txt and test.txt, in data.root."""
    from pathlib import Path

    from vdrnn.tasks.lm.datasets import SPLITS, tokenize, word_corpus


    def read(data):
        folder = Path(data.root)
        return word_corpus({split: tokenize((folder / f"{split}.txt").read_text().splitlines()) for split in SPLITS})
'''
CORPUS_YAML = '''
    # @package _global_
    defaults:
      - _self_
      - /model: small
    data:
      name: tinywords
      task: lm
      reader: tinywords_reader
      root: {root}
      batch_size: 4
      bptt: 6
      eval_batch_size: 4
'''
REVIEWS_READER = '''
    """Reviews as lines of "<label> <text>" in train.txt and test.txt, labels 0 and 1."""
    from pathlib import Path

    from vdrnn.tasks.sentiment.datasets import CLASSIFICATION, Review, Reviews


    def read(data):
        def reviews(split):
            lines = (Path(data.root) / f"{split}.txt").read_text().splitlines()
            return [Review(text, int(label)) for label, text in (line.split(" ", 1) for line in lines)]

        return Reviews(CLASSIFICATION, reviews("train"), reviews("test"), classes=2)
'''
REVIEWS_YAML = '''
    # @package _global_
    defaults:
      - _self_
      - /model: sentiment
    data:
      name: tinyreviews
      task: sentiment
      reader: tinyreviews_reader
      root: {root}
      batch_size: 8
      valid_fraction: 0.25
'''


def add_dataset(tmp_path, name: str, reader: str, yaml: str, root) -> list[str]:
    """The two files of a new dataset in ``tmp_path`` (module ``<name>_reader``, conf/dataset/<name>.yaml); the
    overrides that use it."""
    (tmp_path / "modules").mkdir(exist_ok=True)
    (tmp_path / "modules" / f"{name}_reader.py").write_text(textwrap.dedent(reader))
    (tmp_path / "conf" / "dataset").mkdir(parents=True, exist_ok=True)
    (tmp_path / "conf" / "dataset" / f"{name}.yaml").write_text(textwrap.dedent(yaml).format(root=root))
    return [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", f"dataset={name}"]


@pytest.mark.slow
def test_a_new_corpus_is_one_reader_module_and_one_yaml(tmp_path, monkeypatch):
    data = tmp_path / "words"
    data.mkdir()
    for split, lines in (("train", 60), ("valid", 8), ("test", 8)):
        (data / f"{split}.txt").write_text("".join(f" w{i % 7} w{(i + 1) % 7} w{(i + 2) % 7} \n" for i in range(lines)))
    use = add_dataset(tmp_path, "tinywords", CORPUS_READER, CORPUS_YAML, data)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "modules"), os.environ.get("PYTHONPATH", "")]))
    run_cli("train", *use, "model.hidden_size=8", "trainer.epochs=1", "trainer.progress=false", "hydra.run.dir=run",
            cwd=tmp_path)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["config"]["data"]["name"] == "tinywords" and metrics["test_ppl"] > 1
    report = run_cli("report", "run", "--out", "report", cwd=tmp_path)
    assert (tmp_path / "report" / "tinywords_table.md").exists() and "tinywords" in report.stdout


@pytest.mark.slow
def test_a_new_classification_dataset_is_one_reader_module_and_one_yaml(tmp_path, monkeypatch):
    data = tmp_path / "reviews"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"{split}.txt").write_text("".join(f"{i % 2} {'fine' if i % 2 else 'poor'} film number {i}\n"
                                                   for i in range(24)))
    use = add_dataset(tmp_path, "tinyreviews", REVIEWS_READER, REVIEWS_YAML, data)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "modules"), os.environ.get("PYTHONPATH", "")]))
    run_cli("train", *use, "model.hidden_size=8", "trainer.epochs=1", "trainer.progress=false", "hydra.run.dir=run",
            cwd=tmp_path)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["config"]["data"]["task"] == "sentiment" and 0 <= metrics["test_accuracy"] <= 1
    run_cli("report", "run", "--out", "report", cwd=tmp_path)
    assert "accuracy (%)" in (tmp_path / "report" / "tinyreviews_table.md").read_text()


def test_a_dataset_without_a_reader_is_refused_naming_the_module_to_add():
    raw = to_container(composed())
    raw["data"]["name"] = "nosuchcorpus"
    with pytest.raises(Exception, match=r"dataset 'nosuchcorpus' has no reader: vdrnn/tasks/lm/datasets/"
                                        r"nosuchcorpus.py does not exist"):
        task_of(raw).parse(raw)


@pytest.mark.slow
def test_a_corpus_beside_the_user_trains_under_chdir_and_evaluates_where_its_yaml_says(tmp_path):
    """From the folder that holds the reader module (no PYTHONPATH), under hydra.job.chdir=true, with the data and the
    checkpoint given relative to it; `vdrnn eval` imports the reader the checkpoint names only when its command line
    gives it, keeps the checkpoint's data.root, and its --cfg job shows the checkpoint's settings it runs with."""
    (tmp_path / "words").mkdir()
    for split, lines in (("train", 60), ("valid", 8), ("test", 8)):
        (tmp_path / "words" / f"{split}.txt").write_text("".join(f" w{i % 7} w{(i + 1) % 7} \n" for i in range(lines)))
    use = add_dataset(tmp_path, "tinywords", CORPUS_READER, CORPUS_YAML, "words")
    (tmp_path / "modules" / "tinywords_reader.py").rename(tmp_path / "tinywords_reader.py")
    trained = run_cli("train", *use, "model.hidden_size=8", "trainer.epochs=1", "trainer.max_steps=3",
                      "hydra.job.chdir=true", "hydra.run.dir=run", cwd=tmp_path)
    assert "%|" not in trained.stderr  # trainer.progress=auto: no bars where stderr is not a terminal
    run = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert run["status"] == "finished" and run["config"]["data"]["root"] == str(tmp_path / "words")
    # TensorBoard's hparams table declares the final numbers this run has: no MC test, no MC column
    content = events_of(tmp_path / "run").PluginTagToContent("hparams")["_hparams_/experiment"]
    tags = {info.name.tag for info in plugin_data_pb2.HParamsPluginData.FromString(content).experiment.metric_infos}
    assert "test/ppl" in tags and not [tag for tag in tags if tag.endswith("_mc")]
    refused = run_cli("eval", "checkpoint=run/best.pt", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and "data.reader=tinywords_reader" in refused.stderr
    assert "Traceback" not in refused.stderr  # a checkpoint names its reader, but only the command line imports one
    run_cli("eval", "data.reader=tinywords_reader", "checkpoint=run/best.pt", "hydra.job.chdir=true", "hydra.run.dir=scored", cwd=tmp_path)
    scored = json.loads((tmp_path / "scored" / "eval.json").read_text())
    assert scored["test_ppl"] == pytest.approx(run["test_ppl"], rel=1e-4)
    shown = yaml.safe_load(run_cli("eval", "data.reader=tinywords_reader", "checkpoint=run/best.pt", "--cfg", "job", cwd=tmp_path).stdout)
    assert shown["model"]["hidden_size"] == 8 and shown["data"]["name"] == "tinywords"
    assert shown["checkpoint"] == "run/best.pt"


def test_a_reader_python_cannot_import_is_refused_saying_where_it_may_be(tmp_path, monkeypatch):
    raw = to_container(composed())
    raw["data"].update(name="mycorpus", reader="mycorpus_reader")
    with pytest.raises(Exception, match=r"data.reader=mycorpus_reader is not a module Python can import: it must be a "
                                        r"module of the folder vdrnn is launched from, or of a folder on PYTHONPATH"):
        task_of(raw).parse(raw)
    raw["data"]["reader"] = str(tmp_path / "readers" / "mycorpus.py")
    with pytest.raises(Exception, match=r"data.reader=.*mycorpus.py is not a file"):
        task_of(raw).parse(raw)
    (tmp_path / "readers").mkdir()
    (tmp_path / "readers" / "mycorpus.py").write_text(textwrap.dedent(CORPUS_READER))
    task = task_of(raw)
    module = task.reader(task.parse(raw).data)  # a file's path: loaded from it
    assert module.__file__ == raw["data"]["reader"] and callable(module.read)
