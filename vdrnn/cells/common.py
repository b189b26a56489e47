"""What the cells share: the masked input product, the stock kernel, sequences of several lengths, and the choice of
kernels."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence

from vdrnn import kernels
from vdrnn.dropout import LayerMasks


def uses_kernels(impl: str, x: torch.Tensor) -> bool:
    """``impl``: is a masked recurrence on ``x`` meant for the fused kernels (``fast``, or ``auto`` on CUDA tensors)
    rather than the reference loop? Never in float64, which the kernels do not compute in (gradcheck's dtype)."""
    return x.dtype != torch.float64 and (impl == "fast" or (impl == "auto" and x.is_cuda))


def runs_kernels(impl: str, x: torch.Tensor, cell: str) -> bool:
    """Does a masked recurrence of ``cell`` on ``x`` run the fused kernels: meant for them (``uses_kernels``) and
    able to (CUDA, or Triton's interpreter; ``kernels.kernels_or_fallback`` says once where they cannot)?"""
    return uses_kernels(impl, x) and kernels.kernels_or_fallback(x.device, f"the {cell.upper()} layer")


def state_dtype(t: torch.Tensor) -> torch.dtype:
    """What a recurrence keeps its state and gate sums in: fp32, or float64 for float64 inputs."""
    return torch.promote_types(t.dtype, torch.float32)


def masked_linear(v: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, mask: torch.Tensor | None,
                  per_gate: bool) -> torch.Tensor:
    """W (v * z) + b for every gate of a cell at once: v [..., B, D] -> [..., B, G*H].

    ``mask`` is None, broadcastable to v (one mask shared by all gates: [B, D] fixed over time or [T, B, D] fresh per
    step), or with ``per_gate`` a [B, G, D] stack in which gate k (rows k*H..(k+1)*H of W) sees v * z[:, k] (Gal's
    untied weights, eq. 5). G comes from the mask. The fast paths' twin is :func:`vdrnn.kernels.common.input_product`.
    """
    if mask is None:
        return F.linear(v, weight, bias)
    if not per_gate:
        return F.linear(v * mask.to(v.dtype), weight, bias)
    gates = mask.shape[-2]
    masked = v.unsqueeze(-2) * mask.to(v.dtype)  # [..., B, 1, D] * [B, G, D] -> [..., B, G, D]
    per_gate_weight = weight.view(gates, -1, weight.shape[1])  # [G, H, D]
    proj = torch.einsum("...gd,ghd->...gh", masked, per_gate_weight).flatten(-2)
    return proj if bias is None else (proj + bias).to(proj.dtype)  # the product's dtype (autocast's), as F.linear's


def at_step(mask: torch.Tensor, t: int) -> torch.Tensor:
    """Step t's slice of a mask drawn fresh per step ([T, B, H]), or the mask itself if fixed over time ([B, H])."""
    return mask[t] if mask.dim() == 3 else mask


def zone(d: torch.Tensor, previous: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Zoneout: ``previous`` where d = 1, ``new`` where d = 0, and d's mix of them for its expectation z."""
    return d * previous + (1 - d) * new


@dataclass(frozen=True)
class Lengths:
    """The lengths of a batch of sequences padded to one length (from a ``PackedSequence``): the order in which
    torch's packed kernels take them (``sorted_indices``, longest first, and back: ``unsorted_indices``), and, for the
    masked recurrences, which steps lie past each sequence's end (``hold``)."""

    lengths: torch.Tensor  # [B] on the CPU, in the batch's own order
    sorted_indices: torch.Tensor
    unsorted_indices: torch.Tensor

    def hold(self, like: torch.Tensor, hidden_size: int) -> torch.Tensor:
        """[T, B, H] on ``like``'s device: 1 at the steps past each sequence's end, 0 before."""
        steps = like.shape[0]
        past = torch.arange(steps).unsqueeze(1) >= self.lengths.unsqueeze(0)
        return past.to(like.device, torch.float32).unsqueeze(-1).expand(steps, -1, hidden_size)

    def packed_data(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, B, ...] as torch's packed kernels read it: (data, batch_sizes), the batch in ``sorted_indices``
        order."""
        packed = pack_padded_sequence(x.index_select(1, self.sorted_indices.to(x.device)),
                                      self.lengths[self.sorted_indices], enforce_sorted=True)
        return packed.data, packed.batch_sizes


def held(masks: LayerMasks, hold: torch.Tensor, cell_state: bool) -> LayerMasks:
    """``masks`` with every unit holding its value past its sequence's end (``hold`` = 1, as a zoneout draw of 1),
    so that the final state is each sequence's own last one, whatever the padding after it."""
    def merge(d):
        return hold if d is None else hold + (1 - hold) * d

    return replace(masks, zone_h=merge(masks.zone_h), zone_c=merge(masks.zone_c) if cell_state else masks.zone_c)


StockKernel = Callable[..., tuple[torch.Tensor, ...]]  # torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu


def stock(kernel: StockKernel, x: torch.Tensor, hx: tuple[torch.Tensor, ...], params: tuple[torch.Tensor, ...],
          lengths: Lengths | None) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """One layer on the stock kernel (cuDNN on CUDA), with weights passed as arguments: x [T, B, D], ``hx`` each
    [B, H] -> (outputs [T, B, H], the final states, each [B, H]). ``params`` (W_ih, W_hh[, b_ih, b_hh]). With
    ``lengths``, torch's packed kernel reads each sequence to its end and its padded outputs are zero.

    The recurrence runs in fp32 (float64 for float64 inputs) even under autocast: cuDNN in bf16 would keep c_t in bf16
    too, and it is no faster (docs/speed.md). A weight-dropped W_hh is a new tensor every call, which cuDNN copies
    into its own layout: that copy is inherent and its warning expected.
    """
    dtype = state_dtype(x)
    params = [p.to(dtype) for p in params]
    hx = tuple(h.unsqueeze(0).to(dtype) for h in hx)
    hx = hx if len(hx) > 1 else hx[0]
    # train=True when gradients are wanted: cuDNN's backward needs the workspace its training-mode forward keeps.
    train = torch.is_grad_enabled()
    biased = len(params) == 4
    with warnings.catch_warnings(), torch.autocast(x.device.type, enabled=False):
        warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")
        if lengths is None:
            y, *states = kernel(x.to(dtype), hx, params, biased, 1, 0.0, train, False, False)
            return y, tuple(s.squeeze(0) for s in states)
        data, batch_sizes = lengths.packed_data(x.to(dtype))
        order = lengths.sorted_indices.to(x.device)
        hx = tuple(h.index_select(1, order) for h in hx) if isinstance(hx, tuple) else hx.index_select(1, order)
        y, *states = kernel(data, batch_sizes, hx, params, biased, 1, 0.0, train, False)
    padded = torch.nn.utils.rnn.pad_packed_sequence(
        torch.nn.utils.rnn.PackedSequence(y, batch_sizes), total_length=x.shape[0])[0]
    back = lengths.unsorted_indices.to(x.device)
    return padded.index_select(1, back), tuple(s.squeeze(0).index_select(0, back) for s in states)
