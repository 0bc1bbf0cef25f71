"""Property tests against PyTorch (NumPy where torch has no equivalent) for the op
families that tests/ops/test_hypothesis.py does not cover: unary elementwise ops,
clamp/where/logaddexp/minimum, the remaining reductions, shape and indexing ops,
``__getitem__`` with arbitrary NumPy indices, and the nn.functional ops.

Every test draws shapes (size-0 and size-1 dims included), attributes (dims as int
or tuple, negative dims, keepdim...) and a memory layout (contiguous, transposed,
strided or reversed view) with hypothesis, then compares float64 forward values
and the gradients for a random cotangent with ``torch.autograd`` on the same data.
"""
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

import tapegrad as tg  # noqa: E402
import tapegrad.nn.functional as F  # noqa: E402

TF = torch.nn.functional
_HC = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def _settings(n):
    return settings(max_examples=n, deadline=None, database=None, derandomize=True,
                    suppress_health_check=_HC)


FEW, SOME, MORE = _settings(8), _settings(12), _settings(20)


# ---------------------------------------------------------------- helpers
def _rng(data, label="seed"):
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label=label))


def _layout(data, rng, shape, make):
    """``make(rng, shape)`` laid out as a contiguous, transposed, strided or
    reversed view (so non-contiguous inputs reach the op as they are)."""
    shape = tuple(shape)
    layout = data.draw(st.sampled_from(["contiguous", "transposed", "strided", "reversed"]),
                       label="layout")
    if layout == "transposed" and len(shape) >= 2:
        a = np.asarray(make(rng, shape[::-1])).T
    elif layout == "strided" and len(shape) >= 1:
        big = np.asarray(make(rng, shape[:-1] + (shape[-1] * 2,)))
        a = big[..., ::2]
    elif layout == "reversed" and len(shape) >= 1:
        a = np.asarray(make(rng, shape))[::-1]
    else:
        a = np.asarray(make(rng, shape))
    assert a.shape == shape
    return a


def _array(data, shape, low=-2.0, high=2.0, avoid=(), margin=0.05):
    """float64 values in [low, high) kept ``margin`` away from the points ``avoid``
    (the kinks of the function under test), in a random memory layout."""
    def make(rng, s):
        a = rng.uniform(low, high, size=s)
        for p in avoid:
            near = np.abs(a - p) < margin
            a = np.where(near, p + np.where(a >= p, margin, -margin) * 1.5, a)
        return a
    return _layout(data, _rng(data), shape, make)


def _distinct(data, shape, scale=0.1):
    """float64 values without ties (a shuffled grid), in a random layout."""
    def make(rng, s):
        n = int(np.prod(s))
        return ((rng.permutation(n) - n / 2.0) * scale + 0.01).reshape(s)
    return _layout(data, _rng(data), shape, make)


def _t(a):
    return torch.from_numpy(np.array(a))


def _outs(r):
    if isinstance(r, (tuple, list)):
        return list(r)
    return [r]


def _np_of(x):
    if isinstance(x, tg.Tensor):
        return np.asarray(x.detach().numpy())
    return x.detach().numpy(force=True)  # force: torch's ZeroTensor gradients


def _close(got, exp, what, rtol, atol):
    assert got.shape == exp.shape, f"{what}: shape {got.shape} vs expected {exp.shape}"
    if exp.dtype.kind in "biu":
        assert got.dtype == exp.dtype, f"{what}: dtype {got.dtype} vs expected {exp.dtype}"
        np.testing.assert_array_equal(got, exp, err_msg=what)
    else:
        assert got.dtype == exp.dtype, f"{what}: dtype {got.dtype} vs expected {exp.dtype}"
        np.testing.assert_allclose(got, exp, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=what)


def _check(fn_tg, fn_t, arrays, data, rtol=1e-9, atol=1e-11, order2=False, grad=True,
           nograd=()):
    """Forward values (every output) and gradients for random cotangents agree with
    torch; with ``order2`` also the second-order vector-Hessian products.

    Float arrays require grad (except positions in ``nograd``); integer/bool arrays
    are passed as plain tensors."""
    req = [a.dtype.kind == "f" and k not in nograd for k, a in enumerate(arrays)]
    # as_tensor shares memory, so a non-contiguous layout reaches tapegrad as it is
    xs = [tg.as_tensor(a).requires_grad_() if r else tg.as_tensor(a)
          for a, r in zip(arrays, req)]
    ts = [_t(a).requires_grad_() if r else _t(a) for a, r in zip(arrays, req)]
    outs, touts = _outs(fn_tg(*xs)), _outs(fn_t(*ts))
    assert len(outs) == len(touts), f"{len(outs)} outputs vs torch {len(touts)}"
    for k, (o, to) in enumerate(zip(outs, touts)):
        assert isinstance(o, tg.Tensor), f"output {k} is a {type(o).__name__}"
        _close(_np_of(o), _np_of(to), f"output {k}", rtol, atol)
    if not grad:
        return
    pairs = [(o, to) for o, to in zip(outs, touts) if to.requires_grad]
    gx = [x for x, r in zip(xs, req) if r]
    gt = [t for t, r in zip(ts, req) if r]
    if not pairs or not gx:
        return
    for o, _ in pairs:
        assert o.requires_grad, "an output torch differentiates does not require grad"
    rng = _rng(data, "cotangent seed")
    vs = [rng.standard_normal(tuple(to.shape)) for _, to in pairs]
    grads = tg.grad([o for o, _ in pairs], gx, grad_outputs=[tg.tensor(v) for v in vs],
                    allow_unused=True, create_graph=order2)
    tgrads = torch.autograd.grad([to for _, to in pairs], gt,
                                 grad_outputs=[torch.tensor(v) for v in vs],
                                 allow_unused=True, create_graph=order2)
    for k, (g, tgr, x) in enumerate(zip(grads, tgrads, gx)):
        exp = np.zeros(x.shape) if tgr is None else _np_of(tgr)
        got = np.zeros(x.shape) if g is None else _np_of(g)
        _close(got, exp, f"gradient of float input {k}", rtol, atol)
    if not order2:
        return
    ws = [rng.standard_normal(tuple(x.shape)) for x in gx]
    s_tg = [(g * tg.tensor(w)).sum() for g, w in zip(grads, ws)
            if g is not None and g.requires_grad]
    s_t = [(g * torch.tensor(w)).sum() for g, w in zip(tgrads, ws)
           if g is not None and g.requires_grad]
    # a first-order gradient that does not depend on x (a linear op) may come back
    # without a recording: its second-order gradient is zero then
    gg = tg.grad(sum(s_tg[1:], s_tg[0]), gx, allow_unused=True) if s_tg else [None] * len(gx)
    tgg = torch.autograd.grad(sum(s_t[1:], s_t[0]), gt, allow_unused=True) if s_t \
        else [None] * len(gt)
    if True:
        for k, (g, tgr, x) in enumerate(zip(gg, tgg, gx)):
            exp = np.zeros(x.shape) if tgr is None else _np_of(tgr)
            got = np.zeros(x.shape) if g is None else _np_of(g)
            _close(got, exp, f"second-order gradient of float input {k}", rtol * 10, atol * 10)


