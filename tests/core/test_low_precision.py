"""bfloat16 (ml_dtypes' NumPy dtype) and float16 against PyTorch: creation, casts,
promotion, printing, DLPack both ways with PyTorch and JAX, save/load, modules, and
ops computed in float32 and rounded once."""
import math

import numpy as np
import pytest
import torch

import tapegrad as tg

LOW = [("bfloat16", tg.bfloat16, torch.bfloat16), ("float16", tg.float16, torch.float16)]
ALL = ["bfloat16", "float16", "float32", "float64", "int8", "uint8", "int16", "int32",
       "int64", "bool"]


def _np32(t):
    return t.detach().float().numpy() if isinstance(t, tg.Tensor) else t.detach().float().numpy()


def _rng(seed=0):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("name,tdt,pdt", LOW)
def test_casts_round_as_pytorch(name, tdt, pdt):
    v = (_rng().standard_normal(200) * 10.0 ** _rng(1).integers(-6, 6, 200)).astype(np.float32)
    ref = torch.tensor(v).to(pdt)
    for got in (tg.tensor(v).to(tdt), tg.tensor(v, dtype=tdt), tg.tensor(v).type(tdt),
                getattr(tg.tensor(v), "bfloat16" if name == "bfloat16" else "half")()):
        assert got.dtype == tdt and got.dtype is getattr(tg, name)
        np.testing.assert_array_equal(_np32(got), _np32(ref))
    # from float64: through float32, as PyTorch (two roundings); the values below are
    # ones where rounding once straight to the half-width dtype gives another result
    w = _rng(2).standard_normal(400_000) * 3
    once = w.astype(tdt.np)
    w = w[once.astype(np.float64) != w.astype(np.float32).astype(once.dtype).astype(np.float64)]
    assert w.size > 0
    for got in (tg.tensor(w).to(tdt), tg.tensor(w, dtype=tdt), tg.tensor(list(w), dtype=tdt)):
        np.testing.assert_array_equal(_np32(got), _np32(torch.tensor(w).to(pdt)))
    ints = _rng(3).integers(-2**30, 2**30, 1000)
    np.testing.assert_array_equal(_np32(tg.tensor(ints).to(tdt)),
                                  _np32(torch.tensor(ints).to(pdt)))
    # to ints
    c = np.clip(v, -1000, 1000)
    np.testing.assert_array_equal(tg.tensor(c).to(tdt).long().numpy(),
                                  torch.tensor(c).to(pdt).long().numpy())


@pytest.mark.parametrize("name,tdt,pdt", LOW)
def test_creation_and_metadata(name, tdt, pdt):
    for f in ("zeros", "ones", "empty"):
        t = getattr(tg, f)(2, 3, dtype=tdt)
        assert t.dtype == tdt and t.shape == (2, 3)
    t = tg.full((2,), 1.5, dtype=tdt)
    assert t.dtype == tdt and t.tolist() == [1.5, 1.5]
    assert tg.arange(4, dtype=tdt).dtype == tdt
    assert tg.randn(3, dtype=tdt).dtype == tdt
    assert tg.zeros_like(t).dtype == tdt
    assert t.is_floating_point() and tdt.is_floating_point and tdt.is_signed
    assert t.element_size() == 2 == tdt.itemsize
    assert t.requires_grad_().requires_grad
    assert repr(tdt) == f"tapegrad.{name}"
    assert tg.ones(2, dtype=name).dtype == tdt


