"""Dropout schemes for recurrent networks: which tensor is dropped, with which mask, and when.

Notation (Gal & Ghahramani 2016, "A Theoretically Grounded Application of Dropout in RNNs"): x_t is a layer's input
at time t, h_{t-1} its previous output, c_t the LSTM cell state; with [a_i; a_f; a_g; a_o] the row blocks of
W_x x_t + W_h h_{t-1} + b (gate order i, f, g, o as in ``torch.nn.LSTM``),

    i, f, o = sigma(a_i), sigma(a_f), sigma(a_o),   g = tanh(a_g),   c_t = f*c_{t-1} + i*g,   h_t = o*tanh(c_t).

A *mask* z holds independent Bernoulli(1-p) draws divided by (1-p) ("inverted dropout"; N(1, p/(1-p)) draws in
Kingma's scheme, relaxed Bernoulli draws in Concrete dropout), so E[z] = 1 and evaluation with every mask equal to one
(weight scaling) needs no rescaling. Zoneout is the exception: its d keeps a unit's previous value rather than zeroing
it, and evaluation uses its expectation z. The schemes differ in where masks go, their shape and how often they are
drawn (B batch, D a layer's input size, H its hidden size, G the cell's gates):

| scheme                     | dropped tensors                  | mask shapes       | drawn                        |
|----------------------------|----------------------------------|-------------------|------------------------------|
| ``Zaremba`` (2014)         | x_t, output                      | TxBxD, TxBxH      | every step, per sequence     |
| ``Moon`` (2015)            | c_t                              | BxH               | per sequence, per call       |
| ``Variational``, tied      | x_t, h_{t-1}, output             | BxD, BxH, BxH     | per sequence, per call       |
| ``Variational``, untied    | the same, x_t and h_{t-1} per gate | BxGxD, BxGxH, BxH | per sequence, per call     |
| ``Gaussian`` (Kingma)      | as variational, N(1, p/(1-p))    | as variational    | per sequence, per call       |
| ``Concrete`` (Gal 2017)    | as variational, each p learned   | as variational    | per sequence, per call       |
| ``WeightDrop`` (Merity)    | x_t, output, W_hh                | BxD, BxH, GHxH    | W_hh: per call               |
| ``Semeniuta`` (2016)       | g_t (+ Zaremba's x_t, output)    | TxBxH or BxH      | every step, or per sequence  |
| ``Zoneout`` (Krueger)      | c_t, h_t kept (+ Zaremba's)      | TxBxH (d ~ Bern(z)) | every step, per sequence   |

Word-type dropout (Gal sec. 4.1: whole word types dropped, one draw per type per sequence) is the embedding's, not
the recurrence's: :class:`vdrnn.nn.Embedding`.

"Per call" means per forward call of the recurrent module, i.e. per truncated-BPTT segment in a language model:
masks are redrawn for every minibatch while the hidden state is carried over from the previous one (Gal's
``main_new_dropout_SOTA_v3.lua``). MC dropout draws the training scheme's masks, recurrent ones included; inside
``vdrnn.nn.fixed_masks`` each sequence keeps its fixed-over-time masks across calls (Gal's ``run_MC_test`` over a
test stream).

Layout: :mod:`~vdrnn.dropout.masks` draws masks and holds :class:`~vdrnn.dropout.masks.LayerMasks`, what a layer
receives; :mod:`~vdrnn.dropout.scheme` is the base class; each module of :mod:`vdrnn.dropout.schemes` is one scheme
family, opening with its paper's equation and mask semantics; :mod:`~vdrnn.dropout.learned` and
:mod:`~vdrnn.dropout.concrete` hold the parameters of the schemes that learn their noise. ``vdrnn.nn`` is where a
user meets them.

Nothing here imports torch at import time but the learned noise: checking a config reads the schemes without
waiting for it.
"""

from vdrnn.dropout.masks import LayerMasks, WeightMask, bernoulli_mask, gaussian_mask, keep_mask, weight_mask
from vdrnn.dropout.scheme import GATES, Scheme
from vdrnn.dropout.schemes.concrete import Concrete
from vdrnn.dropout.schemes.gaussian import Gaussian
from vdrnn.dropout.schemes.moon import Moon
from vdrnn.dropout.schemes.semeniuta import Semeniuta
from vdrnn.dropout.schemes.variational import Variational
from vdrnn.dropout.schemes.weight_drop import WeightDrop
from vdrnn.dropout.schemes.zaremba import Zaremba
from vdrnn.dropout.schemes.zoneout import Zoneout

__all__ = ["GATES", "Concrete", "Gaussian", "LayerMasks", "Moon", "Scheme", "Semeniuta", "Variational",
           "WeightDrop", "WeightMask", "Zaremba", "Zoneout", "bernoulli_mask", "gaussian_mask", "keep_mask",
           "weight_mask"]
