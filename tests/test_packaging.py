"""What `pip install` ships: every package of vdrnn/ and the configs."""

import tomllib

from tests.helpers import REPO


def test_every_package_folder_is_listed_for_the_wheel():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(REPO).parts) for init in (REPO / "vdrnn").rglob("__init__.py")}
    assert found | {"vdrnn.conf"} == listed
