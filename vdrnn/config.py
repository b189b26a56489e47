"""Typed, validated views of the Hydra config: the groups every task shares, and how a group becomes a dataclass.

Hydra composes the YAML in conf/ and rejects unknown keys and options; this module and each task's config module
(``vdrnn/tasks/<task>/config.py``) turn the result into frozen dataclasses and check the values (ranges, choices,
combinations) with errors that say what to pass instead. Code below the CLI only ever sees these dataclasses. Nothing
here imports torch: a config error comes back before it would load.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vdrnn.cells import IMPLS
from vdrnn.dropout.config import SCHEMES, DropoutConfig, in_table_order
from vdrnn.dropout.scheme import GATES
from vdrnn.errors import ConfigError

AMP_MODES = ("off", "bf16", "fp16")
OPTIMIZERS = ("sgd", "adam", "ntasgd", "asgd")


INITS = ("uniform", "awd", "keras")


@dataclass(frozen=True)
class ModelConfig:
    num_layers: int = 2
    hidden_size: int = 650
    embedding_size: int | None = None  # None: the hidden size (Zaremba, Gal); AWD uses 400 with 1150 units
    tie_weights: bool = False  # decoder weight = embedding (AWD); the last layer then has embedding_size units
    init: str = "uniform"  # uniform: every parameter U(+-init_range) (Zaremba, Gal) | awd | keras: see initialize
    init_range: float = 0.05
    cell: str = "lstm"
    # tied | untied: the config's choice, as logged. The layers read it as DropoutConfig.per_gate, which
    # config.dropout_from derives from it: the weights are the same, only the masks differ.
    gates: str = "tied"
    impl: str = "auto"  # masked recurrences: auto (fast on CUDA, reference on CPU) | fast | reference

    def __post_init__(self) -> None:
        if self.cell not in GATES:
            raise ConfigError(f"cell.type={self.cell!r}; choose `cell=lstm`, `cell=gru` or `cell=rnn`")
        if self.gates not in ("tied", "untied"):
            raise ConfigError(f"cell.gates={self.gates!r}; choose `cell.gates=tied` or `cell.gates=untied`")
        if self.impl not in IMPLS:
            raise ConfigError(f"model.impl={self.impl!r}; choose one of {', '.join(IMPLS)}")
        if self.init not in INITS:
            raise ConfigError(f"model.init={self.init!r}; choose one of {', '.join(INITS)}")
        for key in ("num_layers", "hidden_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be at least 1")
        if self.embedding_size is not None and self.embedding_size < 1:
            raise ConfigError(f"model.embedding_size={self.embedding_size} must be at least 1, or null for the "
                              f"hidden size")
        if self.cell == "rnn" and self.gates == "untied":
            raise ConfigError("cell.gates=untied gives each gate its own dropout masks, and cell=rnn has one gate, "
                              "so they would be the tied masks (run on a slower path). Use cell.gates=tied "
                              "(dropout=variational or dropout=gaussian, not their _untied presets)")
        if not self.init_range > 0:
            raise ConfigError(f"model.init_range={self.init_range} must be positive (uniform init in +-range)")

    def layer_sizes(self) -> list[int]:
        """[input of layer 1, output of layer 1, ..., output of layer L]."""
        embedding = self.embedding_size or self.hidden_size
        last = embedding if self.tie_weights else self.hidden_size
        return [embedding] + [self.hidden_size] * (self.num_layers - 1) + [last]


@dataclass(frozen=True)
class TrainerConfig:
    epochs: int = 39
    max_steps: int | None = None
    max_minutes: float | None = None
    optimizer: str = "sgd"
    lr: float = 1.0
    lr_decay: float = 1.2
    lr_decay_start: int = 6
    clip: float = 5.0
    weight_decay: float = 0.0
    weight_decay_mode: str = "gal"
    ema: float = 0.0
    select: str = "scale"
    amp: str = "off"
    cuda_graph: str = "auto"
    loss: str = "sum_over_time"
    ar: float = 0.0
    tar: float = 0.0
    nonmono: int = 5
    stop_nonmono: bool = False
    log_every: int = 100
    progress: bool | str = "auto"  # tqdm bars: auto (on a terminal only) | true | false

    def __post_init__(self) -> None:
        if self.amp not in AMP_MODES:
            raise ConfigError(f"trainer.amp={self.amp!r}; choose one of {', '.join(AMP_MODES)}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"trainer.optimizer={self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
        if self.loss not in ("sum_over_time", "mean"):
            raise ConfigError(f"trainer.loss={self.loss!r}; choose `sum_over_time` (Zaremba, Gal) or `mean` (AWD)")
        if self.cuda_graph not in ("auto", "off"):
            raise ConfigError(f"trainer.cuda_graph={self.cuda_graph!r}; choose `auto` or `off`")
        if self.select not in ("scale", "mc", "last"):
            raise ConfigError(f"trainer.select={self.select!r}; choose `scale` (best.pt by the weight-scaling "
                              f"validation score), `mc` (by the MC-dropout one; sentiment runs) or `last` (the "
                              f"last epoch's weights, a fixed budget)")
        if self.weight_decay_mode not in ("gal", "l2"):
            raise ConfigError(f"trainer.weight_decay_mode={self.weight_decay_mode!r}; choose `gal` or `l2`")
        if self.epochs < 1 or (self.max_steps is not None and self.max_steps < 1):
            raise ConfigError("trainer.epochs and trainer.max_steps must be at least 1")
        if self.progress not in (True, False, "auto"):
            raise ConfigError(f"trainer.progress={self.progress!r}; choose auto (bars on a terminal only), true or "
                              f"false")
        if self.log_every < 1:  # also how often a NaN loss is looked for
            raise ConfigError(f"trainer.log_every={self.log_every} must be at least 1 (steps between loss reads)")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ConfigError(f"trainer.max_minutes={self.max_minutes} must be positive (or null: no time limit)")
        # Written as `not x > 0` so that NaN, which compares false, is refused too.
        for key, value, ok, rule in (("lr", self.lr, self.lr > 0, "> 0"),
                                     ("lr_decay", self.lr_decay, self.lr_decay >= 1, ">= 1 (1: no decay)"),
                                     ("clip", self.clip, self.clip > 0, "> 0 (a large value turns clipping off)"),
                                     ("weight_decay", self.weight_decay, self.weight_decay >= 0, ">= 0")):
            if not ok:
                raise ConfigError(f"trainer.{key}={value} must be {rule}")
        if not 0 <= self.ema < 1:
            raise ConfigError(f"trainer.ema={self.ema} is the decay of the weights' moving average: use a value in "
                              f"[0, 1), e.g. 0.999 (about the last 1,000 steps), or 0 for none")
        if self.ema and self.optimizer in ("ntasgd", "asgd"):
            raise ConfigError(f"trainer.ema averages the weights, and trainer.optimizer={self.optimizer} already "
                              f"validates averaged weights: use one of them (trainer.ema=0, or trainer.optimizer=sgd)")
        if self.ar < 0 or self.tar < 0 or self.nonmono < 1:
            raise ConfigError("need trainer.ar >= 0, trainer.tar >= 0 and trainer.nonmono >= 1")

    @property
    def gal_decay(self) -> float:
        """The decay applied after each update (``weight_decay_mode=gal``); 0 with ``l2``, which the optimizer
        applies through the gradient instead."""
        return self.weight_decay if self.weight_decay_mode == "gal" else 0.0

    def lr_at(self, epoch: int) -> float:
        """Learning rate of epoch ``epoch`` (1-based), as Zaremba's and Gal's code schedule it: at the end of
        every epoch e > lr_decay_start (their ``max_epoch``) the lr is divided by lr_decay, so epochs
        1 .. lr_decay_start + 1 run at the full lr and epoch lr_decay_start + 2 is the first decayed one."""
        return self.lr / self.lr_decay ** max(0, epoch - self.lr_decay_start - 1)


# eval.average -> how MC dropout combines its samples' distributions (vdrnn.nn.mc.AVERAGES)
AVERAGES = ("arithmetic", "geometric")


@dataclass(frozen=True)
class EvalConfig:
    mode: str = "scale"
    samples: int = 1000
    batch: int = 1000
    word_dropout: bool = False
    mc_masks: str = "stream"
    average: str = "arithmetic"
    dropout_scale: float = 1.0
    temperature: float | str = 1.0

    def __post_init__(self) -> None:
        if self.mode not in ("scale", "mc"):
            raise ConfigError(f"eval.mode={self.mode!r}; choose `eval=scale` or `eval=mc`")
        if self.mc_masks not in ("stream", "minibatch"):
            raise ConfigError(f"eval.mc_masks={self.mc_masks!r}; choose `stream` (Gal) or `minibatch`")
        if self.samples < 1 or self.batch < 1:
            raise ConfigError("eval.samples and eval.batch must be at least 1")
        if self.average not in AVERAGES:
            raise ConfigError(f"eval.average={self.average!r}; choose `arithmetic` (the mean of the samples' "
                              f"probabilities, Gal's) or `geometric` (of their log-probabilities, renormalised)")
        if not self.dropout_scale > 0:  # NaN too
            raise ConfigError(f"eval.dropout_scale={self.dropout_scale} must be > 0: it multiplies every dropout "
                              f"probability in the MC passes (1: the trained ones; weight scaling is eval=scale)")
        if isinstance(self.temperature, str) and self.temperature != "fit":
            raise ConfigError(f"eval.temperature={self.temperature!r}; give a number > 0 (1: none) or `fit` (the one "
                              f"that minimises the validation NLL)")
        if not isinstance(self.temperature, str) and not self.temperature > 0:
            raise ConfigError(f"eval.temperature={self.temperature} must be > 0 (1: none), or `fit`")


# What a config field's annotation accepts, and how an error names it. Bools are not numbers here, though Python
# counts them as ints: `trainer.lr=true` is a typo, not 1.
KINDS = {"int": ("an integer", (int,)), "float": ("a number", (int, float)), "bool": ("true or false", (bool,)),
         "str": ("a string", (str,))}


def check_type(value: Any, annotation: str, key: str) -> None:
    """Refuse ``value`` for the config field ``key`` annotated ``annotation`` (e.g. ``float | None``) when it has
    the wrong type, e.g. `trainer.epochs=abc`, which would otherwise fail later with a bare TypeError."""
    options = [part.strip() for part in annotation.split("|")]
    if value is None and "None" in options:
        return
    kinds = [KINDS[option] for option in options if option in KINDS]
    if len(kinds) < len([option for option in options if option != "None"]):
        return  # a type this check does not cover
    if any(isinstance(value, types) and (bool in types or not isinstance(value, bool)) for _, types in kinds):
        return
    expected = " or ".join(name for name, _ in kinds) + (" or null" if "None" in options else "")
    hint = YAML_BOOL_HINT if isinstance(value, bool) and options == ["str"] else ""
    raise ConfigError(f"{key}={value!r} must be {expected}{hint}")


# YAML 1.1, which OmegaConf follows, reads a bare off/on/no/yes as a boolean: `amp: off` in a preset is False.
YAML_BOOL_HINT = " (YAML reads a bare off, on, no or yes as true/false: quote the word, e.g. amp: \"off\")"


def build(cls, values: dict[str, Any], where: str, derived: dict[str, tuple[Any, str]] | None = None):
    """``cls(**values)`` for the config group ``where``, refusing unknown keys and values of the wrong type.
    ``derived``: fields set from another group, name -> (value, the option that sets it); the group's own values may
    not set them (they would be overwritten without a word)."""
    derived = derived or {}
    annotations = {f.name: f.type for f in fields(cls)}
    settable = sorted(set(annotations) - set(derived))
    unknown = sorted(set(values) - set(settable))
    if unknown:
        set_by = "".join(f"; {where}.{k} follows {derived[k][1]}" for k in unknown if k in derived)
        raise ConfigError(f"unknown key(s) {', '.join(where + '.' + k for k in unknown)}; "
                          f"known: {', '.join(settable)}{set_by}")
    values = {**values, **{name: value for name, (value, _) in derived.items()}}
    # A true/false where a word goes is checked after the group's own checks, which name the words it takes
    # (`trainer.cuda_graph=True; choose auto or off`), where "must be a string" would not.
    words = [name for name, value in values.items() if isinstance(value, bool) and annotations[name] == "str"]
    for name, value in values.items():
        if name not in words:
            check_type(value, annotations[name], f"{where}.{name}")
    try:
        built = cls(**values)
    except ConfigError as err:
        if any(f"{where}.{name}=" in str(err) for name in words):
            raise ConfigError(f"{err}{YAML_BOOL_HINT}") from None
        raise
    for name in words:  # no check of the group's own took the value up
        check_type(values[name], annotations[name], f"{where}.{name}")
    return built


# The top level of a composed config: the groups, the run's own keys, the cell group (folded into model) and the
# preset's paper numbers (read by `vdrnn report`). Hydra appends any other key given with a `+` (its own hint for a
# mistyped group, `+datset=ptb`), which no code would then read.
TOP_LEVEL = ("data", "model", "dropout", "trainer", "eval", "seed", "device", "resume", "checkpoint", "init_from",
             "cell", "paper", "objective", "ood", "ood_root")


# The sections every run reads; conf/ gives each of them, so only a deletion on the command line can take one away.
SECTIONS = ("data", "model", "dropout", "trainer", "eval")


def check_sections(raw: dict[str, Any]) -> None:
    """Refuse a config without one of SECTIONS (``~trainer``, ``~dataset``), which would fail later as a KeyError."""
    missing = [name for name in SECTIONS if not isinstance(raw.get(name), dict)]
    if missing:
        raise ConfigError(f"the config has no {', '.join(missing)} settings, which every run needs; set values "
                          f"instead of deleting them (e.g. trainer.lr=0.5), or choose an option of the group "
                          f"(e.g. dataset=ptb)")


# The config groups conf/config.yaml chooses none of by default.
OPTIONAL_GROUPS = ("experiment", "search")


def refuse_deletions(overrides: list[str]) -> None:
    """Refuse ``~key`` on the command line for any key of vdrnn's config (Hydra's own may go): a deleted key would
    fall back to a default the config does not show, or take away a section every run reads. A group that is
    none by default (OPTIONAL_GROUPS) may go: ``~experiment`` drops the preset, ``~search`` the search."""
    for override in overrides:
        if not override.startswith("~"):
            continue
        key = override[1:].split("=", 1)[0]
        if key in OPTIONAL_GROUPS or key.startswith("hydra"):
            continue
        if key not in (*SECTIONS, "dataset", "cell"):  # a key, not a section or a config group
            raise ConfigError(f"{override} deletes {key}, which every run reads: set it instead ({key}=VALUE)")
        raise ConfigError(f"{override} deletes the {key} settings, which every run reads: set a key of them instead "
                          f"({key}.KEY=VALUE), or choose an option of the group ({key}=OPTION; `vdrnn train --help` "
                          f"lists them)")


def run_settings(raw: dict[str, Any]) -> tuple[int, str]:
    """The top-level ``seed`` and ``device``, type-checked, once no other top-level key is unknown."""
    unknown = sorted(set(raw) - set(TOP_LEVEL))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(TOP_LEVEL))} (a config "
                          f"group is chosen without a `+`, e.g. dataset=imdb)")
    seed, device = raw.get("seed", 1), raw.get("device", "auto")
    check_type(seed, "int", "seed")
    check_seed(seed, "seed")
    check_type(device, "str", "device")
    for key in ("resume", "checkpoint", "init_from", "ood", "ood_root"):  # paths, and the out-of-domain set's name
        check_type(raw.get(key), "str | None", key)
    check_objective(raw.get("objective"))
    problem = paper_problem(raw.get("paper"))
    if problem:
        raise ConfigError(f"paper={raw.get('paper')!r}: {problem}; it is set by experiment presets (the row of the "
                          f"paper a run reproduces, and its numbers), so drop it, or give it as a preset gives it")
    return seed, device


# The seeds torch's generators take.
SEEDS = (-(2**63), 2**64 - 1)


def check_seed(seed: int, key: str) -> None:
    if not SEEDS[0] <= seed <= SEEDS[1]:
        raise ConfigError(f"{key}={seed} is outside the seeds torch takes ({SEEDS[0]} to {SEEDS[1]}): use a smaller "
                          f"one, e.g. {key}=1")


# A preset's paper entry: the paper's row and model size, as `vdrnn report` names its rows, and its numbers.
PAPER_WORDS = ("row", "size")
PAPER_NUMBERS = ("valid", "test", "test_mc")


def paper_problem(paper: Any) -> str | None:
    """What is wrong with a run's ``paper`` entry (null, or a mapping as the experiment presets give it), or None."""
    if paper is None:
        return None
    if not isinstance(paper, dict):
        return f"a {type(paper).__name__}, where a mapping with {', '.join(PAPER_WORDS)} and the paper's numbers goes"
    for key in PAPER_WORDS:
        if not isinstance(paper.get(key), str):
            return f"paper.{key} must be a string"
    for key in PAPER_NUMBERS:
        value = paper.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"paper.{key} must be a number or null"
    return None


