"""Dropout schemes for recurrent networks: which tensor is dropped, with which mask, and when.

Notation (Gal & Ghahramani 2016, "A Theoretically Grounded Application of Dropout in RNNs"):
x_t is a layer's input at time t, h_{t-1} its previous output, c_t the LSTM cell state, and the
LSTM (gate order i, f, g, o as in ``torch.nn.LSTM``) computes, with [a_i; a_f; a_g; a_o] the row blocks of
W_x x_t + W_h h_{t-1} + b,

    i, f, o = sigma(a_i), sigma(a_f), sigma(a_o),   g = tanh(a_g),   c_t = f*c_{t-1} + i*g,   h_t = o*tanh(c_t).

A *mask* z is a tensor of independent Bernoulli(1-p) draws divided by (1-p) ("inverted dropout"; Gaussian
N(1, p/(1-p)) draws in Kingma's scheme), so E[z] = 1 and evaluation with all masks equal to one (weight
scaling, ``eval=scale``) needs no rescaling. (Moon's cell mask is the exception: unscaled, its 1/(1-p) sits
on h_t; see :class:`MoonDropout`.) What differs between schemes is where masks go, their shape, and how
often they are drawn (B batch, D a layer's input size, H its hidden size, V the vocabulary):

| scheme                  | dropped tensors                    | mask shapes            | drawn                     |
|-------------------------|------------------------------------|------------------------|---------------------------|
| ``none``                | nothing                            | --                     | --                        |
| ``zaremba`` (2014)      | x_t, output                        | TxBxD, TxBxH           | every step, per sample    |
| ``moon`` (2015)         | c_t (+ word types)                 | BxH (BxV)              | per sample, per minibatch |
| ``variational``, tied   | word types, x_t, h_{t-1}, output   | BxV, BxD, BxH, BxH     | per sample, per minibatch |
| ``variational``, untied | the same, x_t and h_{t-1} per gate | BxV, BxGxD, BxGxH, BxH | per sample, per minibatch |
| ``gaussian`` (Kingma)   | as variational, N(1, p/(1-p))      | as variational         | per sample, per minibatch |
| ``awd`` (Merity)        | word types, x_t, output, W_hh      | V, BxD, BxH, GHxH      | W_hh, V: per minibatch    |

G is the cell's number of gates (4 LSTM, 3 GRU, 1 RNN). With ``dropout.locked_mask=batch`` the fixed-over-time
masks of ``variational``, ``gaussian`` and ``awd`` (:class:`AWDDropout`) are drawn once per minibatch and shared
by its sequences: 1 x D (1 x G x D untied) instead of B x D (B x G x D). AWD's word types are drawn per
minibatch in its preset (``dropout.embedding_mask=batch``: one V mask), per sequence otherwise.

``dropout.embedding_noise`` draws the word-type masks from the other distribution (Bernoulli word types under
Kingma's Gaussian masks, or the reverse); their shape and draws stay the scheme's.

With ``dropout.learn_alpha`` the Gaussian scheme learns each masked unit's variance alpha (Kingma's adaptive
variational dropout, :class:`NoiseScales`); the masks keep their shapes and draws.

"Per minibatch" means per truncated-BPTT segment: masks are redrawn for every 35-step minibatch
while the hidden state is carried over from the previous one (Gal's ``main_new_dropout_SOTA_v3.lua``).
MC dropout evaluation (``eval=mc``) uses the training scheme's masks, recurrent ones included, but by
default does not draw them as training does: each sample keeps its fixed-over-time masks for the whole
test stream (``eval.mc_masks=stream``, as Gal's ``run_MC_test``; ``minibatch`` redraws them every
minibatch, as in training; Zaremba's per-step masks are fresh either way), and word-type dropout is off
(``eval.word_dropout=false``, as in Gal's code).

Each scheme is a :class:`DropoutScheme`, listed once in ``SCHEME_SPECS`` with the sites it reads;
``make_dropout`` is the one factory. Layers receive their masks as a :class:`LayerMasks`; the scheme
decides shapes, the layer only multiplies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from vdrnn.errors import ConfigError


@dataclass(frozen=True)
class SchemeSpec:
    """What the config checks and ``make_dropout`` know of one scheme."""

    make: Callable[[DropoutConfig], DropoutScheme]  # its constructor (a lambda: the classes are defined below)
    # The ``dropout.*`` probabilities it reads; a non-zero probability anywhere else is a configuration error,
    # because it would silently do nothing (or silently turn one scheme into another).
    sites: tuple[str, ...]
    per_gate: bool = False  # has a separate mask for every gate with ``cell.gates=untied``
    locked_mask: bool = False  # draws fixed-over-time masks as ``dropout.locked_mask`` says


# The one list of schemes: SCHEMES, DropoutConfig's checks, make_dropout and the report's run names read it.
SCHEME_SPECS = {
    "none": SchemeSpec(lambda config: DropoutScheme(config), sites=()),
    "zaremba": SchemeSpec(lambda config: ZarembaDropout(config), sites=("input", "hidden", "output")),
    "moon": SchemeSpec(lambda config: MoonDropout(config), sites=("cell", "embedding")),
    "variational": SchemeSpec(lambda config: VariationalDropout(config),
                              sites=("embedding", "input", "hidden", "recurrent", "output"),
                              per_gate=True, locked_mask=True),
    "gaussian": SchemeSpec(lambda config: GaussianDropout(config),
                           sites=("embedding", "input", "hidden", "recurrent", "output"),
                           per_gate=True, locked_mask=True),
    "awd": SchemeSpec(lambda config: AWDDropout(config),
                      sites=("embedding", "input", "hidden", "output", "weight"), locked_mask=True),
}
SCHEMES = tuple(SCHEME_SPECS)
GRANULARITIES = ("sample", "batch")
CELL_SCALES = ("h", "c")


@dataclass(frozen=True)
class DropoutConfig:
    """Dropout probabilities, one per site. Which sites a scheme may use is checked here.

    ``embedding`` is word-type dropout (drop whole word types, Gal sec. 4.1); ``input`` drops each
    layer's input (the embedding output for layer 1, the layer below's output above it), and
    ``hidden``, when set, replaces it for the inputs of layers 2..L (AWD's ``dropouth``); ``recurrent``
    drops h_{t-1}; ``output`` drops the last layer's output before the softmax; ``cell`` drops c_t
    (Moon only); ``weight`` drops entries of each W_hh (AWD's weight drop / DropConnect).
    ``embedding_mask`` and ``locked_mask`` say whether word-type and fixed-over-time masks are drawn
    per ``sample`` (Gal) or once per ``batch`` and shared by its sequences (AWD's reference code
    for word types); ``batch`` is refused for schemes that draw no such masks. ``per_gate`` gives every
    gate its own masks (Gal's untied-weights variant, eq. 5); only the variational and Gaussian schemes have
    per-gate masks, so it is refused for the others, whose masks are the same for every gate.
    ``cell_scale`` says where Moon's 1/(1-p) goes (see :class:`MoonDropout`).
    ``learn_alpha`` (Gaussian scheme only) learns the noise variance of the layer-input, recurrent and output
    masks, unit by unit, with Kingma's KL term weighted by ``kl_weight`` (see :class:`NoiseScales`).
    ``embedding_noise`` draws the word-type masks from another distribution than the scheme's own (None):
    ``bernoulli`` drops whole word types (Gal sec. 4.1) under Kingma's Gaussian scheme, whose word types are
    otherwise scaled by N(1, alpha) and never dropped; ``gaussian`` scales them under a Bernoulli scheme.
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

    # Derived from SCHEME_SPECS: the sites each scheme drives, and the schemes with per-gate masks.
    ALLOWED = {name: spec.sites for name, spec in SCHEME_SPECS.items()}
    SITES = ("embedding", "input", "hidden", "recurrent", "output", "cell", "weight")
    PER_GATE_SCHEMES = tuple(name for name, spec in SCHEME_SPECS.items() if spec.per_gate)
    LEARNED_SITES = ("input", "hidden", "recurrent", "output")  # the sites whose alpha learn_alpha learns
    # Schemes that read each mask granularity; elsewhere a non-default one would silently do nothing.
    # Only Gal's (Bernoulli or Gaussian) and AWD's layers draw fixed-over-time masks through ``locked_mask``
    # (Moon's cell mask is always one per sample); word-type masks exist only where the embedding site does.
    MASK_USERS = {
        "locked_mask": tuple(name for name, spec in SCHEME_SPECS.items() if spec.locked_mask),
        "embedding_mask": tuple(name for name, sites in ALLOWED.items() if "embedding" in sites),
    }

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError(
                f"unknown dropout scheme {self.scheme!r}; choose one of {', '.join(SCHEMES)} "
                f"(e.g. `dropout=variational`)"
            )
        for key in ("embedding_mask", "locked_mask"):
            if getattr(self, key) not in GRANULARITIES:
                raise ConfigError(f"dropout.{key}={getattr(self, key)!r}; choose `sample` or `batch`")
            users = self.MASK_USERS[key]
            if getattr(self, key) != "sample" and self.scheme not in users:  # `sample` is the default
                why = (f"it sets how schemes {', '.join(users)} draw their fixed-over-time masks (Moon's cell mask "
                       f"is always one per sample, Zaremba's masks are fresh every step)" if key == "locked_mask"
                       else f"word-type masks are drawn only by schemes {', '.join(users)}")
                raise ConfigError(
                    f"dropout.{key}={getattr(self, key)} does nothing with scheme {self.scheme!r}: {why}; "
                    f"drop the override or pick one of those schemes"
                )
        if self.per_gate and self.scheme not in self.PER_GATE_SCHEMES:
            raise ConfigError(
                f"cell.gates=untied gives every gate its own dropout masks, which only "
                f"{' and '.join(f'dropout={name}' for name in self.PER_GATE_SCHEMES)} draw; scheme {self.scheme!r} "
                f"would ignore it. Use cell.gates=tied, or "
                f"{' / '.join(f'dropout={name}_untied' for name in self.PER_GATE_SCHEMES)}"
            )
        if self.cell_scale not in CELL_SCALES:
            raise ConfigError(f"dropout.cell_scale={self.cell_scale!r}; choose `h` (vdrnn's Moon) or `c`")
        if self.cell_scale != "h" and self.scheme != "moon":
            raise ConfigError(f"dropout.cell_scale={self.cell_scale} only applies to `dropout=moon` (it places "
                              f"Moon's 1/(1-p)); drop the override or pick the Moon scheme")
        if self.embedding_noise is not None:
            if self.embedding_noise not in NOISES:
                raise ConfigError(f"dropout.embedding_noise={self.embedding_noise!r}; choose `bernoulli` (drop whole "
                                  f"word types), `gaussian` (scale them by N(1, p/(1-p))) or null (the scheme's own)")
            users = self.MASK_USERS["embedding_mask"]
            if self.scheme not in users:
                raise ConfigError(f"dropout.embedding_noise={self.embedding_noise} draws the word-type masks, which "
                                  f"scheme {self.scheme!r} does not drop (schemes {', '.join(users)} do): drop the "
                                  f"override or pick one of those schemes")
            if not self.embedding:
                raise ConfigError(f"dropout.embedding_noise={self.embedding_noise} draws the word-type masks, and "
                                  f"dropout.embedding=0 draws none: set dropout.embedding (e.g. 0.5) or drop the "
                                  f"override")
        if self.learn_alpha and self.scheme != "gaussian":
            raise ConfigError(f"dropout.learn_alpha=true learns the variance of Gaussian masks; scheme {self.scheme!r} "
                              f"has none. Use `dropout=gaussian` (or `gaussian_untied`) or drop the override")
        if not (_is_number(self.kl_weight) and self.kl_weight >= 0):
            raise ConfigError(f"dropout.kl_weight={self.kl_weight!r} must be a number >= 0 (1 is Kingma's ELBO)")
        if self.kl_weight != 1.0 and not self.learn_alpha:
            raise ConfigError(f"dropout.kl_weight={self.kl_weight} does nothing without dropout.learn_alpha=true "
                              f"(with alpha fixed the KL term is a constant); drop it or learn alpha")
        for site in self.SITES:
            p = getattr(self, site)
            if site == "hidden" and p is None:  # unset: layers 2..L use dropout.input
                continue
            if not _is_number(p) or not 0.0 <= p < 1.0:
                raise ConfigError(
                    f"dropout.{site}={p!r} is not a probability in [0, 1); "
                    f"pass e.g. `dropout.{site}=0.5` (p=1 would drop everything)"
                )
            if p > 0 and site not in self.ALLOWED[self.scheme]:
                allowed = ", ".join(self.ALLOWED[self.scheme]) or "none"
                raise ConfigError(
                    f"dropout.{site}={p} is not used by scheme {self.scheme!r} (its sites: {allowed}); "
                    f"set `dropout.{site}=0` or pick a scheme that drops {site}"
                )
        if self.per_gate and not any(getattr(self, site) for site in ("input", "hidden", "recurrent")):
            raise ConfigError(
                "cell.gates=untied gives every gate its own masks on the layer inputs and h_{t-1}, and "
                "dropout.input, dropout.hidden and dropout.recurrent are all 0: untied would change nothing. "
                "Set one of them, or use cell.gates=tied"
            )
        if self.learn_alpha and not any(getattr(self, site) for site in self.LEARNED_SITES):
            raise ConfigError(
                f"dropout.learn_alpha=true learns the noise of dropout.{', dropout.'.join(self.LEARNED_SITES)}, and "
                f"all are 0: there is nothing to learn. Set one of them (e.g. `dropout.input=0.3`) or drop learn_alpha"
            )

    def input_p(self, layer: int) -> float:
        """Dropout probability on the input of layer ``layer`` (0-based)."""
        return self.input if layer == 0 or self.hidden is None else self.hidden


def _is_number(value) -> bool:
    """An int or float, not a bool (YAML's `true` would otherwise pass as 1)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def keep_mask(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """Unscaled dropout mask: 0 with probability p, else 1. Drawn on ``like``'s device in fp32.

    Sampling on the device with the default generator keeps it valid inside CUDA graphs.
    """
    return torch.empty(shape, device=like.device, dtype=torch.float32).bernoulli_(1.0 - p)


def bernoulli_mask(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """Inverted-dropout mask: 0 with probability p, else 1/(1-p); drawn as ``keep_mask``."""
    return keep_mask(shape, p, like).div_(1.0 - p)


def gaussian_mask(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """Multiplicative Gaussian noise N(1, alpha) with alpha = p / (1 - p), drawn as ``bernoulli_mask``.

    alpha is the variance of the inverted Bernoulli mask of the same p (its values 0 and 1/(1-p) have mean 1 and
    mean square 1/(1-p)), so the two masks agree in their first two moments (Srivastava et al. 2014, sec. 10).
    """
    return torch.empty(shape, device=like.device, dtype=torch.float32).normal_(1.0, math.sqrt(p / (1.0 - p)))


Noise = Callable[[tuple[int, ...], float, torch.Tensor], torch.Tensor]
NOISES: dict[str, Noise] = {"bernoulli": bernoulli_mask, "gaussian": gaussian_mask}  # by dropout.embedding_noise


@dataclass
class LayerMasks:
    """Masks for one recurrent layer during one minibatch; ``None`` means "not dropped".

    G is the cell's number of gates (4 LSTM, 3 GRU, 1 RNN); B is 1 for fixed-over-time masks drawn with
    ``dropout.locked_mask=batch`` (one mask shared by the batch).

    ``x``: applied to the layer input. Shape [T, B, D] (fresh per step), [B, D] (fixed over time),
      or [B, G, D] with ``per_gate`` (one mask per gate, fixed over time).
    ``h``: applied to h_{t-1} before the recurrent product. [B, H] or [B, G, H] with ``per_gate``.
    ``c``: Moon's cell mask, [B, H], values in {0, 1} ({0, 1/(1-p)} with ``cell_scale=c``); see
      :class:`MoonDropout` for its scaling.
    ``c_scale``: applied to h_t: 1/(1-p_cell) so that E[h_t] is preserved (1 with ``cell_scale=c``).
    ``w_hh``: AWD's weight-drop mask [G*H, H] on the recurrent weight, one for the whole minibatch.
      It leaves the recurrence a plain LSTM (with other weights), so cuDNN still runs it.
    """

    x: torch.Tensor | None = None
    h: torch.Tensor | None = None
    c: torch.Tensor | None = None
    c_scale: float = 1.0
    w_hh: torch.Tensor | None = None
    per_gate: bool = False

    @property
    def recurrent(self) -> bool:
        """True when the layer cannot run on the stock fused kernel (cuDNN on CUDA) and must take the masked
        recurrence (the step loop, or the fused Triton kernel with ``impl=fast``).

        That is when an h or c mask acts inside the recurrence, or with per-gate masks even on x alone: the
        stock kernel multiplies one [x_t; h_{t-1}] by all gates' weights, so it cannot give each gate its own
        masked input. AWD's ``w_hh`` mask does not count: the dropped W_hh goes to the stock kernel as ordinary
        weights. Masks shared by all gates on x only are applied to x before the stock kernel.
        """
        return self.h is not None or self.c is not None or self.per_gate


@dataclass
class DropoutScheme:
    """Base class: no dropout anywhere. Subclasses override the sites they drop."""

    config: DropoutConfig = field(default_factory=DropoutConfig)
    # Masks fixed over time can be kept across minibatches (MC over a whole stream, Gal's protocol);
    # masks drawn fresh at every step (Zaremba) cannot.
    locked = True
    # What one mask entry is; GaussianDropout changes only this. (ClassVar: not a dataclass field.)
    noise: ClassVar[Noise] = staticmethod(bernoulli_mask)

    def word_type_table(self, batch: int, vocab_size: int, like: torch.Tensor) -> torch.Tensor | None:
        """One draw per word type: [B, V] (per sequence) or [1, V] (shared by the batch), or None where
        ``dropout.embedding`` is 0, as it always is for the schemes without word-type dropout (DropoutConfig refuses
        it there). An entry is the scheme's ``noise`` unless ``dropout.embedding_noise`` names another."""
        # One draw per (sequence, word type): every occurrence of a word in a sequence is dropped (or scaled)
        # together (Gal sec. 4.1, and the fix in Gal's README that tied masks per word). With
        # ``embedding_mask=batch`` one draw per word type serves every sequence of the minibatch (AWD).
        c = self.config
        if c.embedding == 0:
            return None
        noise = self.noise if c.embedding_noise is None else NOISES[c.embedding_noise]
        return noise((batch if c.embedding_mask == "sample" else 1, vocab_size), c.embedding, like)

    def shares_draws_across_batch(self, word_dropout: bool) -> bool:
        """Does one draw serve every sequence of a forward pass: AWD's weight drop (one W_hh mask per
        minibatch), ``locked_mask=batch``, or ``embedding_mask=batch`` with word-type dropout on? Then the
        columns of one batch are not independent samples, and MC dropout must run its samples one by one."""
        c = self.config
        return (c.weight > 0 or c.locked_mask == "batch"
                or (word_dropout and c.embedding > 0 and c.embedding_mask == "batch"))

    def drop_words(self, embedded: torch.Tensor, tokens: torch.Tensor, table: torch.Tensor | None) -> torch.Tensor:
        """The embeddings ``embedded`` [T, B, E] of ``tokens`` times their word types' entries of ``table`` (from
        :meth:`word_type_table`; None: unchanged)."""
        mask = words_of(table, tokens)
        return embedded if mask is None else embedded * mask

    def layer_masks(self, x: torch.Tensor, hidden_size: int, gates: int, layer: int = 0) -> LayerMasks:
        """Masks for layer ``layer`` (0-based) whose input is ``x`` [T, B, D]."""
        return LayerMasks()

    def output_mask(self, y: torch.Tensor) -> torch.Tensor | None:
        """Mask for the last layer's output ``y`` [T, B, H], broadcastable to it, or None."""
        return None

    def noise_scales(self, layers: list[tuple[int, int, int]], outputs: int) -> NoiseScales | None:
        """The scheme's learned parameters for a model whose layers are (input size, hidden size, gates) and whose
        head has ``outputs`` rows, or None: only Kingma's adaptive Gaussian dropout learns any."""
        return None


def words_of(table: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor | None:
    """The word-type mask [T, B, 1] of ``tokens`` [T, B]: each token's entry in its sequence's row of ``table``."""
    if table is None:
        return None
    return table.expand(tokens.shape[1], -1).gather(1, tokens.t()).t().unsqueeze(-1)


def _locked_rows(like: torch.Tensor, granularity: str) -> int:
    """The leading size of a fixed-over-time mask for ``like`` [T, B, ...] (``dropout.locked_mask``): B, one row
    per sequence (``sample``), or 1, one row shared by the batch (``batch``)."""
    return like.shape[1] if granularity == "sample" else 1


def _locked_mask(like: torch.Tensor, shape: tuple[int, ...], p: float, granularity: str,
                 noise: Noise = bernoulli_mask) -> torch.Tensor | None:
    """A mask fixed over time for ``like`` [T, B, ...]: [B, *shape] per sample, or [1, *shape] shared by the
    batch; None if p = 0."""
    return noise((_locked_rows(like, granularity), *shape), p, like) if p > 0 else None


class ZarembaDropout(DropoutScheme):
    """Zaremba, Sutskever & Vinyals (2014): dropout on non-recurrent connections only.

    x_t <- x_t * z_t with z_t ~ Bernoulli(1-p)/(1-p) of shape [B, D], **fresh at every time step
    and for every sample**, applied to the embedding output, to each higher layer's input and to
    the final output. h_{t-1} and c_t are never dropped, so the recurrence is the plain LSTM and
    cuDNN runs it.
    """

    locked = False

    def layer_masks(self, x, hidden_size, gates, layer=0):
        p = self.config.input_p(layer)
        return LayerMasks(x=bernoulli_mask(tuple(x.shape), p, x) if p > 0 else None)

    def output_mask(self, y):
        p = self.config.output
        return bernoulli_mask(tuple(y.shape), p, y) if p > 0 else None


class MoonDropout(DropoutScheme):
    """Moon et al. (2015), "RNNDrop": drop units of the memory cell c_t.

    c_t = m * (f*c_{t-1} + i*g) with m ~ Bernoulli(1-p) of shape [B, H], **one mask per sample
    fixed over all time steps** of the minibatch; h_t = o * tanh(c_t) / (1-p).

    Why the 1/(1-p) sits on h_t rather than on c_t: c_t is a running sum, so scaling it inside the
    recurrence would compound as (1/(1-p))^t. A dropped unit is zero for the whole sequence (so is its
    h_t); scaling the kept units' h_t by 1/(1-p) preserves E[h_t], the quantity the next layer and the
    recurrence see, and evaluation with m = 1 and no scale is then the weight-scaling approximation.

    ``dropout.cell_scale=c`` instead puts the 1/(1-p) on c_t, c_t = (m/(1-p)) * (f*c_{t-1} + i*g) and
    h_t = o * tanh(c_t), which is what a stock inverted-dropout module applied to the cell state does.
    Because the mask is fixed over time, a kept cell is multiplied by 1/(1-p) at *every* step: once the
    forget gate passes (1-p) the cell state grows geometrically, across minibatches too (the state is
    carried). It is here as the obvious alternative reading of Moon, to test against the paper's weak Moon
    rows (Table 1: 97.0 medium, 118.7 large, vdrnn ~81 with the default ``h``). Measured: the medium
    preset with ``cell_scale=c`` reaches a NaN loss within 20 steps (CPU, `vdrnn train
    experiment=medium_moon dropout.cell_scale=c trainer.max_steps=60`), so it is not how the paper's
    row was trained either.

    ``dropout.embedding`` adds Gal's word-type embedding dropout ("Moon et al. + emb dropout" row).
    """

    def layer_masks(self, x, hidden_size, gates, layer=0):
        p = self.config.cell
        if p == 0:
            return LayerMasks()
        shape = (x.shape[1], hidden_size)  # always one mask per sample
        if self.config.cell_scale == "c":  # the layers compute c_t *= mask, then h_t *= c_scale
            return LayerMasks(c=bernoulli_mask(shape, p, x), c_scale=1.0)
        return LayerMasks(c=keep_mask(shape, p, x), c_scale=1.0 / (1.0 - p))


class VariationalDropout(DropoutScheme):
    """Gal & Ghahramani (2016): variational (Bayesian) dropout, one weight mask per sequence.

    Tied gates (eq. 7): [i; f; g; o] = W [x_t * z_x ; h_{t-1} * z_h] + b with z_x [B, D] and
    z_h [B, H] **drawn once per sample per minibatch and reused at every time step**, shared by
    all the cell's G gates (4 LSTM, 3 GRU, 1 RNN). Untied gates (eq. 5, ``cell.gates=untied``): i = sigma(W_i
    (x_t * z_x^i) + U_i (h_{t-1} * z_h^i) + b_i) and likewise for f, g, o, i.e. masks of shape [B, G, D] and
    [B, G, H] (a separate mask per gate). The same weights as tied; only the noise differs. With
    ``dropout.locked_mask=batch`` every mask is drawn once per minibatch and shared by its sequences:
    [1, D] ([1, G, D] untied) instead of [B, D] ([B, G, D]).

    Also, each fixed over time: word-type dropout on the embedding (one draw per word type per sequence,
    or per minibatch with ``dropout.embedding_mask=batch``), and z_o [B, H] on the last layer's output
    ([1, H] with ``locked_mask=batch``). Each layer's input mask z_x acts on
    the embedding output (layer 1) or on the output of the layer below.
    """

    def layer_masks(self, x, hidden_size, gates, layer=0):
        cfg = self.config
        p_in = cfg.input_p(layer)
        per_gate = (gates,) if cfg.per_gate else ()  # untied: one mask per gate, [B, G, D] instead of [B, D]
        return LayerMasks(
            x=_locked_mask(x, (*per_gate, x.shape[2]), p_in, cfg.locked_mask, self.noise),
            h=_locked_mask(x, (*per_gate, hidden_size), cfg.recurrent, cfg.locked_mask, self.noise),
            # With both p = 0 the untied cell is exactly the tied one and may take the fused path.
            per_gate=cfg.per_gate and (p_in > 0 or cfg.recurrent > 0),
        )

    def output_mask(self, y):
        cfg = self.config
        mask = _locked_mask(y, (y.shape[2],), cfg.output, cfg.locked_mask, self.noise)
        return None if mask is None else mask.unsqueeze(0)


class GaussianDropout(VariationalDropout):
    """Kingma, Salimans & Welling (2015), variational (Gaussian) dropout, on Gal's sites and with Gal's masks.

    Every mask entry is Gaussian, xi ~ N(1, alpha) with alpha = p / (1 - p), instead of Bernoulli(1-p)/(1-p):
    the same mean (1) and variance (alpha) as the inverted Bernoulli mask of that p. Everything else is
    :class:`VariationalDropout`'s: tied gates [i; f; g; o] = W [x_t * xi_x ; h_{t-1} * xi_h] + b with xi_x [B, D]
    and xi_h [B, H] **drawn once per sample per minibatch and reused at every time step**; untied gates
    (``cell.gates=untied``) draw [B, G, D] and [B, G, H], G the cell's gates; word types get one draw per type
    per sequence (with ``dropout.embedding_noise=bernoulli`` a Bernoulli one, dropping whole word types as Gal's
    scheme does, while every other mask stays Gaussian), the output one [B, H] draw; with
    ``dropout.locked_mask=batch`` the fixed-over-time masks are [1, D] ([1, G, D]), one shared by the batch.
    Evaluation: weight scaling (``eval=scale``) sets xi = 1 = E[xi]; MC (``eval=mc``) draws fresh xi per sample.

    Why this is Kingma's variational dropout. Multiplying the inputs a of a linear map B = (a * xi) W by
    xi ~ N(1, alpha) is the same as sampling each row w_i of W as xi_i * w_i, one noise variable per row (a
    rank-one Gaussian N(w_i, alpha w_i w_i^T), not independent noise per weight): Kingma's variational dropout
    with correlated weight noise ("variational dropout A", the variational reading of Gaussian dropout on a
    layer's inputs), a Gaussian posterior q(W) whose mean W is what training learns. Tying the draws over time,
    as Gal does, makes the noise one sample of the weights per sequence, the same W at every step. Under
    Kingma's log-uniform prior, -KL(q || p) = const + 0.5 log alpha + c1 alpha + c2 alpha^2 + c3 alpha^3 depends
    on alpha alone, so with alpha fixed by ``dropout.*`` the KL term is a constant and the objective is the plain
    likelihood under the noise. ``dropout.learn_alpha=true`` learns alpha instead (Kingma's adaptive variant): see
    :class:`NoiseScales` for its parameters, masks and objective.

    Kingma's other form, independent weight noise sampled through the local reparameterization trick
    ("variational dropout B"), is not offered: it draws the pre-activations afresh at every product, so in a
    recurrence the weights would not stay one sample over the sequence, which is Gal's point.
    """

    noise: ClassVar[Noise] = staticmethod(gaussian_mask)
    scales: NoiseScales | None = None  # set by noise_scales() when alpha is learned

    def noise_scales(self, layers, outputs):
        if self.config.learn_alpha:
            # The masks are drawn from these parameters, so a second model built on this scheme would take
            # over the first one's noise: one scheme per model.
            if self.scales is not None:
                raise RuntimeError("this scheme's learned noise scales belong to another model: call "
                                   "make_dropout again for each model")
            self.scales = NoiseScales(self.config, layers, outputs)
        return self.scales

    def layer_masks(self, x, hidden_size, gates, layer=0):
        if self.scales is None:
            return super().layer_masks(x, hidden_size, gates, layer)
        rows = _locked_rows(x, self.config.locked_mask)
        x_mask = self.scales.mask(f"input{layer}", rows, x)
        h_mask = self.scales.mask(f"recurrent{layer}", rows, x)
        per_gate = self.config.per_gate and (x_mask is not None or h_mask is not None)
        return LayerMasks(x=x_mask, h=h_mask, per_gate=per_gate)

    def output_mask(self, y):
        if self.scales is None:
            return super().output_mask(y)
        mask = self.scales.mask("output", _locked_rows(y, self.config.locked_mask), y)
        return None if mask is None else mask.unsqueeze(0)


# Kingma et al.'s polynomial fit of -KL(N(w, alpha w^2) || log-uniform prior) for one weight, valid for alpha <= 1.
KL_C1, KL_C2, KL_C3 = 1.16145124, -1.50204118, 0.58629921
MAX_LOG_ALPHA = 0.0  # alpha <= 1 (p <= 0.5), Kingma's constraint


def kl_per_weight(alpha: torch.Tensor) -> torch.Tensor:
    """KL(q || prior) of one weight with noise variance ``alpha``, less its value at alpha = 1 (so >= 0 on (0, 1]).

    -KL ~= const + 0.5 log alpha + c1 alpha + c2 alpha^2 + c3 alpha^3; the constant is unknown and, being
    constant, irrelevant to training. Shifting it to KL(1) = 0 makes the logged ``kl`` read "nats above the
    noisiest allowed posterior".
    """
    neg_kl = 0.5 * alpha.log() + KL_C1 * alpha + KL_C2 * alpha**2 + KL_C3 * alpha**3
    return (KL_C1 + KL_C2 + KL_C3) - neg_kl


class NoiseScales(nn.Module):
    """Kingma, Salimans & Welling (2015), adaptive variational dropout: the Gaussian masks' variance, learned.

    Parameters: log alpha, one per unit of each masked tensor, under the keys ``input{l}`` and ``recurrent{l}``
    (layer l's input x_t and h_{t-1}; shape [D], or [G, D] with per-gate masks: one alpha per gate and unit) and
    ``output`` (the last layer's output, [H]). Each starts at log(p / (1 - p)) of its site's ``dropout.*`` and
    is kept <= 0 (alpha <= 1, p <= 0.5, Kingma's constraint: larger alpha makes the gradients' variance blow up
    and leaves the KL fit's range) by :meth:`clamp_` after every update; so large p start at alpha = 1. A site
    with p = 0 has no noise and learns none; word-type masks keep the fixed alpha of ``dropout.embedding`` (or
    are Bernoulli, with ``dropout.embedding_noise=bernoulli``).

    Masks: xi = 1 + sqrt(alpha) * eps, eps ~ N(0, 1), with the shapes and draws of :class:`GaussianDropout`
    (per sample, or per batch with ``locked_mask=batch``; fixed over the sequence). Being a differentiable
    function of log alpha (the reparameterization trick), the mask passes the likelihood's gradient to it.

    Objective (the negative ELBO per training example): E_q[NLL] + kl_weight * KL / N, N the number of examples
    the training loss averages over (PTB tokens, sentiment reviews), and KL = sum over sites of
    fan-out * sum over units of :func:`kl_per_weight`. The fan-out is how many weights one noise variable
    scales: a unit of layer l's input (or h_{t-1}) multiplies a column of W_ih (W_hh), G*H weights, or H
    per gate with per-gate masks; a unit of the output multiplies a column of the decoder. The KL pulls alpha
    up (towards 1), the likelihood down; ``kl_weight`` < 1 is Kingma's down-weighted variant ("A2", 1/3).
    """

    def __init__(self, config: DropoutConfig, layers: list[tuple[int, int, int]], outputs: int):
        super().__init__()
        self.log_alpha = nn.ParameterDict()
        self.fan_out: dict[str, int] = {}
        for index, (inputs, hidden, gates) in enumerate(layers):
            fan_out = hidden if config.per_gate else gates * hidden
            for site, p, size in (("input", config.input_p(index), inputs), ("recurrent", config.recurrent, hidden)):
                self._add(f"{site}{index}", p, (gates, size) if config.per_gate else (size,), fan_out)
        self._add("output", config.output, (layers[-1][1],), outputs)

    def _add(self, key: str, p: float, shape: tuple[int, ...], fan_out: int) -> None:
        if p > 0:
            start = min(math.log(p / (1.0 - p)), MAX_LOG_ALPHA)
            self.log_alpha[key] = nn.Parameter(torch.full(shape, start))
            self.fan_out[key] = fan_out

    def mask(self, key: str, rows: int, like: torch.Tensor) -> torch.Tensor | None:
        """[rows, *shape] of ``key``: 1 + sqrt(alpha) * eps, on ``like``'s device, or None if the site has no noise."""
        if key not in self.log_alpha:
            return None
        log_alpha = self.log_alpha[key]
        eps = torch.randn((rows, *log_alpha.shape), device=like.device, dtype=torch.float32)
        return 1.0 + (0.5 * log_alpha).exp() * eps

    def kl(self) -> torch.Tensor:
        """The KL term summed over every learned noise variable, weighted by its fan-out (nats); a zero tensor
        when no site is learned."""
        terms = (self.fan_out[key] * kl_per_weight(log_alpha.exp()).sum()
                 for key, log_alpha in self.log_alpha.items())
        return sum(terms, torch.zeros(()))

    @torch.no_grad()
    def clamp_(self) -> None:
        """Project back onto alpha <= 1 (after each optimizer step)."""
        for log_alpha in self.log_alpha.values():
            log_alpha.clamp_(max=MAX_LOG_ALPHA)

    @torch.no_grad()
    def summary(self) -> dict[str, float]:
        """Each site's mean alpha and its equivalent dropout probability p = alpha / (1 + alpha), and the KL."""
        out = {}
        for key, log_alpha in self.log_alpha.items():
            alpha = log_alpha.exp()
            out[f"alpha_{key}"] = alpha.mean().item()
            out[f"p_{key}"] = (alpha / (1 + alpha)).mean().item()
        return {**out, "kl": float(self.kl())}


def weights_of(model: nn.Module) -> list[nn.Parameter]:
    """The model's parameters less its learned noise scales, which weight decay must not touch: shrinking log alpha
    towards 0 would push every alpha to 1, a prior of its own on top of Kingma's KL term."""
    scales = getattr(model, "noise_scales", None)
    skip = set() if scales is None else {id(p) for p in scales.parameters()}
    return [p for p in model.parameters() if id(p) not in skip]


class AWDDropout(VariationalDropout):
    """Merity, Keskar & Socher (2017), AWD-LSTM: locked dropout plus weight drop, no mask on h_{t-1}.

    - word types (``embedding``, the reference's 0.1): whole embedding rows dropped; the ``awd`` preset
      draws once per word type for the whole minibatch (``embedding_mask=batch``, as ``embedded_dropout``;
      ``sample`` draws per sequence, as Gal).
    - locked dropout (Gal's fixed-over-time masks) on the embedding output (``input``, dropouti 0.65),
      between layers (``hidden``, dropouth 0.3) and on the output (``output``, 0.4): [B, D] per sample
      ([1, D] shared by the batch with ``locked_mask=batch``).
    - weight drop (``weight``, 0.5): W_hh' = W_hh * M / (1-p), M [4H, H] drawn **once per minibatch**
      and shared by all samples and steps (DropConnect on the recurrent weights; a per-sample W_hh would
      be a [B, 4H, H] tensor). The raw W_hh is the parameter: it receives the gradients and is never
      overwritten; evaluation uses it as it is.
    """

    # Word types and the output are dropped as in VariationalDropout; the layers differ.
    def layer_masks(self, x, hidden_size, gates, layer=0):
        cfg = self.config
        w = cfg.weight
        return LayerMasks(x=_locked_mask(x, (x.shape[2],), cfg.input_p(layer), cfg.locked_mask),
                          w_hh=bernoulli_mask((gates * hidden_size, hidden_size), w, x) if w > 0 else None)


def make_dropout(config: DropoutConfig) -> DropoutScheme:
    """The one factory: the implementation of ``config.scheme`` (see ``SCHEME_SPECS``)."""
    return SCHEME_SPECS[config.scheme].make(config)
