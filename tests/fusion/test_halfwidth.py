"""Half-width fused kernels: bfloat16 and float16 elements are read and written as
their 16 bits, computed in float32 and rounded once (nearest-even), so a fused
chain in those dtypes equals its float32 run rounded once, and PyTorch's result
computed the same way."""
import ml_dtypes
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import fusion
from tapegrad.devices import cpu
from tapegrad.fusion import codegen_numba, expr as E

torch = pytest.importorskip("torch")

HALF = {"bfloat16": (tg.bfloat16, np.dtype(ml_dtypes.bfloat16), torch.bfloat16),
        "float16": (tg.float16, np.dtype(np.float16), torch.float16)}

CHAIN = tg.elementwise("test_half_chain", "x * sigmoid(y) + tanh(x - y) * x + z * x * x",
                       inputs=["x", "y", "z"])


# arithmetic alone: in bfloat16 its kernels (forward and adjoint) run over element pairs
ARITH = tg.elementwise("test_half_arith", "x * y + z * x - x / (y + 3.0)",
                       inputs=["x", "y", "z"])


def chain_torch(x, y, z):
    return x * torch.sigmoid(y) + torch.tanh(x - y) * x + z * x * x


def _bits(a):
    return np.ascontiguousarray(np.asarray(a)).view(np.uint16)


def _same(a, b):
    """Bitwise equal half-width arrays, any NaN equal to any NaN."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    af, bf = a.astype(np.float32), b.astype(np.float32)
    nan = np.isnan(af) & np.isnan(bf)
    bad = (_bits(a) != _bits(b)) & ~nan
    assert not bad.any(), f"{bad.sum()} differ, e.g. {af[bad][:4]} vs {bf[bad][:4]}"


def _tie_patterns():
    """Every upper half of a float32 with low bits at and around the rounding ties
    of bfloat16 and float16, and random floats."""
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001,
                     0xFFFF], np.uint32)
    rand = np.random.default_rng(0).integers(0, 1 << 32, 200_000, dtype=np.uint64)
    return np.concatenate([(hi[:, None] | lows).ravel(), rand.astype(np.uint32)]).view(np.float32)


def _store_kernel(dtype):
    """A float32 -> half-width identity kernel from the code generator."""
    v = E.var("x")
    src = codegen_numba.kernel_source([v], [v], np.float32, "f", store=dtype)
    return cpu.compile_source(("test-store", src), src, "kernel", parallel=False)


@pytest.mark.parametrize("name", sorted(HALF))
def test_store_rounds_nearest_even_as_ml_dtypes(name):
    """Every upper half of a float32 with the low bits at and around the rounding
    ties of both dtypes (and random floats): the kernel's store gives NumPy's /
    ml_dtypes' conversion bit for bit; NaN stays NaN, overflow gives inf,
    float16 subnormals round right."""
    np_dt = HALF[name][1]
    f = _tie_patterns()
    out = np.empty(f.size, np.uint16)
    _store_kernel(name)(f.size, f, out)
    with np.errstate(all="ignore"):
        _same(out.view(np_dt), f.astype(np_dt))


def _loop(conv):
    def run(a, o):
        for i in range(a.size):
            o[i] = conv(a[i])
    return cpu.numba().njit(run)


def test_float16_integer_store_rounds_as_numpy():
    """The integer float32 -> float16 conversion (used where the CPU has none), on
    the same float32 patterns."""
    f = _tie_patterns()
    out = np.empty(f.size, np.uint16)
    _loop(cpu.jit_helpers().f16_store_int)(f, out)
    with np.errstate(all="ignore"):
        _same(out.view(np.float16), f.astype(np.float16))


def test_float16_round_in_float32_as_numpy():
    """``f16_round`` (a float16 rounding inside a chain, held as float32) on the same
    patterns: NumPy's float16 value widened back; NaN a quiet NaN with its sign."""
    f = _tie_patterns()
    out = np.empty(f.size, np.float32)
    run = _loop(cpu.jit_helpers().f16_round)
    cpu.numba().njit(fastmath=set(cpu.FASTMATH))(run.py_func)(f, out)  # as in a kernel
    with np.errstate(all="ignore"):
        ref = f.astype(np.float16).astype(np.float32)
    nan = np.isnan(f)
    assert np.array_equal(np.isnan(out), nan)
    assert np.array_equal(out.view(np.uint32)[nan], (f.view(np.uint32)[nan] &
                                                     np.uint32(0x80000000)) | 0x7FC00000)
    assert np.array_equal(out[~nan].view(np.uint32), ref[~nan].view(np.uint32))


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float16-int"])
def test_load_is_exact_for_every_bit_pattern(name):
    h = cpu.jit_helpers()
    load = {"bfloat16": h.bf16_load, "float16": h.f16_load, "float16-int": h.f16_load_int}[name]
    name = name.split("-")[0]
    bits = np.arange(1 << 16, dtype=np.uint16)
    out = np.empty(bits.size, np.float32)
    _loop(load)(bits, out)
    ref = bits.view(HALF[name][1]).astype(np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(out), nan)
    assert np.array_equal(out[~nan].view(np.uint32), ref[~nan].view(np.uint32))


