"""The ``dropout`` config group: the schemes it names (:data:`SCHEMES`), its checks, and the :mod:`vdrnn.nn` objects
it builds (:meth:`DropoutConfig.scheme` for the recurrent modules, :meth:`DropoutConfig.word_dropout` for the
embedding). A config and a Python call thus reach the same code; only the names differ (``dropout.hidden`` is a
scheme's ``between``, ``dropout.locked_mask=sample`` its ``per="sequence"``, ...)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import metadata

from vdrnn.dropout.masks import NOISES
from vdrnn.dropout.scheme import Scheme
from vdrnn.dropout.schemes.concrete import Concrete
from vdrnn.dropout.schemes.gaussian import Gaussian
from vdrnn.dropout.schemes.moon import Moon
from vdrnn.dropout.schemes.semeniuta import Semeniuta
from vdrnn.dropout.schemes.variational import Variational
from vdrnn.dropout.schemes.weight_drop import WeightDrop
from vdrnn.dropout.schemes.zaremba import Zaremba
from vdrnn.dropout.schemes.zoneout import Zoneout
from vdrnn.errors import ConfigError

SITES = ("embedding", "input", "hidden", "recurrent", "output", "cell", "weight", "candidate", "zoneout_cell",
         "zoneout_hidden")
LEARNED_SITES = ("input", "hidden", "recurrent", "output")  # the sites whose alpha learn_alpha learns
GRANULARITIES = ("sample", "batch")
CELL_SCALES = ("h", "c")
CANDIDATE_MASKS = ("step", "sequence")


@dataclass(frozen=True)
class DropoutConfig:
    """Dropout probabilities, one per site, and how the masks are drawn. Which sites a scheme may use is checked here.

    ``embedding`` is word-type dropout (drop whole word types, Gal sec. 4.1); ``input`` drops each layer's input (the
    embedding output for layer 1, the layer below's output above it), and ``hidden``, when set, replaces it for the
    inputs of layers 2..L (AWD's ``dropouth``); ``recurrent`` drops h_{t-1}; ``output`` drops the last layer's output
    before the head; ``cell`` drops c_t (Moon); ``weight`` drops entries of each W_hh (AWD's weight drop);
    ``candidate`` drops the candidate update g_t (Semeniuta), with a mask fresh at every ``step`` or one per
    ``sequence`` (``candidate_mask``); ``zoneout_cell`` and ``zoneout_hidden`` are zoneout's chances z_c, z_h that a
    unit of c_t / h_t keeps its previous value (Krueger).
    ``embedding_mask`` and ``locked_mask`` say whether word-type and fixed-over-time masks are drawn per ``sample``
    (Gal) or once per ``batch`` and shared by its sequences (AWD's reference code for word types). ``per_gate`` gives
    every gate its own masks (Gal's untied weights, eq. 5), set from ``cell.gates``. ``cell_scale`` says where Moon's
    1/(1-p) goes. ``learn_alpha`` learns the Gaussian masks' variance with Kingma's KL term weighted by
    ``kl_weight``. ``embedding_noise`` draws the word-type masks from another distribution than the scheme's own.
    Concrete dropout learns its p's with the relaxation's ``temperature`` and a regularizer whose weight term has the
    prior ``lengthscale`` (times ``kl_weight``).
    """

    scheme: str = "none"
    embedding: float = 0.0
    input: float = 0.0
    recurrent: float = 0.0
    output: float = 0.0
    cell: float = 0.0
    hidden: float | None = None
    weight: float = 0.0
    embedding_mask: str = "sample"
    locked_mask: str = "sample"
    cell_scale: str = "h"
    per_gate: bool = False
    learn_alpha: bool = False
    kl_weight: float = 1.0
    embedding_noise: str | None = None
    candidate: float = 0.0
    candidate_mask: str = "step"
    zoneout_cell: float = 0.0
    zoneout_hidden: float = 0.0
    temperature: float = 0.1
    lengthscale: float = 1e-4

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError(f"unknown dropout scheme {self.scheme!r}; choose one of {', '.join(in_table_order())} "
                              f"(e.g. `dropout=variational`)")
        self._check_granularities()
        self._check_options()
        self._check_probabilities()

    def _check_granularities(self) -> None:
        """``embedding_mask`` and ``locked_mask`` off their default only where the scheme draws such masks."""
        users = {"locked_mask": [name for name, s in ordered() if s.reads_locked_mask],
                 "embedding_mask": [name for name, s in ordered() if "embedding" in s.sites]}
        for key, schemes in users.items():
            value = getattr(self, key)
            if value not in GRANULARITIES:
                raise ConfigError(f"dropout.{key}={value!r}; choose `sample` or `batch`")
            if value != "sample" and self.scheme not in schemes:  # `sample` is the default
                why = (f"it sets how schemes {', '.join(schemes)} draw their fixed-over-time masks (Moon's cell mask "
                       f"is always one per sample, Zaremba's masks are fresh every step)" if key == "locked_mask"
                       else f"word-type masks are drawn only by schemes {', '.join(schemes)}")
                raise ConfigError(f"dropout.{key}={value} does nothing with scheme {self.scheme!r}: {why}; "
                                  f"drop the override or pick one of those schemes")

    def _check_options(self) -> None:
        """The options that only some schemes read: per-gate masks, Moon's scale, word-type noise, learned alpha."""
        spec = SCHEMES[self.scheme]
        per_gate = [name for name, s in ordered() if s.per_gate_masks]
        if self.per_gate and not spec.per_gate_masks:
            raise ConfigError(
                f"cell.gates=untied gives every gate its own dropout masks, which only "
                f"{' and '.join(f'dropout={name}' for name in per_gate)} draw; scheme {self.scheme!r} "
                f"would ignore it. Use cell.gates=tied, or {' / '.join(f'dropout={name}_untied' for name in per_gate)}")
        if self.cell_scale not in CELL_SCALES:
            raise ConfigError(f"dropout.cell_scale={self.cell_scale!r}; choose `h` (vdrnn's Moon) or `c`")
        if self.cell_scale != "h" and "cell" not in spec.sites:
            raise ConfigError(f"dropout.cell_scale={self.cell_scale} only applies to `dropout=moon` (it places "
                              f"Moon's 1/(1-p)); drop the override or pick the Moon scheme")
        if self.embedding_noise is not None:
            if self.embedding_noise not in NOISES:
                raise ConfigError(f"dropout.embedding_noise={self.embedding_noise!r}; choose `bernoulli` (drop whole "
                                  f"word types), `gaussian` (scale them by N(1, p/(1-p))) or null (the scheme's own)")
            if "embedding" not in spec.sites:
                users = [name for name, s in ordered() if "embedding" in s.sites]
                raise ConfigError(f"dropout.embedding_noise={self.embedding_noise} draws the word-type masks, which "
                                  f"scheme {self.scheme!r} does not drop (schemes {', '.join(users)} do): drop the "
                                  f"override or pick one of those schemes")
            if not self.embedding:
                raise ConfigError(f"dropout.embedding_noise={self.embedding_noise} draws the word-type masks, and "
                                  f"dropout.embedding=0 draws none: set dropout.embedding (e.g. 0.5) or drop the "
                                  f"override")
        if self.candidate_mask not in CANDIDATE_MASKS:
            raise ConfigError(f"dropout.candidate_mask={self.candidate_mask!r}; choose `step` (a fresh mask every "
                              f"step) or `sequence` (one per sequence)")
        if self.candidate_mask != "step" and "candidate" not in spec.sites:
            raise ConfigError(f"dropout.candidate_mask={self.candidate_mask} draws the candidate's masks, which only "
                              f"`dropout=semeniuta` drops; drop the override or pick that scheme")
        for key in ("temperature", "lengthscale"):
            value, default = getattr(self, key), DropoutConfig.__dataclass_fields__[key].default
            if not (is_number(value) and value > 0):
                raise ConfigError(f"dropout.{key}={value!r} must be a number > 0 (Concrete dropout's default: "
                                  f"{default:g})")
            if value != default and not spec.learns_rates:
                raise ConfigError(f"dropout.{key}={value} is Concrete dropout's; scheme {self.scheme!r} does not read "
                                  f"it. Drop the override or use `dropout=concrete`")
        if self.learn_alpha and not spec.learns_noise:
            raise ConfigError(f"dropout.learn_alpha=true learns the variance of Gaussian masks; scheme {self.scheme!r} "
                              f"has none. Use `dropout=gaussian` (or `gaussian_untied`) or drop the override")
        if not (is_number(self.kl_weight) and self.kl_weight >= 0):
            raise ConfigError(f"dropout.kl_weight={self.kl_weight!r} must be a number >= 0 (1 is Kingma's ELBO)")
        if self.kl_weight != 1.0 and not (self.learn_alpha or spec.learns_rates):
            raise ConfigError(f"dropout.kl_weight={self.kl_weight} weighs the regularizer of learned noise: set "
                              f"dropout.learn_alpha=true (Gaussian) or use `dropout=concrete`, or drop it (with the "
                              f"noise fixed the KL term is a constant)")

    def _check_probabilities(self) -> None:
        """Every site's p is a probability, non-zero only at the scheme's sites, and some p is there to act on."""
        sites = SCHEMES[self.scheme].sites
        for site in SITES:
            p = getattr(self, site)
            if site == "hidden" and p is None:  # unset: layers 2..L use dropout.input
                continue
            if not is_number(p) or not 0.0 <= p < 1.0:
                raise ConfigError(f"dropout.{site}={p!r} is not a probability in [0, 1); "
                                  f"pass e.g. `dropout.{site}=0.5` (p=1 would drop everything)")
            if p > 0 and site not in sites:
                raise ConfigError(f"dropout.{site}={p} is not used by scheme {self.scheme!r} (its sites: "
                                  f"{', '.join(sites) or 'none'}); set `dropout.{site}=0` or pick a scheme that "
                                  f"drops {site}")
        if self.per_gate and not any(getattr(self, site) for site in ("input", "hidden", "recurrent")):
            raise ConfigError("cell.gates=untied gives every gate its own masks on the layer inputs and h_{t-1}, and "
                              "dropout.input, dropout.hidden and dropout.recurrent are all 0: untied would change "
                              "nothing. Set one of them, or use cell.gates=tied")
        learner = "dropout.learn_alpha=true" if self.learn_alpha else (
            f"dropout={self.scheme}" if SCHEMES[self.scheme].learns_rates else None)
        if learner and not any(getattr(self, site) for site in LEARNED_SITES):
            raise ConfigError(f"{learner} learns the noise of dropout.{', dropout.'.join(LEARNED_SITES)}, and all are "
                              f"0: there is nothing to learn. Set one of them (e.g. `dropout.input=0.3`, the starting "
                              f"point) or drop {'learn_alpha' if self.learn_alpha else 'the scheme'}")

    def used(self) -> dict[str, float]:
        """Each site's probability where it is not zero."""
        return {site: p for site in SITES if (p := getattr(self, site))}

    def scaled(self, factor: float) -> DropoutConfig:
        """These settings with every probability times ``factor`` (``eval.dropout_scale``, Melis et al.'s dropout
        multiplier at evaluation)."""
        return replace(self, **{site: p * factor for site, p in self.used().items()})

    def scheme_object(self) -> Scheme | None:
        """The :mod:`vdrnn.nn` scheme these settings choose, or None for ``dropout=none``."""
        return SCHEMES[self.scheme].build(self)

    def word_dropout(self) -> dict:
        """The arguments of :class:`vdrnn.nn.Embedding`'s word-type dropout: ``dropout``, ``per`` and ``noise``
        (the scheme's own noise unless ``dropout.embedding_noise`` names another)."""
        return {"dropout": self.embedding, "per": PER[self.embedding_mask],
                "noise": self.embedding_noise or SCHEMES[self.scheme].embedding_noise}


PER = {"sample": "sequence", "batch": "batch"}  # dropout.locked_mask / embedding_mask -> a scheme's ``per``


@dataclass(frozen=True)
class SchemeEntry:
    """One ``dropout=`` scheme: the :mod:`vdrnn.nn` scheme it builds from the config, and what the config checks and
    the report read of it."""

    build: Callable[[DropoutConfig], Scheme | None]
    cls: type[Scheme] | None  # the class ``build`` makes (None: no dropout); its ``cells`` say where it runs
    sites: tuple[str, ...] = ()  # the dropout.* probabilities it reads; any other non-zero one is refused
    table_order: int = 0  # where its rows sort in the report's tables
    per_gate_masks: bool = False  # a separate mask per gate under cell.gates=untied
    reads_locked_mask: bool = False  # draws its fixed-over-time masks as dropout.locked_mask says
    learns_noise: bool = False  # takes dropout.learn_alpha
    learns_rates: bool = False  # learns its dropout probabilities (Concrete dropout)
    embedding_noise: str = "bernoulli"  # what its word-type masks are drawn from

    def refuses_cell(self, cell: str, config: DropoutConfig | None = None) -> str | None:
        """Why the scheme cannot run on ``cell`` with ``config`` (None: with any config), or None if it can."""
        if self.cls is None:
            return None
        if config is not None and cell != "lstm" and config.zoneout_cell > 0:
            return (f"dropout.zoneout_cell={config.zoneout_cell} zones out the LSTM's cell state c_t, which the "
                    f"{cell.upper()} cell does not have (set it to 0 and use dropout.zoneout_hidden)")
        return None if cell in self.cls.cells else self.cls.cells_why.format(cell=cell.upper())


def _variational_args(c: DropoutConfig) -> dict:
    return {"input": c.input, "recurrent": c.recurrent, "output": c.output, "between": c.hidden,
            "per": PER[c.locked_mask]}


def _zaremba_args(c: DropoutConfig) -> dict:
    return {"input": c.input, "output": c.output, "between": c.hidden}


def _tied(c: DropoutConfig) -> str:
    return "untied" if c.per_gate else "tied"


def _none(c: DropoutConfig) -> None:
    return None


def _zaremba(c: DropoutConfig) -> Zaremba:
    return Zaremba(**_zaremba_args(c))


def _moon(c: DropoutConfig) -> Moon:
    return Moon(cell=c.cell, scale=c.cell_scale)


def _variational(c: DropoutConfig) -> Variational:
    return Variational(**_variational_args(c), gates=_tied(c))


def _gaussian(c: DropoutConfig) -> Gaussian:
    return Gaussian(**_variational_args(c), gates=_tied(c), learn=c.learn_alpha)


def _concrete(c: DropoutConfig) -> Concrete:
    return Concrete(**_variational_args(c), temperature=c.temperature, lengthscale=c.lengthscale)


def _awd(c: DropoutConfig) -> WeightDrop:
    return WeightDrop(weight=c.weight, input=c.input, output=c.output, between=c.hidden, per=PER[c.locked_mask])


def _semeniuta(c: DropoutConfig) -> Semeniuta:
    return Semeniuta(**_zaremba_args(c), candidate=c.candidate, per=c.candidate_mask)


def _zoneout(c: DropoutConfig) -> Zoneout:
    return Zoneout(**_zaremba_args(c), cell=c.zoneout_cell, hidden=c.zoneout_hidden)


GAL_SITES = ("embedding", "input", "hidden", "recurrent", "output")
ZAREMBA_SITES = ("input", "hidden", "output")
SCHEMES: dict[str, SchemeEntry] = {  # dropout.scheme -> its entry; conf/dropout/<name>.yaml chooses one
    "none": SchemeEntry(_none, None),
    "zaremba": SchemeEntry(_zaremba, Zaremba, ZAREMBA_SITES, table_order=10),
    "moon": SchemeEntry(_moon, Moon, ("cell", "embedding"), table_order=20),
    "variational": SchemeEntry(_variational, Variational, GAL_SITES, table_order=30, per_gate_masks=True,
                               reads_locked_mask=True),
    "gaussian": SchemeEntry(_gaussian, Gaussian, GAL_SITES, table_order=40, per_gate_masks=True,
                            reads_locked_mask=True, learns_noise=True, embedding_noise="gaussian"),
    "concrete": SchemeEntry(_concrete, Concrete, GAL_SITES, table_order=45, reads_locked_mask=True,
                            learns_rates=True),
    "awd": SchemeEntry(_awd, WeightDrop, ("embedding", "input", "hidden", "output", "weight"), table_order=50,
                       reads_locked_mask=True),
    "semeniuta": SchemeEntry(_semeniuta, Semeniuta, (*ZAREMBA_SITES, "candidate"), table_order=55),
    "zoneout": SchemeEntry(_zoneout, Zoneout, (*ZAREMBA_SITES, "zoneout_cell", "zoneout_hidden"), table_order=60),
}


# A scheme kept outside vdrnn: an entry point of this group, in the distribution that holds it, names its SchemeEntry
# under the scheme's name (pyproject.toml: [project.entry-points."vdrnn.schemes"] inputs_only = "mypkg.inputs:ENTRY").
ENTRY_POINTS = "vdrnn.schemes"


def plugin_schemes() -> dict[str, SchemeEntry]:
    """The schemes that installed distributions add (ENTRY_POINTS), each refused where it would replace vdrnn's own
    or names no SchemeEntry."""
    found = {}
    for point in metadata.entry_points(group=ENTRY_POINTS):
        if point.name in SCHEMES:
            raise ConfigError(f"the {ENTRY_POINTS} entry point {point.name} = {point.value} names a scheme of vdrnn's "
                              f"own: give it another name")
        entry = point.load()
        if not isinstance(entry, SchemeEntry):
            raise ConfigError(f"the {ENTRY_POINTS} entry point {point.name} = {point.value} is a "
                              f"{type(entry).__name__}, not a vdrnn.dropout.config.SchemeEntry")
        found[point.name] = entry
    return found


# After SCHEMES, so that a plugin's module can import SchemeEntry from this one as it loads.
SCHEMES.update(plugin_schemes())


def in_table_order() -> list[str]:
    """The schemes' names in the order the report's tables list them (each entry's ``table_order``)."""
    return sorted(SCHEMES, key=lambda name: SCHEMES[name].table_order)


def ordered():
    """(name, entry) of every scheme, in table order, as the messages list them."""
    return [(name, SCHEMES[name]) for name in in_table_order()]


def is_number(value) -> bool:
    """An int or float, not a bool (YAML's `true` would otherwise pass as 1)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
