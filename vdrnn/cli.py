"""The `vdrnn` command: `vdrnn train [overrides]`, `vdrnn eval checkpoint=PATH [overrides]`, `vdrnn report DIR...`.

`train` and `eval` are Hydra applications over the same config tree (conf/, shipped as vdrnn.conf), so `-m` sweeps,
`--cfg job` and every override work the same way for both; their `--help` is vdrnn.help's. Each run goes to its
task (``data.task``, :mod:`vdrnn.tasks`). `report` reads finished runs and takes plain arguments. Nothing here imports
torch: help and config errors come back before it would load, and a task imports it when its run starts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from vdrnn.config import refuse_deletions, to_container
from vdrnn.distribution import install_line, version_line
from vdrnn.errors import ConfigError, Crashed, FolderInUse, RunStopped, VdrnnError, WriteError
from vdrnn.eval_settings import eval_run
from vdrnn.files import make_folder, write_atomically
from vdrnn.output_dir import log_file, open_log
from vdrnn.paths import from_launch_dir, importable_from
from vdrnn.tasks import task_of
from vdrnn.training.run import train

CONFIG_PATH = "pkg://vdrnn.conf"
log = logging.getLogger("vdrnn")

USAGE = """usage: vdrnn <command> [hydra overrides]    vdrnn --version

commands:
  train   train a model:          vdrnn train dataset=ptb dropout=variational
  eval    evaluate a checkpoint:  vdrnn eval checkpoint=outputs/.../best.pt eval=mc eval.samples=1000
  report  tabulate runs:          vdrnn report multirun/2026-11-26 --out results/ptb

`vdrnn <command> --help` lists every config group and option, and every key with what it means (`vdrnn train
dataset=imdb --help`: a sentiment run's keys).
"""


def sweep_job_name(overrides: str, checkpoint: str | None) -> str:
    """The name of a `-m` sweep job's folder after its number (conf/config.yaml's ``hydra.sweep.subdir``): the job's
    overrides, as Hydra names it, and for a `vdrnn eval` job the checkpoint it scores too, as
    ``<run folder>-<file stem>`` (``1_dropout=zaremba,seed=2-best``). Hydra's name leaves the checkpoint out, as a
    path would nest folders, so `vdrnn eval -m checkpoint=a/best.pt,b/best.pt` would name its jobs ``0_`` and ``1_``.
    A long name is shortened (within_name_limit)."""
    if checkpoint:
        path = Path(checkpoint)
        scored = f"{path.parent.name}-{path.stem}" if path.parent.name else path.stem
        overrides = f"{overrides}@{scored}" if overrides else scored
    return within_name_limit(overrides)


# A file name may have 255 bytes; the job number and its `_` come before this part.
NAME_BYTES = 200


def within_name_limit(name: str) -> str:
    """``name``, or where it is longer than NAME_BYTES (a sweep of many overrides), its start and a hash of the
    whole: ``dropout.embedding=0.1,dropout.input=0.3,...~3f9a0c1b2d``. Stable, so a rerun of the sweep finds its
    jobs' folders; the whole overrides stay in each folder (.hydra/overrides.yaml, overrides.yaml), which is what
    `vdrnn report` names rows by."""
    encoded = name.encode()
    if len(encoded) <= NAME_BYTES:
        return name
    digest = hashlib.sha1(encoded).hexdigest()[:10]
    return encoded[: NAME_BYTES - len(digest) - 1].decode(errors="ignore") + "~" + digest


# Registered when the CLI is imported, before Hydra resolves a job's folder.
OmegaConf.register_new_resolver("vdrnn_sweep_job", sweep_job_name)


class JobFailed(CompactHydraException):
    """A `-m` sweep job's VdrnnError. Hydra prints a CompactHydraException's message without a traceback."""


def _fail(err: VdrnnError, cfg: DictConfig, run_dir: Path) -> NoReturn:
    """Print ``err`` (it names the problem and the fix) and end the job without a traceback.

    A folder with no record yet (a fresh start's) gets this start's (.hydra/), so that a refused job of a sweep says
    what it was given beside the error in its vdrnn.log; a folder that has one keeps it (record_start).

    A single run exits with the error's status (:mod:`vdrnn.errors`: 1 crashed, 2 refused, 3 diverged, 4 a failed
    write). A job of a `-m` sweep raises an Exception instead: Hydra's launcher records it as that job's failure and
    goes on to the next job (a SystemExit would end the whole sweep there), and once the jobs have run, Hydra reports
    the first failed one and exits with status 1.
    """
    # A folder another live run holds is that run's, its log included: nothing of this start goes there. Nor does a
    # record go where writing has just failed.
    if not isinstance(err, FolderInUse):
        _write_to_log_file(str(err))
        if not (run_dir / ".hydra").exists() and not isinstance(err, WriteError):
            record_start(cfg, run_dir)
    print(f"error: {err}", file=sys.stderr)
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        raise JobFailed(str(err)) from err
    raise SystemExit(err.exit_status)


def _crashed(err: Exception, cfg: DictConfig, run_dir: Path) -> NoReturn:
    """A crash that no input explains (vdrnn.training.run has marked the run failed): its traceback in vdrnn.log
    only, and on the terminal one line saying where it is, with status 1."""
    _write_to_log_file("the traceback of the crash:", exc_info=err)
    where = log_file()
    said = f"the traceback is in {where}" if where else "no log could be written (the folder is not writable)"
    _fail(Crashed(f"{Crashed.of(err)}; {said}: please report it, with that file, to vdrnn's maintainers"), cfg,
          run_dir)


def _write_to_log_file(message: str, exc_info: BaseException | None = None) -> None:
    """Record an error in the run's vdrnn.log only: the terminal gets it once, as `error: ...` on stderr, where a
    log call would print it a second time through Hydra's console handler."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None,
                            (type(exc_info), exc_info, exc_info.__traceback__) if exc_info else None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler.stream is not None:
            handler.handle(record)


