"""What the cells share: the masked input product, the stock module's weights, and the choice of kernels."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vdrnn import kernels
from vdrnn.dropout import LayerMasks


def uses_kernels(impl: str, x: torch.Tensor) -> bool:
    """``model.impl``: is a masked recurrence on ``x`` meant for the fused kernels (``fast``, or ``auto`` on CUDA
    tensors) rather than the reference loop?"""
    return impl == "fast" or (impl == "auto" and x.is_cuda)


def runs_kernels(impl: str, x: torch.Tensor, cell: str) -> bool:
    """Does a masked recurrence of ``cell`` on ``x`` run the fused kernels: meant for them (``uses_kernels``) and
    able to (CUDA, or Triton's interpreter; ``kernels.kernels_or_fallback`` says once where they cannot)?"""
    return uses_kernels(impl, x) and kernels.kernels_or_fallback(x.device, f"the {cell.upper()} layer")


def one_layer_parameters(module: nn.RNNBase) -> tuple[torch.Tensor, ...]:
    """(W_ih, W_hh, b_ih, b_hh) of a one-layer nn.LSTM / nn.GRU / nn.RNN, as the recurrence functions take them."""
    return module.weight_ih_l0, module.weight_hh_l0, module.bias_ih_l0, module.bias_hh_l0


def masked_linear(v: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None,
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
    return (proj + bias).to(proj.dtype)  # the product's dtype (autocast's), as F.linear's, not promoted by the bias


def at_step(mask: torch.Tensor, t: int) -> torch.Tensor:
    """Step t's slice of a mask drawn fresh per step ([T, B, H]), or the mask itself if fixed over time ([B, H])."""
    return mask[t] if mask.dim() == 3 else mask


def zone(d: torch.Tensor, previous: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Zoneout: ``previous`` where d = 1, ``new`` where d = 0, and d's mix of them for its expectation z."""
    return d * previous + (1 - d) * new


class SingleStateLayer(nn.Module):
    """A one-layer recurrence whose state is h alone (GRU, tanh RNN): ``module``'s stock kernel when unmasked, else
    ``masked_loop``'s recurrence, on the same weights."""

    cell: str
    gates: int

    def __init__(self, module: nn.RNNBase, impl: str):
        super().__init__()
        self.module = module
        self.impl = impl
        self.input_size = module.input_size
        self.hidden_size = module.hidden_size

    def forward(self, x: torch.Tensor, h0: torch.Tensor,
                masks: LayerMasks | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, B, D]; h0 [B, H]; returns (outputs [T, B, H], h_T)."""
        masks = masks or LayerMasks()
        if masks.c is not None or masks.zone_c is not None:
            raise ValueError(f"{type(self).__name__} has no cell state: Moon's c-mask and zoneout on c need an LSTM")
        if masks.w_hh is not None:  # refused rather than silently ignored: AWD's weight drop is for the LSTM
            raise ValueError(f"{type(self).__name__} does not apply a weight-drop mask: AWD's W_hh mask needs an LSTM")
        if masks.recurrent:
            return self.masked_loop(x)(x, h0, self.parameters_tuple(), masks)
        if masks.x is not None:  # an input mask shared by all gates: the stock kernel still applies
            x = x * masks.x.to(x.dtype)
        with torch.autocast(x.device.type, enabled=False):  # fp32 state, as the LSTM layer
            y, h = self.module(x.float(), h0.unsqueeze(0).float())
        return y, h.squeeze(0)

    def initial_state(self, batch: int, device: torch.device | str) -> torch.Tensor:
        """h_0, zeros."""
        return torch.zeros(batch, self.hidden_size, device=device)

    def masked_loop(self, x: torch.Tensor):
        """The function that runs a masked recurrence on ``x``: (x, h0, params, masks) -> (outputs, h_T)."""
        raise NotImplementedError

    def parameters_tuple(self) -> tuple[torch.Tensor, ...]:
        return one_layer_parameters(self.module)
