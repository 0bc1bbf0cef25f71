"""Fused ops equal the unfused composition (float64, 1e-12) and PyTorch, gradients
of every order included; @fuse records one tape entry or warns and runs unfused."""
import os
import subprocess
import sys
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

FUSED = tg.elementwise("test_fused_chain", "gelu_t * 0 + x * sigmoid(y) + tanh(x - y) * x",
                       inputs=["x", "y", "gelu_t"])


def unfused(x, y, z):
    return z * 0 + x * tg.sigmoid(y) + tg.tanh(x - y) * x


def torch_ref(x, y, z):
    return z * 0 + x * torch.sigmoid(y) + torch.tanh(x - y) * x


@tg.fuse
def chain(x, y):
    return tg.gelu(x, approximate="tanh") * tg.sigmoid(y) + x * x - tg.where(y > 0.5, y, -x)


def chain_unfused(x, y):
    return tg.gelu(x, approximate="tanh") * tg.sigmoid(y) + x * x - tg.where(y > 0.5, y, -x)


def chain_torch(x, y):
    F = torch.nn.functional
    return F.gelu(x, approximate="tanh") * torch.sigmoid(y) + x * x - torch.where(y > 0.5, y, -x)


def _close(a, b, tol=1e-12):
    a = np.asarray(a.detach() if hasattr(a, "detach") else a)
    b = np.asarray(b.detach() if hasattr(b, "detach") else b)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


shapes = hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=4)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(shapes=shapes, seed=st.integers(0, 2**16))
def test_values_and_grads_equal_unfused_and_torch(shapes, seed):
    r = np.random.default_rng(seed)
    arrs = [r.uniform(-2, 2, s) for s in shapes.input_shapes]
    ts = [tg.tensor(a, requires_grad=True) for a in arrs]
    us = [tg.tensor(a, requires_grad=True) for a in arrs]
    ps = [torch.tensor(a, requires_grad=True) for a in arrs]
    out, ref, tref = FUSED(*ts), unfused(*us), torch_ref(*ps)
    _close(out, ref)
    _close(out, tref.detach().numpy())
    g = r.standard_normal(out.shape)
    out.backward(tg.tensor(g))
    ref.backward(tg.tensor(g))
    tref.backward(torch.tensor(g))
    for t, u, p in zip(ts, us, ps):
        _close(t.grad, u.grad)
        _close(t.grad, p.grad.numpy())


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
       seed=st.integers(0, 2**16))
def test_fuse_equals_unfused_and_torch(shapes, seed):
    r = np.random.default_rng(seed)
    arrs = [r.uniform(-2, 2, s) for s in shapes.input_shapes]
    ts = [tg.tensor(a, requires_grad=True) for a in arrs]
    us = [tg.tensor(a, requires_grad=True) for a in arrs]
    ps = [torch.tensor(a, requires_grad=True) for a in arrs]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # must fuse, not fall back
        out = chain(*ts)
    ref, tref = chain_unfused(*us), chain_torch(*ps)
    _close(out, ref)
    _close(out, tref.detach().numpy())
    tg.sum(out).backward()
    tg.sum(ref).backward()
    tref.sum().backward()
    for t, u, p in zip(ts, us, ps):
        _close(t.grad, u.grad)
        _close(t.grad, p.grad.numpy())


def test_fuse_is_one_tape_entry():
    x = tg.tensor(np.linspace(-1, 1, 6), requires_grad=True)
    y = chain(x, x)
    assert "Fused" in type(y.grad_fn).__name__ or "fused" in repr(y.grad_fn).lower()
    assert all(e[0] is None or not hasattr(e[0], "op") or e[0].op.name == "x"
               for e in y.grad_fn.edges if isinstance(e, tuple))


@pytest.mark.parametrize("fn", [chain, FUSED])
def test_gradgradcheck(fn):
    r = np.random.default_rng(3)
    n = 3 if fn is FUSED else 2
    ts = [tg.tensor(r.uniform(-1.5, 1.5, (2, 3)), requires_grad=True) for _ in range(n)]
    ts[1] = tg.tensor(r.uniform(0.6, 1.5, (3,)), requires_grad=True)  # off where's switch
    assert gradcheck(fn, ts)
    assert gradgradcheck(fn, ts)


