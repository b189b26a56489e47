"""Replaying steps from CUDA graphs, one per input shape (vdrnn.training.graphs), and what makes a step replayable:
averaged SGD's state made up front, and a snapshot of the weights and optimizer that is put back in place."""

from __future__ import annotations

import pytest
import torch

from vdrnn.training import graphs
from vdrnn.training.optim import start_averaging_state

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")


def test_a_call_is_keyed_by_its_shapes_and_host_values_and_rebuilt_from_its_buffers():
    state = [(torch.zeros(2, 3), torch.zeros(2, 3))]
    args = (torch.zeros(5, 2, dtype=torch.long), state, 0.5)
    key = graphs._shape_of(args)
    assert key == graphs._shape_of((torch.ones(5, 2, dtype=torch.long), state, 0.5))
    assert key != graphs._shape_of((torch.zeros(6, 2, dtype=torch.long), state, 0.5))  # another length
    assert key != graphs._shape_of((torch.zeros(5, 2, dtype=torch.long), state, 0.25))  # another step lr
    buffers = [torch.full(t.shape, 7.0) for t in graphs.tensors_of(args)]
    rebuilt = graphs._rebuild(args, iter(buffers))
    assert rebuilt[0] is buffers[0] and rebuilt[1][0][1] is buffers[2] and rebuilt[2] == 0.5
    cloned = graphs._clone(rebuilt)
    assert torch.equal(cloned[1][0][0], buffers[1]) and cloned[1][0][0] is not buffers[1]


def test_averaged_sgds_state_made_up_front_is_the_one_it_makes_at_its_first_step():
    torch.manual_seed(0)
    lazy = [torch.nn.Parameter(torch.randn(3, 2)) for _ in range(2)]
    eager = [torch.nn.Parameter(p.detach().clone()) for p in lazy]
    a = torch.optim.ASGD(lazy, lr=3.0, t0=0, lambd=0.0, weight_decay=1e-3)
    b = torch.optim.ASGD(eager, lr=3.0, t0=0, lambd=0.0, weight_decay=1e-3)
    start_averaging_state(b)
    made = {k: v.clone() for k, v in b.state[eager[0]].items()}
    for lr in (3.0, 1.5, 2.0):  # AWD's lr changes with every minibatch length
        for p, q in zip(lazy, eager, strict=True):
            p.grad = torch.randn(3, 2)
            q.grad = p.grad.clone()
        for optimizer in (a, b):
            optimizer.param_groups[0]["lr"] = lr
            optimizer.step()
    for p, q in zip(lazy, eager, strict=True):
        assert torch.equal(p, q)
        assert a.state[p].keys() == b.state[q].keys()
        assert all(torch.equal(a.state[p][k], b.state[q][k]) for k in a.state[p])
    assert made["step"].item() == 0 and made["eta"].item() == 3.0 and made["mu"].item() == 1
    assert not made["ax"].any()


@cuda
def test_each_shape_is_recorded_once_and_replays_the_eager_numbers_with_fresh_masks():
    weight = torch.randn(4, 4, device="cuda")

    def fn(x, scale):
        return x @ weight * scale * (torch.rand_like(x) > 0.5), x.sum()

    def keep():  # the warm-up calls draw masks too: put the generator back after them
        rng = torch.cuda.get_rng_state()
        return lambda: torch.cuda.set_rng_state(rng)

    replayed = graphs.ShapeGraphs(fn, keep=keep)
    lengths = (3, 5, 3, 5, 3)
    torch.manual_seed(3)
    graphed = [replayed(torch.full((n, 4), i + 1.0, device="cuda"), 2.0) for i, n in enumerate(lengths)]
    assert len(replayed) == 2
    torch.manual_seed(3)
    eager = [fn(torch.full((n, 4), i + 1.0, device="cuda"), 2.0) for i, n in enumerate(lengths)]
    for (g, g_sum), (e, e_sum) in zip(graphed, eager, strict=True):
        torch.testing.assert_close(g, e)  # the same masks: drawn from the generator's stream as eager
        assert g_sum.item() == e_sum.item()
    assert not torch.equal(graphed[0][0] != 0, graphed[2][0] != 0)  # fresh masks at every replay
    replayed(torch.ones(3, 4, device="cuda"), 2.0, key="another")
    assert len(replayed) == 1  # a new key drops the graphs recorded under the old one


@cuda
def test_a_carried_state_lives_in_buffers_every_graph_shares():
    """With carry, each replay reads the state from the buffers the graph before wrote it to, whatever their shapes:
    the chain of states is eager's, the state returned is those buffers, and a state from elsewhere is copied in."""
    weight = torch.randn(3, 3, device="cuda") / 3

    def fn(x, state):
        h = torch.tanh(x.sum(0) + state[0] @ weight)
        return x.mean(), [h]

    replayed = graphs.ShapeGraphs(fn, carry=(1, 1))
    inputs = [torch.randn(n, 2, 3, device="cuda") for n in (3, 5, 3, 4, 5)]
    state, eager = [torch.ones(2, 3, device="cuda")], [torch.ones(2, 3, device="cuda")]
    for x in inputs:
        mean, state = replayed(x, state)
        e_mean, eager = fn(x, eager)
        torch.testing.assert_close(state[0], eager[0])
        assert mean.item() == e_mean.item()
    assert len(replayed) == 3 and state[0] is replayed.carried[0]
    _, fresh = replayed(inputs[0], [torch.zeros(2, 3, device="cuda")])  # a new stream starts from its own state
    torch.testing.assert_close(fresh[0], fn(inputs[0], [torch.zeros(2, 3, device="cuda")])[1][0])


def test_an_average_made_up_front_is_not_read_before_the_first_averaged_step(tmp_path):
    """Right after NT-ASGD's switch, ax is zeros: the weights validated, kept and evaluated stay the raw ones until
    averaged SGD has stepped (as with torch's lazily made state, which has no ax until then)."""
    from vdrnn.training.evaluation import load_evaluation_weights
    from vdrnn.training.optim import has_average

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.ASGD(model.parameters(), lr=1.0, t0=0, lambd=0.0)
    start_averaging_state(optimizer)
    raw = [p.detach().clone() for p in model.parameters()]
    payload = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "averaging": True}
    assert not any(has_average(s) for s in optimizer.state.values())
    load_evaluation_weights(model, payload, tmp_path / "last.pt")
    assert all(torch.equal(p, r) for p, r in zip(model.parameters(), raw, strict=True))
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    assert all(has_average(s) for s in optimizer.state.values())