def _inputs(np_dt, rng, n=(64, 16)):
    x = rng.uniform(-3, 3, n).astype(np.float32).astype(np_dt)
    y = rng.uniform(-3, 3, n[-1:]).astype(np.float32).astype(np_dt)  # broadcast
    z = np.array(0.5, np_dt)  # size one
    return x, y, z


@pytest.mark.parametrize("chain", [CHAIN, ARITH], ids=["approx", "arith"])
@pytest.mark.parametrize("name", sorted(HALF))
def test_fused_half_equals_float32_rounded_once(name, chain, compiled):
    """The half-width kernel equals the float32 kernel on the widened inputs, rounded
    once, bit for bit; so do the gradients (the derived adjoint, also half width):
    per element, and for the broadcast inputs the per-element gradients rounded, then
    summed in float32 and rounded, as the reduction to their shape does."""
    CHAIN = chain
    T, np_dt, _ = HALF[name]
    x, y, z = _inputs(np_dt, np.random.default_rng(1))
    ts = [tg.tensor(a, requires_grad=True) for a in (x, y, z)]
    full = [np.broadcast_to(a, x.shape).astype(np.float32) for a in (x, y, z)]
    ws = [tg.tensor(a, requires_grad=True) for a in full]
    out, wide = CHAIN(*ts), CHAIN(*ws)
    assert out.dtype == T
    _same(out.detach().numpy(), wide.detach().numpy().astype(np_dt))
    g = np.random.default_rng(2).uniform(-1, 1, out.shape).astype(np.float32).astype(np_dt)
    gs = tg.grad(out, ts, grad_outputs=tg.tensor(g))
    ws_g = [w.numpy().astype(np_dt) for w in
            tg.grad(wide, ws, grad_outputs=tg.tensor(g.astype(np.float32)))]
    _same(gs[0].numpy(), ws_g[0])
    for a, b, shape in zip(gs[1:], ws_g[1:], (y.shape, z.shape)):
        assert a.dtype == T and a.shape == shape
        terms = b.astype(np.float32).reshape(-1, *shape) if shape else b.reshape(-1)
        want = terms.astype(np.float64).sum(0)
        np.testing.assert_allclose(a.numpy().astype(np.float64), want,
                                   rtol=2 ** -7, atol=1e-6 * np.abs(terms).sum())


@pytest.mark.parametrize("name", sorted(HALF))
def test_fused_half_matches_torch(name, compiled):
    """Values and gradients against PyTorch in the same dtype (its CPU kernels
    compute each op in float32 and round; the fused chain rounds once, at the end)."""
    T, np_dt, P = HALF[name]
    x, y, z = _inputs(np_dt, np.random.default_rng(3))
    ts = [tg.tensor(a, requires_grad=True) for a in (x, y, z)]
    ps = [torch.tensor(a.astype(np.float32)).to(P).requires_grad_() for a in (x, y, z)]
    out, ref = CHAIN(*ts), chain_torch(*ps)
    tol = {"bfloat16": 2e-2, "float16": 2e-3}[name]
    np.testing.assert_allclose(out.detach().numpy().astype(np.float32),
                               ref.detach().float().numpy(), rtol=tol, atol=tol)
    tg.sum(out).backward()
    ref.float().sum().backward()
    for t, p in zip(ts, ps):
        assert t.grad.dtype == T
        np.testing.assert_allclose(t.grad.numpy().astype(np.float32), p.grad.float().numpy(),
                                   rtol=4 * tol, atol=4 * tol)


