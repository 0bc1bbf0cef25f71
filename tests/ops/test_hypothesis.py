"""Property tests against PyTorch on generated shapes: broadcasting (size-0 and
size-1 dims included), non-contiguous inputs, random dims/keepdim; values and
gradients (float64)."""
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

import tapegrad as tg  # noqa: E402

SETTINGS = settings(max_examples=25, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _array(data, shape, low=-2.0, high=2.0, away_from_zero=False):
    """float64 values for ``shape``, sometimes as a non-contiguous view."""
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    layout = data.draw(st.sampled_from(["contiguous", "transposed", "strided"]), label="layout")
    shape = tuple(shape)
    if layout == "transposed" and len(shape) >= 2:
        a = rng.uniform(low, high, size=shape[::-1]).T
    elif layout == "strided" and len(shape) >= 1:
        big = rng.uniform(low, high, size=shape[:-1] + (shape[-1] * 2,))
        a = big[..., ::2]
    else:
        a = rng.uniform(low, high, size=shape)
    a = np.asarray(a, dtype=np.float64)
    if away_from_zero:
        a = np.where(np.abs(a) < 0.3, np.sign(a + 1e-12) * 0.3 + a, a)
    assert a.shape == shape
    return a


def _check(fn_tg, fn_t, arrays, data, rtol=1e-10, atol=1e-12):
    """Forward values and gradients (for a random cotangent) agree with torch."""
    # as_tensor shares memory, so a non-contiguous layout reaches tapegrad as it is
    xs = [tg.as_tensor(a).requires_grad_() for a in arrays]
    ts = [torch.tensor(np.array(a), requires_grad=True) for a in arrays]
    out = fn_tg(*xs)
    tout = fn_t(*ts)
    assert tuple(out.shape) == tuple(tout.shape), f"shape {out.shape} vs torch {tuple(tout.shape)}"
    assert out.dtype == tg.float64
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=rtol,
                               atol=atol, equal_nan=True)
    seed = data.draw(st.integers(0, 2**32 - 1), label="cotangent seed")
    v = np.random.default_rng(seed).standard_normal(tuple(tout.shape))
    grads = tg.grad(out, xs, grad_outputs=tg.tensor(v), allow_unused=True)
    tgrads = torch.autograd.grad(tout, ts, grad_outputs=torch.tensor(v), allow_unused=True)
    for k, (g, tgr) in enumerate(zip(grads, tgrads)):
        expected = np.zeros(arrays[k].shape) if tgr is None else tgr.numpy()
        got = np.zeros(arrays[k].shape) if g is None else g.numpy()
        assert got.shape == arrays[k].shape
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=f"gradient of input {k}")


# ---------------------------------------------------------------- elementwise binary
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "maximum": (tg.maximum, torch.maximum),
    "pow": (lambda a, b: tg.abs(a) ** b, lambda a, b: torch.abs(a) ** b),
}


@pytest.mark.parametrize("name", list(BINARY))
@SETTINGS
@given(data=st.data(),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4,
                                                min_side=0, max_side=3))
def test_binary_broadcasting(name, data, shapes):
    s1, s2 = shapes.input_shapes
    fn_tg, fn_t = BINARY[name]
    a = _array(data, s1, away_from_zero=name in ("div", "pow"))
    b = _array(data, s2, away_from_zero=name == "div")
    if name == "maximum":
        # no ties (where the subgradient is a convention): a on multiples of 0.2,
        # b on multiples of 0.2 shifted by 0.1
        a = np.round(a * 5) / 5
        b = np.round(b * 5) / 5 + 0.1
    _check(fn_tg, fn_t, [a, b], data)


@SETTINGS
@given(data=st.data(), shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=3),
       scalar=st.floats(-3, 3, allow_nan=False).filter(lambda v: abs(v) > 0.1))
def test_tensor_scalar_ops(data, shape, scalar):
    a = _array(data, shape)
    _check(lambda x: (x * scalar + scalar) / scalar - x ** 2,
           lambda x: (x * scalar + scalar) / scalar - x ** 2, [a], data)


# ---------------------------------------------------------------- reductions
@st.composite
def _reduction_case(draw, allow_empty):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0 if allow_empty else 1,
                                  max_side=4))
    nd = len(shape)
    if nd == 0 or draw(st.booleans()):
        dims = None
    else:
        dims = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1, max_size=nd))))
        if draw(st.booleans()):  # negative dims
            dims = tuple(d - nd for d in dims)
    return shape, dims, draw(st.booleans())