def _shape(min_dims=0, max_dims=4, min_side=0, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def _dims(data, nd, allow_none=True, allow_tuple=True, allow_empty_tuple=False):
    """None, an int or a tuple of distinct dims, each maybe negative."""
    kinds = (["none"] if allow_none or nd == 0 else []) + (["int"] if nd else []) + \
        (["tuple"] if allow_tuple and nd else [])
    kind = data.draw(st.sampled_from(kinds), label="dim kind")
    if kind == "none":
        return None
    neg = st.booleans()
    if kind == "int":
        d = data.draw(st.integers(0, nd - 1), label="dim")
        return d - nd if data.draw(neg, label="neg") else d
    ds = data.draw(st.lists(st.integers(0, nd - 1), min_size=0 if allow_empty_tuple else 1,
                            max_size=nd, unique=True), label="dims")
    return tuple(d - nd if data.draw(neg, label="neg") else d for d in ds)


def _canon(dims, nd):
    if dims is None:
        return tuple(range(nd))
    if isinstance(dims, int):
        dims = (dims,)
    return tuple(sorted(d % nd for d in dims))


# ---------------------------------------------------------------- unary elementwise
# name: (tapegrad fn, torch fn, value range, kinks to avoid)
UNARY = {
    "neg": (tg.neg, torch.neg, (-2, 2), ()),
    "abs": (tg.abs, torch.abs, (-2, 2), (0,)),
    "sign": (tg.sign, torch.sign, (-2, 2), (0,)),
    "exp": (tg.exp, torch.exp, (-3, 3), ()),
    "exp2": (tg.exp2, torch.exp2, (-3, 3), ()),
    "expm1": (tg.expm1, torch.expm1, (-3, 3), ()),
    "log": (tg.log, torch.log, (0.05, 4), ()),
    "log2": (tg.log2, torch.log2, (0.05, 4), ()),
    "log10": (tg.log10, torch.log10, (0.05, 4), ()),
    "log1p": (tg.log1p, torch.log1p, (-0.9, 3), ()),
    "sqrt": (tg.sqrt, torch.sqrt, (0.05, 4), ()),
    "rsqrt": (tg.rsqrt, torch.rsqrt, (0.05, 4), ()),
    "square": (tg.square, torch.square, (-2, 2), ()),
    "reciprocal": (tg.reciprocal, torch.reciprocal, (-2, 2), (0,)),
    "sin": (tg.sin, torch.sin, (-4, 4), ()),
    "cos": (tg.cos, torch.cos, (-4, 4), ()),
    "tan": (tg.tan, torch.tan, (-1.3, 1.3), ()),
    "arcsin": (tg.arcsin, torch.arcsin, (-0.95, 0.95), ()),
    "arccos": (tg.arccos, torch.arccos, (-0.95, 0.95), ()),
    "arctan": (tg.arctan, torch.arctan, (-4, 4), ()),
    "sinh": (tg.sinh, torch.sinh, (-3, 3), ()),
    "cosh": (tg.cosh, torch.cosh, (-3, 3), ()),
    "tanh": (tg.tanh, torch.tanh, (-4, 4), ()),
    "sigmoid": (tg.sigmoid, torch.sigmoid, (-8, 8), ()),
    "logsigmoid": (tg.logsigmoid, TF.logsigmoid, (-8, 8), ()),
    "relu": (tg.relu, torch.relu, (-2, 2), (0,)),
    "F.relu": (F.relu, TF.relu, (-2, 2), (0,)),
    "gelu": (tg.gelu, TF.gelu, (-4, 4), ()),
    "gelu_tanh": (lambda x: tg.gelu(x, approximate="tanh"),
                  lambda x: TF.gelu(x, approximate="tanh"), (-4, 4), ()),
    "F.gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                    lambda x: TF.gelu(x, approximate="tanh"), (-4, 4), ()),
    "silu": (tg.silu, TF.silu, (-5, 5), ()),
    "softplus": (tg.softplus, TF.softplus, (-8, 8), ()),
    "softplus_beta": (lambda x: F.softplus(x, beta=2.5, threshold=3.0),
                      lambda x: TF.softplus(x, beta=2.5, threshold=3.0), (-4, 4), (1.2,)),
    "elu": (tg.elu, TF.elu, (-3, 3), (0,)),
    "elu_alpha": (lambda x: F.elu(x, alpha=0.7), lambda x: TF.elu(x, alpha=0.7),
                  (-3, 3), (0,)),
    "leaky_relu": (tg.leaky_relu, TF.leaky_relu, (-2, 2), (0,)),
    "leaky_relu_slope": (lambda x: F.leaky_relu(x, negative_slope=0.3),
                         lambda x: TF.leaky_relu(x, negative_slope=0.3), (-2, 2), (0,)),
    "erf": (tg.erf, torch.erf, (-3, 3), ()),
    "floor": (tg.floor, torch.floor, (-3, 3), (-2, -1, 0, 1, 2)),
    "ceil": (tg.ceil, torch.ceil, (-3, 3), (-2, -1, 0, 1, 2)),
    "round": (tg.round, torch.round, (-3, 3), (-2.5, -1.5, -0.5, 0.5, 1.5, 2.5)),
    "trunc": (tg.trunc, torch.trunc, (-3, 3), (-2, -1, 0, 1, 2)),
    "method_exp": (lambda x: x.exp(), lambda x: x.exp(), (-2, 2), ()),
    "method_abs": (lambda x: x.abs(), lambda x: x.abs(), (-2, 2), (0,)),
    "operator_neg": (lambda x: -x, lambda x: -x, (-2, 2), ()),
}


@pytest.mark.parametrize("name", list(UNARY))
@FEW
@given(data=st.data(), shape=_shape(max_dims=3))
def test_unary(name, data, shape):
    fn_tg, fn_t, (lo, hi), avoid = UNARY[name]
    a = _array(data, shape, lo, hi, avoid=avoid)
    _check(fn_tg, fn_t, [a], data, order2=True)


# stable forms at large magnitudes, float32: finite, no overflow, as torch
STABLE = {
    "sigmoid": (tg.sigmoid, torch.sigmoid),
    "logsigmoid": (tg.logsigmoid, TF.logsigmoid),
    "softplus": (tg.softplus, TF.softplus),
    "silu": (tg.silu, TF.silu),
    "tanh": (tg.tanh, torch.tanh),
    "gelu": (tg.gelu, TF.gelu),
}


@pytest.mark.parametrize("name", list(STABLE))
@FEW
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=2, min_side=1))
def test_unary_stable_at_large_magnitudes_float32(name, data, shape):
    fn_tg, fn_t = STABLE[name]
    a = (_array(data, shape, -1.0, 1.0) * 1e4).astype(np.float32)
    x = tg.as_tensor(a).requires_grad_()
    t = _t(a).requires_grad_()
    out, tout = fn_tg(x), fn_t(t)
    assert out.dtype == tg.float32
    o = _np_of(out)
    assert np.all(np.isfinite(o)), f"{name} overflows at +-1e4 in float32: {o}"
    np.testing.assert_allclose(o, _np_of(tout), rtol=1e-5, atol=1e-6)
    (g,) = tg.grad(out.sum(), [x])
    (tgr,) = torch.autograd.grad(tout.sum(), [t])
    assert np.all(np.isfinite(_np_of(g))), f"{name} gradient is not finite at +-1e4"
    np.testing.assert_allclose(_np_of(g), _np_of(tgr), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- binary / ternary elementwise
def _tie_free_pair(a, b):
    """a on multiples of 0.2, b on multiples of 0.2 shifted by 0.1: never equal."""
    return np.round(a * 5) / 5, np.round(b * 5) / 5 + 0.1


@pytest.mark.parametrize("name", ["minimum", "maximum", "logaddexp", "arctan2", "fmin_method"])
@SOME
@given(data=st.data(),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4,
                                                min_side=0, max_side=3))