def test_promotion_table_as_pytorch():
    def pair(a, b, zero_dim_b=False):
        shape_b = () if zero_dim_b else (2,)
        x = torch.ones(2, dtype=getattr(torch, a))
        y = torch.ones(shape_b, dtype=getattr(torch, b))
        tx = tg.ones(2, dtype=getattr(tg, a))
        ty = tg.ones(shape_b, dtype=getattr(tg, b))
        return str(tx.add(ty).dtype).split(".")[1], str(x.add(y).dtype).split(".")[1]
    for a in ("bfloat16", "float16"):
        for b in ALL:
            for z in (False, True):
                got, want = pair(a, b, z)
                assert got == want, (a, b, z, got, want)
                got, want = pair(b, a, z)
                assert got == want, (b, a, z, got, want)
        for s in (2, 2.5, True):
            assert str((tg.ones(2, dtype=getattr(tg, a)) * s).dtype).split(".")[1] == \
                str((torch.ones(2, dtype=getattr(torch, a)) * s).dtype).split(".")[1]
    assert tg.result_type(tg.ones(1, dtype=tg.bfloat16), tg.ones(1, dtype=tg.float16)) == tg.float32
    assert tg.promote_types(tg.bfloat16, tg.float16) == tg.float32


@pytest.mark.parametrize("name,tdt,pdt", LOW)
def test_printing_as_pytorch(name, tdt, pdt):
    v = np.array([[1.0, -2.5, 3.14159], [1e-3, 100.0, 0.1]], np.float32)
    got = repr(tg.tensor(v, dtype=tdt)).replace("tapegrad.", "torch.")
    assert got == repr(torch.tensor(v, dtype=pdt))
    assert repr(tg.tensor([1.0, 2.0], dtype=tdt)) == \
        repr(torch.tensor([1.0, 2.0], dtype=pdt)).replace("torch.", "tapegrad.")


@pytest.mark.parametrize("name,tdt,pdt", LOW)
def test_dlpack_with_pytorch_both_ways(name, tdt, pdt):
    x = tg.randn(3, 4).to(tdt)
    t = torch.from_dlpack(x)
    assert t.dtype == pdt and t.shape == (3, 4)
    np.testing.assert_array_equal(t.float().numpy(), _np32(x))
    t[0, 0] = 7.0  # zero-copy
    assert x[0, 0].item() == 7.0
    p = torch.randn(2, 5).to(pdt)[:, 1:4]  # strided
    y = tg.from_dlpack(p)
    assert y.dtype == tdt
    np.testing.assert_array_equal(_np32(y), p.float().numpy())
    assert tg.tensor(p).dtype == tdt
    r = tg.randn(3).to(tdt).requires_grad_()
    assert torch.from_dlpack(r).dtype == pdt  # exported read-only


@pytest.mark.parametrize("name,tdt,pdt", LOW)
def test_dlpack_with_jax_both_ways(name, tdt, pdt):
    jnp = pytest.importorskip("jax.numpy")
    x = tg.randn(3, 4).to(tdt)
    j = jnp.from_dlpack(x)
    assert str(j.dtype) == name
    np.testing.assert_array_equal(np.asarray(j, np.float32), _np32(x))
    a = jnp.arange(6, dtype=getattr(jnp, name)).reshape(2, 3) / 4
    y = tg.from_dlpack(a)
    assert y.dtype == tdt
    np.testing.assert_array_equal(_np32(y), np.asarray(a, np.float32))


@pytest.mark.parametrize("name,tdt,pdt", LOW)
def test_save_load(name, tdt, pdt, tmp_path):
    m = tg.nn.Linear(4, 3).to(tdt)
    x = tg.randn(5).to(tdt)
    tg.save({"sd": m.state_dict(), "x": x, "raw": x.numpy(), "dt": tdt}, tmp_path / "f.pt")
    o = tg.load(tmp_path / "f.pt")
    assert o["dt"] is tdt and o["x"].dtype == tdt and o["raw"].dtype == x.numpy().dtype
    np.testing.assert_array_equal(_np32(o["x"]), _np32(x))
    for k, v in m.state_dict().items():
        assert o["sd"][k].dtype == tdt
        np.testing.assert_array_equal(_np32(o["sd"][k]), _np32(v))