@pytest.mark.parametrize("name", sorted(HALF))
def test_fuse_in_half_width_keeps_inf_nan_and_subnormals(name, compiled):
    T, np_dt, P = HALF[name]

    @tg.fuse
    def f(x):
        return x * x * 0.5

    vals = np.array([np.nan, np.inf, -np.inf, 0.0, 1e-3, -2e-4, 3e-5, 1.5, 300.0, -300.0,
                     3e19, 2e38], np.float32)
    with np.errstate(all="ignore"):
        x = vals.astype(np_dt)
    out = f(tg.tensor(x)).numpy()
    p = torch.tensor(x.astype(np.float32))  # PyTorch computing in float32, rounding once
    ref = (p * p * 0.5).to(P).float().numpy()
    with np.errstate(all="ignore"):
        x32 = x.astype(np.float32)
        want = (x32 * x32 * np.float32(0.5)).astype(np_dt)
    _same(out, want)
    got = out.astype(np.float32)
    np.testing.assert_array_equal(got, ref)  # (NaNs equal, +-inf kept)


@pytest.mark.parametrize("name", sorted(HALF))
def test_fused_sum_in_half_width(name, compiled):
    """A fused chain ending in sum() reads the half-width elements and sums the
    float32 values in float64, then rounds once."""
    T, np_dt, _ = HALF[name]

    @tg.fuse
    def f(x):
        return tg.sum(tg.tanh(x) * x)

    x = np.random.default_rng(4).uniform(-2, 2, 3000).astype(np.float32).astype(np_dt)
    out = f(tg.tensor(x))
    assert out.dtype == T
    x32 = x.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(float(out.numpy().astype(np.float32)),
                               np.sum(np.tanh(x32) * x32), rtol=1e-2 if name == "bfloat16"
                               else 1e-3)


def test_half_width_kernel_writes_into_out(compiled):
    """The kernel writes a caller's C-contiguous half-width out= in place."""
    np_dt = HALF["bfloat16"][1]
    x, y, z = _inputs(np_dt, np.random.default_rng(5))
    buf = np.empty(x.shape, np_dt)
    res = CHAIN.op.fusion.kernel(x, y, z, out=buf)
    assert res is buf
    _same(buf, CHAIN.op.fusion.kernel(x.astype(np.float32), y.astype(np.float32),
                                      z.astype(np.float32)).astype(np_dt))


def test_half_width_runs_in_chunks_on_threads(monkeypatch):
    """Over ``2 * CHUNK_MIN`` elements, chunked over threads: equal to the float32
    kernel rounded once."""
    monkeypatch.setattr(cpu, "_pool", [3])
    np_dt = HALF["float16"][1]
    n = 2 * cpu.CHUNK_MIN + 123
    x = np.random.default_rng(6).uniform(-3, 3, n).astype(np_dt)
    y = np.full(n, 0.25, np_dt)
    z = np.array(-1.0, np_dt)
    CHAIN(tg.tensor(x), tg.tensor(y), tg.tensor(z))  # the first call compiles
    out = CHAIN(tg.tensor(x), tg.tensor(y), tg.tensor(z))
    assert len(cpu._pool) == 2  # the pool was used
    wide = CHAIN(*(tg.tensor(a.astype(np.float32)) for a in (x, y, z)))
    _same(out.numpy(), wide.numpy().astype(np_dt))


@pytest.mark.parametrize("n, offset, threads", [(4096, 0, 1), (4097, 0, 1), (4096, 1, 1),
                                                (2 * cpu.CHUNK_MIN + 7, 0, 3)])