def test_binary_families(name, data, shapes):
    s1, s2 = shapes.input_shapes
    a, b = _array(data, s1, -3, 3), _array(data, s2, -3, 3)
    if name in ("minimum", "maximum", "fmin_method"):
        a, b = _tie_free_pair(a, b)
    if name == "arctan2":
        b = np.where(np.abs(b) < 0.2, 0.5, b)
    fns = {
        "minimum": (tg.minimum, torch.minimum),
        "maximum": (tg.maximum, torch.maximum),
        "logaddexp": (tg.logaddexp, torch.logaddexp),
        "arctan2": (tg.arctan2, torch.arctan2),
        "fmin_method": (lambda x, y: x.minimum(y), lambda x, y: x.minimum(y)),
    }
    _check(*fns[name], [a, b], data, order2=True)


@FEW
@given(data=st.data(), shape=_shape(max_dims=2, min_side=1, max_side=3))
def test_logaddexp_large_magnitudes_float32(data, shape):
    a = (_array(data, shape, -1, 1) * 1e4).astype(np.float32)
    b = (_array(data, shape, -1, 1) * 1e4).astype(np.float32)
    _check(tg.logaddexp, torch.logaddexp, [a, b], data, rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(_np_of(tg.logaddexp(tg.tensor(a), tg.tensor(b)))))


def _torch_clamp(a, lo, hi):
    if torch.broadcast_shapes(a.shape, lo.shape, hi.shape) == a.shape:
        return torch.clamp(a, lo, hi)
    # torch.clamp's backward fails when the bounds broadcast the input up to a
    # larger shape; the same function, composed
    return torch.minimum(torch.maximum(a, lo), hi)


@SOME
@given(data=st.data(),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3,
                                                min_side=0, max_side=3),
       which=st.sampled_from(["both", "min", "max"]))
def test_clamp_tensor_bounds(data, shapes, which):
    s, s_lo, s_hi = shapes.input_shapes
    x = np.round(_array(data, s, -2, 2) * 5) / 5
    lo = np.round(_array(data, s_lo, -2, 1) * 5) / 5 + 0.1
    hi = np.round(_array(data, s_hi, -1, 2) * 5) / 5 + 0.1
    # min > max is allowed (PyTorch gives max there); avoid lo == hi ties
    hi = np.where(np.abs(hi - lo) < 1e-9, hi + 0.2, hi) if lo.shape == hi.shape else hi
    if which == "both":
        if lo.shape != hi.shape and np.any(np.isclose(*np.broadcast_arrays(lo, hi))):
            hi = hi + 0.05  # keep lo and hi tie-free under broadcasting too
        _check(lambda a, lw, h: tg.clamp(a, lw, h), _torch_clamp, [x, lo, hi], data)
    elif which == "min":
        _check(lambda a, lw: tg.clamp(a, min=lw), lambda a, lw: torch.clamp(a, min=lw),
               [x, lo], data)
    else:
        _check(lambda a, h: tg.clip(a, max=h), lambda a, h: torch.clip(a, max=h),
               [x, hi], data)


@SOME
@given(data=st.data(), shape=_shape(max_dims=3),
       lo=st.floats(-1.5, 0.5).map(lambda v: round(v, 1) + 0.05),
       width=st.floats(0.1, 2.0).map(lambda v: round(v, 1)),
       method=st.booleans())
def test_clamp_scalar_bounds(data, shape, lo, width, method):
    x = np.round(_array(data, shape, -2, 2) * 10) / 10
    hi = lo + width
    if method:
        _check(lambda a: a.clamp(lo, hi), lambda a: a.clamp(lo, hi), [x], data)
    else:
        _check(lambda a: tg.clamp(a, min=lo, max=hi), lambda a: torch.clamp(a, lo, hi),
               [x], data)


@SOME
@given(data=st.data(),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=4,
                                                min_side=0, max_side=3))
def test_where_broadcasting(data, shapes):
    sc, sx, sy = shapes.input_shapes
    cond = _array(data, sc) > 0
    x, y = _array(data, sx), _array(data, sy)
    _check(tg.where, torch.where, [cond, x, y], data, order2=True)
    _check(lambda c, a: tg.where(c, a, 0.5), lambda c, a: torch.where(c, a, 0.5),
           [cond, x], data)


@SOME
@given(data=st.data(),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                min_side=0, max_side=3))
def test_predicates_and_logical_ops(data, shapes):
    """isnan/isinf/isfinite and logical ops: bool results, broadcasting, no gradient."""
    s1, s2 = shapes.input_shapes
    rng = _rng(data, "specials")
    a = np.array(_array(data, s1))
    if a.size:
        a.reshape(-1)[rng.integers(0, a.size, size=2)] = rng.choice([np.nan, np.inf, -np.inf, 0.0],
                                                                    size=2)
    b = _array(data, s2) > 0
    for fn, tfn in ((tg.isnan, torch.isnan), (tg.isinf, torch.isinf),
                    (tg.isfinite, torch.isfinite), (tg.logical_not, torch.logical_not)):
        _check(fn, tfn, [a], data)
    for fn, tfn in ((tg.logical_and, torch.logical_and), (tg.logical_or, torch.logical_or)):
        _check(fn, tfn, [a, b], data)
        _check(fn, tfn, [b, a], data)


# ---------------------------------------------------------------- reductions
def _reduced_count(shape, dims):
    nd = len(shape)
    return int(np.prod([shape[d] for d in _canon(dims, nd)])) if nd else 1


def _t_multi(fn, x, dims, keepdim):
    """torch reduction over several dims for functions that take one int dim."""
    cd = _canon(dims, x.ndim)
    if x.ndim == 0:
        return fn(x)
    for d in sorted(cd, reverse=True):
        x = fn(x, dim=d, keepdim=True)
    if not keepdim:
        x = x.reshape([s for i, s in enumerate(x.shape) if i not in cd])
    return x


@SOME
@given(data=st.data(), shape=_shape(max_dims=3, max_side=3), keepdim=st.booleans(),
       zeros=st.sampled_from([0, 1, 2]))
def test_prod(data, shape, keepdim, zeros):
    a = _array(data, shape, 0.5, 1.5) * np.where(_array(data, shape) > 0, 1, -1)
    a = np.array(a)
    if zeros and a.size:  # exact zeros: the classic prod-gradient trap
        idx = _rng(data, "zero seed").choice(a.size, size=min(zeros, a.size), replace=False)
        a.reshape(-1)[idx] = 0.0
    dims = _dims(data, len(shape), allow_tuple=True)
    if dims is None:
        _check(lambda x: tg.prod(x, keepdim=keepdim) if keepdim else tg.prod(x),
               lambda x: _t_multi(torch.prod, x, None, keepdim) if keepdim else torch.prod(x),
               [a], data, order2=True)
    else:
        _check(lambda x: tg.prod(x, dim=dims, keepdim=keepdim),
               lambda x: _t_multi(torch.prod, x, dims, keepdim), [a], data, order2=True)


@pytest.mark.parametrize("name", ["var", "std"])
@SOME
@given(data=st.data(), shape=_shape(max_dims=3, max_side=4), keepdim=st.booleans(),
       correction=st.sampled_from([0, 1]), spelling=st.sampled_from(["correction", "unbiased"]))
def test_var_std(name, data, shape, keepdim, correction, spelling):
    dims = _dims(data, len(shape))
    n = _reduced_count(shape, dims)
    # keep the result finite and (for std) away from 0 so the gradient is defined
    hypothesis.assume(n - correction >= 1 and (name == "var" or n >= 2))
    a = _array(data, shape)
    kw = {"correction": correction} if spelling == "correction" else {"unbiased": bool(correction)}
    tdims = dims if dims is not None else tuple(range(len(shape)))
    _check(lambda x: getattr(tg, name)(x, dim=dims, keepdim=keepdim, **kw),
           lambda x: getattr(torch, name)(x, dim=tdims if len(shape) else None,
                                          keepdim=keepdim, **kw),
           [a], data, order2=True)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, max_side=3), keepdim=st.booleans())
