"""Zaremba, Sutskever & Vinyals (2014): dropout on the non-recurrent connections only.

    x_t <- x_t * z_t,   z_t ~ Bernoulli(1-p) / (1-p)

- tensors: the embedding output and each higher layer's input (``dropout.input``; ``dropout.hidden`` for layers
  2..L where set), and the last layer's output (``dropout.output``); h_{t-1} and c_t are never dropped;
- shape: [T, B, D], a fresh mask **at every time step and for every sample**, shared by the gates;
- scaling: inverted (1/(1-p) in training), so evaluation with the masks at one is weight scaling;
- MC (``eval=mc``): fresh masks every step, as in training (there is nothing fixed to keep over the stream).

The recurrence stays the plain LSTM, so cuDNN runs it.
"""

from vdrnn.dropout.masks import LayerMasks, bernoulli_mask
from vdrnn.dropout.registry import register
from vdrnn.dropout.scheme import DropoutScheme


@register
class ZarembaDropout(DropoutScheme):
    name = "zaremba"
    sites = ("input", "hidden", "output")
    table_order = 10
    fixed_over_time = False

    def layer_masks(self, x, hidden_size, gates, layer=0):
        p = self.config.input_p(layer)
        return LayerMasks(x=bernoulli_mask(tuple(x.shape), p, x) if p > 0 else None)

    def output_mask(self, y):
        p = self.config.output
        return bernoulli_mask(tuple(y.shape), p, y) if p > 0 else None
