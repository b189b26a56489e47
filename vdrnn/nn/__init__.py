"""vdrnn.nn: recurrent dropout for any PyTorch model, as ``torch.nn``-style modules.

``vdrnn.nn.LSTM``, ``GRU`` and ``RNN`` are ``torch.nn.LSTM``, ``GRU`` and ``RNN`` (the same arguments, call, state
shapes and state dicts) with one more argument, ``dropout=``: a scheme that says where the masks go inside the
recurrence and how they are drawn, per sequence and fixed over time as Gal & Ghahramani (2016), or as the schemes
compared with it::

    import torch
    import vdrnn.nn

    embedding = vdrnn.nn.Embedding(10_000, 650, dropout=0.2)            # word-type dropout
    lstm = vdrnn.nn.LSTM(650, 650, num_layers=2,
                         dropout=vdrnn.nn.Variational(input=0.3, recurrent=0.2, output=0.3))
    output, (h_n, c_n) = lstm(embedding(tokens))                        # tokens [T, B]

The schemes, each with its paper's names for its probabilities: :class:`Variational` (Gal, tied or untied gates),
:class:`Zaremba`, :class:`Moon`, :class:`WeightDrop` (AWD-LSTM), :class:`Zoneout`, :class:`Semeniuta`,
:class:`Gaussian` (Kingma, fixed or learned alpha) and :class:`Concrete` (each p learned). The sites outside a
recurrence: :class:`Embedding` (word-type dropout) and :class:`LockedDropout` (one mask per sequence between one's own
layers).

Masks follow ``module.training``: drawn at every call in training, none in evaluation (weight scaling).
:func:`mc_predict` runs MC dropout in one call, its samples side by side; :func:`fixed_masks` keeps each sequence's
masks across calls; :func:`mc_dropout` switches the masks on in an evaluating model. On CUDA a recurrence with masks
inside it runs fused Triton kernels, on the CPU a reference loop; docs/api.md gives every name's paper, equation and
mask semantics.
"""

from vdrnn.dropout import (
           Concrete,
           Gaussian,
           Moon,
           Scheme,
           Semeniuta,
           Variational,
           WeightDrop,
           Zaremba,
           Zoneout,
)
from vdrnn.nn.mc import MCPrediction, fixed_masks, mc_dropout, mc_predict, shares_draws_across_batch
from vdrnn.nn.rnn import GRU, LSTM, RNN
from vdrnn.nn.sites import Embedding, LockedDropout

__all__ = ["GRU", "LSTM", "RNN", "Concrete", "Embedding", "Gaussian", "LockedDropout", "MCPrediction", "Moon",
           "Scheme", "Semeniuta", "Variational", "WeightDrop", "Zaremba", "Zoneout", "fixed_masks", "mc_dropout",
           "mc_predict", "shares_draws_across_batch"]