def test_logsumexp(data, shape, keepdim):
    dims = _dims(data, len(shape), allow_none=False)
    a = _array(data, shape, -3, 3)
    tdims = dims if dims is not None else ()
    _check(lambda x: tg.logsumexp(x, dim=dims, keepdim=keepdim),
           lambda x: torch.logsumexp(x, dim=tdims, keepdim=keepdim), [a], data, order2=True)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, min_side=1, max_side=4),
       keepdim=st.booleans())
def test_logsumexp_large_magnitudes_float32(data, shape, keepdim):
    dims = _dims(data, len(shape), allow_none=False)
    a = (_array(data, shape, -1, 1) * 1e4).astype(np.float32)
    out = tg.logsumexp(tg.as_tensor(a), dim=dims, keepdim=keepdim)
    assert np.all(np.isfinite(_np_of(out))), "logsumexp overflows at +-1e4 in float32"
    _check(lambda x: tg.logsumexp(x, dim=dims, keepdim=keepdim),
           lambda x: torch.logsumexp(x, dim=dims, keepdim=keepdim), [a], data,
           rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("p", [1, 2, float("inf")])
@SOME
@given(data=st.data(), shape=_shape(max_dims=3, min_side=1, max_side=4), keepdim=st.booleans())
def test_norm(p, data, shape, keepdim):
    dims = _dims(data, len(shape))
    a = _distinct(data, shape, scale=0.3) if p == float("inf") else \
        _array(data, shape, avoid=(0,), margin=0.1)
    if dims is None:
        _check(lambda x: tg.norm(x, p=p), lambda x: torch.norm(x, p=p), [a], data)
        _check(lambda x: tg.linalg.vector_norm(x, ord=p),
               lambda x: torch.linalg.vector_norm(x, ord=p), [a], data, order2=p != 1)
    else:
        _check(lambda x: tg.norm(x, p=p, dim=dims, keepdim=keepdim),
               lambda x: torch.norm(x, p=p, dim=dims, keepdim=keepdim), [a], data)
        _check(lambda x: tg.linalg.vector_norm(x, ord=p, dim=dims, keepdim=keepdim),
               lambda x: torch.linalg.vector_norm(x, ord=p, dim=dims, keepdim=keepdim),
               [a], data, order2=True)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, max_side=4),
       zero=st.booleans())
def test_cumsum_cumprod(name, data, shape, zero):
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim")
    a = np.array(_array(data, shape, 0.5, 1.5) * np.where(_array(data, shape) > 0, 1, -1))
    if zero and a.size and name == "cumprod":
        a.reshape(-1)[_rng(data, "zero").integers(a.size)] = 0.0
    _check(lambda x: getattr(tg, name)(x, dim=dim), lambda x: getattr(torch, name)(x, dim=dim),
           [a], data, order2=True)


@pytest.mark.parametrize("name", ["max", "min"])
@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, min_side=1, max_side=4),
       keepdim=st.booleans(), method=st.booleans())
def test_max_min_with_dim(name, data, shape, keepdim, method):
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim")
    a = _distinct(data, shape)
    if method:
        _check(lambda x: getattr(x, name)(dim=dim, keepdim=keepdim),
               lambda x: getattr(x, name)(dim=dim, keepdim=keepdim), [a], data, order2=True)
    else:
        _check(lambda x: tuple(getattr(tg, name)(x, dim, keepdim)),
               lambda x: tuple(getattr(torch, name)(x, dim, keepdim)), [a], data)


@pytest.mark.parametrize("name", ["max", "min", "amax", "amin"])
@SOME
@given(data=st.data(), shape=_shape(max_dims=3, min_side=1, max_side=4))
def test_max_min_amax_amin_ties_split(name, data, shape):
    """With ties the gradient is split evenly among the extreme elements (amax
    with dims; max/min over everything), as PyTorch."""
    rng = _rng(data)
    a = rng.integers(-1, 2, size=shape).astype(np.float64)  # many ties
    if name in ("max", "min"):
        _check(lambda x: getattr(tg, name)(x), lambda x: getattr(torch, name)(x), [a], data)
    else:
        dims = _dims(data, len(shape), allow_none=False) if shape else ()
        tdims = dims if dims is not None else ()
        _check(lambda x: getattr(tg, name)(x, dim=dims),
               lambda x: getattr(torch, name)(x, dim=tdims), [a], data)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@SOME
@given(data=st.data(), shape=_shape(max_dims=3, min_side=1, max_side=4), keepdim=st.booleans())
def test_argmax_argmin(name, data, shape, keepdim):
    a = _distinct(data, shape)
    dims = _dims(data, len(shape), allow_tuple=False)
    if dims is None:
        _check(lambda x: getattr(tg, name)(x), lambda x: getattr(torch, name)(x), [a], data)
    else:
        _check(lambda x: getattr(tg, name)(x, dim=dims, keepdim=keepdim),
               lambda x: getattr(torch, name)(x, dim=dims, keepdim=keepdim), [a], data)


@pytest.mark.parametrize("name", ["all", "any"])
@SOME
@given(data=st.data(), shape=_shape(max_dims=3, max_side=3), keepdim=st.booleans(),
       kind=st.sampled_from(["bool", "float"]))
def test_all_any(name, data, shape, keepdim, kind):
    rng = _rng(data)
    p = rng.uniform()
    a = rng.uniform(size=shape) < p
    if kind == "float":
        a = np.where(a, rng.uniform(0.5, 1, size=shape), 0.0)
    dims = _dims(data, len(shape))
    x = tg.as_tensor(a)
    if dims is None:
        got = getattr(tg, name)(x)
        exp = getattr(np, name)(a)
    else:
        got = getattr(tg, name)(x, dim=dims, keepdim=keepdim)
        exp = getattr(np, name)(a, axis=dims, keepdims=keepdim)
        if isinstance(dims, int):
            tex = getattr(torch, name)(_t(a), dim=dims, keepdim=keepdim)
            np.testing.assert_array_equal(_np_of(tex), exp)
    assert got.dtype == tg.bool
    _close(_np_of(got), np.asarray(exp), f"{name}", 0, 0)


# ---------------------------------------------------------------- shape ops
@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, max_side=3),
       n=st.integers(1, 3), stack=st.booleans())
def test_cat_stack(data, shape, n, stack):
    nd = len(shape)
    if stack:
        dim = data.draw(st.integers(-nd - 1, nd), label="dim")
        arrays = [_array(data, shape) for _ in range(n)]
        _check(lambda *xs: tg.stack(list(xs), dim=dim),
               lambda *xs: torch.stack(list(xs), dim=dim), arrays, data)
    else:
        dim = data.draw(st.integers(-nd, nd - 1), label="dim")
        arrays = []
        for _ in range(n):
            s = list(shape)
            s[dim] = data.draw(st.integers(0, 3), label="size along dim")
            arrays.append(_array(data, s))
        _check(lambda *xs: tg.cat(xs, dim=dim), lambda *xs: torch.cat(xs, dim=dim),
               arrays, data)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, max_side=5),
       kind=st.sampled_from(["split_int", "split_sections", "chunk"]))
