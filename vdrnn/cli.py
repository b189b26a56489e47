"""The `vdrnn` command: `vdrnn train [overrides]`, `vdrnn eval checkpoint=PATH [overrides]`, `vdrnn report DIR...`.

`train` and `eval` are Hydra applications over the same config tree (conf/, shipped as vdrnn.conf), so `-m` sweeps,
`--cfg job` and every override work the same way for both; their `--help` is vdrnn.help's. Each run goes to its
task (``data.task``, :mod:`vdrnn.tasks`). `report` reads finished runs and takes plain arguments. Nothing here imports
torch: help and config errors come back before it would load, and a task imports it when its run starts.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from vdrnn.config import to_container
from vdrnn.errors import VdrnnError
from vdrnn.eval_settings import eval_config
from vdrnn.files import write_atomically
from vdrnn.tasks import task_of

CONFIG_PATH = "pkg://vdrnn.conf"
log = logging.getLogger("vdrnn")

USAGE = """usage: vdrnn <command> [hydra overrides]

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
    path would nest folders, so `vdrnn eval -m checkpoint=a/best.pt,b/best.pt` would name its jobs ``0_`` and ``1_``."""
    if not checkpoint:
        return overrides
    path = Path(checkpoint)
    scored = f"{path.parent.name}-{path.stem}" if path.parent.name else path.stem
    return f"{overrides}@{scored}" if overrides else scored


# Registered when the CLI is imported, before Hydra resolves a job's folder.
OmegaConf.register_new_resolver("vdrnn_sweep_job", sweep_job_name)


class JobFailed(CompactHydraException):
    """A `-m` sweep job's VdrnnError. Hydra prints a CompactHydraException's message without a traceback."""


def _fail(err: VdrnnError, cfg: DictConfig, run_dir: Path) -> NoReturn:
    """Print ``err`` (it names the problem and the fix) and end the job without a traceback.

    A folder with no record yet (a fresh start's) gets this start's (.hydra/), so that a refused job of a sweep says
    what it was given beside the error in its vdrnn.log; a folder that has one keeps it (record_start).

    A single run exits with status 2. A job of a `-m` sweep raises an Exception instead: Hydra's launcher records
    it as that job's failure and goes on to the next job (a SystemExit would end the whole sweep there), and once
    the jobs have run, Hydra reports the first failed one and exits with status 1.
    """
    _write_to_log_file(str(err))
    if not (run_dir / ".hydra").exists():
        record_start(cfg, run_dir)
    print(f"error: {err}", file=sys.stderr)
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        raise JobFailed(str(err)) from err
    raise SystemExit(2)


def _write_to_log_file(message: str) -> None:
    """Record an error in the run's vdrnn.log only: the terminal gets it once, as `error: ...` on stderr, where a
    log call would print it a second time through Hydra's console handler."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def _interrupted(run_dir: Path) -> NoReturn:
    """Ctrl-C during training: say what the run keeps and how to go on, instead of a traceback. Checkpoints are
    written whole at the end of each epoch, so the epoch in progress is lost and last.pt, where there is one, holds
    the last finished epoch. Exits with 130, the shell's status for an interrupt (a sweep stops there too)."""
    last = run_dir / "last.pt"
    kept = (f"{last} holds the last finished epoch: rerun the command with hydra.run.dir={run_dir} to continue "
            f"from it" if last.exists() else f"no epoch had finished, so {run_dir} holds nothing to continue from")
    log.warning("interrupted; %s", kept)
    raise SystemExit(130)


def record_start(cfg: DictConfig, run_dir: Path) -> None:
    """Hydra's record of a start, in ``run_dir/.hydra/`` as Hydra writes it (config.yaml, hydra.yaml,
    overrides.yaml), written once vdrnn has accepted the start (conf/config.yaml turns Hydra's own off): a rerun in a
    run's folder that vdrnn refuses, under other settings than its checkpoint's, leaves the record of the run there
    (a refused start in a folder with no record gets its own: _fail)."""
    hydra = HydraConfig.get()
    record = {"config.yaml": cfg, "hydra.yaml": {"hydra": hydra}, "overrides.yaml": list(hydra.overrides.task)}
    (run_dir / ".hydra").mkdir(exist_ok=True)
    for name, content in record.items():
        write_atomically(run_dir / ".hydra" / name, OmegaConf.to_yaml(content))


@hydra.main(config_path=CONFIG_PATH, config_name="config", version_base="1.3")
def train_command(cfg: DictConfig) -> float | None:
    raw = to_container(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        task = task_of(raw)
        metrics = task.train(raw, run_dir, accepted=lambda: record_start(cfg, run_dir))
    except VdrnnError as err:
        _fail(err, cfg, run_dir)
    except KeyboardInterrupt:
        _interrupted(run_dir)
    # The command line this run finished under, beside its metrics.json, for `vdrnn report`'s overrides column
    # (.hydra/overrides.yaml is the last accepted start's, which may have stopped before the end).
    write_atomically(run_dir / "overrides.yaml", OmegaConf.to_yaml(list(HydraConfig.get().overrides.task)))
    log.info("finished: %s; %s holds metrics.json, best.pt and the TensorBoard events", task.headline(metrics),
             run_dir)
    # Returned so that a Hydra sweeper (e.g. Optuna) can minimise it: the score the run selected best.pt by,
    # best_valid_<selector> in metrics.json (ppl for PTB, nll for IMDB, rmse for scale, nll_mc or rmse_mc under
    # trainer.select=mc; lower is better; None where nothing was validated, data.valid_fraction=0).
    return next((value for key, value in metrics.items() if key.startswith("best_valid_")), None)


@hydra.main(config_path=CONFIG_PATH, config_name="config", version_base="1.3")
def eval_command(cfg: DictConfig) -> None:
    from vdrnn.training import checkpoint

    raw = to_container(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        if not raw.get("checkpoint"):
            raise VdrnnError("vdrnn eval needs checkpoint=PATH (a best.pt or last.pt of a run)")
        path = Path(raw["checkpoint"])
        payload = checkpoint.load(path)  # read once: large models' checkpoints run to hundreds of MB
        given = {override.split("=", 1)[0].lstrip("+~") for override in HydraConfig.get().overrides.task}
        run_raw = eval_config(raw, payload["config"], given)
        record_start(cfg, run_dir)
        task = task_of(run_raw)
        metrics = task.evaluate(run_raw, path, payload)
        # What it ran: the checkpoint's settings with the command line's (eval.*, amp, batch sizes), as metrics.json
        # records a training run's, and whether that is a smoke run's (a step cap, or capped data it brings along).
        metrics["smoke"] = task.is_smoke(run_raw)
        metrics["config"] = run_raw
    except VdrnnError as err:
        _fail(err, cfg, run_dir)
    except KeyboardInterrupt:
        log.warning("interrupted; no eval.json was written")
        raise SystemExit(130) from None
    out = run_dir / "eval.json"
    out.write_text(json.dumps(metrics, indent=2) + "\n")
    # The numbers on the terminal; the config and the reliability diagrams' bins only in the file.
    print(json.dumps({k: v for k, v in metrics.items() if not isinstance(v, dict) and not
                      (isinstance(v, list) and len(v) > 2)}, indent=2))
    kept = "the reliability bins and the config it ran" if "test_reliability" in metrics else "the config it ran"
    print(f"{task.headline(metrics)}; written to {out}, with {kept}")


def _print_help(command: str, overrides: list[str]) -> None:
    """Groups and the config the overrides compose, each key with its meaning (vdrnn.help); replaces Hydra's --help,
    which prints the same config without the comments that explain it."""
    from vdrnn.help import config_help

    try:
        print(config_help(command, quote_paths(overrides)))
    except VdrnnError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


COMMANDS = {"train": train_command, "eval": eval_command}

# Options whose values are file paths. A sweep's job folders are named by their overrides
# (multirun/<date>/<time>/1_dropout=zaremba,seed=2/), and Hydra's override grammar reads the `=` and `,` in such a
# path as syntax; see quote_paths.
PATH_KEYS = ("checkpoint", "resume", "init_from", "data.root")


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
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    command, rest = argv[0], argv[1:]
    if command == "report":
        from vdrnn import report  # matplotlib, only for the report

        report.main(rest)
        return
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        raise SystemExit(2)
    if "--help" in rest or "-h" in rest:
        if "-m" in rest or "--multirun" in rest:
            print("error: --help shows the config of one run: drop -m and give one value per key", file=sys.stderr)
            raise SystemExit(2)
        _print_help(command, [arg for arg in rest if not arg.startswith("-")])
        return
    if command == "train" and not any(arg.startswith("-") for arg in rest):
        refuse_a_bad_config(quote_paths(rest))
    # Hydra reads sys.argv itself; give it the overrides and a program name for --help.
    sys.argv = [f"vdrnn {command}", *quote_paths(rest)]
    COMMANDS[command]()


def refuse_a_bad_config(overrides: list[str]) -> None:
    """A single run's config checked before Hydra starts the run: an unknown key or option, or a bad value, is refused
    in a fraction of a second, with its message and status 2, and no run folder is made for it. Hydra would compose the
    config twice before the task could check it; a sweep's jobs are checked one by one as they start (a refused job
    fails alone)."""
    from vdrnn.help import composed

    try:
        cfg, _ = composed(overrides)
        raw = to_container(cfg)
        task_of(raw).parse(raw)
    except VdrnnError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
