"""AWD-LSTM's masks: weight drop once per minibatch, locked dropout per sample, word types per batch."""

from __future__ import annotations

import pytest
import torch

from vdrnn.dropout import DropoutConfig, make_dropout, weight_drop, words_of

B, T = 5, 8


def test_weight_drop_mask_is_one_per_minibatch_and_resampled():
    scheme = make_dropout(DropoutConfig(scheme="awd", weight=0.5))
    x = torch.randn(T, B, 6)
    first, second = scheme.layer_masks(x, 12, 4, 0).w_hh, scheme.layer_masks(x, 12, 4, 0).w_hh
    # [4H, H], shared by samples and steps, and drawn anew for the next minibatch
    assert first.keep.shape == (48, 12) and not torch.equal(first.keep, second.keep)
    assert first.keep.dtype == torch.bool and (~first.keep).float().mean().item() == pytest.approx(0.5, abs=0.1)
    assert set((first.keep * first.scale).unique().tolist()) == {0.0, 2.0}  # inverted: kept weights scaled by 1/(1-p)


@pytest.mark.parametrize("p", [0.3, 0.5])
def test_a_weight_drop_mask_drops_in_one_pass_into_any_dtype_and_strides(p):
    """WeightDrop.apply is W * M / (1-p), written into a float buffer of any dtype and strides (the fused kernels'
    padded fp16 copy of W_hh) as into a new tensor, and differentiable in W (the reference path's dropped W_hh)."""
    mask = weight_drop((8, 6), p, torch.empty(0))
    w = torch.randn(8, 6, requires_grad=True)
    dropped = mask.apply(w)
    torch.testing.assert_close(dropped, w * mask.keep / (1 - p))
    buffer = torch.full((8, 10), 7.0, dtype=torch.float16)
    mask.apply(w.detach(), out=buffer[:, :6])
    torch.testing.assert_close(buffer[:, :6], (w * mask.keep / (1 - p)).half())
    assert torch.all(buffer[:, 6:] == 7)
    dropped.sum().backward()
    torch.testing.assert_close(w.grad, mask.keep / (1 - p))


def test_embedding_mask_per_batch_and_locked_masks_per_sample():
    scheme = make_dropout(DropoutConfig(scheme="awd", embedding=0.5, input=0.5, embedding_mask="batch"))
    tokens = torch.randint(0, 3, (40, B))
    mask = words_of(scheme.word_type_table(tokens.shape[1], 3, tokens), tokens)
    for word in range(3):  # one draw per word type, shared by every sequence of the batch
        assert mask[tokens == word].unique().numel() == 1
    locked = scheme.layer_masks(torch.randn(T, B, 6), 12, 4, 0).x
    assert locked.shape == (B, 6) and not all(torch.equal(locked[0], locked[b]) for b in range(1, B))
    shared = make_dropout(DropoutConfig(scheme="awd", input=0.5, locked_mask="batch"))
    assert shared.layer_masks(torch.randn(T, B, 6), 12, 4, 0).x.shape == (1, 6)


def test_hidden_probability_applies_to_layers_above_the_first():
    cfg = DropoutConfig(scheme="awd", input=0.65, hidden=0.3)
    assert (cfg.input_p(0), cfg.input_p(1), cfg.input_p(2)) == (0.65, 0.3, 0.3)
    assert DropoutConfig(scheme="variational", input=0.5).input_p(1) == 0.5