@pytest.mark.parametrize("name,tdt,pdt", LOW)
def test_module_to_and_training_step_as_pytorch(name, tdt, pdt):
    torch.manual_seed(0)
    pm = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    tm = tg.nn.Sequential(tg.nn.Linear(8, 16), tg.nn.GELU(), tg.nn.Linear(16, 4))
    with tg.no_grad():
        for (_, a), (_, b) in zip(tm.named_parameters(), pm.named_parameters()):
            a.copy_(tg.tensor(b.detach().numpy()))
    pm.to(pdt)
    getattr(tm, "bfloat16" if name == "bfloat16" else "half")()
    assert all(p.dtype == tdt for p in tm.parameters())
    v = _rng(3).standard_normal((6, 8)).astype(np.float32)
    tgt = _rng(4).integers(0, 4, 6)
    po = pm(torch.tensor(v).to(pdt))
    to = tm(tg.tensor(v).to(tdt))
    assert to.dtype == tdt
    tol = dict(rtol=2e-2, atol=2e-2) if name == "bfloat16" else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(_np32(to), po.detach().float().numpy(), **tol)
    torch.nn.functional.cross_entropy(po, torch.tensor(tgt)).backward()
    loss = tg.nn.functional.cross_entropy(to, tg.tensor(tgt))
    assert loss.dtype == tdt
    loss.backward()
    for a, b in zip(tm.parameters(), pm.parameters()):
        assert a.grad.dtype == tdt
        np.testing.assert_allclose(_np32(a.grad), b.grad.float().numpy(), **tol)


def test_float16_values_pytorch_computes_in_float32():
    # gelu(-3.75) in float16: PyTorch computes in float32 and rounds once (its last
    # bits differ between CPUs: within float16's tolerance of it, and within one
    # float16 step of the exact value rounded once)
    v = [-3.75, -5.0, 2.0]
    got = _np32(tg.nn.functional.gelu(tg.tensor(v, dtype=tg.float16)))
    np.testing.assert_allclose(got, torch.nn.functional.gelu(
        torch.tensor(v, dtype=torch.float16)).float().numpy(), rtol=1e-3, atol=1e-5)
    exact = np.array([a * 0.5 * math.erfc(-a / math.sqrt(2)) for a in v]).astype(np.float16)
    assert np.all(np.abs(got - exact) <= np.spacing(np.abs(exact)).astype(np.float32))
    assert got[0] != 0.0
    # cumsum accumulates in float32
    v = _rng(5).random(1024).astype(np.float32)
    for tdt, pdt in ((tg.float16, torch.float16), (tg.bfloat16, torch.bfloat16)):
        got = tg.tensor(v, dtype=tdt).cumsum(0)
        want = torch.tensor(v, dtype=pdt).float().cumsum(0).to(pdt)
        np.testing.assert_array_equal(_np32(got), want.float().numpy())
        s = tg.tensor(v, dtype=tdt).sum()
        assert s.dtype == tdt
        assert abs(s.item() - float(torch.tensor(v, dtype=pdt).float().sum())) <= \
            abs(float(torch.tensor(v).sum())) * 2 ** -7


def test_mixed_dtype_contraction_refused_as_pytorch():
    a = tg.ones(2, 2, dtype=tg.bfloat16)
    with pytest.raises(RuntimeError):
        torch.ones(2, 2, dtype=torch.bfloat16) @ torch.ones(2, 2)
    with pytest.raises((RuntimeError, TypeError)):
        a @ tg.ones(2, 2)
    assert (a @ a).dtype == tg.bfloat16


