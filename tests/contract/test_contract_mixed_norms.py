"""API.md "Low precision": under autocast a Linear's bfloat16/float16 output meets the
float32 parameters of the norm after it. PyTorch's CPU norms take that mixed input
(layer_norm, group_norm, batch_norm with its float32 running statistics,
instance_norm, rms_norm): they normalize in float32, return the input's dtype and
give the parameters float32 gradients. Values, output and gradient dtypes and the
running statistics are compared with PyTorch, outside autocast and as the modules
chain under it."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")

TOL = {"bfloat16": 2e-2, "float16": 2e-3}


def _r(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


NORMS = {
    "layer_norm": lambda L, F, x, w, b, rm, rv: F.layer_norm(x, (4,), w, b),
    "group_norm": lambda L, F, x, w, b, rm, rv: F.group_norm(x, 2, w, b),
    "batch_norm train": lambda L, F, x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b,
                                                                   training=True),
    "batch_norm eval": lambda L, F, x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b),
    "batch_norm stats only": lambda L, F, x, w, b, rm, rv: F.batch_norm(x, rm, rv,
                                                                        training=True),
    "instance_norm": lambda L, F, x, w, b, rm, rv: F.instance_norm(x, weight=w, bias=b),
    "rms_norm": lambda L, F, x, w, b, rm, rv: F.rms_norm(x, (4,), w),
}


def _run(L, name, dtype):
    shape = (3, 4, 2) if name in ("group_norm", "instance_norm") else (3, 4)
    x = L.tensor(_r(*shape)).to(getattr(L, dtype))
    x.requires_grad_(True)
    w = L.tensor(np.linspace(0.5, 1.5, 4).astype(np.float32)).requires_grad_(True)
    b = L.tensor(np.linspace(-1, 1, 4).astype(np.float32)).requires_grad_(True)
    rm, rv = L.tensor(_r(4, seed=1)), L.tensor(np.abs(_r(4, seed=2)) + 0.5)
    out = NORMS[name](L, L.nn.functional, x, w, b, rm, rv)
    (out.float() * L.tensor(_r(*out.shape, seed=3))).sum().backward()
    return out, x, w, b, rm, rv


def _np(t):
    return t.detach().float().numpy()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", list(NORMS))
def test_half_input_float32_parameters_as_torch(name, dtype):
    got = _run(tg, name, dtype)
    want = _run(torch, name, dtype)
    out, x = got[0], got[1]
    assert str(out.dtype).rsplit(".")[-1] == dtype
    assert str(x.grad.dtype).rsplit(".")[-1] == dtype
    tol = TOL[dtype] if name != "rms_norm" else 1e-2  # (PyTorch's mixed rms_norm is
    # its unfused composite, rounding in the half dtype; ours rounds once)
    np.testing.assert_allclose(_np(out), _np(want[0]), rtol=tol, atol=tol)
    np.testing.assert_allclose(_np(x.grad), _np(want[1].grad), rtol=4 * tol, atol=4 * tol)
    for t, p in zip(got[2:4], want[2:4]):  # the parameters' gradients, float32
        if p.grad is None:
            continue
        assert t.grad.dtype == tg.float32
        np.testing.assert_allclose(t.grad.numpy(), p.grad.numpy(), rtol=4 * tol, atol=4 * tol)
    for t, p in zip(got[4:], want[4:]):  # the running statistics, float32 still
        assert t.dtype == tg.float32
        np.testing.assert_allclose(t.numpy(), p.numpy(), rtol=1e-2, atol=1e-2)


def _chain(L, layer):
    L.manual_seed(0)
    lin = L.nn.Linear(4, 6)
    norm = {"LayerNorm": lambda: L.nn.LayerNorm(6), "BatchNorm1d": lambda: L.nn.BatchNorm1d(6),
            "GroupNorm": lambda: L.nn.GroupNorm(2, 6)}[layer]()
    with L.no_grad():  # the same parameters in both libraries
        lin.weight.copy_(L.tensor(_r(6, 4, seed=4)))
        lin.bias.copy_(L.tensor(_r(6, seed=5)))
    x = L.tensor(_r(5, 4, seed=6))
    with L.autocast("cpu", dtype=L.bfloat16):
        out = norm(lin(x))
    out.float().sum().backward()
    return out, lin.weight.grad


@pytest.mark.parametrize("layer", ["LayerNorm", "BatchNorm1d", "GroupNorm"])
def test_norm_layer_after_linear_under_autocast(layer):
    out, g = _chain(tg, layer)
    pout, pg = _chain(torch, layer)
    assert str(out.dtype) == str(pout.dtype).replace("torch", "tapegrad")
    assert g.dtype == tg.float32
    np.testing.assert_allclose(_np(out), _np(pout), rtol=3e-2, atol=3e-2)