def test_split_chunk(data, shape, kind):
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim")
    size = shape[dim]
    a = _array(data, shape)
    if kind == "split_int":
        k = data.draw(st.integers(1, max(size, 1) + 1), label="split size")
        fns = (lambda x: tg.split(x, k, dim=dim), lambda x: torch.split(x, k, dim=dim))
    elif kind == "split_sections":
        parts = []
        rest = size
        while rest > 0:
            p = data.draw(st.integers(0, rest), label="section")
            parts.append(p)
            rest -= p
        parts.append(0)
        fns = (lambda x: x.split(parts, dim=dim), lambda x: x.split(parts, dim=dim))
    else:
        hypothesis.assume(size > 0)
        k = data.draw(st.integers(1, size + 1), label="chunks")
        fns = (lambda x: tg.chunk(x, k, dim=dim), lambda x: torch.chunk(x, k, dim=dim))
    _check(*fns, [a], data)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=4, max_side=3))
def test_flip(data, shape):
    nd = len(shape)
    dims = data.draw(st.lists(st.integers(-nd, nd - 1), unique_by=lambda d: d % nd,
                              min_size=1, max_size=nd), label="dims")
    a = _array(data, shape)
    _check(lambda x: tg.flip(x, dims), lambda x: torch.flip(x, dims), [a], data)


@SOME
@given(data=st.data(), shape=_shape(max_dims=3, max_side=4))
def test_roll(data, shape):
    nd = len(shape)
    a = _array(data, shape)
    if nd == 0 or data.draw(st.booleans(), label="flat"):
        s = data.draw(st.integers(-7, 7), label="shift")
        _check(lambda x: tg.roll(x, s), lambda x: torch.roll(x, s), [a], data)
        return
    dims = data.draw(st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=nd),
                     label="dims")
    shifts = [data.draw(st.integers(-7, 7), label="shift") for _ in dims]
    if len(dims) == 1 and data.draw(st.booleans(), label="int form"):
        _check(lambda x: tg.roll(x, shifts[0], dims[0]),
               lambda x: torch.roll(x, shifts[0], dims[0]), [a], data)
    else:
        _check(lambda x: tg.roll(x, tuple(shifts), tuple(dims)),
               lambda x: torch.roll(x, tuple(shifts), tuple(dims)), [a], data)


@SOME
@given(data=st.data(), shape=_shape(max_dims=3, max_side=3), tile=st.booleans())
def test_repeat_tile(data, shape, tile):
    nd = len(shape)
    lo = 0 if tile else nd
    reps = tuple(data.draw(st.lists(st.integers(0, 3), min_size=max(lo, 1), max_size=nd + 2),
                           label="reps"))
    a = _array(data, shape)
    if tile:
        _check(lambda x: tg.tile(x, reps), lambda x: torch.tile(x, reps), [a], data)
    else:
        _check(lambda x: x.repeat(*reps), lambda x: x.repeat(*reps), [a], data)
        _check(lambda x: tg.repeat(x, *reps), lambda x: x.repeat(*reps), [a], data)


@SOME
@given(data=st.data(), mode=st.sampled_from(["constant", "reflect", "replicate"]))
def test_pad(data, mode):
    if mode == "constant":
        shape = data.draw(_shape(min_dims=1, max_dims=4, max_side=3), label="shape")
        k = data.draw(st.integers(1, len(shape)), label="padded dims")
        pad = []
        for i in range(k):
            size = shape[len(shape) - 1 - i]
            lo = data.draw(st.integers(-size // 2 if size else 0, 2), label="pad lo")
            # negative pads crop (torch narrows first): keep the size non-negative
            hi = data.draw(st.integers(-((size + min(lo, 0)) // 2), 2), label="pad hi")
            pad += [lo, hi]
        value = data.draw(st.sampled_from([0.0, 1.5, -2.0]), label="value")
        a = _array(data, shape)
        _check(lambda x: F.pad(x, tuple(pad), mode="constant", value=value),
               lambda x: TF.pad(x, tuple(pad), mode="constant", value=value), [a], data)
        _check(lambda x: tg.pad(x, tuple(pad), value=value),
               lambda x: TF.pad(x, tuple(pad), value=value), [a], data)
        return
    k = data.draw(st.integers(1, 2), label="padded dims")
    batch = data.draw(st.integers(1, 2), label="leading dims")  # (C,...) or (N,C,...)
    spatial = [data.draw(st.integers(1, 4), label="spatial") for _ in range(k)]
    shape = tuple(data.draw(st.integers(1, 2), label="lead") for _ in range(batch)) + \
        tuple(spatial)
    pad = []
    for s in reversed(spatial):
        top = s - 1 if mode == "reflect" else 3
        pad += [data.draw(st.integers(0, top), label="pad") for _ in range(2)]
    a = _array(data, shape)
    _check(lambda x: F.pad(x, tuple(pad), mode=mode), lambda x: TF.pad(x, tuple(pad), mode=mode),
           [a], data, order2=True)


@pytest.mark.parametrize("name", ["tril", "triu"])
@SOME
@given(data=st.data(), shape=_shape(min_dims=2, max_dims=4, max_side=4),
       diagonal=st.integers(-4, 4))
def test_tril_triu(name, data, shape, diagonal):
    a = _array(data, shape)
    _check(lambda x: getattr(tg, name)(x, diagonal=diagonal),
           lambda x: getattr(torch, name)(x, diagonal=diagonal), [a], data)
    _check(lambda x: getattr(x, name)(diagonal),
           lambda x: getattr(x, name)(diagonal), [a], data)


@SOME
@given(data=st.data(), shape=_shape(min_dims=2, max_dims=4, max_side=4),
       offset=st.integers(-4, 4))
def test_diagonal(data, shape, offset):
    nd = len(shape)
    d1, d2 = data.draw(st.lists(st.integers(0, nd - 1), min_size=2, max_size=2, unique=True),
                       label="dims")
    if data.draw(st.booleans(), label="neg1"):
        d1 -= nd
    if data.draw(st.booleans(), label="neg2"):
        d2 -= nd
    a = _array(data, shape)
    _check(lambda x: tg.diagonal(x, offset=offset, dim1=d1, dim2=d2) * 1.0,
           lambda x: torch.diagonal(x, offset=offset, dim1=d1, dim2=d2) * 1.0, [a], data,
           order2=True)
    _check(lambda x: x.diagonal(offset, d1, d2), lambda x: x.diagonal(offset, d1, d2),
           [a], data)


@SOME
@given(data=st.data(), n=st.integers(0, 4), m=st.integers(0, 4), diag=st.integers(-3, 3),
       vector=st.booleans())
def test_diag(data, n, m, diag, vector):
    a = _array(data, (n,) if vector else (n, m))
    _check(lambda x: tg.diag(x, diag), lambda x: torch.diag(x, diag), [a], data)


# ---------------------------------------------------------------- indexing ops
def _index_for(data, shape, dim, size_along):
    """int64 indices in [0, shape[dim]) of ``shape`` with ``size_along`` along dim."""
    s = list(shape)
    s[dim] = size_along
    rng = _rng(data, "index seed")
    return rng.integers(0, max(shape[dim], 1), size=s).astype(np.int64)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, min_side=1, max_side=4))
def test_gather(data, shape):
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim")
    ishape = [data.draw(st.integers(0, s), label="index size") for s in shape]
    ishape[dim] = data.draw(st.integers(0, 5), label="index size along dim")  # repeats
    rng = _rng(data, "index seed")
    idx = rng.integers(0, shape[dim], size=ishape).astype(np.int64)
    a = _array(data, shape)
    _check(lambda x, i: tg.gather(x, dim, i), lambda x, i: torch.gather(x, dim, i),
           [a, idx], data, order2=True)
    _check(lambda x, i: x.gather(dim, i), lambda x, i: x.gather(dim, i), [a, idx], data)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, min_side=1, max_side=4))
def test_scatter_add(data, shape):
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim")
    ishape = [data.draw(st.integers(0, s), label="index size") for s in shape]
    ishape[dim] = data.draw(st.integers(0, 5), label="index size along dim")
    rng = _rng(data, "index seed")
    idx = rng.integers(0, shape[dim], size=ishape).astype(np.int64)
    a, src = _array(data, shape), _array(data, ishape)
    _check(lambda x, i, s: tg.scatter_add(x, dim, i, s),
           lambda x, i, s: torch.scatter_add(x, dim, i, s), [a, idx, src], data, order2=True)
    # a src larger than the index: only its leading index-shaped block is used, the
    # rest gets a zero gradient (torch's own backward refuses this case)
    big = _array(data, [s + data.draw(st.integers(0, 1), label="src extra") for s in ishape])
    x, sb = tg.as_tensor(a).requires_grad_(), tg.as_tensor(big).requires_grad_()
    out = tg.scatter_add(x, dim, tg.as_tensor(idx), sb)
    block = tuple(slice(0, s) for s in ishape)
    exp = torch.scatter_add(_t(a), dim, _t(idx), _t(big)[block])
    _close(_np_of(out), exp.numpy(), "scatter_add with a larger src", 1e-12, 1e-12)
    v = _rng(data, "v").standard_normal(out.shape)
    _, gs = tg.grad(out, [x, sb], grad_outputs=tg.tensor(v))
    gexp = np.zeros(big.shape)
    gexp[block] = torch.gather(torch.tensor(v), dim, _t(idx)).numpy()
    _close(_np_of(gs), gexp, "gradient of the larger src", 1e-12, 1e-12)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, min_side=1, max_side=4),
       n=st.integers(0, 6))
