"""`vdrnn train --help`: the config groups and the composed config, each key with what it means.

Hydra's own --help prints the composed config without the comments that explain its keys, because YAML comments
do not survive loading. The comments in conf/ are the keys' documentation, so this reads them from the files the
command line composes and prints each beside its key:

    dropout:
      embedding: 0.2            # word-type (embedding row) dropout

A key takes the first comment that describes it in composition order: conf/config.yaml, which documents every
key it declares, then the group files (dataset, model, cell, dropout, eval, experiment), whose comments document
the keys config.yaml leaves to them. An experiment's remarks on its own values ("Gal's T = 50") stay in its file.
"""

from __future__ import annotations

import re
import textwrap
from importlib import resources
from pathlib import Path

import yaml
from hydra import compose, initialize_config_module
from hydra.errors import HydraException
from omegaconf import OmegaConf, open_dict

from vdrnn.config import key_among
from vdrnn.errors import ConfigError
from vdrnn.eval_settings import EVAL_ALWAYS, EVAL_WHEN_GIVEN, task_eval_keys

CONFIG_MODULE = "vdrnn.conf"
WIDTH = 118  # the longest line the annotated config prints
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_]\w*):(?P<rest>.*)$")
COMMENT = re.compile(r"(?:^|\s)#\s?(?P<text>.*)$")  # a `#` that starts a comment, not one inside a word

HEADER = {"train": "vdrnn train: train a model; pick one option per group and override any key:",
          "eval": "vdrnn eval: evaluate a checkpoint under the settings it was trained with, changing only the keys "
                  "below\n(data.test_batch_size and data.eval_max_tokens: PTB checkpoints only; the eval keys: the "
                  "checkpoint's unless given):"}
FOOTER = {"train": "Options and keys before --help show the config a run with them gets (`vdrnn train dataset=imdb "
                   "--help`: a sentiment run's); --hydra-help lists Hydra's own flags.",
          "eval": "`vdrnn eval checkpoint=PATH` alone repeats the run's own test; --hydra-help lists Hydra's own "
                  "flags."}


def nested(path: list[tuple[int, str]], match: re.Match) -> list[tuple[int, str]]:
    """The (indent, key) path of a KEY_LINE ``match``, from ``path``, the one of the key line before it: YAML nests a
    key under the nearest one before it that is indented less."""
    indent = len(match["indent"])
    return [(i, key) for i, key in path if i < indent] + [(indent, match["key"])]


def key_comments(text: str, package: str) -> dict[str, str]:
    """The comment beside each key of one YAML file, under its dotted path (``package`` prefixed, e.g. `data`).

    A comment goes on across the comment-only lines below it that are indented beyond its key, as conf/ writes the
    long ones; a comment on a line of its own elsewhere (a file's or a section's header) describes no single key.
    """
    comments: dict[str, str] = {}
    path: list[tuple[int, str]] = []  # (indent, key) of the mapping the current line is in, outermost first
    current, current_indent = None, 0  # the key whose comment a following comment-only line continues
    for line in text.splitlines():
        stripped = line.lstrip()
        match = KEY_LINE.match(line)
        if match:
            path = nested(path, match)
            comment = COMMENT.search(match["rest"])
            current = ".".join(filter(None, [package, *(key for _, key in path)])) if comment else None
            current_indent = path[-1][0]
            if comment:
                comments[current] = comment["text"].strip()
        elif current and stripped.startswith("#") and len(line) - len(stripped) > current_indent:
            comments[current] += " " + stripped[1:].strip()
        else:
            current = None
    return comments


def _package(text: str, group: str) -> str:
    """Where a file's keys land: its `# @package` line, else its group (Hydra's default)."""
    match = re.search(r"^# @package (\S+)", text, re.MULTILINE)
    package = match[1] if match else group
    return "" if package == "_global_" else package


class ConfigFiles:
    """The YAML files a composition reads, through Hydra's search path: vdrnn's conf/ and any folder the command line
    adds (``hydra.searchpath=[file://...]``, ``--config-dir``), the first holding a file giving it, as in Hydra."""

    def __init__(self, sources: list[tuple[str, str]] | None = None):
        """``sources``: (schema, path) of each, in search-path order; pkg and file ones hold files (Hydra's own,
        hydra.conf, holds no group of vdrnn's)."""
        self.roots = []
        for schema, where in sources or [("pkg", CONFIG_MODULE)]:
            if schema == "pkg" and where != "hydra.conf":
                self.roots.append(resources.files(where.replace("/", ".")))
            elif schema == "file":
                self.roots.append(Path(where).expanduser())

    def text(self, name: str) -> str:
        for root in self.roots:
            path = root.joinpath(name)
            if path.is_file():
                return path.read_text()
        raise ConfigError(f"no config file {name} in the search path ({', '.join(map(str, self.roots))})")

    def options(self, group: str) -> list[str]:
        found = {item.name.removesuffix(".yaml") for root in self.roots if root.joinpath(group).is_dir()
                 for item in root.joinpath(group).iterdir() if item.name.endswith(".yaml")}
        return sorted(found)


