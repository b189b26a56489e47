"""The dropout sites outside a recurrence, as modules: word-type dropout on an embedding (:class:`Embedding`) and a
mask fixed over time between a user's own layers (:class:`LockedDropout`)."""

from __future__ import annotations

import torch
from torch import nn

from vdrnn.dropout.masks import NOISES, PER, locked_mask, words_of
from vdrnn.nn.masked import MaskedModule


def check_dropout(owner: str, p) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{owner}(dropout={p!r}): a probability must be a number in [0, 1) (1 would drop everything)")


def check_per(owner: str, per) -> None:
    if per not in PER:
        raise ValueError(f"{owner}(per={per!r}): choose 'sequence' (a mask per sequence) or 'batch' (one shared by the "
                         f"batch)")


class Embedding(nn.Embedding, MaskedModule):
    r"""``torch.nn.Embedding`` with word-type dropout (Gal & Ghahramani 2016, sec. 4.1).

    In training, every occurrence of a word type in a sequence is dropped together: one draw per word type and
    sequence, z_v ~ Bernoulli(1-p) / (1-p), and the embedding of token w at any step is e_w * z_w. Dropping word
    types, not tokens, is dropping rows of the embedding matrix, the input weight that Gal's variational view puts
    one mask on per sequence.

    Args:
        num_embeddings, embedding_dim, **kwargs: as ``torch.nn.Embedding``.
        dropout: p, the probability of dropping a word type. Default: 0.
        per: ``"sequence"`` (a draw per word type and sequence, Gal's) or ``"batch"`` (one draw per word type for the
            whole call, shared by its sequences: AWD-LSTM's ``embedded_dropout``). Default: ``"sequence"``.
        noise: ``"bernoulli"``, or ``"gaussian"``: z_v ~ N(1, p/(1-p)), the same mean and variance (Kingma's noise, as
            ``vdrnn.nn.Gaussian``). Default: ``"bernoulli"``.
        batch_first: the tokens are [B, T] rather than [T, B]. Default: False.

    Inputs: tokens [T, B] ([B, T] with ``batch_first``), or [T] for one sequence. Output: [..., embedding_dim].
    The mask table [B, V] (or [1, V]) is drawn at each call in training, kept across calls inside
    ``vdrnn.nn.fixed_masks``, and none is drawn in evaluation (the embedding as it is: weight scaling).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, *args, dropout: float = 0.0,
                 per: str = "sequence", noise: str = "bernoulli", batch_first: bool = False, **kwargs):
        super().__init__(num_embeddings, embedding_dim, *args, **kwargs)
        check_dropout("Embedding", dropout)
        check_per("Embedding", per)
        if noise not in NOISES:
            raise ValueError(f"Embedding(noise={noise!r}): choose one of {', '.join(repr(n) for n in NOISES)}")
        self.dropout, self.per, self.noise, self.batch_first = dropout, per, noise, batch_first

    def shares_draws_across_batch(self) -> bool:
        return self.dropout > 0 and self.per == "batch"

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        embedded = super().forward(input)
        if not self.training or self.dropout == 0:
            return embedded
        if input.dim() not in (1, 2):
            raise ValueError(f"Embedding with dropout: the tokens must be [T, B] ([B, T] with batch_first) or [T], "
                             f"not {tuple(input.shape)}")
        tokens = input.unsqueeze(1) if input.dim() == 1 else (input.t() if self.batch_first else input)  # [T, B]
        batch = tokens.shape[1]
        rows = batch if self.per == "sequence" else 1
        table = self.draw("words", batch, NOISES[self.noise], (rows, self.num_embeddings), self.dropout, tokens)
        mask = words_of(table, tokens)  # [T, B, 1]
        if input.dim() == 1:
            mask = mask.squeeze(1)
        elif self.batch_first:
            mask = mask.transpose(0, 1)
        return embedded * mask

    def extra_repr(self) -> str:
        extra = f", dropout={self.dropout}, per={self.per!r}" if self.dropout else ""
        if self.dropout and self.noise != "bernoulli":
            extra += f", noise={self.noise!r}"
        return super().extra_repr() + extra + (", batch_first=True" if self.batch_first else "")


class LockedDropout(MaskedModule):
    r"""Dropout with one mask per sequence, the same at every time step ("locked", Gal's variational dropout on a
    tensor between layers; AWD-LSTM's ``LockedDropout``).

        y_t = x_t * z,   z ~ Bernoulli(1-p) / (1-p),   z of shape [B, D] (``per="sequence"``) or [1, D] (``"batch"``)

    Inputs: x [T, B, D] ([B, T, D] with ``batch_first``); output the same shape. In training the mask is drawn at each
    call (kept across calls inside ``vdrnn.nn.fixed_masks``); in evaluation x passes unchanged (weight scaling).
    """

    def __init__(self, dropout: float = 0.5, per: str = "sequence", batch_first: bool = False):
        super().__init__()
        check_dropout("LockedDropout", dropout)
        check_per("LockedDropout", per)
        self.dropout, self.per, self.batch_first = dropout, per, batch_first

    def shares_draws_across_batch(self) -> bool:
        return self.dropout > 0 and self.per == "batch"

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not self.training or self.dropout == 0:
            return input
        if input.dim() != 3:
            raise ValueError(f"LockedDropout: the input must be [T, B, D] ([B, T, D] with batch_first), not "
                             f"{tuple(input.shape)}")
        x = input.transpose(0, 1) if self.batch_first else input
        mask = self.draw("mask", x.shape[1], locked_mask, x, (x.shape[2],), self.dropout, self.per)  # [B or 1, D]
        mask = mask.unsqueeze(1 if self.batch_first else 0)
        return input * mask.to(input.dtype)

    def extra_repr(self) -> str:
        return f"dropout={self.dropout}, per={self.per!r}" + (", batch_first=True" if self.batch_first else "")