def test_index_select(data, shape, n):
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim")
    idx = _rng(data, "index seed").integers(0, shape[dim], size=n).astype(np.int64)
    a = _array(data, shape)
    _check(lambda x, i: tg.index_select(x, dim, i), lambda x, i: torch.index_select(x, dim, i),
           [a, idx], data, order2=True)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, min_side=1, max_side=4),
       flat=st.booleans())
def test_take_along_dim(data, shape, flat):
    nd = len(shape)
    a = _array(data, shape)
    rng = _rng(data, "index seed")
    if flat:
        idx = rng.integers(0, a.size, size=data.draw(st.integers(0, 6), label="n"))
        # (torch's own take_along_dim(x, i) views x as 1-D: not for a transposed x)
        _check(lambda x, i: tg.take_along_dim(x, i),
               lambda x, i: torch.take_along_dim(x.reshape(-1), i),
               [a, idx.astype(np.int64)], data)
        return
    dim = data.draw(st.integers(-nd, nd - 1), label="dim")
    # indices broadcast against the input in the other dims
    ishape = [data.draw(st.sampled_from([1, s]), label="index size") for s in shape]
    ishape[dim] = data.draw(st.integers(0, 5), label="along")
    idx = rng.integers(0, shape[dim], size=ishape).astype(np.int64)
    _check(lambda x, i: tg.take_along_dim(x, i, dim=dim),
           lambda x, i: torch.take_along_dim(x, i, dim=dim), [a, idx], data)


@SOME
@given(data=st.data(),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                min_side=0, max_side=3),
       value=st.sampled_from([0.0, -1.5, float("-inf")]))
def test_masked_fill(data, shapes, value):
    sx, sm = shapes.input_shapes
    # masked_fill broadcasts the mask to the input, not the other way round
    shape = np.broadcast_shapes(sx, sm)
    a = _array(data, shape)
    mask = _array(data, sm) > 0
    _check(lambda x, m: tg.masked_fill(x, m, value), lambda x, m: x.masked_fill(m, value),
           [a, mask], data)
    _check(lambda x, m: x.masked_fill(m, 2.0), lambda x, m: x.masked_fill(m, 2.0),
           [a, mask], data)


@SOME
@given(data=st.data(),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                min_side=0, max_side=3))
def test_masked_select(data, shapes):
    sx, sm = shapes.input_shapes
    a = _array(data, sx)
    mask = _array(data, sm) > 0
    _check(tg.masked_select, torch.masked_select, [a, mask], data)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, max_side=4),
       descending=st.booleans())
def test_sort_argsort(data, shape, descending):
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim")
    a = _distinct(data, shape)
    _check(lambda x: tuple(tg.sort(x, dim=dim, descending=descending)),
           lambda x: tuple(torch.sort(x, dim=dim, descending=descending)), [a], data,
           order2=True)
    _check(lambda x: tg.argsort(x, dim=dim, descending=descending),
           lambda x: torch.argsort(x, dim=dim, descending=descending), [a], data)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, max_side=4),
       largest=st.booleans())
def test_topk(data, shape, largest):
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim")
    k = data.draw(st.integers(0, shape[dim]), label="k")
    a = _distinct(data, shape)
    _check(lambda x: tuple(tg.topk(x, k, dim=dim, largest=largest)),
           lambda x: tuple(torch.topk(x, k, dim=dim, largest=largest)), [a], data)


# ---------------------------------------------------------------- __getitem__
@st.composite
def _index(draw, shape):
    """A random NumPy index for ``shape``: ints (negative too), slices with any
    step (negative included), None, Ellipsis, integer arrays (with repeats,
    broadcasting against each other) and boolean masks."""
    parts = []
    d = 0
    nd = len(shape)
    used_ellipsis = False
    while d < nd:
        kind = draw(st.sampled_from(["slice", "slice", "int", "none", "array", "bool",
                                     "ellipsis", "stop"]))
        size = shape[d]
        if kind == "stop":
            break
        if kind == "slice":
            start = draw(st.one_of(st.none(), st.integers(-size - 2, size + 2)))
            stop = draw(st.one_of(st.none(), st.integers(-size - 2, size + 2)))
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2, -3]))
            parts.append(slice(start, stop, step))
            d += 1
        elif kind == "int":
            if size == 0:
                continue
            parts.append(draw(st.integers(-size, size - 1)))
            d += 1
        elif kind == "none":
            parts.append(None)
        elif kind == "array":
            if size == 0:
                continue
            n = draw(st.integers(0, 4))
            parts.append(np.array(draw(st.lists(st.integers(-size, size - 1), min_size=n,
                                                max_size=n)), dtype=np.int64))
            d += 1
        elif kind == "bool":
            k = draw(st.integers(1, nd - d))
            sub = shape[d:d + k]
            mask = np.array(draw(st.lists(st.booleans(), min_size=int(np.prod(sub)),
                                          max_size=int(np.prod(sub)))), dtype=bool)
            parts.append(mask.reshape(sub))
            d += k
        elif kind == "ellipsis" and not used_ellipsis:
            used_ellipsis = True
            parts.append(Ellipsis)
            d = nd - draw(st.integers(0, nd - d))
    if draw(st.booleans()) and len(parts) == 1:
        return parts[0]
    return tuple(parts)


def _n_adv(index):
    idx = index if isinstance(index, tuple) else (index,)
    return sum(isinstance(i, np.ndarray) for i in idx)