def _file_chain(files: ConfigFiles, group: str, option: str) -> list[str]:
    """The texts of group/option.yaml and, after it, of the options of its own group it builds on (its `defaults:`
    entries that name a bare option, e.g. experiment/imdb_lstm_variational_tuned -> imdb_lstm_variational, or
    dropout/variational_untied -> variational@dropout; `override /group: option` entries are in the choices)."""
    text = files.text(f"{group}/{option}.yaml")
    parents = [entry.split("@")[0] for entry in (yaml.safe_load(text) or {}).get("defaults", [])
               if isinstance(entry, str) and entry != "_self_"]
    return [text] + [chained for parent in parents for chained in _file_chain(files, group, parent)]


def descriptions(choices: dict[str, str | None], files: ConfigFiles | None = None) -> dict[str, str]:
    """Each key's description for a config composed from ``choices`` (group -> option), first comment first."""
    files = files or ConfigFiles()
    found: dict[str, str] = {}
    sources = [(files.text("config.yaml"), "")]
    for group in GROUPS:
        if choices.get(group):
            sources += [(text, _package(text, group)) for text in _file_chain(files, group, choices[group])]
    for text, package in sources:
        for key, comment in key_comments(text, package).items():
            found.setdefault(key, comment)
    return found


# The config groups, in the order a run composes them: config.yaml's defaults, the model coming with the dataset's.
GROUPS = ("dataset", "model", "cell", "dropout", "eval", "experiment", "search")


def groups(files: ConfigFiles | None = None) -> dict[str, list[str]]:
    """The config groups and their options."""
    files = files or ConfigFiles()
    return {group: files.options(group) for group in GROUPS}


def annotate(config_yaml: str, described: dict[str, str]) -> str:
    """``config_yaml`` (OmegaConf's block YAML) with each key's description after it, wrapped to WIDTH."""
    lines = config_yaml.splitlines()
    column = max(len(line) for line in lines if len(line) <= 38) + 2  # longer lines get their text below them
    out, path = [], []
    for line in lines:
        match = KEY_LINE.match(line)
        if not match:
            out.append(line)
            continue
        path = nested(path, match)
        text = described.get(".".join(key for _, key in path))
        if not text:
            out.append(line)
            continue
        wrapped = textwrap.wrap(text, WIDTH - column - 2)
        if len(line) + 2 > column:  # a long value (a path): its description on the lines below
            out.append(line)
            out += [f"{'':<{column}}# {rest}" for rest in wrapped]
            continue
        out.append(f"{line:<{column}}# {wrapped[0]}")
        out += [f"{'':<{column}}# {rest}" for rest in wrapped[1:]]
    return "\n".join(out)


def composed(overrides: list[str], with_sources: bool = False):
    """The config a run with ``overrides`` gets (without Hydra's own keys), and its choice of each group (and with
    ``with_sources`` the ConfigFiles it was composed from)."""
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    except HydraException as err:  # an unknown option or key, as a run would be refused for (less the search path)
        message = one_line_options(str(err).split("\nConfig search path:")[0].strip())
        cause = str(err.__cause__).splitlines()[0] if err.__cause__ and str(err.__cause__) else ""
        raise ConfigError(f"{message}\n{cause}" if cause and cause not in message else message) from None
    choices = dict(cfg.hydra.runtime.choices)
    files = ConfigFiles([(source.schema, source.path) for source in cfg.hydra.runtime.config_sources])
    with open_dict(cfg):
        del cfg["hydra"]
    return (cfg, choices, files) if with_sources else (cfg, choices)


def one_line_options(message: str) -> str:
    """Hydra's "Could not find 'dropout/nope'" with its options listed one per line below, as one line:
    "Could not find 'dropout/nope'; choose one of awd, gaussian, ..."."""
    match = re.search(r"\s*Available options in '[^']*':\s*\n((?:\s+\S+\n?)+)$", message)
    if not match:
        return message
    return f"{message[:match.start()]}; choose one of {', '.join(match[1].split())}"


def kept(tree: dict, names: tuple[str, ...], prefix: str = "") -> dict:
    """``tree`` with only the keys among ``names`` (config.key_among) and the sections that hold them."""
    out = {}
    for key, value in tree.items():
        if key_among(prefix + key, names):
            out[key] = value
        elif isinstance(value, dict) and (inner := kept(value, names, f"{prefix}{key}.")):
            out[key] = inner
    return out


def config_help(command: str, overrides: list[str]) -> str:
    """The help text of `vdrnn <command> [overrides] --help`: for train the whole config, for eval the keys it takes
    (the rest come from the checkpoint)."""
    cfg, choices, files = composed(overrides, with_sources=True)
    shown, listed = OmegaConf.to_container(cfg), groups(files)
    if command == "eval":
        shown = kept(shown, (*EVAL_ALWAYS, *EVAL_WHEN_GIVEN, *task_eval_keys()))
        listed = {"eval": listed["eval"]}
    group_lines = "\n".join(textwrap.fill(f"{group}: {', '.join(options)}", WIDTH, subsequent_indent="  ",
                                          break_on_hyphens=False) for group, options in listed.items())
    chosen = ", ".join(f"{group}={choices[group]}" for group in listed if choices.get(group))
    return (f"{HEADER[command]}\n  vdrnn {command} group=option key=value ...   (-m sweeps comma-separated values)\n\n"
            f"== Configuration groups ==\n{group_lines}\n\n"
            f"== Config ==\n{textwrap.fill(f'# composed from {chosen}', WIDTH, subsequent_indent='#   ')}\n"
            f"{annotate(OmegaConf.to_yaml(shown).rstrip(), descriptions(choices, files))}\n\n"
            + textwrap.fill(FOOTER[command], WIDTH))
