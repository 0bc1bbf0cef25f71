"""PyTorch's everyday names that programs stop on, each against PyTorch."""
import warnings
from collections import deque

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.testing import gradcheck, gradgradcheck

RNG = np.random.default_rng(1)


def _eq(t, r):
    assert tuple(t.shape) == tuple(r.shape)
    np.testing.assert_allclose(t.detach().numpy(), r.detach().numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 5), (4,), ()])
def test_t_vs_torch(shape):
    a = RNG.standard_normal(shape)
    _eq(tg.tensor(a).t(), torch.tensor(a).t())
    _eq(tg.t(tg.tensor(a)), torch.t(torch.tensor(a)))
    with pytest.raises(RuntimeError, match="<= 2 dimensions"):
        tg.ones(2, 3, 4).t()


def test_mm_vs_torch_and_gradients():
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))
    _eq(tg.mm(tg.tensor(a), tg.tensor(b)), torch.mm(torch.tensor(a), torch.tensor(b)))
    _eq(tg.tensor(a).mm(tg.tensor(b)), torch.tensor(a).mm(torch.tensor(b)))
    x, y = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
    assert gradcheck(tg.mm, (x, y)) and gradgradcheck(tg.mm, (x, y))
    for bad in [(tg.ones(3, 4), tg.ones(5, 2)), (tg.ones(3, 4, 1), tg.ones(1, 2)),
                (tg.ones(4), tg.ones(4, 2))]:
        with pytest.raises(RuntimeError, match="mm"):
            tg.mm(*bad)
    with pytest.raises(TypeError, match="mat2"):
        tg.mm(tg.ones(2, 2), None)


@pytest.mark.parametrize("dim,start,length", [(1, 2, 3), (0, -3, 2), (-1, 0, 0), (0, 4, 1)])
def test_narrow_vs_torch(dim, start, length):
    a = RNG.standard_normal((5, 6))
    _eq(tg.narrow(tg.tensor(a), dim, start, length),
        torch.narrow(torch.tensor(a), dim, start, length))
    _eq(tg.tensor(a).narrow(dim, start, length), torch.tensor(a).narrow(dim, start, length))
    x = tg.tensor(a, requires_grad=True)
    assert gradcheck(lambda v: v.narrow(dim, start, length) * 2, (x,))


def test_narrow_errors_and_view():
    x = tg.zeros(4, 6)
    with pytest.raises(RuntimeError, match="exceeds dimension size"):
        x.narrow(1, 4, 3)
    with pytest.raises(IndexError):
        x.narrow(2, 0, 1)
    with pytest.raises(IndexError, match="start out of range"):
        x.narrow(0, 9, 1)
    x.narrow(1, 1, 2).fill_(1.0)  # a view, as PyTorch's
    assert x.sum().item() == 8.0


def test_type_vs_torch():
    for dt, tdt in [(tg.float32, torch.float32), (tg.float64, torch.float64),
                    (tg.int64, torch.int64), (tg.bool, torch.bool)]:
        assert tg.ones(2, dtype=dt).type() == torch.ones(2, dtype=tdt).type()
    x = tg.tensor([1.5, -2.5])
    assert x.type(tg.int64).dtype == tg.int64
    assert x.type(tg.float64).dtype == tg.float64
    assert x.type("torch.LongTensor").dtype == tg.int64
    assert x.type(tg.LongTensor).dtype == tg.int64
    _eq(x.type(tg.int64), torch.tensor([1.5, -2.5]).type(torch.int64))
    with pytest.raises(ValueError, match="invalid type"):
        x.type("torch.NoSuchTensor")


def test_new_constructors_vs_torch():
    for dt, tdt in [(tg.float64, torch.float64), (tg.int32, torch.int32)]:
        x, tx = tg.ones(2, dtype=dt), torch.ones(2, dtype=tdt)
        for name, args in [("new_zeros", (2, 3)), ("new_ones", ((4,),)), ("new_full", ((2,), 7)),
                           ("new_tensor", ([1, 2, 3],))]:
            a, b = getattr(x, name)(*args), getattr(tx, name)(*args)
            _eq(a, b)
            assert a.dtype.name == str(b.dtype).split(".")[1]
        assert x.new_empty(3, 2).shape == (3, 2)
    y = tg.ones(2).new_zeros(3, dtype=tg.int64, requires_grad=False)
    assert y.dtype == tg.int64
    assert tg.ones(2).new_ones(2, requires_grad=True).requires_grad