def _stopped(stop: RunStopped, run_dir: Path) -> NoReturn:
    """A signal stopped the run once its state was safe (vdrnn.training.stopping): say so in one line, with how to go
    on, and exit with 128 + the signal's number, as a process the signal had killed would (a sweep stops there too:
    the signal was for the whole process)."""
    log.warning("%s; %s", stop, _how_to_go_on(run_dir))
    raise SystemExit(stop.exit_status)


def _interrupted(run_dir: Path) -> NoReturn:
    """A second Ctrl-C, which stops at once: say what the run keeps and how to go on, instead of a traceback."""
    last = run_dir / "last.pt"
    kept = (f"{last} holds the last saved step" if last.exists() else
            f"no step was saved, so {run_dir} holds nothing to continue from")
    log.warning("interrupted; %s%s", kept, f"; {_how_to_go_on(run_dir)}" if last.exists() else "")
    raise SystemExit(130)


def _how_to_go_on(run_dir: Path) -> str:
    return f"to continue, run the same command with hydra.run.dir={run_dir}"


def record_start(cfg: DictConfig, run_dir: Path) -> None:
    """Hydra's record of a start, in ``run_dir/.hydra/`` as Hydra writes it (config.yaml, hydra.yaml,
    overrides.yaml), written once vdrnn has accepted the start (conf/config.yaml turns Hydra's own off): a rerun in a
    run's folder that vdrnn refuses, under other settings than its checkpoint's, leaves the record of the run there
    (a refused start in a folder with no record gets its own: _fail)."""
    hydra = HydraConfig.get()
    record = {"config.yaml": cfg, "hydra.yaml": {"hydra": hydra}, "overrides.yaml": list(hydra.overrides.task)}
    make_folder(run_dir / ".hydra")
    for name, content in record.items():
        write_atomically(run_dir / ".hydra" / name, OmegaConf.to_yaml(content))


@hydra.main(config_path=CONFIG_PATH, config_name="config", version_base="1.3")
def train_command(cfg: DictConfig) -> float | None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        open_log()
        raw = from_launch_dir(to_container(cfg), HydraConfig.get().runtime.cwd)
        refuse_eval_only(raw)
        task = task_of(raw)
        metrics = train(task, raw, run_dir, accepted=lambda: record_start(cfg, run_dir))
        # The command line this run finished under, beside its metrics.json, for `vdrnn report`'s overrides column
        # (.hydra/overrides.yaml is the last accepted start's, which may have stopped before the end).
        write_atomically(run_dir / "overrides.yaml", OmegaConf.to_yaml(list(HydraConfig.get().overrides.task)))
    except VdrnnError as err:
        _fail(err, cfg, run_dir)
    except RunStopped as stop:
        _stopped(stop, run_dir)
    except KeyboardInterrupt:
        _interrupted(run_dir)
    except Exception as err:
        _crashed(err, cfg, run_dir)
    log.info("finished: %s; %s holds metrics.json, best.pt and the TensorBoard events", task.headline(metrics),
             run_dir)
    return objective_of(metrics, raw.get("objective"), cfg, run_dir)