def check_objective(objective: Any) -> None:
    """A sweeper's objective is a validation number of metrics.json: tuning on the test set would leave no test."""
    check_type(objective, "str | None", "objective")
    if objective is not None and not objective.startswith(("best_valid_", "valid_")):
        raise ConfigError(f"objective={objective} is not a validation number: a search tuned on "
                          f"{'the test set leaves its numbers no test' if 'test' in objective else 'it compares nothing'}"
                          f"; use best_valid_<metric> (best_valid_ppl, best_valid_nll, best_valid_rmse) or valid_<metric>")


def to_container(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain Python containers (what checkpoints and logs store); a ConfigError naming the key
    whose interpolation cannot be resolved (``seed=${nope}``, ``data.root=${oc.env:UNSET}``)."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as err:
        what = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"{getattr(err, 'full_key', None) or 'a key'} cannot be resolved ({what}): give it a value, "
                          f"or interpolate a key the config has (${{trainer.lr}}) or a set environment variable "
                          f"(${{oc.env:NAME,default}})") from None


def model_from(raw: dict[str, Any], cls: type = ModelConfig):
    """The ``model`` group with the ``cell`` group's choices (type, tied or untied gates) folded in."""
    cell = raw.get("cell") or {}
    return build(cls, raw["model"], "model", {"cell": (cell.get("type", "lstm"), "cell=lstm|gru|rnn"),
                                              "gates": (cell.get("gates", "tied"), "cell.gates=tied|untied")})


