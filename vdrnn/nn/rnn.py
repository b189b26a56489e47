"""``vdrnn.nn.LSTM``, ``GRU`` and ``RNN``: ``torch.nn``'s recurrent modules with a dropout scheme inside.

Each holds ``torch.nn``'s parameters under ``torch.nn``'s names, so state dicts pass between them and stock modules
both ways, and runs every layer as :mod:`vdrnn.cells` says: the stock kernel (cuDNN on CUDA) where no mask acts inside
the recurrence, else the fused kernels on CUDA or the reference loop on the CPU, with the scheme's masks drawn for the
call (:mod:`vdrnn.dropout`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from vdrnn.cells import IMPLS
from vdrnn.cells.common import state_dtype
from vdrnn.cells.gru import gru_layer
from vdrnn.cells.lstm import lstm_layer
from vdrnn.cells.rnn import NONLINEARITIES, rnn_layer
from vdrnn.dropout import GATES, LayerMasks, Scheme
from vdrnn.nn.layout import Layout, reversed_in_time
from vdrnn.nn.masked import MaskedModule

CUDNN_MODES = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN_TANH", "rnn_relu": "RNN_RELU"}


class RecurrentBase(MaskedModule):
    """What LSTM, GRU and RNN share; see :class:`LSTM` for the arguments."""

    cell: ClassVar[str]
    states: ClassVar[int]  # tensors in a layer's state: (h, c) for the LSTM, h for the others

    def __init__(self, input_size: int, hidden_size: int | Sequence[int], num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: Scheme | None = None, bidirectional: bool = False,
                 impl: str = "auto", device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        check_whole(name, "num_layers", num_layers)
        sizes = list(hidden_size) if isinstance(hidden_size, Sequence) else [hidden_size] * num_layers
        check_arguments(name, self.cell, input_size, sizes, dropout, bidirectional, impl)
        if isinstance(hidden_size, Sequence) and len(sizes) != num_layers:
            raise ValueError(f"{name}(hidden_size={list(hidden_size)}): one size per layer, so num_layers="
                             f"{len(sizes)}, not {num_layers}")
        self.input_size = input_size
        self.hidden_size = hidden_size if isinstance(hidden_size, int) else tuple(sizes)
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.bidirectional = bidirectional
        self.dropout = dropout
        self.impl = impl
        self.sizes = sizes  # each layer's hidden size
        self.directions = 2 if bidirectional else 1
        self.layout = Layout(name, input_size, batch_first, self.states,
                             [size for size in sizes for _ in range(self.directions)],
                             hidden_size if isinstance(hidden_size, int) else None)
        # AWD's weight-dropped layers run cuDNN eagerly and the fused kernels inside a CUDA graph, where they are the
        # faster (scripts/bench_awd.py): whoever records the graph sets this.
        self.weight_drop_on_kernels = impl == "fast"
        gates = GATES[self.cell]
        self.names: list[tuple[str, ...]] = []  # each (layer, direction)'s W_ih, W_hh, b_ih, b_hh, as torch names them
        for layer in range(num_layers):
            for direction in range(self.directions):
                self.names.append(self._make_parameters(layer, direction, gates, {"device": device, "dtype": dtype}))
        self.reset_parameters()
        # A scheme's learned noise (Concrete dropout's p's, Kingma's alphas): parameters of this module, made after the
        # weights so that ``parameters()`` lists the weights first, in torch's order.
        layers = [(self.layer_input_size(layer), hidden, gates) for layer, hidden in enumerate(sizes)]
        self.noise = dropout.learned_noise(layers, sizes[-1] * self.directions) if dropout is not None else None
        self.flatten_parameters()

    # ------------------------------------------------------------------ parameters
    def _make_parameters(self, layer: int, direction: int, gates: int, factory: dict) -> tuple[str, ...]:
        """Layer ``layer``'s weights in ``direction``, under torch's names, which it returns (W_ih, W_hh, b_ih,
        b_hh). Without biases, zeros the kernels add: buffers outside the state dict, which stays torch's."""
        hidden, suffix = self.sizes[layer], f"l{layer}{'_reverse' if direction else ''}"
        names = tuple(f"{kind}_{suffix}" for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
        shapes = ((gates * hidden, self.layer_input_size(layer)), (gates * hidden, hidden), (gates * hidden,),
                  (gates * hidden,))
        for i, (param, shape) in enumerate(zip(names, shapes, strict=True)):
            if i < 2 or self.bias:
                setattr(self, param, nn.Parameter(torch.empty(shape, **factory)))
            else:
                self.register_buffer(param, torch.zeros(shape, **factory), persistent=False)
        return names

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.sizes[layer - 1] * self.directions

    def reset_parameters(self) -> None:
        """torch.nn's initialization: every weight and bias U(-1/sqrt(H), 1/sqrt(H)), H its layer's hidden size."""
        for k in range(len(self.names)):
            bound = 1.0 / math.sqrt(self.sizes[k // self.directions])
            for param in self.layer_parameters(k):
                if isinstance(param, nn.Parameter):
                    nn.init.uniform_(param, -bound, bound)

    def layer_parameters(self, k: int) -> tuple[torch.Tensor, ...]:
        """(W_ih, W_hh, b_ih, b_hh) of layer k // directions in direction k % directions (zeros for no bias)."""
        return tuple(getattr(self, name) for name in self.names[k])

    def flatten_parameters(self) -> None:
        """On CUDA, put each layer's weights in one buffer of cuDNN's layout, as ``torch.nn.LSTM`` does for all its
        layers together, so that cuDNN reads them without a copy at every call. Done again after ``.to()``."""
        first = self.weight_ih_l0
        if not (first.is_cuda and torch.backends.cudnn.is_acceptable(first) and torch._use_cudnn_rnn_flatten_weight()):
            return
        import torch.backends.cudnn.rnn as cudnn_rnn

        mode = cudnn_rnn.get_cudnn_mode(CUDNN_MODES[self.mode])
        with torch.cuda.device_of(first), torch.no_grad():
            for k in range(len(self.names)):
                params = [p for p in self.layer_parameters(k) if isinstance(p, nn.Parameter)]
                # as torch's: not where dtypes differ or parameters alias one another (the copying path then)
                if len({p.dtype for p in params}) == 1 and len({p.data_ptr() for p in params}) == len(params):
                    torch._cudnn_rnn_flatten_weight(params, len(params), self.layer_input_size(k // self.directions),
                                                    mode, self.sizes[k // self.directions], 0, 1, False, False)

    @property
    def mode(self) -> str:
        return self.cell

    def _apply(self, fn, recurse=True):
        module = super()._apply(fn, recurse)
        self.flatten_parameters()
        return module

    def __setstate__(self, state):
        super().__setstate__(state)
        self.flatten_parameters()

    # ------------------------------------------------------------------ masks
    def keeps_masks(self) -> bool:
        return self.dropout is not None and self.dropout.fixed_over_time

    def shares_draws_across_batch(self) -> bool:
        return self.dropout is not None and self.dropout.shares_draws_across_batch()

    def layer_masks(self, k: int, x: torch.Tensor) -> LayerMasks:
        """The masks of layer k // directions in direction k % directions for input x [T, B, D]: drawn in training,
        the scheme's expectation in evaluation."""
        if self.dropout is None:
            return LayerMasks()
        layer = k // self.directions
        hidden, gates = self.sizes[layer], GATES[self.cell]
        if self.training:
            return self.draw(("layer", k), x.shape[1], self.dropout.layer_masks, x, hidden, gates, layer, self.noise)
        return self.dropout.expected_masks(x, hidden, layer) or LayerMasks()

    def drop_output(self, output: torch.Tensor) -> torch.Tensor:
        """``output`` (the last layer's, in this module's layout) times the scheme's output mask in training; as it is
        in evaluation. ``forward(..., drop_output=False)`` and then this: a regularizer can read the undropped output
        (AWD's temporal activation regularization), or a classifier drop only the step it reads."""
        if self.dropout is None or not self.training:
            return output
        y = output.transpose(0, 1) if self.batch_first else output  # the masks are drawn time-major
        mask = self.draw("output", y.shape[1], self.dropout.output_mask, y, self.noise)
        return output if mask is None else output * (mask.transpose(0, 1) if self.batch_first else mask).to(output.dtype)

    # ------------------------------------------------------------------ learned noise
    def site_weights(self, output_weight: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The weight each dropout site's mask multiplies: W_ih (``input{l}``) and W_hh (``recurrent{l}``) of every
        layer, and ``output_weight``, the weight of the layer the output feeds (``output``)."""
        weights = {} if output_weight is None else {"output": output_weight}
        for layer in range(self.num_layers):
            w_ih, w_hh = self.layer_parameters(layer * self.directions)[:2]
            weights[f"input{layer}"], weights[f"recurrent{layer}"] = w_ih, w_hh
        return weights

    def _weights_for_noise(self, output_weight: torch.Tensor | None, what: str) -> dict[str, torch.Tensor]:
        if self.noise.needs("output") and output_weight is None:
            raise ValueError(f"{what}(output_weight=None): the scheme learns the output's noise, whose regularizer "
                             f"reads the weight the output feeds: pass output_weight=<the next layer>.weight")
        return self.site_weights(output_weight)

    def regularizer(self, num_examples: int, output_weight: torch.Tensor | None = None) -> torch.Tensor:
        """The learned noise's regularizer per training example, to add to a loss that averages over
        ``num_examples`` (Concrete dropout's, Kingma's KL term); zero for a scheme that learns nothing.
        ``output_weight``: the weight of the layer the output feeds, where the output's noise is learned."""
        if self.noise is None:
            return torch.zeros((), device=self.weight_ih_l0.device)
        return self.noise.kl(self._weights_for_noise(output_weight, "regularizer")) / num_examples

    def noise_summary(self, output_weight: torch.Tensor | None = None) -> dict[str, float]:
        """Each site's learned noise level (``p_input0``, ...) and the regularizer; empty if nothing is learned."""
        if self.noise is None:
            return {}
        return self.noise.summary(self._weights_for_noise(output_weight, "noise_summary"))

    # ------------------------------------------------------------------ the call
    def initial_state(self, batch_size: int, device=None):
        """Zeros, shaped as the state ``forward`` takes and returns: [num_layers * directions, B, H] (a tuple of
        those for the LSTM); where the layers' sizes differ, a tuple of one [B, H_l] per layer instead."""
        weight = self.weight_ih_l0
        return self.layout.stacked(self.layout.zeros(batch_size, device or weight.device, state_dtype(weight)))

    def forward(self, input, hx=None, *, drop_output: bool = True):
        x, lengths, unbatched = self.layout.time_major(input, self.weight_ih_l0)
        layers = self.layout.split(hx, x, unbatched)
        if self.noise is not None and self.training:
            self.noise.constrain_()
        final = []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self.directions):
                k = layer * self.directions + direction
                masks = self.layer_masks(k, x)
                x_in = x if direction == 0 else reversed_in_time(x, lengths)
                y, state = self._run(x_in, layers[k], self.layer_parameters(k), masks, lengths)
                outputs.append(y if direction == 0 else reversed_in_time(y, lengths))
                final.append(state)
            x = outputs[0] if self.directions == 1 else torch.cat(outputs, dim=-1)
        y = x.transpose(0, 1) if self.batch_first else x
        if drop_output:
            y = self.drop_output(y)
        state = self.layout.stacked(final, unbatched)
        if isinstance(input, PackedSequence):
            data, batch_sizes = lengths.packed_data(y.transpose(0, 1) if self.batch_first else y)
            return PackedSequence(data, batch_sizes, input.sorted_indices, input.unsorted_indices), state
        return (y.squeeze(1) if unbatched else y), state

    def _run(self, x, state, params, masks, lengths):
        """One layer in one direction: (outputs [T, B, H], its final state, a tuple)."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.bidirectional:
            s += ", bidirectional=True"
        if self.dropout is not None:
            s += f", dropout={self.dropout}"
        return s


class LSTM(RecurrentBase):
    r"""A multi-layer LSTM, as ``torch.nn.LSTM``, with a dropout scheme's masks inside it.

    For each layer and time step, with the scheme's masks z (each one where the scheme drops nothing):

        i_t = sigma(W_ii (x_t * z_x) + b_ii + W_hi (h_{t-1} * z_h) + b_hi)
        f_t = sigma(W_if (x_t * z_x) + b_if + W_hf (h_{t-1} * z_h) + b_hf)
        g_t = tanh(W_ig (x_t * z_x) + b_ig + W_hg (h_{t-1} * z_h) + b_hg)
        o_t = sigma(W_io (x_t * z_x) + b_io + W_ho (h_{t-1} * z_h) + b_ho)
        c_t = f_t * c_{t-1} + i_t * g_t,    h_t = o_t * tanh(c_t)

    and the last layer's output times z_o. Which of these masks a scheme draws, their shapes, how often and with
    which scaling is the scheme's (``vdrnn.nn.Variational``, ``Zaremba``, ``Moon``, ``WeightDrop``, ``Zoneout``,
    ``Semeniuta``, ``Gaussian``, ``Concrete``; docs/api.md); with ``dropout=None`` the module is ``torch.nn.LSTM``
    (at ``torch.nn.LSTM``'s ``dropout=0``).

    Masks follow ``module.training``: drawn afresh at every call in training, none in evaluation (weight scaling; the
    expectation for zoneout). ``vdrnn.nn.fixed_masks`` keeps each sequence's fixed-over-time masks across calls and
    ``vdrnn.nn.mc_predict`` runs MC dropout.

    Args:
        input_size: the number of features of the input x.
        hidden_size: the number of features of the state h; a list of one size per layer gives each layer its own
            (AWD-LSTM's last layer matches the embedding), and then the state is a tuple of one tensor per layer.
        num_layers: the number of stacked layers. Default: 1.
        bias: whether the layers have the biases b_ih and b_hh. Default: True.
        batch_first: input and output as [B, T, features] instead of [T, B, features]; the state keeps
            [num_layers, B, H]. Default: False.
        dropout: a scheme object (``vdrnn.nn.Variational(input=0.3, recurrent=0.2, output=0.3)``), or None.
        bidirectional: a second recurrence over the reversed sequence in every layer, outputs concatenated; each
            direction draws its own masks. Default: False.
        impl: how a recurrence with masks inside it runs: ``"auto"`` (the fused Triton kernels on CUDA, the reference
            loop on the CPU), ``"fast"`` (the kernels) or ``"reference"`` (the loop). Default: ``"auto"``.

    Inputs: input, (h_0, c_0)
        input: [T, B, input_size] ([B, T, input_size] with ``batch_first``), [T, input_size] for one sequence, or a
            ``torch.nn.utils.rnn.PackedSequence``.
        h_0, c_0: [num_layers * directions, B, H] ([num_layers * directions, H] for one sequence). Default: zeros.

    Outputs: output, (h_n, c_n)
        output: [T, B, directions * H] (``batch_first``: [B, T, directions * H]), or a ``PackedSequence``.
        h_n, c_n: [num_layers * directions, B, H]: each layer's final state (each sequence's own, when packed).

    Attributes:
        weight_ih_l[k], weight_hh_l[k], bias_ih_l[k], bias_hh_l[k] (``_reverse`` for the second direction): torch's
            [4H, D], [4H, H], [4H], [4H], gates in the order i, f, g, o, initialized U(-1/sqrt(H), 1/sqrt(H)).
        noise: the scheme's learned parameters (Concrete dropout's p's, Kingma's alphas), or None.

    Example::

        >>> lstm = vdrnn.nn.LSTM(10, 20, num_layers=2, dropout=vdrnn.nn.Variational(input=0.3, recurrent=0.2))
        >>> output, (h_n, c_n) = lstm(torch.randn(5, 3, 10))
    """

    cell = "lstm"
    states = 2

    def __init__(self, input_size: int, hidden_size: int | Sequence[int], num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: Scheme | None = None, bidirectional: bool = False,
                 proj_size: int = 0, impl: str = "auto", device=None, dtype=None):
        if proj_size:
            raise ValueError(f"LSTM(proj_size={proj_size}): projections are not supported; leave proj_size=0")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, impl,
                         device, dtype)

    def _run(self, x, state, params, masks, lengths):
        return lstm_layer(x, state, params, masks, self.impl, self.weight_drop_on_kernels, lengths)


class GRU(RecurrentBase):
    r"""A multi-layer GRU, as ``torch.nn.GRU``, with a dropout scheme's masks inside it.

    For each layer and time step, with the scheme's masks z (tied: one z_x, one z_h for the three gates; untied: one
    per gate):

        r_t = sigma(W_ir (x_t * z_x) + b_ir + W_hr (h_{t-1} * z_h) + b_hr)
        z_t = sigma(W_iz (x_t * z_x) + b_iz + W_hz (h_{t-1} * z_h) + b_hz)
        n_t = tanh(W_in (x_t * z_x) + b_in + r_t * (W_hn (h_{t-1} * z_h) + b_hn))
        h_t = (1 - z_t) * n_t + z_t * h_{t-1}

    The arguments, inputs and outputs are :class:`LSTM`'s, with the state h alone: ``output, h_n = gru(input, h_0)``.
    The schemes that drop the LSTM's cell state (Moon's, zoneout on c_t) and weight drop are refused.
    """

    cell = "gru"
    states = 1

    def _run(self, x, state, params, masks, lengths):
        y, h = gru_layer(x, state[0], params, masks, self.impl, lengths)
        return y, (h,)


class RNN(RecurrentBase):
    r"""A multi-layer Elman RNN, as ``torch.nn.RNN``, with a dropout scheme's masks inside it:

        h_t = tanh(W_ih (x_t * z_x) + b_ih + W_hh (h_{t-1} * z_h) + b_hh)    (relu for ``nonlinearity="relu"``)

    The arguments, inputs and outputs are :class:`GRU`'s, with ``nonlinearity`` (``"tanh"`` or ``"relu"``) as
    torch's. No fused kernel: a recurrence with masks inside it runs the reference loop.
    """

    cell = "rnn"
    states = 1

    def __init__(self, input_size: int, hidden_size: int | Sequence[int], num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: Scheme | None = None, bidirectional: bool = False, impl: str = "auto", device=None,
                 dtype=None):
        if nonlinearity not in NONLINEARITIES:
            raise ValueError(f"RNN(nonlinearity={nonlinearity!r}): choose 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, impl,
                         device, dtype)

    @property
    def mode(self) -> str:
        return f"rnn_{self.nonlinearity}"

    def _run(self, x, state, params, masks, lengths):
        y, h = rnn_layer(x, state[0], params, masks, self.nonlinearity, lengths)
        return y, (h,)


def check_whole(name: str, arg: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}({arg}={value!r}): must be a whole number >= 1")


def check_arguments(name: str, cell: str, input_size, sizes: list, dropout, bidirectional, impl) -> None:
    """The constructor's arguments, each refused with a ValueError that names it and what it may be."""
    for arg, value in (("input_size", input_size), *(("hidden_size", s) for s in sizes)):
        check_whole(name, arg, value)
    if dropout is not None and not isinstance(dropout, Scheme):
        hint = (f"; torch.nn.{name}'s dropout={dropout} between layers is vdrnn.nn.Zaremba(between={dropout})"
                if isinstance(dropout, (int, float)) else "")
        raise ValueError(f"{name}(dropout={dropout!r}): a dropout scheme, e.g. vdrnn.nn.Variational(input=0.3, "
                         f"recurrent=0.2, output=0.3), or None{hint}")
    if dropout is not None and (why := dropout.refuses(cell)):
        raise ValueError(f"{name}(dropout={dropout}): {type(dropout).__name__} cannot run on the {cell.upper()}: {why}")
    if dropout is not None and dropout.learns and bidirectional:
        raise ValueError(f"{name}(dropout={dropout}, bidirectional=True): learned dropout noise is one set of "
                         f"parameters per layer, for one direction; use bidirectional=False or a scheme that learns "
                         f"nothing")
    if impl not in IMPLS:
        raise ValueError(f"{name}(impl={impl!r}): choose one of {', '.join(repr(i) for i in IMPLS)}")


