"""The CLI's cluster side: the launcher presets as submitit writes their jobs, the searches over the dropout
probabilities, sweep folders within the file system's name limit, plugins and deletions refused with the fix, and
shell completion and --help through Hydra's search path."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from importlib import resources

import pytest
import yaml
from omegaconf import OmegaConf

from tests.helpers import TINY, composed, run_cli
from vdrnn import cli
from vdrnn.config import refuse_deletions
from vdrnn.distribution import install_line
from vdrnn.errors import ConfigError
from vdrnn.help import groups


def launcher_config(name: str) -> dict:
    """hydra.launcher of `vdrnn train -m hydra/launcher=<name>`, resolved as the plugin receives it."""
    cfg = composed(f"hydra/launcher={name}", with_hydra=True)
    cfg.hydra.sweep.dir, cfg.hydra.job.name = "sweep", "vdrnn"
    return OmegaConf.to_container(cfg.hydra.launcher, resolve=True)


def test_the_slurm_preset_asks_for_one_gpu_its_threads_a_signal_before_the_limit_and_requeue(tmp_path, monkeypatch):
    """The sbatch script submitit writes from the preset, given to its executor as the launcher gives it."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="the slurm extra (pip install -e '.[slurm]') is not installed")
    import submitit
    import submitit.slurm.slurm

    monkeypatch.setattr(submitit.slurm.slurm.shutil, "which", lambda name: f"/usr/bin/{name}")  # no SLURM here
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    params = launcher_config("slurm")
    assert params["max_num_timeout"] > 0  # the plugin's 0 would end a run at its first time limit
    executor = submitit.AutoExecutor(folder=tmp_path, cluster="slurm", slurm_max_num_timeout=params["max_num_timeout"])
    shared = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in shared else f"slurm_{k}": v for k, v in params.items()
                                  if k not in ("_target_", "submitit_folder", "max_num_timeout")})
    script = executor._executor._make_submission_file_text("python -m submitit.core._submit x", "uid")
    for line in ("#SBATCH --gpus-per-node=1", "#SBATCH --cpus-per-task=8", "#SBATCH --requeue",
                 "#SBATCH --signal=USR2@120", "#SBATCH --time=240", "export OMP_NUM_THREADS=8"):
        assert line in script, line


def test_the_table_1_sweep_of_the_readme_runs_its_twelve_presets():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    readme = (cli.__file__.rsplit("/vdrnn/", 1)[0] + "/README.md")
    assert "'experiment=glob([medium_*,large_*],exclude=[*gaussian*,*zoneout,*semeniuta,*concrete])' seed=1,2,3" in open(readme).read()
    override = OverridesParser.create().parse_overrides(["experiment=glob([medium_*,large_*],exclude=[*gaussian*,*zoneout,*semeniuta,*concrete])"])[0]
    presets = override.value().filter(groups()["experiment"])
    rows = {composed(f"experiment={p}").paper.row for p in presets}
    assert len(presets) == 12 and {composed(f"experiment={p}").paper.size for p in presets} == {"medium", "large"}
    assert rows == {"Non-regularized (early stopping)", "Moon et al. 2015", "Moon et al. + emb dropout",
                    "Zaremba et al. 2014", "Variational (tied weights)", "Variational (untied weights)"}


def test_gals_grid_ties_word_types_to_h_and_inputs_to_outputs_over_its_four_points():
    cfg = composed("experiment=medium_variational", "search=gal_grid", "dropout.embedding=0.1", "dropout.input=0.4")
    assert (cfg.dropout.recurrent, cfg.dropout.output, cfg.objective) == (0.1, 0.4, "best_valid_ppl")
    params = composed("search=gal_grid", with_hydra=True).hydra.sweeper.params
    assert dict(params) == {"dropout.embedding": "0.1,0.2", "dropout.input": "0.3,0.4"}


GRIDS = {"gal_grid": "medium_variational", "zoneout_grid": "medium_zoneout", "semeniuta_grid": "medium_semeniuta",
         "concrete_prior": "medium_concrete"}


