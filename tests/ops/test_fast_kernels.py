"""The fast paths of a few kernels, checked where the registry's small samples do not
reach them: sigmoid and erf in float32 above ``fusion.config.min_numel`` (one compiled
loop over the vectorisable approximations), the flat-position and slice-wise forms
of ``add_at``/gather/scatter, and the index_*/\\*_scatter composites built on them,
against NumPy's ``np.add.at`` and PyTorch (values and gradients), with negative and
repeated indices, non-contiguous and empty inputs."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import tapegrad as tg
from tapegrad import devices
from tapegrad.fusion import config as fusion_config

N = 4 * max(fusion_config.min_numel, 1)  # elements: past the compiled-kernel threshold


# ---------------------------------------------------------------- sigmoid / erf
def _ulps(got, want32, want64):
    """Error in float32 ulps of the exact (float64) value."""
    return np.abs(got.astype(np.float64) - want64) / np.spacing(np.abs(want32))


def _float32_inputs():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(N) * 6, np.linspace(-110, 110, N),
                        [0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0, -104.0, -200.0, 4.0, -4.0,
                         np.inf, -np.inf, np.nan]])
    return x.astype(np.float32)


@pytest.mark.parametrize("name", ["sigmoid", "erf"])
def test_float32_fast_path_within_3_ulp_of_float64_torch(name):
    x = _float32_inputs()
    got = getattr(tg, name)(tg.tensor(x)).numpy()
    assert got.dtype == np.float32
    want64 = getattr(torch, name)(torch.from_numpy(x.astype(np.float64))).numpy()
    want32 = want64.astype(np.float32)
    nan = np.isnan(want64)
    np.testing.assert_array_equal(np.isnan(got), nan)
    err = _ulps(got[~nan], want32[~nan], want64[~nan])
    assert err.max() <= 3, (name, x[~nan][np.argmax(err)], err.max())


@pytest.mark.parametrize("name", ["sigmoid", "erf"])
def test_float32_fast_path_non_contiguous_empty_and_grad(name):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((N // 8, 16)) * 3).astype(np.float32)
    x = tg.tensor(a).T  # non-contiguous
    ref = getattr(torch, name)(torch.from_numpy(a).T).numpy()
    np.testing.assert_allclose(getattr(tg, name)(x).numpy(), ref, rtol=1e-6, atol=1e-7)
    assert getattr(tg, name)(tg.zeros(0, 5)).shape == (0, 5)
    xt = tg.tensor(a, requires_grad=True)
    getattr(tg, name)(xt).sum().backward()
    tt = torch.from_numpy(a).requires_grad_(True)
    getattr(torch, name)(tt).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), tt.grad.numpy(), rtol=2e-5, atol=1e-7)


def test_sigmoid_float64_numpy_path_is_exact_in_the_tail():
    x = np.array([-745.0, -700.0, -40.0, -1.0, 0.0, 3.0, 40.0, 800.0, np.nan])
    got = tg.sigmoid(tg.tensor(x)).numpy()
    want = torch.sigmoid(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got[1:-1], want[1:-1], rtol=1e-15, atol=0)
    assert got[0] == np.exp(-745.0) > 0  # the denormal tail, where torch's 1/(1+e^-x) gives 0
    assert np.isnan(got[-1])
    assert tg.sigmoid(tg.tensor(np.float64(2.0))).numpy() == 1 / (1 + np.exp(-2.0))


# ---------------------------------------------------------------- add_at / flat positions
@st.composite
def _indexings(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    lead = draw(st.integers(0, ndim - 1))
    nadv = draw(st.integers(1, ndim - lead))
    bshape = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=2)))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    index = [slice(None)] * lead
    for j in range(nadv):
        n = shape[lead + j]
        sub = tuple(s if rng.random() < 0.7 else 1 for s in bshape)
        index.append(rng.integers(-n, n, size=sub))
    if draw(st.booleans()):
        index.append(Ellipsis)
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int64]))
    return shape, tuple(index), dtype, rng


@settings(deadline=None)  # examples: the profile's (tests/conftest.py)
@given(_indexings())
def test_add_at_and_flat_positions_match_numpy(case):
    shape, index, dtype, rng = case
    a = rng.standard_normal(shape)
    pos = devices.flat_positions(shape, index)
    assert pos is not None
    np.testing.assert_array_equal(a.reshape(-1)[pos], a[index])
    vals = (rng.standard_normal(a[index].shape) * 8).astype(dtype)
    want = np.zeros(shape, dtype)
    np.add.at(want, index, vals)
    got = np.zeros(shape, dtype)
    devices.add_at(got, index, vals)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-12)


def test_add_at_masks_slices_and_bad_indices():
    rng = np.random.default_rng(3)
    a = np.zeros((4, 5, 3))
    mask = rng.random((5, 3)) > 0.5
    v = rng.standard_normal(int(mask.sum()) * 4).reshape(4, -1)
    want = a.copy()
    np.add.at(want, (slice(None), mask), v)
    devices.add_at(a, (slice(None), mask), v)
    np.testing.assert_array_equal(a, want)
    # the slice-wise form, repeats and negatives, values broadcast
    b = np.zeros((3, 6, 2), np.float32)
    ix = np.array([5, -1, 0, 0])
    want = b.copy()
    np.add.at(want, (slice(None), ix), np.float32(1.5))
    devices.add_at(b, (slice(None), ix), np.float32(1.5))
    np.testing.assert_array_equal(b, want)
    for bad in ((np.array([6]),), (slice(None), np.array([-7]))):
        with pytest.raises(IndexError):
            devices.add_at(np.zeros((6, 6)), bad, 1.0)
    assert devices.flat_positions((4, 5), (slice(1, 3),)) is None  # not handled: NumPy's


# ---------------------------------------------------------------- ops vs PyTorch
def _pair(a, grad=True):
    return (tg.tensor(a, requires_grad=grad and a.dtype.kind == "f"),
            torch.from_numpy(a.copy()).requires_grad_(grad and a.dtype.kind == "f"))


def _check(tg_fn, th_fn, arrays, exact=True):
    pairs = [_pair(a) for a in arrays]
    out = tg_fn(*[p[0] for p in pairs])
    ref = th_fn(*[p[1] for p in pairs])
    tol = dict(rtol=0, atol=0) if exact else dict(rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), **tol)
    w = np.random.default_rng(9).standard_normal(tuple(out.shape))
    w = w.astype(out.detach().numpy().dtype)
    (out * tg.tensor(w)).sum().backward()
    (ref * torch.from_numpy(w)).sum().backward()
    for (t, r) in pairs:
        if r.requires_grad:
            np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_ops_match_torch(dtype, dim):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((30, 40, 3)).astype(dtype)
    n = x.shape[dim]
    rep = np.array([1, -1, 1, 0, n - 2, -n])  # repeats and negatives
    uniq = np.array([2, -1, 0, n - 3])
    src_shape = list(x.shape)
    src_shape[dim] = len(rep)
    src = rng.standard_normal(src_shape).astype(dtype)
    _check(lambda a, s: tg.index_add(a, dim, tg.tensor(rep), s, alpha=2.0),
           lambda a, s: a.index_add(dim, torch.from_numpy(rep % n), s, alpha=2.0), [x, src],
           exact=False)
    src_shape[dim] = len(uniq)
    src = rng.standard_normal(src_shape).astype(dtype)
    _check(lambda a, s: tg.index_copy(a, dim, tg.tensor(uniq), s),
           lambda a, s: a.index_copy(dim, torch.from_numpy(uniq % n), s), [x, src])
    _check(lambda a: tg.index_fill(a, dim, tg.tensor(uniq), -2.5),
           lambda a: a.index_fill(dim, torch.from_numpy(uniq % n), -2.5), [x])
    # non-contiguous input
    xt = np.ascontiguousarray(np.swapaxes(x, 0, 1)).swapaxes(0, 1)
    _check(lambda a: tg.index_fill(a, dim, tg.tensor(uniq), 1.0),
           lambda a: a.index_fill(dim, torch.from_numpy(uniq % n), 1.0), [xt])


@pytest.mark.parametrize("offset,d1,d2", [(0, 0, 1), (3, 1, 2), (-2, 2, 0), (-50, 0, 1)])
def test_scatter_composites_match_torch(offset, d1, d2):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((20, 30, 25)).astype(np.float32)
    diag_shape = tuple(torch.from_numpy(x).diagonal(offset, d1, d2).shape)
    src = rng.standard_normal(diag_shape).astype(np.float32)
    _check(lambda a, s: tg.diagonal_scatter(a, s, offset, d1, d2),
           lambda a, s: torch.diagonal_scatter(a, s, offset, d1, d2), [x, src])
    sel = rng.standard_normal((20, 25)).astype(np.float32)
    _check(lambda a, s: tg.select_scatter(a, s, 1, -3),
           lambda a, s: torch.select_scatter(a, s, 1, -3), [x, sel])
    sl = rng.standard_normal((20, 30, 8)).astype(np.float32)
    _check(lambda a, s: tg.slice_scatter(a, s, 2, 1, None, 3),
           lambda a, s: torch.slice_scatter(a, s, 2, 1, None, 3), [x, sl])


def test_gather_scatter_spread_and_general_indices_match_torch():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((40, 30)).astype(np.float32)
    general = rng.integers(0, 40, (50, 30))
    spread = np.broadcast_to(rng.integers(0, 40, (50, 1)), (50, 30))
    src = rng.standard_normal((50, 30)).astype(np.float32)
    for ix in (general, spread):
        ti = torch.from_numpy(np.ascontiguousarray(ix))
        _check(lambda a: tg.gather(a, 0, tg.tensor(ix)), lambda a: torch.gather(a, 0, ti), [x])
        _check(lambda a, s: tg.scatter_add(a, 0, tg.tensor(ix), s),
               lambda a, s: torch.scatter_add(a, 0, ti, s), [x, src], exact=False)
    perm = np.broadcast_to(rng.permutation(40)[:25].reshape(25, 1), (25, 30))
    tp = torch.from_numpy(np.ascontiguousarray(perm))
    _check(lambda a, s: tg.scatter(a, 0, tg.tensor(perm), s),
           lambda a, s: torch.scatter(a, 0, tp, s), [x, src[:25]])
    # embedding's backward (rows accumulate), repeated ids
    ids = rng.integers(0, 40, (6, 7))
    _check(lambda w: tg.nn.functional.embedding(tg.tensor(ids), w),
           lambda w: torch.nn.functional.embedding(torch.from_numpy(ids), w), [x])


# ---------------------------------------------------------------- stacked small matmuls
@pytest.mark.parametrize("case", ["qk", "pv", "f64", "out_view", "grad"])
def test_stacked_small_matmuls_on_threads_equal_numpy_bitwise(monkeypatch, case):
    """A stack of small matrix products (attention's per-head QK^T and PV), which
    OpenBLAS runs one thread per GEMM, is split along the leading dim over tapegrad's
    threads (``ops/linalg.py``'s ``_stacked_matmul``): each matrix the same GEMM as
    NumPy's loop, so the same bits, into a planned ``out`` view too; the gradients
    through it equal PyTorch's."""
    from tapegrad.devices import cpu
    from tapegrad.ops import linalg as L
    monkeypatch.setattr(cpu, "_pool", [2])  # (two threads, whatever this machine has)
    calls = []
    chunked = cpu.run_chunked
    monkeypatch.setattr(cpu, "run_chunked", lambda *a, **k: (calls.append(a[1]),
                                                             chunked(*a, **k))[1])
    rng = np.random.default_rng(0)
    dt = np.float64 if case == "f64" else np.float32
    q = rng.standard_normal((16, 4, 64, 32)).astype(dt)
    k = rng.standard_normal((16, 4, 64, 32)).astype(dt)
    p = rng.standard_normal((16, 4, 64, 64)).astype(dt)
    if case == "grad":
        tq, tk = tg.tensor(q, requires_grad=True), tg.tensor(k, requires_grad=True)
        (tq @ tk.mT).pow(2).sum().backward()
        rq, rk = torch.tensor(q, requires_grad=True), torch.tensor(k, requires_grad=True)
        (rq @ rk.mT).pow(2).sum().backward()
        np.testing.assert_allclose(tq.grad.numpy(), rq.grad.numpy(), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(tk.grad.numpy(), rk.grad.numpy(), rtol=1e-4, atol=1e-3)
        assert len(calls) >= 3  # (the forward and both input gradients)
        return
    a, b = (p, q) if case == "pv" else (q, k.swapaxes(-1, -2))
    want = np.matmul(a, b)
    if case == "out_view":  # (a compiled program's buffer: heads merged afterwards)
        buf = np.empty((16, 64, 4, 64), dt)
        got = L._matmul_kernel(a, b, out=buf.transpose(0, 2, 1, 3))
        assert np.shares_memory(got, buf)
    else:
        got = L._matmul_kernel(a, b)
        assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)
    assert calls == [16]
    # one big product per matrix (OpenBLAS threads it itself): NumPy's call
    calls.clear()
    big = rng.standard_normal((2, 512, 512)).astype(np.float32)
    np.testing.assert_array_equal(L._matmul_kernel(big, big), np.matmul(big, big))
    assert calls == []
