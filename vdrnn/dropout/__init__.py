"""Dropout schemes for recurrent networks: which tensor is dropped, with which mask, and when.

Notation (Gal & Ghahramani 2016, "A Theoretically Grounded Application of Dropout in RNNs"): x_t is a layer's input
at time t, h_{t-1} its previous output, c_t the LSTM cell state; with [a_i; a_f; a_g; a_o] the row blocks of
W_x x_t + W_h h_{t-1} + b (gate order i, f, g, o as in ``torch.nn.LSTM``),

    i, f, o = sigma(a_i), sigma(a_f), sigma(a_o),   g = tanh(a_g),   c_t = f*c_{t-1} + i*g,   h_t = o*tanh(c_t).

A *mask* z holds independent Bernoulli(1-p) draws divided by (1-p) ("inverted dropout"; N(1, p/(1-p)) draws in
Kingma's scheme, relaxed Bernoulli draws in Concrete dropout), so E[z] = 1 and evaluation with every mask equal to one
(weight scaling, ``eval=scale``) needs no rescaling. Zoneout is the exception: its d keeps a unit's previous value
rather than zeroing it, and evaluation uses its expectation z. The schemes differ in where masks go, their shape and how often they are drawn (B batch, D a layer's
input size, H its hidden size, G the cell's gates, V the vocabulary):

| scheme                  | dropped tensors                    | mask shapes            | drawn                     |
|-------------------------|------------------------------------|------------------------|---------------------------|
| ``none``                | nothing                            | --                     | --                        |
| ``zaremba`` (2014)      | x_t, output                        | TxBxD, TxBxH           | every step, per sample    |
| ``moon`` (2015)         | c_t (+ word types)                 | BxH (BxV)              | per sample, per minibatch |
| ``variational``, tied   | word types, x_t, h_{t-1}, output   | BxV, BxD, BxH, BxH     | per sample, per minibatch |
| ``variational``, untied | the same, x_t and h_{t-1} per gate | BxV, BxGxD, BxGxH, BxH | per sample, per minibatch |
| ``gaussian`` (Kingma)   | as variational, N(1, p/(1-p))      | as variational         | per sample, per minibatch |
| ``concrete`` (Gal 2017) | as variational, each p learned     | as variational, tied   | per sample, per minibatch |
| ``awd`` (Merity)        | word types, x_t, output, W_hh      | V, BxD, BxH, GHxH      | W_hh, V: per minibatch    |
| ``semeniuta`` (2016)    | g_t (+ Zaremba's x_t, output)      | TxBxH or BxH           | every step, or per seq.   |
| ``zoneout`` (Krueger)   | c_t, h_t kept (+ Zaremba's)        | TxBxH (d ~ Bern(z))    | every step, per sample    |

"Per minibatch" means per truncated-BPTT segment: masks are redrawn for every minibatch while the hidden state is
carried over from the previous one (Gal's ``main_new_dropout_SOTA_v3.lua``). MC dropout (``eval=mc``) uses the
training scheme's masks, recurrent ones included; by default each sample keeps its fixed-over-time masks for the whole
test stream (``eval.mc_masks=stream``, Gal's ``run_MC_test``) and word-type dropout is off (``eval.word_dropout``).

Layout: :mod:`~vdrnn.dropout.config` checks the ``dropout`` group; :mod:`~vdrnn.dropout.masks` draws masks and holds
:class:`~vdrnn.dropout.masks.LayerMasks`, what a layer receives; :mod:`~vdrnn.dropout.scheme` is the base class and
:mod:`~vdrnn.dropout.registry` the schemes by name; each module of :mod:`vdrnn.dropout.schemes` is one scheme family, opening with its paper's equation and
mask semantics. A new scheme on the existing sites is one module there, its YAML in conf/dropout/ and its test.

Nothing here imports torch at import time: validating a config (``vdrnn train --help``, a config error) reads the
registry without waiting for it.
"""

import importlib
import pkgutil

from vdrnn.dropout import schemes
from vdrnn.dropout.config import DropoutConfig
from vdrnn.dropout.masks import (
    LayerMasks,
    WeightDrop,
    bernoulli_mask,
    gaussian_mask,
    keep_mask,
    weight_drop,
    words_of,
)
from vdrnn.dropout.registry import SCHEMES, in_table_order, make_dropout
from vdrnn.dropout.scheme import DropoutScheme

# Every module of vdrnn/dropout/schemes/ registers its scheme when imported: a new one is found here, unlisted.
for _module in pkgutil.iter_modules(schemes.__path__):
    importlib.import_module(f"{schemes.__name__}.{_module.name}")

__all__ = ["SCHEMES", "DropoutConfig", "DropoutScheme", "LayerMasks", "WeightDrop", "bernoulli_mask", "gaussian_mask",
           "in_table_order", "keep_mask", "make_dropout", "weight_drop", "words_of"]
