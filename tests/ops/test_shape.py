"""as_strided against torch.as_strided: views of a tensor's storage (offsets counted from
the storage's start, the input's own by default), gradients that add overlapping
windows, forward mode, second order, and PyTorch's errors."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")

_INPUTS = {  # the input: a view of a (3, 4) base, built the same way in each library
    "base": lambda x: x,
    "rows": lambda x: x[1:],
    "transposed": lambda x: x.T,
    "column": lambda x: x[:, 1],
    "corner": lambda x: x[1:, 2:],
}
_CALLS = [  # (size, stride, storage_offset)
    ((2, 2), (1, 2), None),
    ((3, 3), (1, 1), 2),        # overlapping windows
    ((2, 3), (0, 4), 1),        # a repeated row
    ((4,), (3,), 0),
    ((), (), 11),
    ((0, 5), (1, 1), 12),
]


def _case(M, inp, call, requires_grad=False):
    base = M.arange(12.0, dtype=M.float64).reshape(3, 4)
    if requires_grad:
        base.requires_grad_(True)
    x = _INPUTS[inp](base)
    size, stride, off = call
    return base, x, M.as_strided(x, size, stride, off)


@pytest.mark.parametrize("call", _CALLS, ids=str)
@pytest.mark.parametrize("inp", sorted(_INPUTS))
def test_values_strides_and_offset_as_torch(inp, call):
    _, _, ours = _case(tg, inp, call)
    _, _, theirs = _case(torch, inp, call)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert ours.stride() == theirs.stride()
    if ours.numel():
        assert ours.storage_offset() == theirs.storage_offset()


@pytest.mark.parametrize("call", _CALLS[:4], ids=str)
@pytest.mark.parametrize("inp", sorted(_INPUTS))
def test_gradients_as_torch(inp, call):
    grads = []
    for M in (tg, torch):
        base, x, y = _case(M, inp, call, requires_grad=True)
        w = M.arange(float(y.numel()), dtype=M.float64).reshape(y.shape)
        (M.sin(y) * w).sum().backward()
        grads.append(base.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)


def test_second_order_and_forward_mode_as_torch():
    def f(M, x):
        return (M.as_strided(x, (3, 3), (1, 1), 1) ** 3).sum()
    a = np.linspace(-1, 1, 12)
    x = tg.tensor(a, requires_grad=True)
    (g,) = tg.grad(f(tg, x), x, create_graph=True)
    (gg,) = tg.grad(g.sum(), x)
    xt = torch.tensor(a, requires_grad=True)
    (tg_,) = torch.autograd.grad(f(torch, xt), xt, create_graph=True)
    (tgg,) = torch.autograd.grad(tg_.sum(), xt)
    np.testing.assert_allclose(g.detach().numpy(), tg_.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-12)
    t = np.cos(np.arange(12.0))

    def h(M):
        return lambda x: M.as_strided(x[2:], (2, 3), (4, 1)) * x[:6].reshape(2, 3)
    out, tan = tg.func.jvp(h(tg), (tg.tensor(a),), (tg.tensor(t),))
    tout, ttan = torch.func.jvp(h(torch), (torch.tensor(a),), (torch.tensor(t),))
    np.testing.assert_allclose(out.numpy(), tout.numpy(), rtol=1e-12)
    np.testing.assert_allclose(tan.numpy(), ttan.numpy(), rtol=1e-12)


def test_a_view_shares_memory_with_its_input():
    x = tg.zeros(6)
    y = x.as_strided((2, 2), (1, 2))
    y[1, 1] = 5.0
    assert x.tolist() == [0.0, 0.0, 0.0, 5.0, 0.0, 0.0]


@pytest.mark.parametrize("args", [((3, 3), (1, 4), 0), ((2,), (1,), 11), ((2, 2), (1,), 0),
                                  ((2,), (-1,), 1), ((2,), (1,), -1), ((-1,), (1,), 0)],
                         ids=str)
def test_errors_as_torch(args):
    def outcome(M):
        try:
            M.as_strided(M.zeros(10), *args)
        except Exception as e:  # noqa: BLE001 (the class is what is compared)
            return type(e)
        return None
    ours, theirs = outcome(tg), outcome(torch)
    assert theirs is not None and ours is theirs, (ours, theirs)


def test_out_of_bounds_names_the_storage_size():
    with pytest.raises(RuntimeError, match="requiring a storage size of 28 .* storage of size 24"):
        tg.as_strided(tg.zeros(6), (3, 3), (1, 2))


def test_gradient_through_an_input_overlapping_itself_is_refused():
    x = tg.zeros(3, requires_grad=True)
    y = tg.as_strided(x.expand(2, 3), (2, 2), (1, 1))
    with pytest.raises(RuntimeError, match="as_strided: .*overlap"):
        y.sum().backward()


def test_an_inplace_write_through_the_view_of_a_non_leaf_as_torch():
    grads = []
    for M in (tg, torch):
        x = M.arange(6.0, dtype=M.float64).requires_grad_(True)
        y = x * 1
        y.as_strided((2, 2), (1, 2), 1).mul_(2)
        (y * M.arange(6.0, dtype=M.float64)).sum().backward()
        grads.append((y.detach().numpy(), x.grad.numpy()))
    for a, b in zip(*grads):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_stack_of_transposed_views_is_contiguous_as_torch(dim):
    """``np.stack`` follows its inputs' layout as ``concatenate`` does; PyTorch's stack
    is C-contiguous (the differential fuzzer found ``tg.stack([x.mT, x.mT]).view(-1,
    1, 1, 12)`` raising)."""
    x = np.arange(6.0).reshape(2, 3)
    t = tg.tensor(x, requires_grad=True)
    s = tg.stack([t.mT, t.mT], dim=dim)
    ref = torch.stack([torch.tensor(x).mT] * 2, dim=dim)
    assert s.is_contiguous() and ref.is_contiguous()
    np.testing.assert_array_equal(s.view(-1, 1, 1, 12).detach().numpy(),
                                  ref.view(-1, 1, 1, 12).numpy())
    s.view(-1).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.full((2, 3), 2.0))


@pytest.mark.parametrize("view", ["plain", "mT", "step"])
def test_flip_and_rot90_keep_the_input_layout_as_torch(view):
    """PyTorch's flip copies into the input's layout (preserve_format), and rot90 is a
    flip and a transpose: the strides match PyTorch's, so ``.view`` works (or raises)
    where PyTorch's does. Before, flip was C-contiguous, and ``tg.rot90(x.mT).view(-1)``
    raised where PyTorch's worked."""
    x = np.arange(12.0).reshape(3, 4)
    t, r = tg.tensor(x), torch.tensor(x)
    t, r = {"plain": (t, r), "mT": (t.mT, r.mT), "step": (t[:, ::2], r[:, ::2])}[view]
    pairs = [(tg.flip(t, (0,)), torch.flip(r, (0,))), (tg.flip(t, (0, 1)), torch.flip(r, (0, 1))),
             (tg.fliplr(t), torch.fliplr(r))]
    pairs += [(tg.rot90(t, k), torch.rot90(r, k)) for k in (1, 2, 3)]
    for a, b in pairs:
        assert tuple(a.stride()) == b.stride()
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        if b.is_contiguous():
            a.view(-1)


def test_cat_of_transposed_views_is_contiguous_as_torch():
    """NumPy's concatenate follows its inputs' layout; PyTorch's cat is C-contiguous, so
    ``.view`` of the cat of transposed views works there (the differential fuzzer found
    ``tg.cat([x.mT, x.mT]).view(-1, 12)`` raising)."""
    x = np.arange(6.0).reshape(1, 2, 3)
    t = tg.tensor(x, requires_grad=True)
    c = tg.cat([t.mT, t.mT], dim=0)
    ref = torch.cat([torch.tensor(x).mT] * 2, dim=0)
    assert c.is_contiguous() and ref.is_contiguous()
    np.testing.assert_array_equal(c.view(-1, 1, 1, 12).detach().numpy(),
                                  ref.view(-1, 1, 1, 12).numpy())
    c.view(-1).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.full((1, 2, 3), 2.0))