_LAZY = r"""
import sys
import numpy as np
import tapegrad as tg
from tapegrad import dtypes
assert "ml_dtypes" not in sys.modules, "import tapegrad imported ml_dtypes"
assert tg.bfloat16.is_floating_point and tg.bfloat16.itemsize == 2
assert repr(tg.bfloat16) == "tapegrad.bfloat16" and tg.bfloat16 != tg.float16
x = tg.tensor([1.0, 2.5, -3.0], requires_grad=True)
(x * x).sum().backward()
assert x.grad.tolist() == [2.0, 5.0, -6.0] and tg.float16 in (tg.float32, tg.float16)
assert "ml_dtypes" not in sys.modules, "float32 work imported ml_dtypes"
if sys.argv[1] == "tapegrad":  # tapegrad imports it: a cast to bfloat16
    y = x.detach().to(tg.bfloat16)
else:  # someone else does (having asked first whether it is installed, as libraries
    # do), and hands tapegrad its arrays
    if sys.argv[1] == "another_library_asking_first":
        import importlib.util
        assert importlib.util.find_spec("ml_dtypes") is not None
    import ml_dtypes
    y = tg.tensor(np.array([1.0, 2.5, -3.0], ml_dtypes.bfloat16))
assert type(tg.bfloat16) is dtypes.DType and tg.bfloat16.np is dtypes.BF16
assert dtypes.BF16 == np.dtype("bfloat16") and dtypes.LOW_SET == {dtypes.BF16, dtypes.F16}
assert y.dtype is tg.bfloat16 and y.is_floating_point() and (y * 2).dtype is tg.bfloat16
assert (y + tg.ones(3, dtype=tg.float16)).dtype is tg.float32
assert (y * 2).float().tolist() == [2.0, 5.0, -6.0]
z = y.float().requires_grad_()
(z.to(tg.bfloat16) ** 2).sum().backward()
assert z.grad.tolist() == [2.0, 5.0, -6.0]
print("OK")
"""


def _fresh_process(script, *args):
    # a fresh process: this one has ml_dtypes already
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "OK", p.stderr


@pytest.mark.parametrize("importer", ["tapegrad", "another_library",
                                      "another_library_asking_first"])
def test_ml_dtypes_is_imported_when_bfloat16_is_first_needed(importer):
    _fresh_process(_LAZY, importer)


_BIND_ORDER = r"""
import copy, pickle, sys, threading
import numpy as np
import tapegrad as tg
from tapegrad import dtypes
before = {tg.float32: "f32", tg.float16: "f16"}
assert pickle.loads(pickle.dumps(tg.bfloat16)) is tg.bfloat16
assert copy.deepcopy(tg.bfloat16) is tg.bfloat16 and copy.copy(tg.bfloat16) is tg.bfloat16
assert "ml_dtypes" not in sys.modules
seen = []
# a table's callback runs before tg.bfloat16 is published (bound): a thread that sees it
# bound finds the tables filled
dtypes.on_bfloat16(lambda bf16: seen.append((type(tg.bfloat16) is dtypes.DType,
                                             dtypes.BF16 is bf16)))
errors, go = [], threading.Barrier(5)
def use():
    go.wait()
    try:
        for _ in range(200):
            x = tg.zeros(4, dtype=tg.bfloat16)
            assert x.dtype is tg.bfloat16 and (x + 1).dtype is tg.bfloat16, x.dtype
            assert hash(tg.bfloat16) == hash(tg.bfloat16.np) and x.is_floating_point()
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=use) for _ in range(4)]
for t in threads:
    t.start()
go.wait()
import ml_dtypes
for t in threads:
    t.join()
assert not errors, errors[:3]
assert seen == [(False, False)], seen
bf16 = np.dtype(ml_dtypes.bfloat16)
assert tg.bfloat16.np is bf16 is dtypes.BF16 and dtypes.LOW == (bf16, dtypes.F16)
assert before[tg.float16] == "f16" and {tg.bfloat16: 1}[tg.bfloat16] == 1
assert tg.bfloat16 == bf16 and tg.bfloat16 == "bfloat16" and tg.bfloat16 != tg.float16
assert pickle.loads(pickle.dumps(tg.bfloat16)) is tg.bfloat16
assert copy.deepcopy(tg.bfloat16) is tg.bfloat16
assert not [f for f in sys.meta_path if type(f).__name__ == "_BindOnImport"]
print("OK")
"""


def test_bfloat16_binds_once_in_order_under_threads():
    _fresh_process(_BIND_ORDER)