def test_bfloat16_arithmetic_chain_over_pairs(n, offset, threads, monkeypatch):
    """An arithmetic bfloat16 chain runs over element pairs (uint32 lanes): equal to
    the float32 kernel rounded once, bit for bit, for an odd length (its last
    element by the per-element kernel), an input starting mid-pair (per element
    throughout) and in chunks on threads; infinities, NaNs, subnormals and rounding
    ties included."""
    monkeypatch.setattr(cpu, "_pool", [threads])
    np_dt = HALF["bfloat16"][1]
    rng = np.random.default_rng(7)
    raw = rng.uniform(-4, 4, n + offset).astype(np.float32)
    raw[:8] = [np.inf, -np.inf, np.nan, 1e-39, -3e-40, 0.0, -0.0, 3e38]
    x = raw.astype(np_dt)[offset:]
    y = (rng.uniform(-2, 2, n).astype(np.float32) + np.float32(2.0 ** -9)).astype(np_dt)
    z = np.array(0.3, np_dt)
    fused = ARITH.op.fusion
    calls = []
    run_pairs = fused._run_pairs
    monkeypatch.setattr(fused, "_run_pairs", lambda *a: calls.append(1) or run_pairs(*a))
    assert (x.ctypes.data % 4 == 0) == (offset == 0)
    for _ in range(2):  # the first call compiles on this thread, the next runs chunked
        out = fused.kernel(x, y, z)
    _same(out, fused.kernel(*(a.astype(np.float32) for a in (x, y, z))).astype(np_dt))
    assert len(calls) == (2 if offset == 0 else 0)


def test_numpy_fallback_computes_in_float32_and_rounds_once():
    """Below ``min_numel`` (and without Numba) the IR runs with NumPy in float32 on
    the widened inputs and rounds once: the same values as the compiled kernel."""
    np_dt = HALF["bfloat16"][1]
    x, y, z = _inputs(np_dt, np.random.default_rng(7), (4, 5))
    out = CHAIN(tg.tensor(x), tg.tensor(y), tg.tensor(z))
    assert fusion.config.min_numel > x.size
    wide = CHAIN.op.fusion.reference(x.astype(np.float32), y.astype(np.float32),
                                     z.astype(np.float32))
    _same(out.numpy(), wide.astype(np_dt))


_EXACT = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
          "div": lambda x, y: x / y, "maximum": tg.maximum, "minimum": tg.minimum,
          "neg": lambda x, y: -x, "abs": lambda x, y: abs(x), "sqrt": lambda x, y: tg.sqrt(x),
          "square": lambda x, y: tg.square(x), "reciprocal": lambda x, y: tg.reciprocal(x),
          "scalar": lambda x, y: 0.1 - x * 3,
          "broadcast": lambda x, y: x.reshape(50, 60) / y[:60]}


# the main tier runs a few (each case compiles its kernels); the slow tier all of them
_QUICK = ("div", "scalar", "broadcast")


@pytest.mark.parametrize("case", [c if c in _QUICK else pytest.param(c, marks=pytest.mark.slow)
                                  for c in sorted(_EXACT)])
@pytest.mark.parametrize("name", sorted(HALF))
def test_single_ops_run_half_width_with_the_widened_values(name, case, monkeypatch):
    """A registry op of exactly rounded float32 arithmetic on half-width tensors runs
    as a half-width kernel from its expression: values (inf, NaN, zeros and
    overflow included) and gradients bit for bit those of the float32 kernel on
    widened copies, rounded once (the path it replaces)."""
    from tapegrad import dispatch
    from tapegrad.fusion import op as fop
    T, np_dt, _ = HALF[name]
    r = np.random.default_rng(8)
    x32 = r.standard_normal(3000).astype(np.float32) * 300
    y32 = r.standard_normal(3000).astype(np.float32)
    x32[:5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    y32[:5] = [1.0, -np.inf, 0.0, 0.0, 2.0]
    with np.errstate(all="ignore"):
        x, y = x32.astype(np_dt), y32.astype(np_dt)

    def run():
        a, b = tg.tensor(x, requires_grad=True), tg.tensor(y, requires_grad=True)
        out = _EXACT[case](a, b)
        g = tg.tensor(np.linspace(-2, 2, out.numel()).astype(np_dt).reshape(out.shape))
        grads = tg.grad(out, [a, b], grad_outputs=g, allow_unused=True)
        return [out.detach().numpy()] + [q.numpy() for q in grads if q is not None]

    fop._HALF_KERNELS.clear()
    with np.errstate(all="ignore"):
        got = run()
        assert fop._HALF_KERNELS, "no half-width kernel ran"
        monkeypatch.setattr(dispatch, "halfwidth_elementwise", [None])
        want = run()
    assert got[0].dtype == np_dt
    for a, b in zip(got, want):
        _same(a, b)
