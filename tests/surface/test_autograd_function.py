"""tg.autograd.Function against torch.autograd.Function: values, gradients of first and
second order, the ctx API, and its errors."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.testing import gradcheck, gradgradcheck


def _pair(lib):
    class Cube(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.save_for_backward(x)
            ctx.k = k
            return k * x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * 3 * ctx.k * x * x, None

    class ExpSaveOut(lib.autograd.Function):  # saves its own output
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            y, = ctx.saved_tensors
            return g * y

    class MulAdd(lib.autograd.Function):  # two tensor inputs, a number, two outputs
        @staticmethod
        def forward(ctx, a, b, c):
            ctx.save_for_backward(a, b)
            ctx.seen = ctx.needs_input_grad
            return a * b + c, a - b

        @staticmethod
        def backward(ctx, g1, g2):
            a, b = ctx.saved_tensors
            ga = g1 * b + g2 if ctx.needs_input_grad[0] else None
            gb = g1 * a - g2 if ctx.needs_input_grad[1] else None
            return ga, gb, None

    class SetupCtx(lib.autograd.Function):  # the setup_context form
        @staticmethod
        def forward(x, w):
            return (x * w).sin()

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, w = inputs
            ctx.save_for_backward(x, w)

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            c = (x * w).cos() * g
            return c * w, c * x

    return Cube, ExpSaveOut, MulAdd, SetupCtx


TG, TH = _pair(tg), _pair(torch)
RNG = np.random.default_rng(0)


def _both(*arrays):
    a = [tg.tensor(x, requires_grad=True) for x in arrays]
    b = [torch.tensor(x, requires_grad=True) for x in arrays]
    return a, b


def _close(t, r, tol=1e-10):
    np.testing.assert_allclose(t.detach().numpy(), r.detach().numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("i", [0, 1, 3])
def test_first_and_second_order_vs_torch(i):
    x0 = RNG.standard_normal((3, 4))
    w0 = RNG.standard_normal((3, 4))
    (x, w), (tx, tw) = _both(x0, w0)
    args = {0: ((x, 2.5), (tx, 2.5)), 1: ((x,), (tx,)), 3: ((x, w), (tx, tw))}[i]
    y = TG[i].apply(*args[0])
    ty = TH[i].apply(*args[1])
    _close(y, ty)
    ins = [a for a in args[0] if isinstance(a, tg.Tensor)]
    tins = [a for a in args[1] if isinstance(a, torch.Tensor)]
    g = tg.grad((y * y).sum(), ins, create_graph=True)
    tgr = torch.autograd.grad((ty * ty).sum(), tins, create_graph=True)
    for a, b in zip(g, tgr):
        _close(a, b)
    gg = tg.grad(sum((a * a).sum() for a in g), ins)
    tgg = torch.autograd.grad(sum((a * a).sum() for a in tgr), tins)
    for a, b in zip(gg, tgg):
        _close(a, b, 1e-8)


def test_finite_differences_first_and_second_order():
    x = tg.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    w = tg.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    assert gradcheck(lambda a, b: TG[3].apply(a, b), (x, w))
    assert gradgradcheck(lambda a, b: TG[3].apply(a, b), (x, w))
    assert gradcheck(lambda a: TG[1].apply(a), (x,))
    assert gradgradcheck(lambda a: TG[0].apply(a, -1.5), (x,))


def test_two_outputs_and_needs_input_grad():
    a0, b0 = RNG.standard_normal(5), RNG.standard_normal(5)
    a = tg.tensor(a0, requires_grad=True)
    b = tg.tensor(b0)  # no grad: its gradient is not asked for
    ta = torch.tensor(a0, requires_grad=True)
    tb = torch.tensor(b0)
    s, d = TG[2].apply(a, b, 1.0)
    ts, td = TH[2].apply(ta, tb, 1.0)
    _close(s, ts)
    _close(d, td)
    (s.sum() + 3 * d.sum()).backward()
    (ts.sum() + 3 * td.sum()).backward()
    _close(a.grad, ta.grad)
    assert b.grad is None
    # only one output used: the other's gradient is materialized as zeros
    a.grad = None
    ta.grad = None
    TG[2].apply(a, b, 1.0)[1].sum().backward()
    TH[2].apply(ta, tb, 1.0)[1].sum().backward()
    _close(a.grad, ta.grad)


def test_needs_input_grad_matches_torch():
    seen = {}
    for lib, key in ((tg, "tg"), (torch, "th")):
        _, _, MulAdd, _ = TG if lib is tg else TH
        a = lib.ones(2, requires_grad=True)
        b = lib.ones(2)
        MulAdd.apply(a, b, 2.0)
        ctxs = []
        orig = MulAdd.forward

        class Spy(MulAdd):
            @staticmethod
            def forward(ctx, *args):
                ctxs.append(ctx)
                return orig(ctx, *args)
        Spy.apply(a, b, 2.0)
        with lib.no_grad():
            Spy.apply(a, b, 2.0)
        seen[key] = [tuple(c.needs_input_grad) for c in ctxs]
    assert seen["tg"] == seen["th"] == [(True, False, False), (True, False, False)]


def _sorter(lib, materialize):
    class Sort(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(materialize)
            v, idx = x.sort()
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(idx)
            return v, idx

        @staticmethod
        def backward(ctx, gv, gidx):
            idx, = ctx.saved_tensors
            ctx.got = (gv is None, gidx is None)
            out = lib.zeros_like(gv) if gv is not None else None
            if out is not None:
                out[idx] = gv
            return out
    return Sort


@pytest.mark.parametrize("materialize", [True, False])
def test_mark_non_differentiable_and_materialize(materialize):
    x0 = RNG.standard_normal(6)
    res = {}
    for lib in (tg, torch):
        Sort = _sorter(lib, materialize)
        x = lib.tensor(x0, requires_grad=True)
        v, idx = Sort.apply(x)
        assert not idx.requires_grad and v.requires_grad
        (v * lib.arange(6, dtype=v.dtype)).sum().backward()
        res[lib.__name__] = x.grad.detach().numpy() if lib is torch else x.grad.numpy()
    np.testing.assert_allclose(res["tapegrad"], res["torch"])


def test_materialize_false_gives_none():
    got = {}
    for lib in (tg, torch):
        class Two(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(False)
                return x * 2, x * 3

            @staticmethod
            def backward(ctx, g1, g2):
                got[lib.__name__] = (g1 is None, g2 is None)
                return g1 * 2
        x = lib.ones(3, requires_grad=True)
        Two.apply(x)[0].sum().backward()
    assert got["tapegrad"] == got["torch"] == (False, True)


def test_no_grad_inputs_do_not_record():
    y = TG[1].apply(tg.ones(3))
    assert not y.requires_grad and y.grad_fn is None
    with tg.no_grad():
        y = TG[1].apply(tg.ones(3, requires_grad=True))
    assert not y.requires_grad


def test_inplace_on_saved_tensor_is_refused():
    x = tg.ones(3, requires_grad=True)
    h = x * 1
    y = TG[0].apply(h, 2.0)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_wrong_gradient_count_is_refused():
    class Bad(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        Bad.apply(tg.ones(2, requires_grad=True), tg.ones(2)).sum().backward()


def test_gradient_for_non_tensor_is_refused():
    class Bad(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g, g
    with pytest.raises(RuntimeError, match="not a Variable"):
        Bad.apply(tg.ones(2, requires_grad=True), 2.0).sum().backward()


def test_once_differentiable_and_namespace():
    class Sq(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @tg.autograd.function.once_differentiable
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g
    x = tg.tensor([3.0], requires_grad=True)
    g, = tg.autograd.grad(Sq.apply(x).sum(), [x])
    assert g.item() == 6.0
    for name in ("grad", "backward", "Function", "forward_ad", "functional"):
        assert hasattr(tg.autograd, name)
    with pytest.raises(RuntimeError, match="static forward"):
        Sq()(x)


def test_backward_twice_without_retain_is_refused():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = TG[1].apply(x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([1.0, 2.0]))


def _with_jvp(lib):
    class ScaledExp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            y = (x * k).exp()
            ctx.save_for_backward(y)
            ctx.save_for_forward(y)
            ctx.k = k
            return y

        @staticmethod
        def backward(ctx, g):
            y, = ctx.saved_tensors
            return g * y * ctx.k, None

        @staticmethod
        def jvp(ctx, tx, tk):
            y, = ctx.saved_tensors
            return tx * y * ctx.k
    return ScaledExp


def test_forward_mode_jvp_vs_torch():
    import torch.autograd.forward_ad as tfwd
    x0, t0 = RNG.standard_normal(4), RNG.standard_normal(4)
    F1, F2 = _with_jvp(tg), _with_jvp(torch)
    with tg.forward_ad.dual_level():
        y = F1.apply(tg.forward_ad.make_dual(tg.tensor(x0), tg.tensor(t0)), 1.5)
        p, tan = tg.forward_ad.unpack_dual(y)
    with tfwd.dual_level():
        ty = F2.apply(tfwd.make_dual(torch.tensor(x0), torch.tensor(t0)), 1.5)
        tp, ttan = tfwd.unpack_dual(ty)
    _close(p, tp)
    _close(tan, ttan)
    with tg.forward_ad.dual_level():  # no jvp declared: a clear error
        with pytest.raises(RuntimeError, match="forward-mode"):
            TG[1].apply(tg.forward_ad.make_dual(tg.tensor(x0), tg.tensor(t0)))
