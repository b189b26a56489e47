"""vdrnn.nn.Embedding (word-type dropout) and LockedDropout: one draw per word type / per sequence, in training only,
kept inside fixed_masks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vdrnn.nn as vnn

V, E, T, B = 11, 3, 30, 5


def test_embedding_is_torchs_without_dropout_and_in_evaluation():
    torch.manual_seed(0)
    ours = vnn.Embedding(V, E, dropout=0.5)
    stock = nn.Embedding(V, E)
    stock.load_state_dict(ours.state_dict())
    tokens = torch.randint(0, V, (T, B))
    assert torch.equal(ours.eval()(tokens), stock(tokens))
    assert not torch.equal(ours.train()(tokens), stock(tokens))
    undropped = vnn.Embedding(V, E).train()
    undropped.load_state_dict(stock.state_dict())
    assert torch.equal(undropped(tokens), stock(tokens)) and list(undropped.state_dict()) == ["weight"]


@pytest.mark.parametrize("batch_first", [False, True])
def test_every_occurrence_of_a_word_type_in_a_sequence_shares_one_draw(batch_first):
    torch.manual_seed(0)
    embedding = vnn.Embedding(V, E, dropout=0.5, batch_first=batch_first).train()
    nn.init.ones_(embedding.weight)
    tokens = torch.randint(0, 4, (T, B))
    out = embedding(tokens.t() if batch_first else tokens)
    out = out.transpose(0, 1) if batch_first else out  # [T, B, E]
    for b in range(B):
        for word in tokens[:, b].unique():
            assert out[tokens[:, b] == word, b].unique().numel() == 1  # kept (2.0) or dropped (0.0) everywhere
    assert set(out.unique().tolist()) == {0.0, 2.0}


def test_per_batch_word_types_share_a_draw_across_sequences_and_gaussian_noise_is_real_valued():
    torch.manual_seed(0)
    tokens = torch.randint(0, 4, (T, B))
    shared = vnn.Embedding(V, 1, dropout=0.5, per="batch").train()
    nn.init.ones_(shared.weight)
    out = shared(tokens)
    assert all(out[tokens == w].unique().numel() == 1 for w in tokens.unique())
    gaussian = vnn.Embedding(V, 1, dropout=0.5, noise="gaussian").train()
    nn.init.ones_(gaussian.weight)
    assert gaussian(torch.arange(V).repeat(400, 1).t()).unique().numel() > 1000


def test_locked_dropout_is_one_mask_per_sequence_for_every_step():
    torch.manual_seed(0)
    locked = vnn.LockedDropout(0.5).train()
    y = locked(torch.ones(T, 400, E))
    assert all(torch.equal(y[t], y[0]) for t in range(T))
    assert (y[0] == 0).float().mean().item() == pytest.approx(0.5, abs=0.05) and set(y.unique().tolist()) == {0, 2}
    batch_first = vnn.LockedDropout(0.5, batch_first=True).train()(torch.ones(400, T, E))
    assert all(torch.equal(batch_first[:, t], batch_first[:, 0]) for t in range(T))
    assert torch.equal(locked.eval()(y), y)  # evaluation: as it is


def test_fixed_masks_keep_the_word_types_and_locked_masks_across_calls():
    embedding, locked = vnn.Embedding(V, E, dropout=0.5).train(), vnn.LockedDropout(0.5).train()
    model = nn.Sequential(embedding, locked)
    tokens = torch.randint(0, V, (T, B))
    with vnn.fixed_masks(model):
        assert torch.equal(model(tokens), model(tokens))
        with pytest.raises(ValueError, match="every call must have the batch of the first \\(5 sequences"):
            model(tokens[:, :2])
    assert not torch.equal(model(tokens), model(tokens))


@pytest.mark.parametrize("call, message", [
    (lambda: vnn.Embedding(V, E, dropout=1.0), r"Embedding\(dropout=1.0\): a probability must be a number in \[0, 1\)"),
    (lambda: vnn.Embedding(V, E, dropout=0.1, per="word"), r"Embedding\(per='word'\): choose 'sequence'"),
    (lambda: vnn.Embedding(V, E, dropout=0.1, noise="uniform"), r"Embedding\(noise='uniform'\)"),
    (lambda: vnn.LockedDropout(-0.5), r"LockedDropout\(dropout=-0.5\)"),
    (lambda: vnn.LockedDropout(0.5).train()(torch.ones(3, 4)), "must be \\[T, B, D\\]"),
])
def test_bad_arguments_are_value_errors_that_name_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()
