"""AWD-LSTM's masks: weight drop once per call, locked dropout per sequence, word types per batch."""

from __future__ import annotations

import pytest
import torch

from tests.dropout.common import word_mask
from vdrnn.dropout import Variational, WeightDrop, weight_mask
from vdrnn.dropout.scheme import input_p

B, T = 5, 8


def test_weight_drop_mask_is_one_per_call_and_resampled():
    scheme = WeightDrop(weight=0.5)
    x = torch.randn(T, B, 6)
    first, second = scheme.layer_masks(x, 12, 4, 0).w_hh, scheme.layer_masks(x, 12, 4, 0).w_hh
    # [4H, H], shared by samples and steps, and drawn anew for the next minibatch
    assert first.keep.shape == (48, 12) and not torch.equal(first.keep, second.keep)
    assert first.keep.dtype == torch.bool and (~first.keep).float().mean().item() == pytest.approx(0.5, abs=0.1)
    assert set((first.keep * first.scale).unique().tolist()) == {0.0, 2.0}  # inverted: kept weights scaled by 1/(1-p)


@pytest.mark.parametrize("p", [0.3, 0.5])
def test_a_weight_drop_mask_drops_in_one_pass_into_any_dtype_and_strides(p):
    """WeightMask.apply is W * M / (1-p), written into a float buffer of any dtype and strides (the fused kernels'
    padded fp16 copy of W_hh) as into a new tensor, and differentiable in W (the reference path's dropped W_hh)."""
    mask = weight_mask((8, 6), p, torch.empty(0))
    w = torch.randn(8, 6, requires_grad=True)
    dropped = mask.apply(w)
    torch.testing.assert_close(dropped, w * mask.keep / (1 - p))
    buffer = torch.full((8, 10), 7.0, dtype=torch.float16)
    mask.apply(w.detach(), out=buffer[:, :6])
    torch.testing.assert_close(buffer[:, :6], (w * mask.keep / (1 - p)).half())
    assert torch.all(buffer[:, 6:] == 7)
    dropped.sum().backward()
    torch.testing.assert_close(w.grad, mask.keep / (1 - p))


def test_embedding_mask_per_batch_and_locked_masks_per_sequence():
    tokens = torch.randint(0, 3, (40, B))
    mask = word_mask(tokens, 3, dropout=0.5, per="batch")
    for word in range(3):  # one draw per word type, shared by every sequence of the batch
        assert mask[tokens == word].unique().numel() == 1
    locked = WeightDrop(input=0.5).layer_masks(torch.randn(T, B, 6), 12, 4, 0).x
    assert locked.shape == (B, 6) and not all(torch.equal(locked[0], locked[b]) for b in range(1, B))
    shared = WeightDrop(input=0.5, per="batch")
    assert shared.layer_masks(torch.randn(T, B, 6), 12, 4, 0).x.shape == (1, 6)
    assert WeightDrop(weight=0.5).shares_draws_across_batch()  # one W_hh mask serves every sequence


def test_between_applies_to_layers_above_the_first():
    scheme = WeightDrop(input=0.65, between=0.3)
    assert (input_p(scheme, 0), input_p(scheme, 1), input_p(scheme, 2)) == (0.65, 0.3, 0.3)
    assert input_p(Variational(input=0.5), 1) == 0.5