@pytest.mark.parametrize("search,experiment", GRIDS.items())
def test_every_point_of_a_grid_search_is_a_valid_run_of_the_preset_its_header_runs(search, experiment):
    """Each grid's header runs it on its scheme's preset, and every point of the grid composes and validates there
    with the swept values in place (a grid over a key the scheme refuses fails validation)."""
    from vdrnn.config import to_container
    from vdrnn.tasks.lm.config import from_dict

    header = resources.files("vdrnn.conf").joinpath("search", f"{search}.yaml").read_text()
    assert f"vdrnn train -m experiment={experiment} search={search} " in header
    params = composed(f"search={search}", with_hydra=True).hydra.sweeper.params
    grid = [[(key, value) for value in str(values).split(",")] for key, values in params.items()]
    for point in itertools.product(*grid):
        raw = composed(f"experiment={experiment}", f"search={search}", *(f"{key}={value}" for key, value in point))
        assert raw.objective == "best_valid_ppl"
        cfg = from_dict(to_container(raw))
        for key, value in point:
            section, name = key.split(".")
            assert str(getattr(getattr(cfg, section), name)) == value, (point, key)


@pytest.mark.slow
def test_an_optuna_search_minimises_the_objective_its_preset_names(tmp_path, tiny_corpus):
    """Two trials of the Optuna sweeper through the real CLI, kept in an SQLite storage: each a run, and the best
    trial's value its best_valid_ppl, which `vdrnn train` returned."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="the optuna extra (pip install -e '.[optuna]') is not installed")
    run_cli("train", "-m", *TINY, "trainer.epochs=1", f"data.root={tiny_corpus}", "search=optuna",
            "hydra.sweeper.n_trials=2", "hydra.sweep.dir=search", "hydra.sweeper.storage=sqlite:///search.db",
            cwd=tmp_path)
    found = [json.loads(p.read_text()) for p in (tmp_path / "search").glob("*/metrics.json")]
    assert len(found) == 2 and all(m["status"] == "finished" for m in found)
    best = yaml.safe_load((tmp_path / "search" / "optimization_results.yaml").read_text())
    assert best["best_value"] == min(m["best_valid_ppl"] for m in found)
    assert set(best["best_params"]) == {"dropout.embedding", "dropout.input", "dropout.recurrent", "dropout.output"}
    import optuna

    stored = optuna.load_study(study_name="dropout", storage=f"sqlite:///{tmp_path / 'search.db'}")
    assert len(stored.trials) == 2 and stored.best_value == best["best_value"]


def test_an_objective_must_be_a_validation_number():
    with pytest.raises(ConfigError, match="objective=test_ppl is not a validation number: a search tuned on the "
                                          "test set leaves its numbers no test"):
        cli.checked_config(["objective=test_ppl"])


def test_a_plugin_option_without_its_plugin_names_the_extra_to_install(monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("hydra_plugins") else find_spec(name, *a))
    with pytest.raises(SystemExit) as refused:
        cli.main(["train", "-m", "search=optuna"])
    assert refused.value.code == 2
    assert f"search=optuna needs a Hydra plugin that is not installed: {install_line('optuna')}" in \
        capsys.readouterr().err


@pytest.mark.parametrize("override,message", [
    ("~data", "~data deletes the data settings, which every run reads: set a key of them instead (data.KEY=VALUE), "
              "or choose an option of the group (data=OPTION"),
    ("~trainer.lr", "~trainer.lr deletes trainer.lr, which every run reads: set it instead (trainer.lr=VALUE)"),
    ("~data.name", "~data.name deletes data.name"),
])
def test_deleting_a_key_every_run_reads_is_refused_with_the_fix(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        refuse_deletions([override])
    refuse_deletions(["~experiment", "~hydra.job.env_set"])  # the preset (none by default) and Hydra's own may go


@pytest.mark.parametrize("group", ["search", "experiment"])
def test_deleting_a_group_that_is_none_by_default_is_hydras_plain_deletion(group):
    refuse_deletions([f"~{group}"])
    assert cli.checked_config([f"~{group}", "trainer.epochs=1"])["trainer"]["epochs"] == 1


def test_a_config_without_a_section_is_refused_rather_than_a_key_error():
    from vdrnn.tasks import task_of

    raw = OmegaConf.to_container(composed())
    del raw["trainer"]
    with pytest.raises(ConfigError, match="the config has no trainer settings, which every run needs"):
        task_of(raw).parse(raw)


def test_a_long_sweep_job_name_keeps_its_start_and_a_stable_hash_within_the_limit():
    name = ",".join(f"dropout.input={0.1 + i / 1000:.4f}" for i in range(30))
    short = cli.sweep_job_name(name, None)
    assert len(short.encode()) == cli.NAME_BYTES and short.startswith(name[:150])
    assert short == cli.sweep_job_name(name, None) and short != cli.sweep_job_name(name + "x", None)
    assert cli.sweep_job_name("dropout=zaremba,seed=2", None) == "dropout=zaremba,seed=2"


@pytest.mark.slow
def test_a_sweep_of_many_overrides_names_its_job_within_the_limit_and_the_report_by_its_overrides(tmp_path,
                                                                                               tiny_corpus):
    many = [f"trainer.lr_decay={1 + 1e-9 * (i + 1):.12f}" for i in range(1)] + \
           [f"dropout.{site}={p}" for site, p in (("embedding", "0.100000000001"), ("input", "0.100000000002"),
                                                   ("recurrent", "0.100000000003"), ("output", "0.100000000004"))]
    args = [*TINY, "trainer.epochs=1", f"data.root={tiny_corpus}", "dropout=variational", *many,
            "trainer.weight_decay=0.000000000001", "trainer.clip=5.00000000001", "trainer.lr=1.00000000001"]
    run_cli("train", "-m", *args, "hydra.sweep.dir=sweep", cwd=tmp_path)
    (job,) = [p for p in (tmp_path / "sweep").iterdir() if p.is_dir()]
    assert len(job.name.encode()) <= 255 and "~" in job.name
    kept = OmegaConf.load(job / "overrides.yaml")
    assert "trainer.clip=5.00000000001" in kept and "model.hidden_size=16" in kept
    result = run_cli("report", "sweep", "--out", "report", cwd=tmp_path)
    assert "trainer.clip=5.00000000001" in result.stdout and "trainer.lr=1.00000000001" in result.stdout


def test_bash_completion_installs_for_vdrnn_and_completes_the_command_its_options_and_a_search_path(tmp_path):
    """Hydra's bash script, as `vdrnn -sc install=bash` prints it, run by bash for lines a user types."""
    if shutil.which("bash") is None or shutil.which("vdrnn") is None:
        pytest.skip("needs bash and the installed vdrnn console script")
    (tmp_path / "conf" / "dropout").mkdir(parents=True)
    (tmp_path / "conf" / "dropout" / "mine.yaml").write_text("scheme: variational\nrecurrent: 0.1\n")

    def complete(line: str) -> list[str]:
        words = line.split() + ([""] if line.endswith(" ") else [])
        script = (f'eval "$(vdrnn -sc install=bash)"\nCOMP_LINE={line!r}; COMP_WORDS=({" ".join(map(repr, words))});'
                  f' COMP_CWORD={len(words) - 1}; COMP_POINT=${{#COMP_LINE}}\nhydra_bash_completion\n'
                  'printf "%s\\n" "${COMPREPLY[@]}"')
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                             env={**os.environ, "HYDRA_FULL_ERROR": "0"})
        return out.stdout.split()

    assert complete("vdrnn tr") == ["train"]
    assert complete("vdrnn train dropout=varia") == ["dropout=variational", "dropout=variational_untied"]
    assert "trainer.lr=" in complete("vdrnn train trainer.l")
    assert "dropout.recurrent=" in complete("vdrnn eval dropout.rec")
    assert complete(f"vdrnn train hydra.searchpath=[file://{tmp_path / 'conf'}] dropout=mi") == ["dropout=mine"]


def test_help_reads_options_and_comments_through_config_dir_and_the_search_path(tmp_path):
    (tmp_path / "dropout").mkdir()
    (tmp_path / "dropout" / "mine.yaml").write_text("scheme: variational\nrecurrent: 0.1  # my own h\n")
    for extra in (["--config-dir", str(tmp_path)], [f"hydra.searchpath=[file://{tmp_path}]"]):
        out = run_cli("train", *extra, "dropout=mine", "--help", cwd=tmp_path).stdout
        assert "mine" in out.split("== Config ==")[0]  # listed among the dropout options
        assert "dropout=mine" in out and "recurrent: 0.1" in out
