"""PyTorch's ``out=`` on factories (``arange``, ``full``, ``eye``, ``linspace``,
``logspace``, ``rand``, ``randn``, ``randint``), reductions (``sum``, ``prod``,
``argmax``, ...), ``quantile`` and the functions returning values and indices
(``max``/``min`` over a dim, ``sort``, ``topk``, ``kthvalue``, ``median``, ``mode``,
``cummax``, ``cummin``), each against ``torch`` with the same call."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")

X = np.array([[3.0, 1.0, 2.0, 2.5], [0.0, 5.0, 4.0, 6.0], [7.0, -1.0, 0.5, 3.0]],
             np.float32)


def _pair(lib, dt=None):
    return (lib.empty(0), lib.empty(0, dtype=lib.int64))


FACTORIES = [("arange", (5,), {}), ("arange", (1, 4, 0.5), {}), ("full", ((2, 3), 1.5), {}),
             ("eye", (3,), {}), ("eye", (2, 4), {}), ("linspace", (0, 1, 5), {}),
             ("logspace", (0, 2, 3), {})]


@pytest.mark.parametrize("name,args,kw", FACTORIES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_factories_write_out_in_its_dtype(name, args, kw, dtype):
    if name in ("linspace", "logspace") and dtype == "int64":
        args = (0, 8, 5)
    if name == "arange" and dtype == "int64":
        args = tuple(int(a) + 1 for a in args)
    out = tg.zeros(0, dtype=getattr(tg, dtype))
    r = getattr(tg, name)(*args, out=out, **kw)
    tout = torch.zeros(0, dtype=getattr(torch, dtype))
    ref = getattr(torch, name)(*args, out=tout, **kw)
    assert r is out and out.dtype == getattr(tg, dtype)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["rand", "randn"])
def test_random_factories_write_out(name):
    out = tg.zeros(2, 3, dtype=tg.float64)
    tg.manual_seed(0)
    r = getattr(tg, name)(2, 3, out=out)
    tg.manual_seed(0)
    ref = getattr(tg, name)(2, 3, dtype=tg.float64)
    assert r is out and out.dtype == tg.float64
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    ints = tg.zeros(4, dtype=tg.int64)
    assert tg.randint(0, 3, (4,), out=ints) is ints and ints.dtype == tg.int64
    assert ((ints.numpy() >= 0) & (ints.numpy() < 3)).all()


REDUCTIONS = [("sum", (1,)), ("prod", (0,)), ("nansum", (1,)), ("argmax", (1,)),
              ("argmin", (0,)), ("mean", (1,)), ("amax", (1,))]


@pytest.mark.parametrize("name,args", REDUCTIONS)
def test_reductions_write_out(name, args):
    int_result = name.startswith("arg")
    out = tg.empty(0, dtype=tg.int64 if int_result else tg.float32)
    r = getattr(tg, name)(tg.tensor(X), *args, out=out)
    tout = torch.empty(0, dtype=torch.int64 if int_result else torch.float32)
    getattr(torch, name)(torch.tensor(X), *args, out=tout)
    assert r is out
    np.testing.assert_allclose(out.numpy(), tout.numpy(), rtol=1e-6)


PAIRS = [("max", (1,)), ("min", (0,)), ("sort", (1,)), ("topk", (2,)), ("kthvalue", (2, 1)),
         ("median", (1,)), ("mode", (1,)), ("cummax", (1,)), ("cummin", (0,))]


@pytest.mark.parametrize("name,args", PAIRS)
def test_values_and_indices_write_their_pair(name, args):
    v, i = _pair(tg)
    r = getattr(tg, name)(tg.tensor(X), *args, out=(v, i))
    tv, ti = _pair(torch)
    ref = getattr(torch, name)(torch.tensor(X), *args, out=(tv, ti))
    assert r[0] is v and r[1] is i and r.values is v and r.indices is i
    assert r._fields == ("values", "indices") and ref.values is tv and ref.indices is ti
    np.testing.assert_allclose(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())


def test_quantile_writes_out():
    out = tg.empty(0)
    r = tg.quantile(tg.tensor(X), 0.3, dim=1, out=out)
    tout = torch.empty(0)
    torch.quantile(torch.tensor(X), 0.3, dim=1, out=tout)
    assert r is out
    np.testing.assert_allclose(out.numpy(), tout.numpy(), rtol=1e-6)
    n = tg.empty(0)
    assert tg.nanquantile(tg.tensor(X), 0.5, out=n) is n


def test_bad_out_is_refused_as_torch():
    x = tg.tensor(X)
    with pytest.raises(TypeError, match="tuple of 2 Tensors"):
        tg.max(x, 1, out=tg.empty(0))
    with pytest.raises(TypeError, match="must be Tensor"):
        tg.arange(3, out=[0, 0, 0])
    with pytest.raises(RuntimeError, match="automatic differentiation"):
        tg.sum(tg.ones(3, requires_grad=True), out=tg.empty(0))
    with pytest.raises(RuntimeError, match="can't be cast"):
        tg.sum(x, 1, out=tg.empty(0, dtype=tg.int64))
