"""@fuse of a body ending in sum()/mean() over all elements: one op whose forward
stores nothing but the scalar, equal to the unfused composition and PyTorch at
every order; anything else about reductions falls back to unfused with a warning."""
import math
import warnings

import numpy as np
import pytest
from conftest import gradgradcheck
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg
from tapegrad import fusion
from tapegrad.testing import gradcheck

torch = pytest.importorskip("torch")


def body(x, y):
    return tg.gelu(x, approximate="tanh") * tg.sigmoid(y) + x * x - tg.tanh(x - y)


def body_torch(x, y):
    F = torch.nn.functional
    return F.gelu(x, approximate="tanh") * torch.sigmoid(y) + x * x - torch.tanh(x - y)


@tg.fuse
def fsum(x, y):
    return tg.sum(body(x, y))


@tg.fuse
def fmean(x, y):
    return body(x, y).mean()  # the method form


CASES = [(fsum, lambda x, y: tg.sum(body(x, y)), lambda x, y: body_torch(x, y).sum()),
         (fmean, lambda x, y: tg.mean(body(x, y)), lambda x, y: body_torch(x, y).mean())]


def _np(t):
    return np.asarray(t.detach() if hasattr(t, "detach") else t)


def _close(a, b, tol=1e-12):
    a, b = _np(a), _np(b)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _fused(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # must fuse, not fall back
        return fn(*args)


@pytest.mark.parametrize("case", range(len(CASES)))
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                max_side=4),
       seed=st.integers(0, 2**16))
def test_equals_unfused_and_torch(case, shapes, seed):
    fn, unfused, ref = CASES[case]
    r = np.random.default_rng(seed)
    arrs = [r.uniform(-2, 2, s) for s in shapes.input_shapes]
    ts = [tg.tensor(a, requires_grad=True) for a in arrs]
    us = [tg.tensor(a, requires_grad=True) for a in arrs]
    ps = [torch.tensor(a, requires_grad=True) for a in arrs]
    out, uout, tout = _fused(fn, *ts), unfused(*us), ref(*ps)
    assert out.shape == () and out.dtype == tg.float64
    if math.prod(shapes.result_shape) == 0 and fn is fmean:
        assert np.isnan(out.item()) and np.isnan(tout.item())  # mean of nothing
        return
    _close(out, uout)
    _close(out, tout.detach().numpy())
    out.backward()
    uout.backward()
    tout.backward()
    for t, u, p in zip(ts, us, ps):
        _close(t.grad, u.grad)
        _close(t.grad, p.grad.numpy())


def test_one_tape_entry_and_no_stored_output():
    x = tg.tensor(np.linspace(-1, 1, 6), requires_grad=True)
    out = _fused(fsum, x, x)
    assert out.grad_fn.op.name.startswith("fused_fsum")
    assert out.grad_fn.op.name in tg.ops_registry.list_ops() or \
        tg.ops_registry.get(out.grad_fn.op.name) is out.grad_fn.op
    assert all(e is None or getattr(e[0], "op", None) is None for e in out.grad_fn.edges
               if isinstance(e, tuple))


@pytest.mark.parametrize("fn", [fsum, fmean])
def test_second_order(fn):
    r = np.random.default_rng(3)
    ts = [tg.tensor(r.uniform(-1.5, 1.5, (2, 3)), requires_grad=True),
          tg.tensor(r.uniform(-1.5, 1.5, (3,)), requires_grad=True)]
    assert gradcheck(fn, ts)
    assert gradgradcheck(fn, ts)
    # the Hessian-vector product equals PyTorch's
    ps = [torch.tensor(_np(t), requires_grad=True) for t in ts]
    ref = (lambda x, y: body_torch(x, y).sum()) if fn is fsum else \
        (lambda x, y: body_torch(x, y).mean())
    gx, gy = tg.grad(fn(*ts), ts, create_graph=True)
    hx = tg.grad(tg.sum(gx * gx) + tg.sum(gy), ts)
    GX, GY = torch.autograd.grad(ref(*ps), ps, create_graph=True)
    HX = torch.autograd.grad((GX * GX).sum() + GY.sum(), ps)
    for a, b in zip(hx, HX):
        _close(a, b.numpy(), 1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 1000, 2 * (1 << 17) + 123])
def test_compiled_equals_reference(compiled, monkeypatch, dtype, n):
    """The Numba reduction (blocks of float32 partial sums, chunks on three threads
    for the large case) equals the float64 sum of the reference values."""
    from tapegrad.devices import cpu
    monkeypatch.setattr(cpu, "_pool", [3])
    r = np.random.default_rng(n)
    x = tg.tensor(r.uniform(-3, 3, n).astype(dtype), requires_grad=True)
    y = tg.tensor(np.array([0.75], dtype), requires_grad=True)
    for fn in (fsum, fmean):
        fn(x, y)  # the first call compiles on this thread
        out = fn(x, y)
        assert out.dtype == tg.as_tensor(np.zeros(1, dtype)).dtype
        gx, gy = tg.grad(out, [x, y])
        fusion.config.use_numba = False
        try:
            ref = fn(x, y)
            rx, ry = tg.grad(ref, [x, y])
        finally:
            fusion.config.use_numba = True
        vals = _np(body(x.detach().to(tg.float64), y.detach().to(tg.float64)))
        exact = vals.sum() if fn is fsum else vals.mean()
        tol = 2e-6 if dtype == np.float32 else 1e-12
        scale = np.abs(vals).sum() / (1 if fn is fsum else n)  # error bound of a sum
        assert abs(out.item() - exact) <= tol * scale
        assert abs(ref.item() - exact) <= tol * scale
        _close(gx, rx, 3e-6 if dtype == np.float32 else 1e-12)
        np.testing.assert_allclose(_np(gy), _np(ry), rtol=1e-4 if dtype == np.float32 else 1e-10)


def test_float16_computes_in_float32():
    x = tg.tensor(np.linspace(-2, 2, 5000).astype(np.float16))
    out = _fused(fsum, x, x)
    assert out.dtype == tg.float16
    exact = _np(body(x.to(tg.float64), x.to(tg.float64))).sum()
    assert abs(float(out.item()) - exact) <= 1e-3 * abs(exact)


def test_reductions_that_do_not_fuse_warn_and_still_compute():
    @tg.fuse
    def over_dim(x):
        return tg.sum(x * x, dim=0)

    @tg.fuse
    def used_again(x):
        return tg.sum(tg.exp(x)) * x

    @tg.fuse
    def keepdim(x):
        return (x * x).sum(keepdim=True)

    @tg.fuse
    def two_outputs(x):
        return tg.sum(x * x), x * 2

    x = tg.tensor(np.array([[0.5, 1.0], [2.0, -1.0]]), requires_grad=True)
    cases = [(over_dim, "sum over dim=0", (x * x).sum(0)),
             (used_again, "used again", tg.sum(tg.exp(x)) * x),
             (keepdim, "keepdim", (x * x).sum(keepdim=True)),
             (two_outputs, "only as the one output", None)]
    for fn, why, expect in cases:
        with pytest.warns(RuntimeWarning, match=f"not fusable.*{why}"):
            out = fn(x)
        if expect is not None:
            _close(out, expect)


def test_fused_reduce_errors_name_the_op():
    with pytest.raises(ValueError, match=r"fused_fsum_\d+: shapes \(3,\) and \(4,\)"):
        fsum(tg.ones(3), tg.ones(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a wrong call is an error, not a fallback
        with pytest.raises(TypeError, match="missing a required argument: 'y'"):
            fsum(tg.ones(3))
