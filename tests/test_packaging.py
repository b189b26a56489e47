"""What `pip install` ships and under which name: every package of vdrnn/ and the configs, one version, a licence,
an sdist that holds the tests and docs, and install lines that install this project."""

import re
import subprocess
import sys
import tarfile
import zipfile

import pytest
import tomllib

import vdrnn
from tests.helpers import REPO
from vdrnn import cli
from vdrnn.distribution import DISTRIBUTION, install_line

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_every_package_folder_is_listed_for_the_wheel():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(REPO).parts) for init in (REPO / "vdrnn").rglob("__init__.py")}
    # conf/ ships as vdrnn.conf, each group folder a package of YAML files
    conf = {".".join(("vdrnn", *folder.relative_to(REPO).parts)) for folder in (REPO / "conf").rglob("*")
            if folder.is_dir() and folder.name != "__pycache__"}
    assert found | {"vdrnn.conf"} | conf == listed


def test_the_distribution_is_named_apart_from_pypis_vdrnn_and_versioned_once():
    # PyPI's `vdrnn` is an unrelated project; the import package and the command keep the name.
    assert PROJECT["name"] == DISTRIBUTION != "vdrnn"
    assert PROJECT["scripts"] == {"vdrnn": "vdrnn.__main__:main"}
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert PROJECT["license"] == "MIT" and (REPO / "LICENSE").read_text().startswith("MIT License")


def test_version_is_a_command_line_option(capsys):
    cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"vdrnn {vdrnn.__version__} (distribution {DISTRIBUTION})"


def install_lines() -> list[tuple[str, str]]:
    """(file, line) of every `pip install` that the docs, configs, Makefile and messages give."""
    files = [REPO / "README.md", REPO / "Makefile", *(REPO / "docs").glob("*.md"), *(REPO / "conf").rglob("*.yaml"),
             *(REPO / "vdrnn").rglob("*.py"), *(REPO / "examples").rglob("*.py")]
    return [(str(path.relative_to(REPO)), line.strip()) for path in files
            for line in path.read_text().splitlines() if "pip install" in line]


def test_every_install_line_installs_this_project():
    lines = install_lines()
    assert any("pip install -e '.[slurm]'" in line for _, line in lines)
    wrong = [(path, line) for path, line in lines if re.search(r"pip install[^#]*'vdrnn\[|pip install vdrnn\b", line)]
    assert not wrong, f"these install PyPI's unrelated `vdrnn`: {wrong}"


def test_an_extra_s_install_line_is_the_checkout_s_or_its_requirements(monkeypatch, tmp_path):
    assert install_line("optuna") == f"pip install -e '{REPO}[optuna]'"
    from vdrnn import distribution

    monkeypatch.setattr(distribution, "__file__", str(tmp_path / "site-packages" / "vdrnn" / "distribution.py"))
    monkeypatch.setattr(distribution.metadata, "requires", lambda name: ['tqdm>=4.60', 'optuna<3,>=2.10; extra == "optuna"',
                                                                        'sqlalchemy<2,>=1.4; extra == "optuna"'])
    assert install_line("optuna") == "pip install 'optuna<3,>=2.10' 'sqlalchemy<2,>=1.4'"


def test_hugging_faces_datasets_is_an_extra_and_the_optuna_extra_pins_what_its_storage_needs():
    extras = PROJECT["optional-dependencies"]
    assert not any(req.startswith("datasets") for req in PROJECT["dependencies"])
    assert any(req.startswith("datasets") for req in extras["hub"])
    # optuna 2.x (the sweeper's) fails on SQLAlchemy 2 with an AssertionError as it opens an RDB storage
    assert "sqlalchemy>=1.4,<2" in extras["optuna"] and "optuna>=2.10,<3" in extras["optuna"]


@pytest.mark.slow
def test_the_sdist_and_wheel_build_quietly_with_the_tests_docs_configs_and_licence(tmp_path):
    build = ("import setuptools.build_meta as b, sys; "
             f"b.build_sdist({str(tmp_path)!r}); b.build_wheel({str(tmp_path)!r})")
    result = subprocess.run([sys.executable, "-c", build], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "would be ignored" not in result.stdout + result.stderr
    tracked = subprocess.run(["git", "ls-files", "tests", "docs", "examples", "LICENSE"], cwd=REPO,
                             capture_output=True, text=True).stdout.split()
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        shipped = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert tracked and not set(tracked) - shipped
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta = archive.read(next(n for n in names if n.endswith("METADATA"))).decode()
    configs = {f"vdrnn/conf/{p.relative_to(REPO / 'conf').as_posix()}" for p in (REPO / "conf").rglob("*.yaml")}
    assert not configs - set(names)
    assert f"Name: {DISTRIBUTION}\n" in meta and f"Version: {vdrnn.__version__}\n" in meta
    assert "License-Expression: MIT" in meta and "Requires-Dist: datasets" in meta.split("Provides-Extra: hub")[1]
