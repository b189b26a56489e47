"""The base class of every dropout scheme: where a recurrent stack's masks go and how they are drawn.

A scheme is a frozen dataclass of its probabilities (named as its paper names them) whose methods draw the masks of one
forward call: each layer's (:meth:`Scheme.layer_masks`), the last layer's output's (:meth:`Scheme.output_mask`) and,
in evaluation without noise, what stands in for the layers' masks (:meth:`Scheme.expected_masks`: zoneout's
expectation, nothing for the rest). The recurrent modules of :mod:`vdrnn.nn` call these; the cells only multiply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from vdrnn.dropout.masks import PER, LayerMasks, Noise, bernoulli_mask

if TYPE_CHECKING:
    import torch
    from torch import nn

# The cells a scheme may name, and their gates: the size of a per-gate mask's gate axis.
GATES = {"lstm": 4, "gru": 3, "rnn": 1}


@dataclass(frozen=True, kw_only=True)
class Scheme:
    """No mask anywhere; the subclasses override the sites they drop."""

    # What each scheme sets: the cells it runs on (and why not on the others, "{cell}" the one asked for), whether
    # its masks are fixed over time (they can then be kept across calls, ``vdrnn.nn.fixed_masks``) and what one entry
    # of its masks is drawn from.
    probabilities: ClassVar[tuple[str, ...]] = ()  # its fields that are probabilities (checked in [0, 1))
    cells: ClassVar[tuple[str, ...]] = tuple(GATES)
    cells_why: ClassVar[str] = ""
    fixed_over_time: ClassVar[bool] = True
    noise: ClassVar[Noise] = staticmethod(bernoulli_mask)

    def __post_init__(self) -> None:
        for name in self.probabilities:
            if getattr(self, name) is not None:  # ``between=None``: the layers above the first take ``input``
                check_probability(self, name, getattr(self, name))

    def refuses(self, cell: str) -> str | None:
        """Why the scheme cannot run on ``cell`` (``"lstm"``, ``"gru"``, ``"rnn"``), or None if it can."""
        return None if cell in self.cells else self.cells_why.format(cell=cell.upper())

    def layer_masks(self, x: torch.Tensor, hidden_size: int, gates: int, layer: int = 0,
                    noise: nn.Module | None = None) -> LayerMasks:
        """Masks for layer ``layer`` (0-based) whose input is ``x`` [T, B, D]; ``noise``: the scheme's learned noise
        (:meth:`learned_noise`) where it has any."""
        return LayerMasks()

    def expected_masks(self, x: torch.Tensor, hidden_size: int, layer: int = 0) -> LayerMasks | None:
        """What layer ``layer`` computes with in evaluation without noise (weight scaling), or None: every mask at
        its mean of one, nothing to apply. Zoneout's expectation is not a mask of ones (it mixes in the previous
        state), so it is applied here."""
        return None

    def output_mask(self, y: torch.Tensor, noise: nn.Module | None = None) -> torch.Tensor | None:
        """Mask for the last layer's output ``y`` [T, B, H], broadcastable to it, or None."""
        return None

    def shares_draws_across_batch(self) -> bool:
        """Does one draw serve every sequence of a forward call (AWD's one W_hh mask per call, masks drawn
        ``per="batch"``)? Then the sequences of one batch are not independent samples, and MC dropout must run its
        samples one per call."""
        return getattr(self, "per", "sequence") == "batch"

    @property
    def learns(self) -> bool:
        """Does the scheme learn its noise (:meth:`learned_noise`)?"""
        return False

    def learned_noise(self, layers: list[tuple[int, int, int]], output_size: int) -> nn.Module | None:
        """The parameters a scheme learns for a stack whose layers are (input size, hidden size, gates) and whose
        output has ``output_size`` features, or None: only Kingma's adaptive Gaussian dropout and Concrete dropout
        learn any."""
        return None


class Site(NamedTuple):
    """A site whose noise a scheme learns, as the learned noise's parameters are made for it."""

    key: str  # input{l}, recurrent{l} (layer l's input x_t and h_{t-1}) or output (the last layer's output)
    p: float  # the probability it starts at; 0: no noise there, nothing learned
    size: int  # the features of the tensor its mask multiplies
    gates: int  # 1, or the cell's gates where every gate has its own mask (untied)
    fan_out: int | None  # how many weights one noise variable scales; None: the rows of the next layer's weight


def check_probability(scheme: Scheme, name: str, value) -> None:
    """A dropout probability in [0, 1), or a ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{type(scheme).__name__}({name}={value!r}): a probability must be a number in [0, 1) "
                         f"(1 would drop everything)")


def check_choice(scheme: Scheme, name: str, value, choices: tuple[str, ...]) -> None:
    """One of ``choices``, or a ValueError naming the argument and them."""
    if value not in choices:
        raise ValueError(f"{type(scheme).__name__}({name}={value!r}): choose one of "
                         f"{', '.join(repr(c) for c in choices)}")


def check_per(scheme: Scheme) -> None:
    """``per``: one fixed-over-time mask per sequence or one per batch."""
    check_choice(scheme, "per", scheme.per, PER)


def input_p(scheme: Scheme, layer: int) -> float:
    """The probability on layer ``layer``'s input (0-based): ``input`` for the first, ``between`` above it where
    set (AWD's separate dropout between layers), else ``input`` again."""
    return scheme.input if layer == 0 or scheme.between is None else scheme.between