def dropout_from(raw: dict[str, Any], model: ModelConfig) -> DropoutConfig:
    """The ``dropout`` group of a language-model or sentiment run, checked against its model; untied gates mean
    one mask per gate."""
    dropout = build(DropoutConfig, raw["dropout"], "dropout",
                    {"per_gate": (model.gates == "untied", "cell.gates=untied (a mask per gate)")})
    problem = SCHEMES[dropout.scheme].refuses_cell(model.cell, dropout)
    if problem:
        others = [name for name in in_table_order()
                  if name != dropout.scheme and not SCHEMES[name].refuses_cell(model.cell)]
        raise ConfigError(f"dropout={dropout.scheme} cannot run on cell={model.cell}: {problem}. Use cell=lstm, or "
                          f"dropout={' / '.join(others)}")
    if dropout.hidden and model.num_layers == 1:
        raise ConfigError(f"dropout.hidden={dropout.hidden} drops the inputs of layers 2..L, and model.num_layers=1 "
                          f"has none: set dropout.hidden=null (dropout.input drops the one layer's input), or "
                          f"model.num_layers=2 or more")
    return dropout


def eval_from(raw: dict[str, Any], dropout: DropoutConfig) -> EvalConfig:
    """The ``eval`` group of a run, its dropout scale checked against the probabilities it scales."""
    evaluation = build(EvalConfig, raw["eval"], "eval")
    problem = dropout_scale_problem(evaluation.dropout_scale, dropout)
    if problem:
        raise ConfigError(f"eval.dropout_scale={evaluation.dropout_scale:g} {problem}")
    return evaluation