@MORE
@given(data=st.data(), shape=_shape(max_dims=4, max_side=4))
def test_getitem_vs_numpy(data, shape):
    """Forward vs NumPy (torch refuses negative steps); the gradient is the
    scatter-add of the cotangent into the indexed positions (repeats accumulate),
    computed with np.add.at on the flat positions NumPy's indexing selects."""
    index = data.draw(_index(shape), label="index")
    try:
        pos = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[index]
    except (IndexError, ValueError):
        hypothesis.assume(False)  # e.g. integer arrays that do not broadcast together
    a = _array(data, shape)
    exp = np.asarray(a[index])
    x = tg.as_tensor(a).requires_grad_()
    out = x[index]
    got = _np_of(out)
    assert got.shape == exp.shape, f"x[{index!r}]: shape {got.shape} vs NumPy {exp.shape}"
    np.testing.assert_array_equal(got, exp)
    v = _rng(data, "cotangent").standard_normal(exp.shape)
    gexp = np.zeros(a.size)
    np.add.at(gexp, np.asarray(pos).reshape(-1), v.reshape(-1))
    (g,) = tg.grad(out, [x], grad_outputs=tg.tensor(v), create_graph=True)
    np.testing.assert_allclose(_np_of(g), gexp.reshape(shape), rtol=1e-12, atol=1e-12,
                               err_msg=f"gradient of x[{index!r}]")
    # the gradient of the gradient (a linear map of v, not of x) is zero
    w = _rng(data, "w").standard_normal(shape)
    if g.requires_grad:
        (gg,) = tg.grad((g * tg.tensor(w)).sum(), [x], allow_unused=True)
        if gg is not None:
            np.testing.assert_array_equal(_np_of(gg), np.zeros(shape))


def _torchable(index):
    idx = index if isinstance(index, tuple) else (index,)
    return all(not (isinstance(i, slice) and i.step is not None and i.step < 0) for i in idx)


@SOME
@given(data=st.data(), shape=_shape(max_dims=3, max_side=4))
def test_getitem_vs_torch(data, shape):
    """Indices torch accepts (no negative steps): values and gradients vs torch."""
    index = data.draw(_index(shape), label="index")
    hypothesis.assume(_torchable(index))
    try:
        np.empty(shape)[index]
    except (IndexError, ValueError):
        hypothesis.assume(False)
    tindex = tuple(torch.from_numpy(i) if isinstance(i, np.ndarray) else i
                   for i in (index if isinstance(index, tuple) else (index,)))
    a = _array(data, shape)
    _check(lambda x: x[index], lambda x: x[tindex], [a], data)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, min_side=1, max_side=4))
def test_getitem_negative_step_gradient_vs_flip(data, shape):
    """x[::-k] along a random dim equals torch.flip(x)[::k]: values and gradients."""
    nd = len(shape)
    dim = data.draw(st.integers(0, nd - 1), label="dim")
    k = data.draw(st.integers(1, 3), label="step")
    idx = (slice(None),) * dim + (slice(None, None, -k),)
    tidx = (slice(None),) * dim + (slice(None, None, k),)
    a = _array(data, shape)
    _check(lambda x: x[idx], lambda x: torch.flip(x, (dim,))[tidx], [a], data)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, min_side=1, max_side=4),
       n=st.integers(0, 8))
def test_getitem_integer_array_repeats(data, shape, n):
    """x[idx] with repeated (and negative) indices accumulates the gradient."""
    rng = _rng(data, "index seed")
    idx = rng.integers(-shape[0], shape[0], size=n).astype(np.int64)
    if n:
        idx[-1] = idx[0]  # at least one repeat
    a = _array(data, shape)
    _check(lambda x: x[idx], lambda x: x[torch.from_numpy(idx)], [a], data)
    if len(shape) >= 2:
        j = rng.integers(0, shape[1], size=n).astype(np.int64)
        _check(lambda x: x[idx, j], lambda x: x[torch.from_numpy(idx), torch.from_numpy(j)],
               [a], data)
        _check(lambda x: x[:, j], lambda x: x[:, torch.from_numpy(j)], [a], data)


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=3, max_side=4))
def test_getitem_boolean_mask(data, shape):
    k = data.draw(st.integers(1, len(shape)), label="mask dims")
    mask = _array(data, shape[:k]) > 0
    a = _array(data, shape)
    _check(lambda x: x[mask], lambda x: x[torch.from_numpy(np.array(mask))], [a], data)
    _check(lambda x, m: x[m], lambda x, m: x[m], [a, np.array(mask)], data)


# ---------------------------------------------------------------- nn.functional
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=4, max_side=4))
def test_softmax_log_softmax(name, data, shape):
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim")
    a = _array(data, shape, -4, 4)
    _check(lambda x: getattr(F, name)(x, dim=dim), lambda x: getattr(TF, name)(x, dim=dim),
           [a], data, order2=True)
    _check(lambda x: getattr(x, name)(dim), lambda x: getattr(x, name)(dim), [a], data)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@FEW
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=2, min_side=1, max_side=4))
def test_softmax_large_magnitudes_float32(name, data, shape):
    a = (_array(data, shape, -1, 1) * 1e4).astype(np.float32)
    out = getattr(F, name)(tg.as_tensor(a), dim=-1)
    o = _np_of(out)
    assert not np.any(np.isnan(o)) and not np.any(o == np.inf), f"{name} overflows: {o}"
    _check(lambda x: getattr(F, name)(x, dim=-1), lambda x: getattr(TF, name)(x, dim=-1),
           [a], data, rtol=1e-5, atol=1e-5)


@SOME
@given(data=st.data(), n=st.integers(1, 4), c=st.integers(1, 4),
       extra=st.lists(st.integers(1, 3), max_size=2),
       reduction=st.sampled_from(["mean", "sum", "none"]),
       label_smoothing=st.sampled_from([0.0, 0.1, 0.37]),
       ignore=st.sampled_from([None, -100, 0, 1, 7]),
       weighted=st.booleans(), probs=st.booleans())
def test_cross_entropy(data, n, c, extra, reduction, label_smoothing, ignore, weighted, probs):
    shape = (n, c) + tuple(extra)
    tshape = (n,) + tuple(extra)
    a = _array(data, shape, -3, 3)
    rng = _rng(data, "target seed")
    w = rng.uniform(0.5, 2, size=c) if weighted else None
    kw = dict(reduction=reduction, label_smoothing=label_smoothing)
    if probs:
        p = rng.uniform(0.01, 1, size=shape)
        p = p / p.sum(axis=1, keepdims=True)
        arrays = [a, p] + ([w] if weighted else [])
        fn_tg = lambda x, t, *ws: F.cross_entropy(x, t, *ws, **kw)  # noqa: E731
        fn_t = lambda x, t, *ws: TF.cross_entropy(x, t, *ws, **kw)  # noqa: E731
        _check(fn_tg, fn_t, arrays, data, order2=True, nograd=(2,))
        return
    target = rng.integers(0, c, size=tshape).astype(np.int64)
    if ignore is not None:
        kw["ignore_index"] = ignore
        drop = rng.uniform(size=tshape) < 0.3
        target = np.where(drop, ignore, target)
        if reduction == "mean" and np.all(target == ignore):
            target.reshape(-1)[0] = (ignore + 1) % c if 0 <= ignore < c else 0
            hypothesis.assume(not np.all(target == ignore))
    arrays = [a, target] + ([w] if weighted else [])
    _check(lambda x, t, *ws: F.cross_entropy(x, t, *ws, **kw),
           lambda x, t, *ws: TF.cross_entropy(x, t, *ws, **kw), arrays, data, order2=True,
           nograd=(2,))  # torch does not differentiate the class weights


@SOME
@given(data=st.data(), shape=_shape(min_dims=1, max_dims=4, min_side=1, max_side=4),
       affine=st.sampled_from(["none", "weight", "both"]),
       eps=st.sampled_from([1e-5, 0.1]))
def test_layer_norm(data, shape, affine, eps):
    k = data.draw(st.integers(1, len(shape)), label="normalized dims")
    ns = tuple(shape[len(shape) - k:])
    a = _array(data, shape)
    arrays = [a]
    if affine != "none":
        arrays.append(_array(data, ns))
    if affine == "both":
        arrays.append(_array(data, ns))
    _check(lambda x, *wb: F.layer_norm(x, ns, *wb, eps=eps),
           lambda x, *wb: TF.layer_norm(x, ns, *wb, eps=eps), arrays, data, order2=True)