def refuse_eval_only(raw: dict) -> None:
    """`vdrnn train` would ignore ``checkpoint=`` (what `vdrnn eval` scores) and ``ood=`` (the text it scores against
    the test data) without a word: refuse them, naming what to run instead."""
    if raw.get("checkpoint"):
        raise ConfigError(f"checkpoint={raw['checkpoint']} is what `vdrnn eval` scores, and `vdrnn train` would ignore "
                          f"it: drop it; to continue a run from it use resume=PATH, to start a new language-model run "
                          f"from its weights init_from=PATH")
    for key in ("ood", "ood_root"):
        if raw.get(key):
            raise ConfigError(f"{key}={raw[key]} is for `vdrnn eval`, which scores a trained checkpoint against "
                              f"out-of-domain text, and `vdrnn train` would ignore it: drop it, and once the run has "
                              f"finished, run `vdrnn eval checkpoint=<run>/best.pt ood={raw.get('ood') or 'NAME'}`")


def objective_of(metrics: dict, objective: str | None, cfg: DictConfig, run_dir: Path) -> float | None:
    """What `vdrnn train` returns, for a Hydra sweeper (Optuna) to minimise: metrics.json's ``objective``, by default
    the score the run selected best.pt by, best_valid_<selector> (ppl for PTB, nll for IMDB, rmse for scale, nll_mc
    or rmse_mc under trainer.select=mc; None where nothing was validated, data.valid_fraction=0)."""
    if objective is None:
        return next((value for key, value in metrics.items() if key.startswith("best_valid_")), None)
    value = metrics.get(objective)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        numbers = sorted(k for k, v in metrics.items() if k.startswith(("best_valid_", "valid_"))
                         and isinstance(v, (int, float)) and not isinstance(v, bool))
        _fail(ConfigError(f"objective={objective} is not a number of this run's metrics.json (the run finished; "
                          f"its results are in {run_dir}); its validation numbers: {', '.join(numbers)}"), cfg, run_dir)
    return value


@hydra.main(config_path=CONFIG_PATH, config_name="config", version_base="1.3")
def eval_command(cfg: DictConfig) -> None:
    from vdrnn.training import checkpoint
    from vdrnn.training.evaluation import evaluate_checkpoint

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    out = run_dir / "eval.json"
    try:
        open_log()
        raw = from_launch_dir(to_container(cfg), HydraConfig.get().runtime.cwd)
        if not raw.get("checkpoint"):
            raise VdrnnError("vdrnn eval needs checkpoint=PATH (a best.pt or last.pt of a run)")
        path = Path(raw["checkpoint"])
        payload = checkpoint.load(path)  # read once: large models' checkpoints run to hundreds of MB
        given = {override.split("=", 1)[0].lstrip("+~") for override in HydraConfig.get().overrides.task}
        task, run_cfg, run_raw = eval_run(raw, payload["config"], given, path)
        record_start(cfg, run_dir)
        metrics = evaluate_checkpoint(task, run_cfg, path, payload)
        # What it ran: the checkpoint's settings with the command line's (eval.*, amp, batch sizes), as metrics.json
        # records a training run's, and whether that is a smoke run's (a step cap, or capped data it brings along).
        metrics["smoke"] = task.is_smoke(run_raw)
        metrics["config"] = run_raw
        write_atomically(out, json.dumps(metrics, indent=2) + "\n")
    except VdrnnError as err:
        _fail(err, cfg, run_dir)
    except KeyboardInterrupt:
        log.warning("interrupted; no eval.json was written")
        raise SystemExit(130) from None
    except Exception as err:
        _crashed(err, cfg, run_dir)
    # The numbers on the terminal; the config, the reliability diagrams' bins and the retention curves only in the file.
    print(json.dumps({k: v for k, v in metrics.items() if not isinstance(v, dict) and not
                      (isinstance(v, list) and len(v) > 2)}, indent=2))
    curves = [what for key, what in (("test_reliability", "the reliability bins"),
                                     ("test_retention_curves", "the retention curves")) if key in metrics]
    print(f"{task.headline(metrics)}; written to {out}, with {', '.join([*curves, 'the config it ran'])}")


