"""In-place ops through views, as PyTorch: views share the base's version counter and
history; an in-place op on a view rewrites the base's history so that gradients
reach everything that went into it (first and second order); an in-place op on a
view of a leaf that requires grad raises. Every case runs in tapegrad and in
PyTorch and compares values and gradients."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")

X = [0.5, -1.25, 2.0, 0.75]
W = [1.5, -0.5, 2.5]


def _programs():
    def mul_slice(lib, x, w):
        y = x * 1
        y[1:].mul_(w)
        return y

    def view_then_row(lib, x, w):
        y = x * 1
        y.view(2, 2)[0].add_(w[:2])
        return y

    def two_ops_on_one_view(lib, x, w):
        y = x * 2
        v = y[1:]
        v.mul_(w)
        v.add_(1.0)
        return y * v.sum()

    def setitem_through_view(lib, x, w):
        y = x.sin()
        v = y[1:]
        v[0] = w[0] * 3
        return y

    def view_of_view(lib, x, w):
        y = x.tanh() * 1
        v = y.view(2, 2)[:, 1:]
        v.mul_(w[1:].reshape(2, 1))
        return y * y

    def base_without_grad(lib, x, w):
        y = lib.zeros(4, dtype=x.dtype)
        y[1:].add_(w)
        return y * x

    def base_used_before(lib, x, w):
        y = x * 3
        z = y.exp()  # saves its output, not y: y may change
        y[:2].mul_(w[:2])
        return y * z

    def views_made_before(lib, x, w):
        y = x * 1
        head, tail = y[:2], y[1:]
        y.mul_(w[0])    # the base written: both views' history follows
        tail.mul_(w)    # a sibling written: head's history follows
        return head * tail[:2]

    return [mul_slice, view_then_row, two_ops_on_one_view, setitem_through_view, view_of_view,
            base_without_grad, base_used_before, views_made_before]


def _run(lib, program, dtype):
    if lib is tg:
        x = tg.tensor(np.array(X, dtype), requires_grad=True)
        w = tg.tensor(np.array(W, dtype), requires_grad=True)
    else:
        x = torch.tensor(np.array(X, dtype), requires_grad=True)
        w = torch.tensor(np.array(W, dtype), requires_grad=True)
    y = program(lib, x, w)
    loss = (y * y).sum()
    gx, gw = (tg.grad if lib is tg else torch.autograd.grad)(loss, (x, w), create_graph=True)
    # second order: the gradient of a function of the first-order gradients
    ggx, ggw = (tg.grad if lib is tg else torch.autograd.grad)((gx * gx).sum() + (gw * gw).sum(),
                                                               (x, w))
    return [np.asarray(t.detach().numpy()) for t in (y, gx, gw, ggx, ggw)]


@pytest.mark.parametrize("program", _programs(), ids=lambda p: p.__name__)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_in_place_through_views_matches_torch(program, dtype):
    ours, theirs = _run(tg, program, dtype), _run(torch, program, dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for name, a, b in zip(("value", "dx", "dw", "d2x", "d2w"), ours, theirs):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=name)


def test_in_place_on_a_view_of_a_leaf_that_requires_grad_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="mul_: a view of a leaf Variable that requires grad"):
        x[0:1].mul_(3)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        x.view(2)[0] = 5.0
    with tg.no_grad():  # allowed without grad mode, as PyTorch (an optimizer's update)
        x[0:1].mul_(3)
    assert x.tolist() == [3.0, 2.0]


def test_the_view_is_rederived_from_the_new_base():
    """After the in-place op the view's own history runs through the base's new one,
    so a later op on the view differentiates to what went into the base."""
    for lib in (tg, torch):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = lib.tensor([4.0, 5.0], requires_grad=True)
        y = x * 1
        v = y[1:]
        v.mul_(w)
        (v * v).sum().backward()
        if lib is tg:
            ours = (x.grad.numpy().copy(), w.grad.numpy().copy())
        else:
            np.testing.assert_allclose(ours[0], x.grad.numpy())
            np.testing.assert_allclose(ours[1], w.grad.numpy())


def _detached_writes(lib):
    """Every kind of in-place write into ``x.detach()`` (and views of it), and what
    ``x`` shows after each."""
    x = lib.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    d = x.detach()
    seen = []
    for write in (lambda: d.__setitem__(0, 5.0), lambda: d[1:3].mul_(2),
                  lambda: d.add_(1), lambda: d.view(2, 2)[1].fill_(7.0),
                  lambda: d.copy_(lib.tensor([4.0, 3.0, 2.0, 1.0])), lambda: d.zero_()):
        write()
        seen.append(x.detach().numpy().copy())
    (x * x).sum().backward()  # x is still a leaf that trains, at its new value
    return seen + [x.grad.numpy().copy()], d.is_leaf, d.requires_grad, x.grad_fn is None


def test_detach_is_a_fresh_leaf_sharing_memory_and_writable():
    import torch
    ours, theirs = _detached_writes(tg), _detached_writes(torch)
    for a, b in zip(ours[0], theirs[0]):
        np.testing.assert_array_equal(a, b)
    assert ours[1:] == theirs[1:] == (True, False, True)


def test_detach_shares_the_version_counter():
    """A write into the detached tensor bumps the version its original saved, so the
    backward that would read the overwritten value refuses (as PyTorch)."""
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = (y * y).sum()
    d = y.detach()
    d[0] = 5.0
    assert y._version_number == d._version_number == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()
