"""AWD-LSTM's masks: weight drop once per minibatch, locked dropout per sample, word types per batch."""

from __future__ import annotations

import pytest
import torch

from vdrnn.dropout import DropoutConfig, make_dropout, words_of

B, T = 5, 8


def test_weight_drop_mask_is_one_per_minibatch_and_resampled():
    scheme = make_dropout(DropoutConfig(scheme="awd", weight=0.5))
    x = torch.randn(T, B, 6)
    first, second = scheme.layer_masks(x, 12, 4, 0).w_hh, scheme.layer_masks(x, 12, 4, 0).w_hh
    assert first.shape == (48, 12) and not torch.equal(first, second)  # [4H, H], shared by samples and steps
    assert (first == 0).float().mean().item() == pytest.approx(0.5, abs=0.1)
    assert set(first.unique().tolist()) == {0.0, 2.0}  # inverted: kept weights scaled by 1/(1-p)


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
