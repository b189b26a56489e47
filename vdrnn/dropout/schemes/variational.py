"""Gal & Ghahramani (2016): variational (Bayesian) dropout, one weight mask per sequence.

Tied gates (eq. 7): [i; f; g; o] = W [x_t * z_x ; h_{t-1} * z_h] + b; untied gates (eq. 5, ``cell.gates=untied``):
i = sigma(W_i (x_t * z_x^i) + U_i (h_{t-1} * z_h^i) + b_i), and likewise for f, g, o, with the same weights as
tied; only the noise differs.

- tensors: word types (``dropout.embedding``), each layer's input x_t (``dropout.input``; ``dropout.hidden`` for
  layers 2..L where set; layer 1's input is the embedding output), h_{t-1} (``dropout.recurrent``) and the last
  layer's output (``dropout.output``);
- shapes: z_x [B, D] and z_h [B, H] shared by the cell's G gates (tied), or [B, G, D] and [B, G, H], a mask per
  gate (untied); z_o [B, H]; word types [B, V], one draw per word type per sequence;
- draws: **once per sample per minibatch, reused at every time step**; with ``dropout.locked_mask=batch`` once per
  minibatch and shared by its sequences ([1, D], [1, G, D], ...), and with ``dropout.embedding_mask=batch`` one
  word-type draw for the minibatch;
- scaling: inverted, so evaluation with the masks at one is weight scaling (``eval=scale``);
- MC (``eval=mc``): each sample keeps its masks for the whole test stream (``eval.mc_masks=stream``, Gal's
  ``run_MC_test``), word-type dropout off (``eval.word_dropout=false``, as Gal's code).
"""

from vdrnn.dropout.masks import LayerMasks, locked_mask, locked_rows
from vdrnn.dropout.registry import register
from vdrnn.dropout.scheme import DropoutScheme


@register
class VariationalDropout(DropoutScheme):
    name = "variational"
    sites = ("embedding", "input", "hidden", "recurrent", "output")
    per_gate_masks = True
    reads_locked_mask = True
    table_order = 30
    # Learned noise the masks are drawn from instead (Kingma's alpha, Concrete's p: an nn.Module with ``mask``), set
    # by the subclasses' noise_scales() through learn().
    learned = None

    def learn(self, noise):
        """Draw this scheme's masks from ``noise`` from now on, and return it. The masks are drawn from its parameters,
        so a second model built on this scheme would take over the first one's noise: one scheme per model."""
        if self.learned is not None:
            raise RuntimeError("this scheme's learned noise belongs to another model: call make_dropout again for "
                               "each model")
        self.learned = noise
        return noise

    def layer_masks(self, x, hidden_size, gates, layer=0):
        cfg = self.config
        if self.learned is not None:  # [rows, D] (or [rows, G, D] per gate) from each site's learned noise
            rows = locked_rows(x, cfg.locked_mask)
            x_mask = self.learned.mask(f"input{layer}", rows, x)
            h_mask = self.learned.mask(f"recurrent{layer}", rows, x)
            return LayerMasks(x=x_mask, h=h_mask, per_gate=cfg.per_gate and (x_mask is not None or h_mask is not None))
        p_in = cfg.input_p(layer)
        per_gate = (gates,) if cfg.per_gate else ()  # untied: one mask per gate, [B, G, D] instead of [B, D]
        return LayerMasks(
            x=locked_mask(x, (*per_gate, x.shape[2]), p_in, cfg.locked_mask, self.noise),
            h=locked_mask(x, (*per_gate, hidden_size), cfg.recurrent, cfg.locked_mask, self.noise),
            # With both p = 0 the untied cell is exactly the tied one and may take the stock kernel.
            per_gate=cfg.per_gate and (p_in > 0 or cfg.recurrent > 0),
        )

    def output_mask(self, y):
        cfg = self.config
        if self.learned is not None:
            mask = self.learned.mask("output", locked_rows(y, cfg.locked_mask), y)
        else:
            mask = locked_mask(y, (y.shape[2],), cfg.output, cfg.locked_mask, self.noise)
        return None if mask is None else mask.unsqueeze(0)