@pytest.mark.parametrize("name,tdt,pdt", LOW)
def test_relu_and_its_gradient_on_the_16_bits_as_pytorch(name, tdt, pdt):
    """relu and its gradient pass a value or write zero: on the 16 bits (no float32
    copies) they give PyTorch's values, NaNs, infinities, zeros and subnormals
    included (a NaN's payload and a zero's sign aside), over the threaded loop's size,
    on a small tensor and a strided one, with a broadcast gradient (through float32)
    and into ``out=``."""
    special = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 2.5, -2.5]
    base = np.concatenate([special, _rng(3).standard_normal(1 << 21)]).astype(np.float32)
    g32 = _rng(4).standard_normal(base.size).astype(np.float32)
    g32[:4] = [np.nan, 1.0, -np.inf, -1.0]

    for n in (base.size, 40):
        v, g = base[:n], g32[:n]
        x = tg.tensor(v).to(tdt).requires_grad_()
        px = torch.tensor(v).to(pdt).requires_grad_()
        out, pout = tg.relu(x), torch.relu(px)
        np.testing.assert_array_equal(_np32(out), _np32(pout))
        out.backward(tg.tensor(g).to(tdt))
        pout.backward(torch.tensor(g).to(pdt))
        np.testing.assert_array_equal(_np32(x.grad), _np32(px.grad))
    v = base[:4000].reshape(40, 100)
    x, px = tg.tensor(v).to(tdt)[:, ::3], torch.tensor(v).to(pdt)[:, ::3]
    np.testing.assert_array_equal(_np32(tg.relu(x).contiguous()),
                                  _np32(torch.relu(px).contiguous()))
    # a broadcast gradient (finite: the float32 loop gives NaN for an inf times 0)
    gb = g32[10:44]
    got = tg.ops_registry.get("relu_backward").compute(tg.tensor(gb).to(tdt).numpy(),
                                                        tg.relu(x).numpy())
    want = torch.ops.aten.threshold_backward(torch.tensor(gb).to(pdt).expand(40, 34),
                                             torch.relu(px), 0)
    np.testing.assert_array_equal(_np32(tg.tensor(got)), _np32(want))
    buf = np.empty(x.shape, tdt.np)
    got = tg.ops_registry.get("relu").compute(x.contiguous().numpy(), out=buf)
    assert got is buf
    np.testing.assert_array_equal(_np32(tg.tensor(buf)), _np32(torch.relu(px).contiguous()))


_SCALAR_OPS = [("add", lambda x, s: x + s), ("sub", lambda x, s: x - s),
               ("rsub", lambda x, s: s - x), ("mul", lambda x, s: x * s),
               ("div", lambda x, s: x / s), ("floordiv", lambda x, s: x // s),
               ("eq", lambda x, s: x == s), ("lt", lambda x, s: x < s),
               ("ge", lambda x, s: x >= s), ("fmod", lambda x, s: x.fmod(s)),
               ("remainder", lambda x, s: x % s), ("pow", lambda x, s: x ** s)]


@pytest.mark.parametrize("name, fn", _SCALAR_OPS)
@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_a_scalar_operand_as_torch(name, fn, half):
    # PyTorch's CPU kernels round a scalar (a Python number or a 0-d tensor) to the
    # half-width dtype for add, sub, comparisons, fmod, remainder and pow, and take it
    # at float32 for mul, div and floor_divide: float16(0.1) == 0.1 is true, and
    # float16 values times 1e5 overflow only where the product does
    torch = pytest.importorskip("torch")
    vals = [0.1, 3.0, 1000.0, -2.5, 65504.0]
    for s in (0.1, 0.3, 3, 1e5, 65519.9):
        if name == "pow" and s > 10:
            continue
        for wrap in (False, True):
            want = fn(torch.tensor(vals, dtype=getattr(torch, half)),
                      torch.tensor(s) if wrap else s)
            got = fn(tg.tensor(vals, dtype=getattr(tg, half)), tg.tensor(s) if wrap else s)
            assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
            w = want.numpy() if want.dtype == torch.bool else want.float().numpy()
            g = got.numpy() if want.dtype == torch.bool else got.float().numpy()
            np.testing.assert_array_equal(g, w, err_msg=f"{name} {half} {s} {wrap}")
