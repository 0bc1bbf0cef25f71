"""Tensor.register_post_accumulate_grad_hook, against PyTorch: the hook sees the
accumulated .grad, once per backward, as soon as the walk has every contribution to
the leaf (so it runs before the rest of the backward, in PyTorch's order)."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def _run(lib, accumulate_twice=False):
    rng = np.random.default_rng(0)
    T = lambda a: lib.tensor(a, requires_grad=True)  # noqa: E731
    w1, w2 = T(rng.standard_normal((3, 4))), T(rng.standard_normal((4, 2)))
    b = T(rng.standard_normal(2))
    x = lib.tensor(rng.standard_normal((5, 3)))
    events = []
    for name, p in (("w1", w1), ("w2", w2), ("b", b)):
        p.register_post_accumulate_grad_hook(
            lambda t, name=name: events.append((name, t.grad.detach().numpy().copy())))
    h = x @ w1
    h.register_hook(lambda g: events.append(("h", None)))  # runs mid-walk
    y = (h.tanh() @ w2 + b) * (b.sum())  # b reaches the output twice
    loss = (y * y).sum()
    loss.backward(retain_graph=accumulate_twice)
    if accumulate_twice:
        loss.backward()
    return events, (w1.grad.numpy(), w2.grad.numpy(), b.grad.numpy())


@pytest.mark.parametrize("twice", [False, True])
def test_post_accumulate_hooks_match_torch(twice):
    ours, ours_grads = _run(tg, twice)
    theirs, their_grads = _run(torch, twice)
    assert [n for n, _ in ours] == [n for n, _ in theirs]  # same order: w2 and b before h
    for (_, a), (_, b) in zip(ours, theirs):
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-12)
    for a, b in zip(ours_grads, their_grads):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_post_accumulate_hook_handle_and_errors():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    h = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().copy()))
    (w * w).sum().backward()
    h.remove()
    (w * w).sum().backward()
    assert len(seen) == 1 and np.allclose(seen[0], [2.0, 4.0])
    with pytest.raises(RuntimeError, match="non-leaf"):
        (w * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        tg.tensor([1.0]).register_post_accumulate_grad_hook(lambda t: None)


def test_backward_with_inputs_runs_the_hook():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    v = tg.tensor([3.0], requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().copy()))
    tg.backward((w * v).sum(), inputs=[w])
    assert len(seen) == 1 and np.allclose(seen[0], [3.0, 3.0]) and v.grad is None