def test_compiled_kernels_equal_reference(compiled):
    """The Numba kernels (forward, backward, float64 and float32) match the IR
    evaluated with NumPy; size-one and broadcast inputs included."""
    r = np.random.default_rng(5)
    for dt, tol in ((np.float64, 1e-12), (np.float32, 3e-6)):
        x = tg.tensor(r.uniform(-3, 3, (64, 16)).astype(dt), requires_grad=True)
        y = tg.tensor(r.uniform(-3, 3, (16,)).astype(dt), requires_grad=True)
        z = tg.tensor(np.array(0.5, dt), requires_grad=True)
        out = FUSED(x, y, z)
        gx, gy, gz = tg.grad(tg.sum(out * out), [x, y, z])
        fusion.config.use_numba = False
        try:
            ref = FUSED(x, y, z)
            rx, ry, rz = tg.grad(tg.sum(ref * ref), [x, y, z])
        finally:
            fusion.config.use_numba = True
        for a, b in ((out, ref), (gx, rx), (gy, ry), (gz, rz)):
            assert a.dtype == b.dtype
            _close(a, b, tol)


def test_second_call_compiles_nothing(compiled):
    x = tg.tensor(np.linspace(-1, 1, 40).reshape(8, 5), requires_grad=True)
    FUSED(x, x, x)
    n = fusion.stats["compiles"] + fusion.stats["cache_loads"]
    FUSED(x * 2, x, x)
    assert fusion.stats["compiles"] + fusion.stats["cache_loads"] == n


def test_new_process_loads_from_disk_cache(tmp_path):
    code = ("import numpy as np, tapegrad as tg\n"
            "from tapegrad import fusion\n"
            "fusion.config.min_numel = 0\n"
            "f = tg.elementwise('cache_probe', 'x * tanh(x) + 1')\n"
            "f(tg.tensor(np.ones(10)))\n"
            "print(fusion.stats['compiles'], fusion.stats['cache_loads'])\n")
    env = dict(os.environ, TAPEGRAD_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.split()
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, check=True).stdout.split()
    assert first == ["1", "0"]
    assert second == ["0", "1"]


def test_fallback_warns_and_still_computes():
    @tg.fuse
    def not_elementwise(x):
        return tg.sum(tg.exp(x)) * x

    x = tg.tensor(np.array([0.5, 1.0]), requires_grad=True)
    with pytest.warns(RuntimeWarning, match="not fusable.*sum.*used again"):
        y = not_elementwise(x)
    _close(y, np.exp([0.5, 1.0]).sum() * np.array([0.5, 1.0]))


def test_fallback_on_captured_tensor():
    c = tg.tensor(np.array([1.0, 2.0]))

    @tg.fuse
    def uses_capture(x):
        return x * c

    with pytest.warns(RuntimeWarning, match="not fusable"):
        uses_capture(tg.tensor(np.array([3.0, 4.0])))


def test_elementwise_errors():
    with pytest.raises(ValueError, match="already exists"):
        tg.elementwise("test_fused_chain", "x + 1")
    with pytest.raises(ValueError, match="broadcast"):
        FUSED(tg.ones(3), tg.ones(4), tg.ones(1))
    with pytest.raises(TypeError, match="takes 3"):
        FUSED(tg.ones(3))


def test_int_inputs_promote_to_float():
    out = FUSED(tg.tensor([1, 2]), tg.tensor([0, 1]), tg.tensor([0, 0]))
    assert out.dtype == tg.get_default_dtype()


def test_large_inputs_run_in_chunks_on_threads(monkeypatch):
    """Above ``2 * CHUNK_MIN`` elements kernels run chunk by chunk on a thread pool
    (three threads here, whatever the machine): same values as the reference."""
    from tapegrad.devices import cpu
    monkeypatch.setattr(cpu, "_pool", [3])
    r = np.random.default_rng(7)
    n = 2 * cpu.CHUNK_MIN + 123
    x = tg.tensor(r.uniform(-3, 3, n).astype(np.float32), requires_grad=True)
    y = tg.tensor(np.array([0.75], np.float32), requires_grad=True)
    tg.grad(tg.sum(chain(x, y)), [x, y])  # first calls compile, on this thread
    out = chain(x, y)
    gx, gy = tg.grad(tg.sum(out), [x, y])
    assert len(cpu._pool) == 2  # the pool was used
    fusion.config.use_numba = False
    try:
        ref = chain(x, y)
        rx, ry = tg.grad(tg.sum(ref), [x, y])
    finally:
        fusion.config.use_numba = True
    _close(out, ref, 3e-6)
    _close(gx, rx, 3e-6)
    np.testing.assert_allclose(gy.numpy(), ry.numpy(), rtol=1e-4)
