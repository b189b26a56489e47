"""Merity, Keskar & Socher (2017), AWD-LSTM: locked dropout plus weight drop, no mask on h_{t-1}.

    W_hh' = W_hh * M / (1-p),   M ~ Bernoulli(1-p)   (DropConnect on the recurrent weights)

- word types (``dropout.embedding``, the reference's 0.1): whole embedding rows dropped, one draw per word type for
  the whole minibatch in the preset (``embedding_mask=batch``, as ``embedded_dropout``; ``sample`` draws per
  sequence, as Gal);
- locked dropout (Gal's fixed-over-time masks) on the embedding output (``input``, dropouti 0.65), between layers
  (``hidden``, dropouth 0.3) and on the output (``output``, 0.4): [B, D] per sample, the same at every step
  ([1, D] shared by the batch with ``locked_mask=batch``);
- weight drop (``weight``, 0.5): M [4H, H] drawn **once per minibatch**, shared by all samples and steps (a per-sample
  W_hh would be a [B, 4H, H] tensor), kept as M itself (one byte an entry) and 1/(1-p) (``WeightDrop``). The raw
  W_hh is the parameter: it receives the gradients and is never overwritten; evaluation uses it as it is;
- scaling: inverted everywhere; MC: one W_hh mask is one sample, so MC runs its samples one per pass.

The LSTM only, as the reference.
"""

from vdrnn.dropout.masks import LayerMasks, locked_mask, weight_drop
from vdrnn.dropout.registry import register
from vdrnn.dropout.schemes.variational import VariationalDropout


@register
class AWDDropout(VariationalDropout):
    # Word types and the output are dropped as in VariationalDropout; the layers differ.
    name = "awd"
    sites = ("embedding", "input", "hidden", "output", "weight")
    per_gate_masks = False
    cells = ("lstm",)
    cells_why = "it is implemented for the LSTM only"
    table_order = 50

    def layer_masks(self, x, hidden_size, gates, layer=0):
        cfg = self.config
        w = cfg.weight
        return LayerMasks(x=locked_mask(x, (x.shape[2],), cfg.input_p(layer), cfg.locked_mask),
                          w_hh=weight_drop((gates * hidden_size, hidden_size), w, x) if w > 0 else None)
