"""The generic in-place methods (``ops/methods.py``: ``x.foo_()`` from ``foo``) and
the other in-place methods, against PyTorch: values, gradients through an
in-place op on a non-leaf and on a view, the version counter, the leaf refusal, the
dtype rule, forward mode; the shape-changing and random in-place methods."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.ops import methods

RNG = np.random.default_rng(3)
X = RNG.uniform(0.1, 0.9, (3, 4))
Y = RNG.uniform(0.1, 0.9, (3, 4))

# method -> extra arguments (tensors by the names "y", "i")
ARGS = {"atan2": ("y",), "arctan2": ("y",), "lerp": ("y", 0.3), "hypot": ("y",),
        "copysign": ("y",), "xlogy": ("y",), "heaviside": ("y",), "nextafter": ("y",),
        "logical_and": ("y",), "logical_or": ("y",), "logical_xor": ("y",),
        "eq": ("y",), "ne": ("y",), "lt": ("y",), "le": ("y",), "gt": ("y",), "ge": ("y",),
        "less": ("y",), "less_equal": ("y",), "greater": ("y",), "greater_equal": ("y",),
        "not_equal": ("y",), "fmod": ("y",), "remainder": ("y",), "pow": (2,),
        "float_power": (2,), "floor_divide": ("y",), "true_divide": ("y",), "divide": ("y",),
        "multiply": ("y",), "subtract": ("y",), "clamp": (0.3, 0.6), "clip": (0.3, 0.6),
        "clamp_min": (0.4,), "clamp_max": (0.4,), "cumsum": (1,), "cumprod": (1,),
        "addcdiv": ("y", "y"), "addcmul": ("y", "y"), "ldexp": ("y",), "acosh": (),
        "tril": (), "triu": (1,), "index_fill": (1, "i", -1.0),
        "masked_scatter": ("m", "y"), "index_add": (0, "i", "y2"), "index_copy": (0, "i", "y2"),
        "put": ("i", "v2"), "renorm": (2, 0, 1.0), "scatter_reduce": (1, "ii", "y", "amax"),
        "index_reduce": (0, "i", "y2", "prod"), "mvlgamma": (1,), "polygamma": (1,),
        "igamma": ("y",), "igammac": ("y",)}
SKIP_VALUES = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "gcd", "lcm",
               "bitwise_left_shift", "bitwise_right_shift", "float_power", "index_put",
               "addmm", "addmv", "addr", "addbmm", "baddbmm"}  # other dtypes/shapes: below
FLOAT = [n for n in methods.INPLACE if n not in SKIP_VALUES]


def _args(L, names, x):
    env = {"y": L.tensor(Y), "i": L.tensor(np.array([0, 2])), "m": L.tensor(X > 0.5),
           "y2": L.tensor(Y[:2]), "v2": L.tensor(np.array([5.0, 6.0])),
           "ii": L.tensor(np.array([[0, 1, 1, 3], [2, 2, 0, 0], [3, 1, 0, 2]])),
           "amax": "amax", "prod": "prod"}  # (reductions, by name)
    return [env[a] if isinstance(a, str) else a for a in names]


def _base(name):
    return X + 1 if name in ("acosh", "arccosh") else X


@pytest.mark.parametrize("name", FLOAT)
def test_inplace_values_as_torch(name):
    if not hasattr(torch.Tensor, name + "_"):
        pytest.skip(f"PyTorch has no Tensor.{name}_")  # a tapegrad extra, checked below
    a = tg.tensor(_base(name))
    b = torch.tensor(_base(name))
    ra = getattr(a, name + "_")(*_args(tg, ARGS.get(name, ()), a))
    rb = getattr(b, name + "_")(*_args(torch, ARGS.get(name, ()), b))
    assert ra is a and rb is b
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)
    assert str(a.dtype).rsplit(".")[-1] == str(b.dtype).rsplit(".")[-1]


def test_inplace_gradients_as_torch_and_version_counter():
    for lib in (tg, torch):
        x = lib.tensor(X, requires_grad=True)
        y = lib.tensor(Y, requires_grad=True)
        h = x * 2
        h.xlogy_(y).lerp_(y, 0.25).clamp_(0.2, 1.5)
        h.sum().backward()
        if lib is tg:
            gx, gy = x.grad.numpy(), y.grad.numpy()
        else:
            np.testing.assert_allclose(gx, x.grad.numpy(), rtol=1e-10)
            np.testing.assert_allclose(gy, y.grad.numpy(), rtol=1e-10)
    x = tg.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x.acosh_()
    h = x * 1
    s = h.sin()  # saves h
    h.cos_()
    with pytest.raises(RuntimeError):
        s.sum().backward()


def test_inplace_on_a_view_reaches_the_base():
    for lib in (tg, torch):
        x = lib.tensor(X, requires_grad=True)
        base = x * 1
        base[1].logit_().xlogy_(lib.tensor(Y[1]))
        base.sum().backward()
        if lib is tg:
            got = x.grad.numpy()
        else:
            np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-10)


def test_inplace_dtype_rule_and_integer_methods():
    i = tg.tensor(np.array([[12, 18], [7, 5]]))
    with pytest.raises(RuntimeError, match="can't be cast"):
        i.clone().sqrt_()
    f = tg.tensor(X)
    assert f.clone().gt_(0.5).dtype == tg.float64  # a comparison written as 1./0.
    ti = torch.tensor(np.array([[12, 18], [7, 5]]))
    for n, other in (("gcd", [[8, 12], [3, 10]]), ("lcm", [[8, 12], [3, 10]]),
                     ("bitwise_left_shift", [[1, 2], [0, 3]]),
                     ("bitwise_right_shift", [[1, 2], [0, 3]]),
                     ("bitwise_and", [[5, 3], [1, 7]])):
        a = getattr(i.clone(), n + "_")(tg.tensor(np.array(other)))
        b = getattr(ti.clone(), n + "_")(torch.tensor(other))
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_forward_mode_through_an_inplace_method():
    import tapegrad.forward_ad as fwad
    t = RNG.standard_normal((3, 4))
    with fwad.dual_level():
        x = fwad.make_dual(tg.tensor(X), tg.tensor(t))
        h = x * 1
        h.atanh_()
        tan = fwad.unpack_dual(h).tangent.numpy()
    np.testing.assert_allclose(tan, t / (1 - X ** 2), rtol=1e-10)


def test_blas_inplace_methods_as_torch():
    r = np.random.default_rng(5)
    m, a, b = r.standard_normal((3, 5)), r.standard_normal((3, 4)), r.standard_normal((4, 5))
    for lib in (tg, torch):
        out = lib.tensor(m).addmm_(lib.tensor(a), lib.tensor(b), beta=0.5, alpha=2.0)
        if lib is tg:
            got = out.numpy()
        else:
            np.testing.assert_allclose(got, out.numpy(), rtol=1e-12)


@pytest.mark.parametrize("name,args", [("t_", ()), ("transpose_", (0, 1)),
                                       ("squeeze_", ()), ("unsqueeze_", (1,)),
                                       ("swapaxes_", (0, 1))])
def test_shape_changing_inplace(name, args):
    src = X[:1] if name == "squeeze_" else X
    a, b = tg.tensor(src), torch.tensor(src)
    assert getattr(a, name)(*args) is a
    getattr(b, name)(*args)
    assert tuple(a.shape) == tuple(b.shape)
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("name,args,check", [
    ("uniform_", (2.0, 3.0), lambda v: (v >= 2).all() and (v < 3).all()),
    ("normal_", (5.0, 0.1), lambda v: abs(v.mean() - 5) < 0.1),
    ("exponential_", (2.0,), lambda v: (v > 0).all() and abs(v.mean() - 0.5) < 0.1),
    ("cauchy_", (), lambda v: np.isfinite(v).all()),
    ("log_normal_", (0.0, 0.25), lambda v: (v > 0).all()),
    ("geometric_", (0.5,), lambda v: (v >= 1).all() and (v == np.round(v)).all()),
    ("random_", (0, 5), lambda v: set(np.unique(v)) <= {0, 1, 2, 3, 4}),
    ("bernoulli_", (0.3,), lambda v: set(np.unique(v)) <= {0.0, 1.0}),
])
def test_random_fills(name, args, check):
    tg.manual_seed(0)
    x = tg.zeros(400)
    v0 = x._version
    assert getattr(x, name)(*args) is x
    assert check(x.numpy()) and x._version != v0 or x._version_number > 0
    w = tg.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        getattr(w, name)(*args)


def test_apply_map_fill_diagonal_detach_and_metadata():
    a, b = tg.tensor(X), torch.tensor(X)
    np.testing.assert_allclose(a.clone().apply_(lambda e: e * 2).numpy(),
                               b.clone().apply_(lambda e: e * 2).numpy())
    np.testing.assert_allclose(a.clone().map_(tg.tensor(Y), lambda p, q: p - q).numpy(),
                               b.clone().map_(torch.tensor(Y), lambda p, q: p - q).numpy())
    np.testing.assert_allclose(a.clone().fill_diagonal_(7.0).numpy(),
                               b.clone().fill_diagonal_(7.0).numpy())
    tall = np.zeros((7, 3))
    np.testing.assert_allclose(tg.tensor(tall).fill_diagonal_(1.0, wrap=True).numpy(),
                               torch.tensor(tall).fill_diagonal_(1.0, wrap=True).numpy())
    h = tg.tensor(X, requires_grad=True) * 2
    assert h.detach_() is h and not h.requires_grad and h.grad_fn is None
    for attr in ("itemsize", "nbytes", "is_cpu"):
        assert getattr(a, attr) == getattr(b, attr)
    assert a.T.stride() == b.T.stride() and a.stride(1) == b.stride(1)
    assert a.T.is_contiguous() == b.T.is_contiguous() and a.is_contiguous()
    assert str(a.layout) == str(b.layout) and a.get_device() == b.get_device()
    assert a.ndimension() == 2 and a.nelement() == 12 and a.is_signed()
    np.testing.assert_allclose(a.sum_to_size(1, 4).numpy(), b.sum_to_size(1, 4).numpy())
    np.testing.assert_allclose(a.unfold(1, 2, 1).numpy(), b.unfold(1, 2, 1).numpy())
    np.testing.assert_allclose(a.where(a > 0.5, tg.tensor(Y)).numpy(),
                               b.where(b > 0.5, torch.tensor(Y)).numpy())
    with pytest.raises(RuntimeError, match="expandable"):
        a.sum_to_size(5, 4)


def test_unfold_gradient_as_torch():
    for lib in (tg, torch):
        x = lib.tensor(X, requires_grad=True)
        (x.unfold(1, 3, 1) ** 2).sum().backward()
        if lib is tg:
            got = x.grad.numpy()
        else:
            np.testing.assert_allclose(got, x.grad.numpy())
