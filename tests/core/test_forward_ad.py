"""Forward mode: ``tg.forward_ad`` (as ``torch.autograd.forward_ad``) and the
transforms built on it (``jvp``, ``jacfwd``, ``hessian``, ``hvp``), against
``torch.func`` / PyTorch's forward AD."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.forward_ad as fwAD
from tapegrad import functional as F
from tapegrad.tape import GENERAL, state

torch = pytest.importorskip("torch")
tfwAD = torch.autograd.forward_ad


def _np(t):
    return np.asarray(t.detach()) if isinstance(t, tg.Tensor) else t.detach().numpy()


def _pair(seed, *shapes):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def _mlp(m):
    def f(x, w1, w2):
        h = m.tanh(x @ w1)
        return (m.sigmoid(h @ w2) ** 2).sum()
    return f


def test_make_dual_unpack_dual_match_torch():
    x, t = _pair(0, (3, 4), (3, 4))
    with fwAD.dual_level():
        d = fwAD.make_dual(tg.tensor(x), tg.tensor(t))
        y = tg.sin(d) * d.exp() + d.sum(1, keepdim=True)
        p, tan = fwAD.unpack_dual(y)
        assert fwAD.unpack_dual(tg.tensor(x)).tangent is None
    with tfwAD.dual_level():
        td = tfwAD.make_dual(torch.tensor(x), torch.tensor(t))
        ty = torch.sin(td) * td.exp() + td.sum(1, keepdim=True)
        tp, ttan = tfwAD.unpack_dual(ty)
    np.testing.assert_allclose(_np(p), _np(tp), rtol=1e-12)
    np.testing.assert_allclose(_np(tan), _np(ttan), rtol=1e-10)
    assert p.shape == (3, 4) and not p._fw


def test_unpack_dual_is_a_named_tuple_and_level_closes():
    with fwAD.dual_level():
        d = fwAD.make_dual(tg.tensor([1.0, 2.0]), tg.tensor([1.0, 0.0]))
        u = fwAD.unpack_dual(d * 3)
        assert u.primal.tolist() == [3.0, 6.0] and u.tangent.tolist() == [3.0, 0.0]
    # outside the level its tangent is gone
    assert fwAD.unpack_dual(d).tangent is None
    assert (d * 2).tolist() == [2.0, 4.0]


def test_make_dual_checks_its_arguments():
    with pytest.raises(RuntimeError, match="dual_level"):
        fwAD.make_dual(tg.ones(2), tg.ones(2))
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="shape"):
            fwAD.make_dual(tg.ones(2), tg.ones(3))
        with pytest.raises(RuntimeError, match="dtype"):
            fwAD.make_dual(tg.ones(2, dtype=tg.float64), tg.ones(2, dtype=tg.float32))
        with pytest.raises(TypeError, match="Tensor"):
            fwAD.make_dual(tg.ones(2), [1.0, 2.0])


def test_dual_level_sends_ops_down_the_general_path_and_restores():
    before = state.mode
    with fwAD.dual_level():
        assert state.mode == GENERAL
    assert state.mode == before


def test_jvp_matches_torch_func_on_an_mlp():
    x, w1, w2 = _pair(1, (5, 4), (4, 6), (6, 3))
    tx, tw1, tw2 = _pair(2, (5, 4), (4, 6), (6, 3))
    out, tan = F.jvp(_mlp(tg), tuple(map(tg.tensor, (x, w1, w2))),
                     tuple(map(tg.tensor, (tx, tw1, tw2))))
    tout, ttan = torch.func.jvp(_mlp(torch), tuple(map(torch.tensor, (x, w1, w2))),
                                tuple(map(torch.tensor, (tx, tw1, tw2))))
    np.testing.assert_allclose(_np(out), _np(tout), rtol=1e-12)
    np.testing.assert_allclose(_np(tan), _np(ttan), rtol=1e-10)
    assert not out.requires_grad and not tan.requires_grad


def test_jvp_does_not_use_reverse_mode(monkeypatch):
    """One forward pass, no vjp (the double-vjp trick is gone)."""
    def refuse(*a, **k):
        raise AssertionError("jvp ran a reverse pass")
    monkeypatch.setattr(F, "_grad", refuse)
    monkeypatch.setattr(tg, "grad", refuse)
    _, t = F.jvp(lambda x: tg.exp(x).sum(), (tg.tensor([0.5, 1.0]),), (tg.ones(2),))
    np.testing.assert_allclose(float(t), np.exp(0.5) + np.exp(1.0))


def test_nested_jvp_no_perturbation_confusion():
    # d/dx [x * d/dy (x*y)] at x=1 is 2x = 2 (torch.func gives 2)
    def outer(x):
        return x * F.jvp(lambda y: x * y, (tg.tensor(2.0),), (tg.tensor(1.0),))[1]
    _, t = F.jvp(outer, (tg.tensor(1.0),), (tg.tensor(1.0),))
    assert float(t) == 2.0


def test_jvp_of_jvp_second_derivative():
    x = tg.tensor(0.7, dtype=tg.float64)
    one = tg.tensor(1.0, dtype=tg.float64)
    f = lambda x: tg.sin(x) * x ** 3  # noqa: E731

    def df(x):
        return F.jvp(f, (x,), (one,))[1]
    _, d2 = F.jvp(df, (x,), (one,))
    tx = torch.tensor(0.7, dtype=torch.float64)
    tf = lambda x: torch.sin(x) * x ** 3  # noqa: E731
    tdf = lambda x: torch.func.jvp(tf, (x,), (torch.ones((), dtype=torch.float64),))[1]  # noqa: E731
    _, td2 = torch.func.jvp(tdf, (tx,), (torch.ones((), dtype=torch.float64),))
    np.testing.assert_allclose(float(d2), float(td2), rtol=1e-12)


def test_grad_of_jvp_reverse_over_forward():
    x0, v0 = _pair(3, (4,), (4,))

    def g(m, jvp):
        def h(x):
            return (jvp(lambda x: m.tanh(x) ** 3, (x,), (m.tensor(v0) if m is torch
                                                          else tg.tensor(v0),))[1] ** 2).sum()
        return h
    ours = F.grad(g(tg, F.jvp))(tg.tensor(x0))
    theirs = torch.func.grad(g(torch, torch.func.jvp))(torch.tensor(x0))
    np.testing.assert_allclose(_np(ours), _np(theirs), rtol=1e-10)


@pytest.mark.parametrize("argnums", [0, 1, (0, 2)])
def test_jacfwd_matches_torch_func(argnums):
    x, w1, w2 = _pair(4, (2, 3), (3, 4), (4, 2))

    def f(m):
        return lambda x, w1, w2: m.tanh(x @ w1) @ w2
    ours = F.jacfwd(f(tg), argnums)(*map(tg.tensor, (x, w1, w2)))
    theirs = torch.func.jacfwd(f(torch), argnums)(*map(torch.tensor, (x, w1, w2)))
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    for o, t in zip(ours, theirs):
        assert tuple(o.shape) == tuple(t.shape)
        np.testing.assert_allclose(_np(o), _np(t), rtol=1e-10, atol=1e-12)


def test_jacfwd_equals_jacrev():
    x = tg.tensor(np.random.default_rng(5).standard_normal(6))
    f = lambda x: tg.softmax(x * x, 0) * x.sum()  # noqa: E731
    np.testing.assert_allclose(_np(F.jacfwd(f)(x)), _np(F.jacrev(f)(x)), rtol=1e-10,
                               atol=1e-12)


def test_hessian_is_forward_over_reverse_and_matches_torch():
    x, w1, w2 = _pair(6, (3, 4), (4, 5), (5, 2))
    ours = F.hessian(_mlp(tg), 1)(*map(tg.tensor, (x, w1, w2)))
    theirs = torch.func.hessian(_mlp(torch), 1)(*map(torch.tensor, (x, w1, w2)))
    assert tuple(ours.shape) == (4, 5, 4, 5)
    np.testing.assert_allclose(_np(ours), _np(theirs), rtol=1e-9, atol=1e-12)


def test_hvp_matches_torch():
    x, v = _pair(7, (5,), (5,))
    f = lambda m: (lambda x: (m.sin(x) * x.exp()).sum() * (x ** 2).sum())  # noqa: E731
    val, prod = F.hvp(f(tg), (tg.tensor(x),), (tg.tensor(v),))
    tval, tprod = torch.autograd.functional.hvp(f(torch), torch.tensor(x), torch.tensor(v))
    np.testing.assert_allclose(float(val), float(tval), rtol=1e-12)
    np.testing.assert_allclose(_np(prod), _np(tprod), rtol=1e-10)


def test_inplace_op_on_a_dual_updates_its_tangent():
    x, t = _pair(8, (4,), (4,))
    with fwAD.dual_level():
        d = fwAD.make_dual(tg.tensor(x), tg.tensor(t))
        y = d * 1
        y.mul_(d)
        y[1:].add_(d[:3])
        ours = fwAD.unpack_dual(y).tangent
    with tfwAD.dual_level():
        td = tfwAD.make_dual(torch.tensor(x), torch.tensor(t))
        ty = td * 1
        ty.mul_(td)
        ty[1:].add_(td[:3])
        theirs = tfwAD.unpack_dual(ty).tangent
    np.testing.assert_allclose(_np(ours), _np(theirs), rtol=1e-12)


def test_forward_mode_works_under_no_grad():
    with tg.no_grad(), fwAD.dual_level():
        d = fwAD.make_dual(tg.tensor([1.0, 2.0]), tg.tensor([1.0, 1.0]))
        assert fwAD.unpack_dual(d ** 2).tangent.tolist() == [2.0, 4.0]


def test_nested_dual_levels_keep_separate_tangents():
    with fwAD.dual_level() as l1:
        a = fwAD.make_dual(tg.tensor(3.0), tg.tensor(1.0))
        with fwAD.dual_level() as l2:
            b = fwAD.make_dual(a, tg.tensor(10.0))
            y = b * b
            t2 = fwAD.unpack_dual(y, level=l2).tangent   # 2 b * 10 = 60
            t1 = fwAD.unpack_dual(y, level=l1).tangent   # 2 b * 1 = 6
            assert float(t2) == 60.0 and float(t1) == 6.0
            # the inner tangent itself carries the outer one: d(20 b)/da = 20
            assert float(fwAD.unpack_dual(t2, level=l1).tangent) == 20.0