def _reduce_t(fn, x, dims, keepdim):
    if dims is None:
        r = fn(x)
        if keepdim:
            r = r.reshape((1,) * x.ndim)
        return r
    return fn(x, dim=dims, keepdim=keepdim)


@pytest.mark.parametrize("name", ["sum", "mean"])
@SETTINGS
@given(data=st.data(), case=_reduction_case(allow_empty=True))
def test_sum_mean(name, data, case):
    shape, dims, keepdim = case
    a = _array(data, shape)
    fn = getattr(tg, name)
    tfn = getattr(torch, name)
    _check(lambda x: fn(x, dim=dims, keepdim=keepdim),
           lambda x: _reduce_t(tfn, x, dims, keepdim), [a], data)


@SETTINGS
@given(data=st.data(), case=_reduction_case(allow_empty=False))
def test_amax(data, case):
    shape, dims, keepdim = case
    a = _array(data, shape)
    _check(lambda x: tg.amax(x, dim=dims, keepdim=keepdim),
           lambda x: torch.amax(x, dim=dims if dims is not None else tuple(range(x.ndim)),
                                keepdim=keepdim), [a], data)


@SETTINGS
@given(data=st.data(), case=_reduction_case(allow_empty=False))
def test_method_spelling_and_axis_alias(data, case):
    shape, dims, keepdim = case
    a = _array(data, shape)
    _check(lambda x: x.sum(axis=dims, keepdims=keepdim),
           lambda x: _reduce_t(torch.sum, x, dims, keepdim), [a], data)


# ---------------------------------------------------------------- shape ops
@SETTINGS
@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=3))
def test_permute(data, shape):
    a = _array(data, shape)
    perm = tuple(data.draw(st.permutations(range(len(shape))), label="perm"))
    _check(lambda x: tg.permute(x, perm) * 1.0, lambda x: x.permute(*perm) * 1.0, [a], data)
    _check(lambda x: x.permute(*perm), lambda x: x.permute(*perm), [a], data)


@st.composite
def _reshape_case(draw):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4))
    sizes = list(draw(st.permutations(list(shape)))) if shape else []
    # merge some neighbours, maybe split off ones
    new = []
    for s in sizes:
        if new and draw(st.booleans()):
            new[-1] *= s
        else:
            new.append(s)
    if draw(st.booleans()):
        new.insert(draw(st.integers(0, len(new))), 1)
    if new and draw(st.booleans()):
        new[draw(st.integers(0, len(new) - 1))] = -1
    return shape, tuple(new)


@SETTINGS
@given(data=st.data(), case=_reshape_case())
def test_reshape(data, case):
    shape, new = case
    a = _array(data, shape)
    _check(lambda x: tg.reshape(x, new), lambda x: torch.reshape(x, new), [a], data)
    _check(lambda x: x.reshape(*new) if new else x.reshape(()),
           lambda x: x.reshape(*new) if new else x.reshape(()), [a], data)


@SETTINGS
@given(data=st.data(), shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
def test_reshape_of_size_zero_and_views_chain(data, shape):
    a = _array(data, shape)
    _check(lambda x: tg.reshape(x, (-1,)).unsqueeze(0).squeeze(0),
           lambda x: torch.reshape(x, (-1,)).unsqueeze(0).squeeze(0), [a], data)


# ---------------------------------------------------------------- matmul
@st.composite
def _matmul_case(draw):
    n, k, m = (draw(st.integers(0, 3)) for _ in range(3))
    kind = draw(st.sampled_from(["vv", "mv", "vm", "mm", "batched"]))
    if kind == "vv":
        return (k,), (k,)
    if kind == "mv":
        return (n, k), (k,)
    if kind == "vm":
        return (k,), (k, m)
    if kind == "mm":
        return (n, k), (k, m)
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2,
                                                   min_side=1, max_side=3))
    b1, b2 = batch.input_shapes
    return tuple(b1) + (n, k), tuple(b2) + (k, m)


@SETTINGS
@given(data=st.data(), shapes=_matmul_case())
def test_matmul(data, shapes):
    s1, s2 = shapes
    a, b = _array(data, s1), _array(data, s2)
    _check(lambda x, y: x @ y, lambda x, y: x @ y, [a, b], data)
    _check(tg.matmul, torch.matmul, [a, b], data)
