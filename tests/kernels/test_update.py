"""The graphed steps' update, the clip folded into SGD's or averaged SGD's step (vdrnn.kernels.update): the same
norm, weights and running means as clip_grad_norm_ followed by torch's optimizer step."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.triton_setup import DEVICE, exact_fp32  # noqa: F401 (autouse: IEEE fp32 products on a GPU)
from vdrnn.kernels.update import clipped_update
from vdrnn.training.optim import start_averaging_state

SHAPES = [(5, 3), (7,), (4, 4), (3000,)]  # the last spans programs (update.BLOCK values each) in the interpreter too


def problem(steps: int = 3):
    torch.manual_seed(0)
    start = [torch.randn(s, device=DEVICE) for s in SHAPES]
    grads = [[torch.randn(s, device=DEVICE) * 3 for s in SHAPES] for _ in range(steps)]
    return start, grads


def optimizer_for(params, kind: str) -> torch.optim.Optimizer:
    """Two parameter groups, L2 decay in one (as make_optimizer builds them for learned dropout variances)."""
    groups = [{"params": params[:2], "weight_decay": 0.1}, {"params": params[2:]}]
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=0.7)
    # lambd, t0 and alpha away from AWD's 0, 0 and 0.75's no-op: every term of torch's schedule counts.
    return torch.optim.ASGD(groups, lr=0.7, lambd=0.05, t0=1.0, alpha=0.6)


@pytest.mark.parametrize("kind", ["sgd", "asgd"])
@pytest.mark.parametrize("clip", [1e-3, 1e3])  # clipping, and a norm under the clip
def test_clipped_update_is_clip_grad_norm_then_the_optimizers_step(kind, clip):
    start, grads = problem()
    lrs = [0.7, 0.3, 0.5]  # AWD's lr follows each minibatch's length: a change of lr between steps
    results = []
    for folded in (False, True):
        params = [torch.nn.Parameter(w.clone()) for w in start]
        optimizer = optimizer_for(params, kind)
        if folded and kind == "asgd":
            start_averaging_state(optimizer)  # as make_optimizer does with capturable=True
        norms = []
        for lr, step_grads in zip(lrs, grads, strict=True):
            for group in optimizer.param_groups:
                group["lr"] = lr
            for param, grad in zip(params, step_grads, strict=True):
                param.grad = grad.clone()
            if folded:
                norms.append(clipped_update(optimizer, clip))
            else:
                norms.append(torch.nn.utils.clip_grad_norm_(params, clip))
                optimizer.step()
        state = [[optimizer.state[p][k] for k in ("ax", "eta", "mu", "step")] for p in params] if kind == "asgd" else []
        results.append((torch.stack(norms), [p.detach() for p in params], state))
    (norms, weights, state), (folded_norms, folded_weights, folded_state) = results
    torch.testing.assert_close(folded_norms, norms)
    for got, want, was in zip(folded_weights, weights, start, strict=True):
        torch.testing.assert_close(got, want)
        assert not torch.equal(got, was)
    for got, want in zip(folded_state, state, strict=True):  # ASGD: running means and the schedule
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a.float(), b.float().to(a.device))


def test_the_gradients_are_left_unclipped_and_a_parameter_without_one_is_left_alone():
    start, grads = problem(steps=1)
    params = [torch.nn.Parameter(w.clone()) for w in start]
    for param, grad in zip(params[1:], grads[0][1:], strict=True):
        param.grad = grad.clone()
    clipped_update(torch.optim.SGD(params, lr=1.0), 1e-3)
    assert torch.equal(params[0], start[0]) and params[0].grad is None
    assert all(torch.equal(p.grad, g) for p, g in zip(params[1:], grads[0][1:], strict=True))


@pytest.mark.parametrize("make,match", [
    (lambda ps: torch.optim.Adam(ps), "not Adam's"),
    (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), "no momentum"),
    (lambda ps: torch.optim.SGD(ps, lr=0.1, maximize=True), "no maximize"),
    (lambda ps: torch.optim.ASGD(ps, lr=0.1), "capturable=True"),  # its state would be made at its first step
])
def test_what_it_cannot_step_is_refused(make, match):
    param = torch.nn.Parameter(torch.ones(2, device=DEVICE))
    param.grad = torch.ones(2, device=DEVICE)
    with pytest.raises(ValueError, match=match):
        clipped_update(make([param]), 1.0)


def test_awds_step_on_the_kernels_with_the_folded_update_is_the_eager_step(tmp_path, tiny_corpus):
    """AWD's step as its graphs record it (weight drop on the fused kernels, the clip folded into the update) against
    the eager step (the dropped W_hh on the reference LSTM, clip_grad_norm_ then torch's SGD and averaged SGD): the
    same losses, gradient norms, weights and running means through NT-ASGD's switch. Here without the graphs, in
    Triton's interpreter on a CPU; tests/tasks/lm/test_awd.py replays them on a GPU."""
    from tests.helpers import TINY, composed, trainer_for
    from vdrnn.config import to_container
    from vdrnn.tasks.lm.data import variable_minibatches

    tiny = [a for a in TINY if not a.startswith(("model=", "model.hidden_size", "model.impl"))]
    results = []
    for fast in (True, False):
        raw = to_container(composed("experiment=awd_ptb", *tiny, "model.hidden_size=16", "model.embedding_size=8",
                                    f"data.root={tiny_corpus}", f"device={DEVICE.type}", "trainer.cuda_graph=off",
                                    f"model.impl={'fast' if fast else 'reference'}"))
        t = trainer_for(raw, tmp_path / str(fast))
        # IEEE fp32 on a GPU too (setting up turned TF32 on): the kernels and cuDNN differ by rounding only.
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        t.optimization.fold_clip = fast  # as a recorded graph steps
        torch.manual_seed(5)
        batches = list(variable_minibatches(t.train_data, t.cfg.data.bptt))[:3]
        t.model.train()
        t.next_row, t.carried = 0, t.model.initial_state(t.cfg.data.batch_size, t.device)
        steps = [t.advance(inputs, targets, 30.0) for inputs, targets in batches]
        t.optimization.switch_to_averaging()
        # Both with averaged SGD's state made at the switch, as on CUDA (capturable): eta from the lr then, not from
        # the first averaged step's (lazily, on a CPU).
        start_averaging_state(t.optimization.optimizer)
        steps += [t.advance(inputs, targets, 30.0) for inputs, targets in batches]
        ax = [t.optimization.optimizer.state[p]["ax"] for p in t.model.parameters()]
        results.append((torch.tensor([[loss.item(), norm.item()] for loss, norm in steps]),
                        [p.detach() for p in t.model.parameters()], ax))
        t.cleanup()
    (f_steps, f_weights, f_ax), (e_steps, e_weights, e_ax) = results
    torch.testing.assert_close(f_steps, e_steps, rtol=1e-4, atol=1e-5)
    for f, e in zip(f_weights + f_ax, e_weights + e_ax, strict=True):
        torch.testing.assert_close(f, e, rtol=1e-4, atol=1e-5)