def _print_help(command: str, overrides: list[str]) -> None:
    """Groups and the config the overrides compose, each key with its meaning (vdrnn.help); replaces Hydra's --help,
    which prints the same config without the comments that explain it."""
    from vdrnn.help import config_help

    try:
        print(config_help(command, quote_paths(overrides)))
    except VdrnnError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def shown_part(args: list[str]) -> str | None:
    """The part of the config Hydra's ``--cfg PART`` (``-c PART``) asks to be shown: job, hydra or all."""
    for flag in ("--cfg", "-c"):
        if flag in args and args.index(flag) + 1 < len(args):
            return args[args.index(flag) + 1]
    return None


def _print_eval_config(overrides: list[str]) -> None:
    """`vdrnn eval checkpoint=PATH ... --cfg job`: the config the evaluation runs with, the checkpoint's with what
    the command line changes (Hydra's would show the composed defaults, which the evaluation does not run)."""
    from vdrnn.help import composed
    from vdrnn.training import checkpoint

    overrides = quote_paths(overrides)
    try:
        cfg, _ = composed(overrides)
        raw = to_container(cfg)
        if not raw.get("checkpoint"):
            raise VdrnnError("vdrnn eval needs checkpoint=PATH (a best.pt or last.pt of a run)")
        given = {override.split("=", 1)[0].lstrip("+~") for override in overrides}
        path = Path(raw["checkpoint"])
        print(OmegaConf.to_yaml(eval_run(raw, checkpoint.load(path)["config"], given, path)[2]), end="")
    except VdrnnError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


# Options that need a Hydra plugin, the plugin's module and the extra that installs it.
PLUGINS = {"hydra/launcher=slurm": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
           "hydra/launcher=local": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
           "hydra/launcher=submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
           "hydra/launcher=submitit_local": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
           "search=optuna": ("hydra_plugins.hydra_optuna_sweeper", "optuna"),
           "hydra/sweeper=optuna": ("hydra_plugins.hydra_optuna_sweeper", "optuna")}


def check_plugins(args: list[str]) -> None:
    """Refuse an option whose Hydra plugin is not installed, naming the extra that installs it (Hydra itself would
    only say that it knows no such option)."""
    import importlib.util

    for arg in args:
        if arg in PLUGINS:
            module, extra = PLUGINS[arg]
            if importlib.util.find_spec(module) is None:
                raise ConfigError(f"{arg} needs a Hydra plugin that is not installed: {install_line(extra)}")


def shell_completion(argv: list[str]) -> None:
    """Hydra's shell completion for the two-word commands. ``vdrnn [train] -sc install=bash`` (zsh, fish) prints
    Hydra's script, registered for ``vdrnn``; the script then asks ``vdrnn -sc query=bash`` with the line typed so
    far in $COMP_LINE, which names the command second (Hydra expects the program and then overrides): the command
    word is completed here, and the rest is Hydra's completion of that command's config, on the line without it."""
    flag = "-sc" if "-sc" in argv else "--shell-completion"
    action = argv[argv.index(flag) + 1] if argv.index(flag) + 1 < len(argv) else ""
    sys.argv = ["vdrnn", flag, action]
    if not action.startswith("query"):
        COMMANDS["train"]()  # install / uninstall: the script is the same for both commands
        return
    line = os.environ.get("COMP_LINE", "")
    words = line.split()
    if len(words) < 2 or (len(words) == 2 and not line.endswith(" ")):  # the command itself
        typed = words[1] if len(words) == 2 else ""
        print(" ".join(c for c in ("train", "eval", "report") if c.startswith(typed)))
        return
    if words[1] in COMMANDS:
        os.environ["COMP_LINE"] = re.sub(r"^(\s*\S+\s+)\S+", r"\1", line)  # the program word, less the command
        COMMANDS[words[1]]()


