"""Gal & Ghahramani (2016): variational (Bayesian) dropout, one weight mask per sequence.

Tied gates (eq. 7): [i; f; g; o] = W [x_t * z_x ; h_{t-1} * z_h] + b; untied gates (eq. 5, ``gates="untied"``):
i = sigma(W_i (x_t * z_x^i) + U_i (h_{t-1} * z_h^i) + b_i), and likewise for f, g, o, with the same weights as
tied; only the noise differs.

- tensors: each layer's input x_t (``input``; ``between`` for layers 2..L where set), h_{t-1} (``recurrent``) and
  the last layer's output (``output``); Gal's word types are :class:`vdrnn.nn.Embedding`'s;
- shapes: z_x [B, D] and z_h [B, H] shared by the cell's G gates (tied), or [B, G, D] and [B, G, H], a mask per
  gate (untied); z_o [B, H];
- draws: **once per sequence per forward call, reused at every time step**; with ``per="batch"`` once per call and
  shared by its sequences ([1, D], [1, G, D], ...);
- scaling: inverted, so evaluation (``module.eval()``) with the masks at one is weight scaling;
- MC: masks drawn as in training; inside ``vdrnn.nn.fixed_masks`` each sequence keeps its masks across calls (a test
  stream read in many minibatches, Gal's ``run_MC_test``).
"""

from __future__ import annotations

from dataclasses import dataclass

from vdrnn.dropout.masks import LayerMasks, locked_mask, locked_rows
from vdrnn.dropout.scheme import Scheme, Site, check_choice, check_per, input_p

GATE_MASKS = ("tied", "untied")


@dataclass(frozen=True, kw_only=True)
class Variational(Scheme):
    input: float = 0.0
    recurrent: float = 0.0
    output: float = 0.0
    between: float | None = None
    gates: str = "tied"
    per: str = "sequence"

    probabilities = ("input", "recurrent", "output", "between")

    def __post_init__(self):
        super().__post_init__()
        check_choice(self, "gates", self.gates, GATE_MASKS)
        check_per(self)

    def layer_masks(self, x, hidden_size, gates, layer=0, noise=None):
        untied = self.gates == "untied"
        if noise is not None:  # [rows, D] (or [rows, G, D] per gate) from each site's learned noise
            rows = locked_rows(x, self.per)
            x_mask = noise.mask(f"input{layer}", rows, x)
            h_mask = noise.mask(f"recurrent{layer}", rows, x)
            return LayerMasks(x=x_mask, h=h_mask, per_gate=untied and (x_mask is not None or h_mask is not None))
        p_in = input_p(self, layer)
        per_gate = (gates,) if untied else ()  # untied: one mask per gate, [B, G, D] instead of [B, D]
        return LayerMasks(
            x=locked_mask(x, (*per_gate, x.shape[2]), p_in, self.per, self.noise),
            h=locked_mask(x, (*per_gate, hidden_size), self.recurrent, self.per, self.noise),
            # With both p = 0 the untied cell is exactly the tied one and may take the stock kernel.
            per_gate=untied and (p_in > 0 or self.recurrent > 0),
        )

    def noise_sites(self, layers: list[tuple[int, int, int]], output_size: int) -> list[Site]:
        """The sites a learning subclass learns the noise of: each layer's input and h_{t-1}, then the output. A unit
        of a layer's input (or h_{t-1}) multiplies a column of W_ih (W_hh): G*H weights, or H per gate when untied."""
        untied = self.gates == "untied"
        sites = []
        for index, (inputs, hidden, gates) in enumerate(layers):
            per_gate, fan_out = (gates, hidden) if untied else (1, gates * hidden)
            sites += [Site(f"input{index}", input_p(self, index), inputs, per_gate, fan_out),
                      Site(f"recurrent{index}", self.recurrent, hidden, per_gate, fan_out)]
        return [*sites, Site("output", self.output, output_size, 1, None)]

    def output_mask(self, y, noise=None):
        if noise is not None:
            mask = noise.mask("output", locked_rows(y, self.per), y)
        else:
            mask = locked_mask(y, (y.shape[2],), self.output, self.per, self.noise)
        return None if mask is None else mask.unsqueeze(0)


def require_something_to_learn(scheme: Variational) -> None:
    """A scheme that learns its noise needs a site with noise to start from."""
    if not any((scheme.input, scheme.recurrent, scheme.output, scheme.between)):
        raise ValueError(f"{type(scheme).__name__}(): input, recurrent, output and between are all 0, so there is no "
                         f"noise to learn; set one of them (e.g. input=0.3, the starting point)")
