"""The base class of every dropout scheme.

A scheme is a class whose attributes say what the config checks and the report need to know of it (its sites, whether
it has per-gate masks, which cells it runs on, where its rows sort) and whose methods draw the masks of one minibatch:
word types (:meth:`DropoutScheme.word_type_table`), each layer's (:meth:`DropoutScheme.layer_masks`) and the output's
(:meth:`DropoutScheme.output_mask`); in evaluation without noise, what stands in for the layers' masks
(:meth:`DropoutScheme.expected_masks`: zoneout's expectation, nothing for the rest). The models call these; the layers
only multiply (:mod:`vdrnn.cells`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from vdrnn.dropout.config import DropoutConfig
from vdrnn.dropout.masks import NOISES, LayerMasks, Noise, bernoulli_mask, words_of

if TYPE_CHECKING:
    import torch

    from vdrnn.dropout.concrete import ConcreteRates
    from vdrnn.dropout.learned import NoiseScales

@dataclass
class DropoutScheme:
    """No dropout anywhere: the base class, whose subclasses override the sites they drop."""

    config: DropoutConfig = field(default_factory=DropoutConfig)

    # What the config checks and the report read; each scheme sets its own.
    name: ClassVar[str]
    sites: ClassVar[tuple[str, ...]] = ()  # the dropout.* probabilities it reads; any other non-zero one is refused
    per_gate_masks: ClassVar[bool] = False  # a separate mask per gate under cell.gates=untied
    reads_locked_mask: ClassVar[bool] = False  # draws its fixed-over-time masks as dropout.locked_mask says
    learns_noise: ClassVar[bool] = False  # takes dropout.learn_alpha
    learns_rates: ClassVar[bool] = False  # learns its dropout probabilities (Concrete dropout)
    cells: ClassVar[tuple[str, ...]] = ("lstm", "gru", "rnn")  # the cells it runs on
    cells_why: ClassVar[str] = ""  # why not on the others, for the error ("{cell}": the cell asked for)
    table_order: ClassVar[int] = 0  # where its rows sort in the report's tables
    # Masks fixed over time can be kept across minibatches (MC over a whole stream, Gal's protocol); masks drawn
    # fresh at every step (Zaremba) cannot.
    fixed_over_time: ClassVar[bool] = True
    # What one mask entry is drawn from; the Gaussian scheme changes only this.
    noise: ClassVar[Noise] = staticmethod(bernoulli_mask)

    def word_type_table(self, batch: int, vocab_size: int, like: torch.Tensor) -> torch.Tensor | None:
        """One draw per word type: [B, V] (per sequence) or [1, V] (shared by the batch, ``embedding_mask=batch``),
        or None where ``dropout.embedding`` is 0. Every occurrence of a word in a sequence is dropped (or scaled)
        together (Gal sec. 4.1, and the fix in Gal's README that tied the masks per word). An entry is the scheme's
        ``noise`` unless ``dropout.embedding_noise`` names another."""
        c = self.config
        if c.embedding == 0:
            return None
        noise = self.noise if c.embedding_noise is None else NOISES[c.embedding_noise]
        return noise((batch if c.embedding_mask == "sample" else 1, vocab_size), c.embedding, like)

    def drop_words(self, embedded: torch.Tensor, tokens: torch.Tensor, table: torch.Tensor | None) -> torch.Tensor:
        """The embeddings ``embedded`` [T, B, E] of ``tokens`` times their word types' entries of ``table`` (from
        :meth:`word_type_table`; None: unchanged)."""
        mask = words_of(table, tokens)
        return embedded if mask is None else embedded * mask

    @classmethod
    def refuses_cell(cls, cell: str, config: DropoutConfig | None = None) -> str | None:
        """Why the scheme cannot run on ``cell`` with ``config`` (None: with any config), or None if it can."""
        return None if cell in cls.cells else cls.cells_why.format(cell=cell.upper())

    def layer_masks(self, x: torch.Tensor, hidden_size: int, gates: int, layer: int = 0) -> LayerMasks:
        """Masks for layer ``layer`` (0-based) whose input is ``x`` [T, B, D]."""
        return LayerMasks()

    def expected_masks(self, x: torch.Tensor, hidden_size: int, layer: int = 0) -> LayerMasks | None:
        """What layer ``layer`` computes with in evaluation without noise (weight scaling), or None: every mask at
        its mean of one, nothing to apply. Zoneout's expectation is not a mask of ones (it mixes in the previous
        state), so it is applied here."""
        return None

    def output_mask(self, y: torch.Tensor) -> torch.Tensor | None:
        """Mask for the last layer's output ``y`` [T, B, H], broadcastable to it, or None."""
        return None

    def shares_draws_across_batch(self, word_dropout: bool) -> bool:
        """Does one draw serve every sequence of a forward pass: AWD's weight drop (one W_hh mask per minibatch),
        ``locked_mask=batch``, or ``embedding_mask=batch`` with word-type dropout on? Then the columns of one batch
        are not independent samples, and MC dropout must run its samples one by one."""
        c = self.config
        return (c.weight > 0 or c.locked_mask == "batch"
                or (word_dropout and c.embedding > 0 and c.embedding_mask == "batch"))

    def noise_scales(self, layers: list[tuple[int, int, int]], outputs: int,
                     weights: dict[str, torch.Tensor]) -> NoiseScales | ConcreteRates | None:
        """The scheme's learned parameters for a model whose layers are (input size, hidden size, gates) and whose
        head has ``outputs`` rows, or None: only Kingma's adaptive Gaussian dropout and Concrete dropout learn any.
        ``weights`` are the weights each site's mask multiplies (``input{l}``: W_ih of layer l, ``recurrent{l}``:
        its W_hh, ``output``: the head's), for a regularizer that reads them."""
        return None