def dropout_scale_problem(scale: float, dropout: DropoutConfig) -> str | None:
    """Why ``eval.dropout_scale`` cannot scale ``dropout``'s probabilities, or None. A scheme that learns its noise
    keeps the learned levels in the checkpoint's weights, not in the config, so scaling the config would change nothing
    the passes draw: refused rather than ignored."""
    if scale == 1:
        return None
    entry = SCHEMES[dropout.scheme]
    if dropout.learn_alpha or entry.learns_rates:
        learner = "dropout.learn_alpha=true" if dropout.learn_alpha else f"dropout={dropout.scheme}"
        return (f"multiplies the dropout probabilities of the config, and under {learner} the model's noise levels are "
                f"learned weights of the checkpoint, which it would leave as they are: drop eval.dropout_scale")
    used = dropout.used()
    if not used:
        return "multiplies the dropout probabilities, and this model has none (all 0): drop eval.dropout_scale"
    site, p = max(used.items(), key=lambda item: item[1])
    if p * scale >= 1:
        return (f"makes dropout.{site}={p:g} a probability of {p * scale:g}, and a probability must stay below 1: use "
                f"a scale below {1 / p:.4g}")
    return None


def option_defaults(cfg) -> dict[str, Any]:
    """Every option of a typed run config (RunConfig, SentimentRunConfig) with its default, as dotted keys
    (``trainer.select``: ``"scale"``). An option vdrnn added later defaults to what runs did before it."""
    defaults = {}
    for group in fields(cfg):
        node = getattr(cfg, group.name)
        if is_dataclass(node):
            defaults.update({f"{group.name}.{f.name}": f.default for f in fields(node) if f.default is not MISSING})
    return defaults


def key_among(key: str, names: tuple[str, ...]) -> bool:
    """Is the dotted ``key`` one of ``names`` or inside one of them (``eval.samples`` is in ``eval``)? Whole
    names only: ``trainer.lr_decay`` is not ``trainer.lr``."""
    return any(key == name or key.startswith(name + ".") for name in names)


def drop_them(keys: list[str]) -> str:
    """The end of an error that refuses ``keys`` of the command line: "drop it" or "drop them"."""
    return f"drop {'them' if len(keys) > 1 else 'it'}"
