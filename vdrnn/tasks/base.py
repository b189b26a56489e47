"""What a task is to the rest of vdrnn: the :class:`Task` base class.

The CLI, resume checks, `vdrnn eval` and `vdrnn report` reach a task's code only through its Task object (``TASKS`` in
:mod:`vdrnn.tasks`), never by checking the dataset's name. The object is light: its methods import the task's heavy
modules (torch, its model, its trainer) when called, so that checking a config does not wait for them.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from vdrnn.errors import ConfigError
from vdrnn.paths import is_reader_file

if TYPE_CHECKING:
    import torch


class Task:
    """One kind of experiment: its config, how it reads its datasets, builds its model, trains and evaluates.
    A subclass per task folder (``vdrnn/tasks/<name>/``) sets the attributes and implements the methods."""

    name: str  # data.task, set by each dataset's YAML
    title: str  # how messages name it ("language modelling")
    takes_init_from = False  # can start a new run from a trained checkpoint's weights (init_from=)
    eval_keys: tuple[str, ...] = ()  # keys of its own that `vdrnn eval` takes when given (besides the shared ones)
    smoke_keys: tuple[str, ...] = ()  # data keys that cap the data: a run with one set is a smoke run
    first_run_settings: str  # the overrides of a run of the task that ends in about a minute on a CPU
    default_dataset: str | None = None  # the dataset a command line without dataset= gets
    report_ignores: tuple[str, ...] = ()  # settings that never change its runs' numbers (the report's rows)

    # ------------------------------------------------------------------ light: config and records
    def parse(self, raw: dict[str, Any]):
        """The typed, checked run config of a composed config (plain containers), or a ConfigError naming the fix."""
        raise NotImplementedError

    def is_smoke(self, raw: dict[str, Any]) -> bool:
        """Is a run with config ``raw`` a smoke run, whose numbers are not results: a step cap (``trainer.max_steps``)
        or capped data (the task's ``smoke_keys``)?"""
        keys = ("trainer.max_steps", *self.smoke_keys)
        return any((raw.get(key.split(".")[0]) or {}).get(key.split(".")[1]) is not None for key in keys)

    def first_run(self, dataset: str) -> str:
        """The command of a run on ``dataset`` that ends in about a minute on a CPU."""
        chosen = "" if dataset == self.default_dataset else f"dataset={dataset} "
        return f"vdrnn train {chosen}{self.first_run_settings}"

    def dataset_module(self, data) -> str:
        """The module that reads dataset ``data.name``: ``data.reader`` where set (a dataset kept outside vdrnn), else
        the task's own ``vdrnn/tasks/<task>/datasets/<name>.py``."""
        return data.reader or f"vdrnn.tasks.{self.name}.datasets.{data.name}"

    def has_dataset(self, name: Any) -> bool:
        """Is there a module ``datasets/<name>.py`` in this task's folder?"""
        return isinstance(name, str) and name.isidentifier() and \
            importlib.util.find_spec(f"vdrnn.tasks.{self.name}.datasets.{name}") is not None

    def headline(self, metrics: dict[str, Any]) -> str:
        """The test numbers a run's or an evaluation's last line gives (``test ppl 79.6, MC 77.8 (valid 82.9)``)."""
        raise NotImplementedError

    def ood_texts(self, data) -> tuple[str, ...]:
        """The corpora whose text `vdrnn eval ood=NAME` scores as out-of-domain inputs against a checkpoint of the
        task trained on ``data`` (docs/uncertainty.md): none unless the task says."""
        return ()

    def check_ood(self, cfg) -> None:
        """Refuse an ``ood=`` the task has no pairing for, and an ``ood_root=`` without an ``ood=``."""
        if cfg.ood is None:
            if cfg.ood_root is not None:
                raise ConfigError(f"ood_root={cfg.ood_root} says where the ood= corpus lies, and no ood= is given: "
                                  f"add ood=NAME, or drop ood_root")
            return
        choices = self.ood_texts(cfg.data)
        if cfg.ood not in choices:
            pairs = (f"choose {' or '.join(f'ood={name}' for name in choices)}" if choices else
                     "they have no out-of-domain pairing, so drop ood=")
            raise ConfigError(f"ood={cfg.ood}: {self.title} trained on {cfg.data.name} are scored against other text "
                              f"as docs/uncertainty.md pairs them; {pairs}")

    def check_dataset(self, data) -> None:
        """Refuse a dataset whose reading module does not exist, before anything is loaded."""
        module = self.dataset_module(data)
        if is_reader_file(data.reader):
            found = Path(module).is_file()
        else:
            try:
                # A name of the task's own folder, a module there: not a dotted path that would reach elsewhere.
                found = (bool(data.reader) or data.name.isidentifier()) and importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):  # a parent package that does not exist, or an empty name
                found = False
        if found:
            return
        if data.reader:
            raise ConfigError(f"dataset {data.name!r} has no reader: data.reader={module} is "
                              + ("not a file" if is_reader_file(module) else
                                 "not a module Python can import: it must be a module of the folder vdrnn is launched "
                                 "from, or of a folder on PYTHONPATH (PYTHONPATH=/path/to/folder vdrnn ...), or a "
                                 ".py file's path (data.reader=readers/mycorpus.py)"))
        raise ConfigError(f"dataset {data.name!r} has no reader: vdrnn/tasks/{self.name}/datasets/{data.name}.py does "
                          f"not exist. Choose a dataset/ option of {self.title} (`vdrnn train --help` lists them), or "
                          f"add that module (docs/extending.md)")

    # ------------------------------------------------------------------ heavy: imported when called
    def reader(self, data) -> ModuleType:
        """The module that reads dataset ``data.name`` (dataset_module), imported; a data.reader file by its path."""
        module = self.dataset_module(data)
        if not is_reader_file(module):
            return importlib.import_module(module)
        spec = importlib.util.spec_from_file_location(Path(module).stem, module)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return loaded

    def trainer(self) -> type:
        """The task's trainer class, a subclass of :class:`~vdrnn.training.trainer.EpochTrainer`."""
        raise NotImplementedError

    def load_data(self, cfg):
        """The run's data: its vocabulary (``.vocab``) and splits, as the task's trainer and evaluation read them."""
        raise NotImplementedError

    def build_model(self, cfg, data, device: torch.device) -> torch.nn.Module:
        raise NotImplementedError

    def evaluate_model(self, model: torch.nn.Module, data, cfg) -> dict[str, Any]:
        """The test metrics of ``model`` (valid_*, test_*, with ``eval=mc`` test_*_mc, and with ``ood=`` the
        out-of-domain detection's ood_*)."""
        raise NotImplementedError


def read_dataset(module: ModuleType, data, returns: type):
    """What the dataset module ``module`` reads for ``data`` (its ``read(data)``), a ``returns``; a ConfigError where
    the module is no dataset reader (``data.reader`` naming some other module)."""
    read = getattr(module, "read", None)
    if not inspect.isfunction(read):
        raise ConfigError(f"data.reader={data.reader} is not a dataset reader: it has no read(data) function. Name a "
                          f"module that has one (docs/extending.md), or drop data.reader for the dataset's own")
    read_data = read(data)
    if not isinstance(read_data, returns):
        raise ConfigError(f"data.reader={data.reader}: its read(data) returned a {type(read_data).__name__}, not a "
                          f"{returns.__name__} (docs/extending.md)")
    return read_data