@st.composite
def _conv_case(draw, nspatial):
    groups = draw(st.integers(1, 2))
    cin = groups * draw(st.integers(1, 2))
    cout = groups * draw(st.integers(1, 2))
    n = draw(st.integers(1, 2))
    ks = [draw(st.integers(1, 3)) for _ in range(nspatial)]
    stride = [draw(st.integers(1, 2)) for _ in range(nspatial)]
    dil = [draw(st.integers(1, 2)) for _ in range(nspatial)]
    pad = [draw(st.integers(0, 2)) for _ in range(nspatial)]
    sizes = []
    for k, d, p in zip(ks, dil, pad):
        lo = max(1, d * (k - 1) + 1 - 2 * p)  # output at least one element
        sizes.append(draw(st.integers(lo, lo + 3)))
    bias = draw(st.booleans())
    as_int = draw(st.booleans()) and nspatial == 1
    def f(v):
        return v[0] if as_int or (len(set(v)) == 1 and draw(st.booleans())) else tuple(v)
    return dict(x=(n, cin) + tuple(sizes), w=(cout, cin // groups) + tuple(ks), bias=bias,
                attrs=dict(stride=f(stride), padding=f(pad), dilation=f(dil), groups=groups))


@pytest.mark.parametrize("nd", [1, 2])
@SOME
@given(data=st.data(), case=st.data())
def test_conv(nd, data, case):
    c = case.draw(_conv_case(nd), label="conv case")
    arrays = [_array(data, c["x"]), _array(data, c["w"])]
    if c["bias"]:
        arrays.append(_array(data, (c["w"][0],)))
    attrs = c["attrs"]
    fn_tg, fn_t = (F.conv1d, TF.conv1d) if nd == 1 else (F.conv2d, TF.conv2d)
    _check(lambda x, w, *b: fn_tg(x, w, *b, **attrs), lambda x, w, *b: fn_t(x, w, *b, **attrs),
           arrays, data, order2=nd == 2)


@st.composite
def _pool_case(draw):
    ks = [draw(st.integers(1, 3)) for _ in range(2)]
    stride = draw(st.one_of(st.none(), st.lists(st.integers(1, 3), min_size=2, max_size=2)))
    pad = [draw(st.integers(0, k // 2)) for k in ks]
    ceil_mode = False
    sizes = [draw(st.integers(max(1, k - 2 * p), 5)) for k, p in zip(ks, pad)]
    lead = tuple(draw(st.lists(st.integers(1, 2), min_size=2, max_size=2)))
    return lead + tuple(sizes), dict(kernel_size=tuple(ks),
                                     stride=tuple(stride) if stride else None,
                                     padding=tuple(pad), ceil_mode=ceil_mode)


@SOME
@given(data=st.data(), case=_pool_case(), dilation=st.sampled_from([1, 2]))
def test_max_pool2d(data, case, dilation):
    shape, attrs = case
    attrs = dict(attrs, dilation=dilation)
    # the effective window must still fit the padded input
    for k, p, s in zip(attrs["kernel_size"], attrs["padding"], shape[-2:]):
        hypothesis.assume(dilation * (k - 1) + 1 <= s + 2 * p)
    a = _distinct(data, shape)
    # windows lying entirely in the padding: test_max_pool2d_window_all_padding
    hypothesis.assume(np.all(np.isfinite(TF.max_pool2d(_t(a), **attrs).numpy())))
    _check(lambda x: F.max_pool2d(x, **attrs), lambda x: TF.max_pool2d(x, **attrs), [a], data,
           order2=True)
    _check(lambda x: tuple(F.max_pool2d(x, return_indices=True, **attrs)),
           lambda x: tuple(TF.max_pool2d(x, return_indices=True, **attrs)), [a], data)


def test_max_pool2d_window_all_padding():
    """With dilation a window can lie entirely in the padding: torch outputs -inf
    there and routes its gradient nowhere."""
    a = np.full((1, 1, 1, 1), 0.5)
    attrs = dict(kernel_size=(1, 2), padding=(0, 1), dilation=2)
    _check(lambda x: F.max_pool2d(x, **attrs), lambda x: TF.max_pool2d(x, **attrs), [a],
           _FixedData())


@SOME
@given(data=st.data(), case=_pool_case(), count_include_pad=st.booleans())
def test_avg_pool2d(data, case, count_include_pad):
    shape, attrs = case
    a = _array(data, shape)
    _check(lambda x: F.avg_pool2d(x, count_include_pad=count_include_pad, **attrs),
           lambda x: TF.avg_pool2d(x, count_include_pad=count_include_pad, **attrs), [a], data,
           order2=True)


@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d"])
@FEW
@given(data=st.data(), case=_pool_case(), ceil_mode=st.booleans(), unbatched=st.booleans())
def test_pool2d_ceil_mode_and_unbatched(name, data, case, ceil_mode, unbatched):
    """PyTorch also takes ceil_mode=True and an unbatched (C, H, W) input."""
    shape, attrs = case
    hypothesis.assume(ceil_mode or unbatched)
    attrs = dict(attrs, ceil_mode=ceil_mode)
    if unbatched:
        shape = shape[1:]
    a = _distinct(data, shape)
    _check(lambda x: getattr(F, name)(x, **attrs), lambda x: getattr(TF, name)(x, **attrs),
           [a], data)


@SOME
@given(data=st.data(), lead=_shape(max_dims=3, max_side=3), fin=st.integers(1, 4),
       fout=st.integers(0, 4), bias=st.booleans())
def test_linear(data, lead, fin, fout, bias):
    arrays = [_array(data, tuple(lead) + (fin,)), _array(data, (fout, fin))]
    if bias:
        arrays.append(_array(data, (fout,)))
    _check(F.linear, TF.linear, arrays, data, order2=True)


@SOME
@given(data=st.data(), ishape=_shape(max_dims=3, max_side=4), num=st.integers(1, 5),
       dim=st.integers(1, 4), padding=st.booleans())
def test_embedding(data, ishape, num, dim, padding):
    rng = _rng(data, "index seed")
    idx = rng.integers(0, num, size=ishape).astype(np.int64)  # repeats likely
    w = _array(data, (num, dim))
    pidx = int(rng.integers(0, num)) if padding else None
    _check(lambda i, ww: F.embedding(i, ww, padding_idx=pidx),
           lambda i, ww: TF.embedding(i, ww, padding_idx=pidx), [idx, w], data, order2=True)


@pytest.mark.parametrize("lead", [(), (2,), (0,), (2, 3)])
@pytest.mark.parametrize("fout", [0, 3])
def test_linear_zero_in_features(lead, fout):
    """in_features == 0: the output is the bias (zeros without one), as torch."""
    rng = np.random.default_rng(0)
    x, w, b = np.zeros(lead + (0,)), np.zeros((fout, 0)), rng.standard_normal(fout)
    for args in ([x, w], [x, w, b]):
        hyp = _FixedData()
        _check(F.linear, TF.linear, args, hyp)


@pytest.mark.parametrize("ishape", [(), (3,), (2, 2)])
def test_embedding_zero_dim(ishape):
    """embedding_dim == 0: an empty (..., 0) result and an empty weight gradient."""
    idx = np.zeros(ishape, dtype=np.int64)
    _check(F.embedding, TF.embedding, [idx, np.zeros((2, 0))], _FixedData())


class _FixedData:
    """Stands in for hypothesis' ``data`` in the non-hypothesis tests."""
    def draw(self, strategy, label=None):
        return 12345