def help_overrides(args: list[str]) -> list[str]:
    """The overrides of a `--help` command line, with Hydra's ``--config-dir DIR`` (``-cd``) as the search path entry
    it stands for, so that the help shows the options and comments of the files there too."""
    overrides, dirs, rest = [], [], iter(args)
    for arg in rest:
        if arg in ("--config-dir", "-cd"):
            dirs.append(next(rest, ""))
        elif arg.startswith("--config-dir="):
            dirs.append(arg.split("=", 1)[1])
        elif not arg.startswith("-"):
            overrides.append(arg)
    if dirs:
        given = [o for o in overrides if o.startswith("hydra.searchpath=")]
        entries = [entry for o in given for entry in o.split("=", 1)[1].strip("[]").split(",") if entry]
        entries += [f"file://{Path(d).expanduser().resolve()}" for d in dirs]
        overrides = [o for o in overrides if o not in given] + [f"hydra.searchpath=[{','.join(entries)}]"]
    return overrides


COMMANDS = {"train": train_command, "eval": eval_command}

# Options whose values are file paths. A sweep's job folders are named by their overrides
# (multirun/<date>/<time>/1_dropout=zaremba,seed=2/), and Hydra's override grammar reads the `=` and `,` in such a
# path as syntax; see quote_paths.
PATH_KEYS = ("checkpoint", "resume", "init_from", "data.root", "ood_root")


def quote_paths(overrides: list[str]) -> list[str]:
    """``overrides`` with the value of each path option that holds an `=` (which an unquoted Hydra value never may)
    single-quoted, so that `vdrnn eval checkpoint=multirun/.../1_dropout=zaremba,seed=2/best.pt` takes the path as
    written instead of failing in Hydra's parser. Values without an `=`, including a sweep over plain paths
    (`checkpoint=a/best.pt,b/best.pt`), and values already quoted pass through unchanged."""
    quoted = []
    for override in overrides:
        key, sep, value = override.partition("=")
        if sep and key.lstrip("+~") in PATH_KEYS and "=" in value and value[:1] not in ("'", '"'):
            # Inside quotes Hydra reads \' as a quote and \\ as a backslash only before a quote (or the closing one).
            value = "'" + re.sub(r"(\\*)('|$)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), value) + "'"
        quoted.append(f"{key}{sep}{value}")
    return quoted


def main(argv: list[str] | None = None) -> None:
    try:
        run_command(argv)
    except BrokenPipeError:
        # The reader of the output went first (`vdrnn eval --help | head -1`): end as a shell's command does, without
        # a traceback, and without another at exit, when Python flushes stdout.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(141) from None


def run_command(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    if argv[0] in ("-V", "--version"):
        print(version_line())
        return
    if "-sc" in argv or "--shell-completion" in argv:
        shell_completion(argv)
        return
    command, rest = argv[0], argv[1:]
    importable_from(os.getcwd())  # a data.reader module beside the user, wherever Hydra runs the job
    if command == "report":
        from vdrnn import report  # matplotlib, only for the report

        report.main(rest)
        return
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        raise SystemExit(2)
    if command == "eval" and shown_part(rest) == "job":
        _print_eval_config([arg for arg in rest if not arg.startswith("-") and arg != "job"])
        return
    if "--help" in rest or "-h" in rest:
        if "-m" in rest or "--multirun" in rest:
            print("error: --help shows the config of one run: drop -m and give one value per key", file=sys.stderr)
            raise SystemExit(2)
        _print_help(command, help_overrides(rest))
        return
    try:
        refuse_deletions(rest)
        check_plugins(rest)
        # A single run's config is checked before Hydra starts the run: a bad one is refused in a fraction of a
        # second and no run folder is made for it (Hydra would compose the config twice before the task could check
        # it). A sweep's jobs are checked one by one as they start, so that a refused job fails alone.
        if command == "train" and not any(arg.startswith("-") for arg in rest):
            checked_config(quote_paths(rest))
    except VdrnnError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    # Hydra reads sys.argv itself; give it the overrides and a program name for --help.
    sys.argv = [f"vdrnn {command}", *quote_paths(rest)]
    COMMANDS[command]()


def checked_config(overrides: list[str]) -> dict:
    """The config `vdrnn train <overrides>` runs with (plain containers), checked as its task checks it; a
    VdrnnError where it would be refused."""
    from vdrnn.help import composed

    refuse_deletions(overrides)
    cfg, _ = composed(overrides)
    raw = to_container(cfg)
    refuse_eval_only(raw)
    task_of(raw).parse(raw)
    return raw


if __name__ == "__main__":
    main()