def test_tensor_of_any_sequence():
    for data in (deque([1.0, 2.0, 3.0]), range(4), deque([1, 2])):
        _eq(tg.tensor(data), torch.tensor(data))
        assert tg.tensor(data).dtype.name == str(torch.tensor(data).dtype).split(".")[1]


def test_format_of_tensors_as_torch():
    for v in (1.5, -2.25, 3.0):
        for spec in ("+.2f", ".3e", "", "8.1f"):
            assert format(tg.tensor(v), spec) == format(torch.tensor(v), spec)
    assert "{:+.2f}".format(tg.tensor([1.0, 2.0]).sum()) == "+3.00"
    assert format(tg.tensor(3), "d") == format(torch.tensor(3), "d")
    with pytest.raises(TypeError):
        format(tg.ones(2), "+.2f")  # as PyTorch: only a 0-d tensor formats as its number
    with pytest.raises(TypeError):
        format(torch.ones(2), "+.2f")


def test_legacy_constructors_vs_torch():
    for name in ("FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "BoolTensor"):
        a, b = getattr(tg, name)([1, 0, 2]), getattr(torch, name)([1, 0, 2])
        _eq(a, b)
        assert a.dtype.name == str(b.dtype).split(".")[1]
        assert isinstance(a, getattr(tg, name))
        assert getattr(tg, name)(2, 3).shape == getattr(torch, name)(2, 3).shape
    assert not isinstance(tg.ones(2), tg.LongTensor)
    with pytest.raises(TypeError):
        tg.FloatTensor(2, "x")


def test_device_namespaces_and_flags():
    import tapegrad.backends.cudnn as cudnn
    cudnn.benchmark = True
    assert tg.backends.cudnn.benchmark is True
    cudnn.benchmark = False
    assert tg.backends.cudnn.deterministic is False
    avail = tg.accelerator.is_available()
    assert avail == tg.cuda.is_available()
    acc = tg.accelerator.current_accelerator()
    assert (acc is None) == (not avail)
    x = tg.ones(2)
    for flag in ("is_xpu", "is_mps", "is_meta", "is_sparse", "is_quantized", "is_nested"):
        assert getattr(x, flag) is False is getattr(torch.ones(2), flag)


def test_load_weights_only(tmp_path):
    p = tmp_path / "w.tg"
    tg.save({"w": tg.ones(2)}, p)
    _eq(tg.load(p, weights_only=True)["w"], torch.ones(2))


@pytest.mark.parametrize("fn", ["matmul", "mul"])
def test_out_keyword_vs_torch(fn):
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 3))
    for out_shape in [(2, 3), (0,), (5, 5)]:  # exact, empty and wrong shapes are resized
        out, tout = tg.zeros(*out_shape, dtype=tg.float64), torch.zeros(*out_shape,
                                                                         dtype=torch.float64)
        args = (a, b) if fn == "matmul" else (a, a)
        r = getattr(tg, fn)(tg.tensor(args[0]), tg.tensor(args[1]), out=out)
        with warnings.catch_warnings():  # PyTorch warns when it resizes a non-empty out
            warnings.simplefilter("ignore")
            getattr(torch, fn)(torch.tensor(args[0]), torch.tensor(args[1]), out=tout)
        assert r is out
        _eq(out, tout)
    # an int out cannot take a float result; out= does not differentiate
    with pytest.raises(RuntimeError, match="can't be cast"):
        getattr(tg, fn)(tg.ones(3, 3), tg.ones(3, 3), out=tg.zeros(3, 3, dtype=tg.int64))
    with pytest.raises(RuntimeError, match="automatic differentiation"):
        getattr(tg, fn)(tg.ones(3, 3, requires_grad=True), tg.ones(3, 3), out=tg.zeros(3, 3))
    with tg.no_grad():
        getattr(tg, fn)(tg.ones(3, 3, requires_grad=True), tg.ones(3, 3), out=tg.zeros(3, 3))
