"""tg.autocast against torch.autocast: output dtypes for the same inputs, gradients
in each parameter's dtype, nesting, enabled=False inside, the decorator form, thread
locality, the weight-cast cache, and tg.compile capturing the casts."""
import threading
import warnings

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.ops_registry import get


def _name(dt):
    return str(dt).split(".")[1]


def _pair(*shapes, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    vals = [rng.standard_normal(s).astype(dtype) for s in shapes]
    return [tg.tensor(v) for v in vals], [torch.tensor(v) for v in vals]


CASES = [  # (name, tg call, torch call, input shapes)
    ("linear", lambda F, L, x, w: F.linear(x, w), None, [(2, 4), (3, 4)]),
    ("matmul", lambda F, L, x, w: x @ w.T, None, [(2, 4), (3, 4)]),
    ("mm", lambda F, L, x, w: L.mm(x, w.T), None, [(2, 4), (3, 4)]),
    ("bmm", lambda F, L, x, w: L.bmm(x[None], w.T[None]), None, [(2, 4), (3, 4)]),
    ("addmm", lambda F, L, x, w: L.addmm(x[:, :3], x, w.T), None, [(2, 4), (3, 4)]),
    ("baddbmm", lambda F, L, x, w: L.baddbmm(x[None, :, :3], x[None], w.T[None]), None,
     [(2, 4), (3, 4)]),
    ("conv2d", lambda F, L, x, w: F.conv2d(x.reshape(1, 2, 2, 2), w.reshape(3, 2, 2, 1)), None,
     [(2, 4), (3, 4)]),
    ("conv1d", lambda F, L, x, w: F.conv1d(x.reshape(1, 2, 4), w.reshape(3, 2, 2)), None,
     [(2, 4), (3, 4)]),
    ("cross_entropy", lambda F, L, x, w: F.cross_entropy(F.linear(x, w), L.tensor([0, 2])),
     None, [(2, 4), (3, 4)]),
    ("mse_loss", lambda F, L, x, w: F.mse_loss(F.linear(x, w), F.linear(x, w) * 2), None,
     [(2, 4), (3, 4)]),
    ("l1_loss", lambda F, L, x, w: F.l1_loss(F.linear(x, w), x[:, :3]), None,
     [(2, 4), (3, 4)]),
    ("softmax", lambda F, L, x, w: F.softmax(F.linear(x, w), 1), None, [(2, 4), (3, 4)]),
    ("log_softmax", lambda F, L, x, w: F.log_softmax(F.linear(x, w), 1), None, [(2, 4), (3, 4)]),
    ("layer_norm", lambda F, L, x, w: F.layer_norm(F.linear(x, w), (3,)), None, [(2, 4), (3, 4)]),
    ("gelu", lambda F, L, x, w: F.gelu(F.linear(x, w)), None, [(2, 4), (3, 4)]),
    ("sum", lambda F, L, x, w: F.linear(x, w).sum(), None, [(2, 4), (3, 4)]),
    ("exp", lambda F, L, x, w: F.linear(x, w).exp(), None, [(2, 4), (3, 4)]),
    ("add", lambda F, L, x, w: F.linear(x, w) + x[:, :3], None, [(2, 4), (3, 4)]),
    ("cat", lambda F, L, x, w: L.cat([F.linear(x, w), x[:, :3]]), None, [(2, 4), (3, 4)]),
    ("cat64", lambda F, L, x, w: L.cat([F.linear(x, w), x[:, :3].double()]), None,
     [(2, 4), (3, 4)]),
    ("stack", lambda F, L, x, w: L.stack([F.linear(x, w), x[:, :3]]), None, [(2, 4), (3, 4)]),
    ("double_mm", lambda F, L, x, w: x.double() @ w.double().T, None, [(2, 4), (3, 4)]),
    ("int_mm", lambda F, L, x, w: (x * 4).long() @ (w * 4).long().T, None, [(2, 4), (3, 4)]),
    ("bce_logits", lambda F, L, x, w: F.binary_cross_entropy_with_logits(
        F.linear(x, w), L.ones(2, 3)), None, [(2, 4), (3, 4)]),
    # float32 in PyTorch though made of listed ops here: run as given ("keep")
    ("matrix_exp", lambda F, L, x, w: L.matrix_exp(w[:, :3] * 0.3), None, [(2, 4), (3, 4)]),
    ("linalg.matrix_exp", lambda F, L, x, w: L.linalg.matrix_exp(w[:, :3] * 0.3), None,
     [(2, 4), (3, 4)]),
    ("lu_solve_adjoint", lambda F, L, x, w: L.linalg.lu_solve(
        *L.linalg.lu_factor(L.eye(3) * 3 + w[:, :3]), x[:, :3].T, adjoint=True), None,
     [(2, 4), (3, 4)]),
    ("lu_solve_right", lambda F, L, x, w: L.linalg.lu_solve(
        *L.linalg.lu_factor(L.eye(3) * 3 + w[:, :3]), x[:, :3], left=False), None,
     [(2, 4), (3, 4)]),
    ("adaptive_avg_pool1d", lambda F, L, x, w: F.adaptive_avg_pool1d(x[None], 3), None,
     [(2, 4), (3, 4)]),
    ("adaptive_avg_pool2d", lambda F, L, x, w: F.adaptive_avg_pool2d(x[None], 3), None,
     [(2, 4), (3, 4)]),
    ("adaptive_avg_pool3d", lambda F, L, x, w: F.adaptive_avg_pool3d(
        (x[:, None, :, None] * w[None, :, None, :])[None], (2, 3, 3)), None, [(2, 4), (3, 4)]),
    ("linear_cross_entropy", lambda F, L, x, w: F.linear_cross_entropy(x, w, L.tensor([0, 2])),
     None, [(2, 4), (3, 4)]),
    ("linalg.eigvalsh", lambda F, L, x, w: L.linalg.eigvalsh(w[:, :3] + w[:, :3].T), None,
     [(2, 4), (3, 4)]),
    # lowered in PyTorch: the sparse product
    ("sparse.mm", lambda F, L, x, w: L.sparse.mm(_coo(L, w), x.T), None, [(2, 4), (3, 4)]),
    ("sparse @ dense", lambda F, L, x, w: _coo(L, w) @ x.T, None, [(2, 4), (3, 4)]),
    ("dense @ sparse", lambda F, L, x, w: x[:, :3] @ _coo(L, w), None, [(2, 4), (3, 4)]),
]


def _coo(L, w):
    """A 3x4 sparse COO matrix whose three values are ``w[:, 0]``."""
    return L.sparse_coo_tensor(L.tensor([[0, 1, 2], [1, 0, 3]]), w[:, 0], (3, 4))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_output_dtype_as_torch_autocast(case, dtype):
    name, fn, _, shapes = case
    ts, ps = _pair(*shapes)
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        want = fn(torch.nn.functional, torch, *ps)
    with tg.autocast("cpu", dtype=getattr(tg, dtype)):
        got = fn(tg.nn.functional, tg, *ts)
    assert _name(got.dtype) == _name(want.dtype), (name, got.dtype, want.dtype)
    tol = 3e-2 if want.dtype in (torch.bfloat16, torch.float16) else 1e-5
    np.testing.assert_allclose(got.detach().float().numpy(), want.detach().float().numpy(),
                               rtol=tol, atol=tol)


def test_gradients_reach_parameters_in_their_dtype_as_torch():
    torch.manual_seed(0)
    pm = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    tm = tg.nn.Sequential(tg.nn.Linear(6, 8), tg.nn.ReLU(), tg.nn.Linear(8, 3))
    with tg.no_grad():
        for a, b in zip(tm.parameters(), pm.parameters()):
            a.copy_(tg.tensor(b.detach().numpy()))
    ts, ps = _pair((5, 6))
    y = np.array([0, 1, 2, 1, 0])
    with torch.autocast("cpu"):
        pl = torch.nn.functional.cross_entropy(pm(ps[0]), torch.tensor(y))
    with tg.autocast("cpu"):
        tl = tg.nn.functional.cross_entropy(tm(ts[0]), tg.tensor(y))
    assert tl.dtype == tg.float32 and pl.dtype == torch.float32
    pl.backward()
    tl.backward()
    for a, b in zip(tm.parameters(), pm.parameters()):
        assert a.grad.dtype == tg.float32
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=5e-2, atol=5e-3)


def test_nesting_enabled_false_and_decorator():
    x = tg.randn(2, 3)
    assert not tg.is_autocast_enabled("cpu")
    with tg.autocast("cpu"):
        assert tg.is_autocast_enabled("cpu") and tg.get_autocast_dtype("cpu") == tg.bfloat16
        assert (x @ x.T).dtype == tg.bfloat16
        with tg.autocast("cpu", enabled=False):
            assert not tg.is_autocast_enabled("cpu")
            assert (x @ x.T).dtype == tg.float32
            with tg.amp.autocast("cpu", dtype=tg.float16):
                assert (x @ x.T).dtype == tg.float16
            assert (x @ x.T).dtype == tg.float32
        assert (x @ x.T).dtype == tg.bfloat16
        with tg.autocast("cuda"):  # another device: CPU tensors keep the CPU setting
            assert (x @ x.T).dtype == tg.bfloat16
    assert (x @ x.T).dtype == tg.float32 and not tg.is_autocast_enabled("cpu")

    @tg.autocast("cpu", dtype=tg.float16)
    def f(a):
        return a @ a.T

    assert f(x).dtype == tg.float16 and f(x).dtype == tg.float16
    assert (x @ x.T).dtype == tg.float32


def test_thread_local():
    x = tg.randn(2, 3)
    seen = {}

    def other():
        seen["enabled"] = tg.is_autocast_enabled("cpu")
        seen["dtype"] = (x @ x.T).dtype

    with tg.autocast("cpu"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert (x @ x.T).dtype == tg.bfloat16
    assert seen == {"enabled": False, "dtype": tg.float32}


def test_weight_casts_cached_within_a_region():
    lin = tg.nn.Linear(4, 4)
    x = tg.randn(3, 4)
    calls = []
    real = get("cast").kernel

    def counting(a, **k):
        calls.append(a.shape)
        return real(a, **k)
    cast = get("cast")
    cast.kernel = counting
    try:
        with tg.autocast("cpu"):
            for _ in range(3):
                lin(x)
        weight_casts = [s for s in calls if s == (4, 4)]
        assert len(weight_casts) == 1  # the weight: once; x: every call
        assert len([s for s in calls if s == (3, 4)]) == 3
        calls.clear()
        with tg.autocast("cpu", cache_enabled=False):
            for _ in range(3):
                lin(x)
        assert len([s for s in calls if s == (4, 4)]) == 3
        calls.clear()
        with tg.autocast("cpu"):  # a new region casts afresh (the weight may have changed)
            lin(x)
        assert len([s for s in calls if s == (4, 4)]) == 1
    finally:
        cast.kernel = real


def test_weight_cast_under_no_grad_is_not_cached():
    # a cast made under no_grad has no history: a later use with grad on in the same
    # region must cast again, or the weight gets no gradient (as PyTorch)
    w = tg.ones(3, 2, requires_grad=True)
    x = tg.ones(4, 3)
    with tg.autocast("cpu"):
        with tg.no_grad():
            x @ w
        y = x @ w
        z = x @ w
    assert y.requires_grad and y.dtype == tg.bfloat16
    (y.float().sum() + z.float().sum()).backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((3, 2), 8.0))


def test_bad_arguments_as_torch():
    with pytest.raises(ValueError, match="device_type"):
        tg.autocast(3)
    with pytest.raises(RuntimeError, match="unsupported autocast device_type"):
        tg.autocast("xyz")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with tg.autocast("cpu", dtype=tg.float32):
            assert not tg.is_autocast_enabled("cpu")
    assert any("not supported" in str(m.message) for m in w)


def test_compile_captures_the_casts():
    lin = tg.nn.Linear(4, 3)
    x = tg.randn(5, 4)

    def step(inp):
        with tg.autocast("cpu"):
            return tg.nn.functional.relu(lin(inp)).sum(1)
    with tg.no_grad():
        eager = step(x)
        compiled = tg.compile(step)
        for _ in range(3):
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # captured and replayed, not run eagerly
                got = compiled(x)
            assert got.dtype == eager.dtype == tg.bfloat16
            np.testing.assert_array_equal(got.float().numpy(), eager.float().numpy())
        # the program holds the casts: outside any region it still runs them
        x2 = tg.randn(5, 4)
        np.testing.assert_array_equal(compiled(x2).float().numpy(), step(x2).float().numpy())


def _cpu_policy(op):
    p = op.autocast
    return p.get("cpu") if isinstance(p, dict) else p


# ops whose registry oracle is a decomposition in PyTorch ops (a loop of matmuls), which
# torch.autocast casts op by op: checked through the modules that call them instead
_BY_MODULE = {"lstm_layer", "gru_layer", "rnn_layer"}
_DECLARED = sorted((o for o in (get(n) if isinstance(n, str) else n
                                for n in __import__("tapegrad").ops_registry.list_ops())
                    if _cpu_policy(o) is not None and o.name not in _BY_MODULE),
                   key=lambda o: o.name)


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_recurrent_modules_give_torch_autocast_dtypes(name):
    """nn.LSTM and nn.RNN run in bfloat16 under CPU autocast, nn.GRU in float32, as
    PyTorch's (its LSTM through oneDNN's autocast-listed layer); the gradients reach
    the float32 weights in float32."""
    tg.manual_seed(0)
    m = getattr(tg.nn, name)(8, 16, batch_first=True)
    pm = getattr(torch.nn, name)(8, 16, batch_first=True)
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    with tg.autocast("cpu"):
        out, state = m(tg.tensor(x))
    state = state if isinstance(state, tuple) else (state,)
    try:
        with torch.autocast("cpu"):
            pout, pstate = pm(torch.tensor(x))
    except RuntimeError as e:  # oneDNN's bfloat16 LSTM needs a CPU with bfloat16
        if name != "LSTM" or "primitive descriptor" not in str(e):  # instructions
            raise                                                     # (AVX-512 BF16)
        want = ["bfloat16"] * 3  # what PyTorch gives where it has them (out, h_n, c_n)
    else:
        pstate = pstate if isinstance(pstate, tuple) else (pstate,)
        want = [_name(t.dtype) for t in (pout, *pstate)]
    assert [_name(t.dtype) for t in (out, *state)] == want
    out.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == tg.float32 for p in m.parameters())


@pytest.mark.parametrize("op", _DECLARED, ids=[o.name for o in _DECLARED])
def test_declared_cpu_policies_give_torch_autocast_dtypes(op):
    """Every op whose declaration carries a CPU policy, on its registry samples: the
    output dtypes under tg.autocast are torch.autocast's for the same inputs (float32
    inputs for "lower", bfloat16 for "fp32", one bfloat16 among float32 for "promote")."""
    from tapegrad.dispatch import bind
    pol = _cpu_policy(op)
    bf16 = tg.bfloat16.np
    checked = 0
    for s in list(op.samples(np.float32))[:3]:
        args = list(s.args)
        fl = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
        if not fl:
            continue
        low = fl if pol == "fp32" else fl[:1] if pol == "promote" else []
        args = [a.astype(bf16) if i in low else a for i, a in enumerate(args)]
        tg_args = [tg.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        pt_args = [(torch.tensor(a.astype(np.float32)).bfloat16() if a.dtype == bf16 else
                    torch.from_numpy(a)) if isinstance(a, np.ndarray) else a for a in args]
        with torch.autocast("cpu"):
            want = op.torch(torch, *pt_args, **s.attrs)
        with tg.autocast("cpu"):
            got = bind(op, *tg_args, **s.attrs)
        want = want if isinstance(want, (tuple, list)) else (want,)
        got = got if isinstance(got, (tuple, list)) else (got,)
        for g, w in zip(got, want):
            if isinstance(w, torch.Tensor) and w.is_floating_point():
                assert _name(g.dtype) == _name(w.dtype), (op.name, g.dtype, w.dtype)
                checked += 1
    assert checked


# einsum, tensordot and the functions made of them cast on the CPU only where PyTorch's
# reach bmm or mm (OpDef.autocast_when): an equation summing a subscript two operands
# share with a size other than 1 (in the last pair of its left-to-right contraction:
# PyTorch's order without opt_einsum, which the comparison asks of it); a tensordot
# that is not a dot product
_THROUGH_GEMM = [
    ("einsum", "ij,jk->ik", [(2, 3), (3, 4)]), ("einsum", "bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
    ("einsum", "i,j->ij", [(3,), (4,)]), ("einsum", "ij,ij->ij", [(2, 3), (2, 3)]),
    ("einsum", "ij,ij->", [(2, 3), (2, 3)]), ("einsum", "ij,ij->i", [(2, 3), (2, 3)]),
    ("einsum", "ij,j->i", [(2, 3), (3,)]), ("einsum", "ij,jk->ijk", [(2, 3), (3, 4)]),
    ("einsum", "ij,k->", [(2, 3), (4,)]), ("einsum", "ij,k->ij", [(2, 3), (4,)]),
    ("einsum", "ij,jk", [(2, 3), (3, 4)]), ("einsum", "i,j", [(3,), (4,)]),
    ("einsum", "...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]), ("einsum", "...ij->...", [(2, 3)]),
    ("einsum", "ii,j->j", [(3, 3), (4,)]), ("einsum", "ii,i->", [(3, 3), (3,)]),
    ("einsum", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("einsum", "i,j,k->ijk", [(2,), (3,), (4,)]), ("einsum", "i,i,i->i", [(3,), (3,), (3,)]),
    ("einsum", "i,i,j->j", [(3,), (3,), (2,)]), ("einsum", "i,j,i->j", [(3,), (2,), (3,)]),
    ("einsum", "ij,ij,ij->i", [(2, 3), (2, 3), (2, 3)]), ("einsum", "i,i,i->", [(3,), (3,), (3,)]),
    ("einsum", "ij->ji", [(2, 3)]), ("einsum", "ii->", [(3, 3)]), ("einsum", "ij->i", [(2, 3)]),
    ("einsum", "ij,jk->ik", [(2, 1), (1, 4)]), ("einsum", "i,i->", [(1,), (1,)]),
    ("einsum", "ij,jk->ik", [(2, 3), (3, 1)]), ("einsum", "ij,jk->ik", [(2, 0), (0, 3)]),
    ("einsum", "bi,bi->b", [(2, 3), (2, 3)]), ("einsum", "ij,kj->", [(2, 1), (3, 1)]),
    ("tensordot", 1, [(3, 4), (4,)]), ("tensordot", 1, [(1, 4), (4, 1)]),
    ("tensordot", 2, [(3, 4), (3, 4)]), ("tensordot", 0, [(4,), (3,)]),
    ("tensordot", 0, [(1,), (1,)]), ("tensordot", 1, [(1, 4), (4, 3)]),
    ("tensordot", 1, [(0,), (0,)]), ("tensordot", 2, [(2, 3, 4), (3, 4)]),
    ("inner", None, [(4,), (4,)]), ("inner", None, [(3, 4), (2, 4)]),
    ("inner", None, [(1, 1, 4), (4,)]), ("inner", None, [(), (4,)]),
    ("chain_matmul", None, [(3, 4)]), ("chain_matmul", None, [(3, 4), (4, 2), (2, 5)]),
]


def _through_gemm(lib, name, arg, ts):
    if name == "einsum":
        return lib.einsum(arg, *ts)
    if name == "tensordot":
        return lib.tensordot(*ts, dims=arg)
    return getattr(lib, name)(*ts)


@pytest.mark.parametrize("case", _THROUGH_GEMM, ids=[f"{c[0]}{c[1]}{c[2]}" for c in _THROUGH_GEMM])
def test_composites_cast_where_torchs_reach_a_listed_gemm(case):
    """Output dtype and values of einsum, tensordot, inner, chain_matmul under CPU
    autocast, as torch.autocast's; the gradients reach the float32 inputs in float32."""
    name, arg, shapes = case
    ts, ps = _pair(*shapes)
    for t in ts:
        t.requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.chain_matmul's deprecation
        with torch.backends.opt_einsum.flags(enabled=False), torch.autocast("cpu"):
            want = _through_gemm(torch, name, arg, ps)
    with tg.autocast("cpu"):
        got = _through_gemm(tg, name, arg, ts)
    assert _name(got.dtype) == _name(want.dtype), (got.dtype, want.dtype)
    np.testing.assert_allclose(got.detach().float().numpy(), want.detach().float().numpy(),
                               rtol=3e-2, atol=3e-2)
    got.float().sum().backward()
    assert all(t.grad is not None and t.grad.dtype == tg.float32 for t in ts)


# ---------------------------------------------------------------- CUDA's op lists
# PyTorch's CUDA autocast registers its kernels from the op lists in ATen's
# autocast_mode.h (shipped with torch under include/): read from there, each list's
# policy in the OpDef.autocast terms
_LISTS = (("AT_FORALL_LOWER_PRECISION_FP", "lower"), ("AT_FORALL_FP32", "fp32"),
          ("AT_FORALL_FP32_SET_OPT_DTYPE", "fp32_unless_dtype"),
          ("AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE", "fp32"),  # norm: float32 appended
          ("AT_FORALL_PROMOTE", "promote"))
# ATen's name -> the registry op that is PyTorch's function of that name
_ATEN_NAMES = {"acos": "arccos", "asin": "arcsin", "atan2": "arctan2",
               "native_layer_norm": "layer_norm", "nll_loss2d": "nll_loss",
               "frobenius_norm": "norm", "nuclear_norm": "norm", "grid_sampler": "grid_sample"}
# CUDA policies from outside those lists: cuDNN's RNNs (autocast_rnn.cpp) and the
# functions PyTorch builds from listed ops (its Python or CompositeImplicit code)
_CUDA_ALSO = {
    "lstm_layer": "lower", "gru_layer": "lower", "rnn_layer": "lower",
    "cross_entropy": "fp32",                  # log_softmax then nll_loss: both float32
    "einsum<n>": "lower",  # ATen's einsum over n != 2 operands (an op made on first use)
    "inner": "promote",                       # tensordot (promote) over the last dims
    "binary_cross_entropy": "unsafe",         # autocast_mode.cpp's banned kernel
}


def _cuda_lists():
    import os
    import re
    path = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "autocast_mode.h")
    with open(path) as f:
        text = f.read()
    want = {}
    for macro, policy in _LISTS:
        body = re.search(rf"#define {macro}\(_\)(.*?)\n\s*\n", text, re.S)
        assert body, f"{macro} not found in {path}"
        names = re.findall(r"_\(\s*(?:ADD_NS\()?(\w+)", body.group(1))
        assert names, macro
        for n in names:
            n = _ATEN_NAMES.get(n, "interpolate" if "upsample" in n else n)
            want.setdefault(n, set()).add(policy)
    return want


def test_cuda_policies_are_pytorchs_cuda_lists():
    """Every registry op on PyTorch's CUDA autocast lists declares that list's policy
    for "cuda" (asked of the op on a CPU-only machine: the lookup is keyed by device),
    and every op declaring a CUDA policy is on a list (or in _CUDA_ALSO, with its
    reason)."""
    from tapegrad.ops_registry import list_ops
    want = _cuda_lists()
    assert {"exp", "softmax", "layer_norm", "matmul", "sum"} <= set(want)
    ops = {(get(n) if isinstance(n, str) else n).name: (get(n) if isinstance(n, str) else n)
           for n in list_ops()}
    wrong = []
    for name, policies in sorted(want.items()):
        assert len(policies) == 1, (name, policies)
        if name in ops and ops[name].autocast_policy("cuda") != next(iter(policies)):
            wrong.append((name, ops[name].autocast_policy("cuda"), next(iter(policies))))
    for name, op in sorted(ops.items()):
        pol = op.autocast_policy("cuda")
        if pol is not None and name not in want:
            also = _CUDA_ALSO.get("einsum<n>" if name.startswith("einsum") else name)
            if also != pol:
                wrong.append((name, pol, also))
    assert not wrong, wrong


def test_cuda_policy_decisions_by_call():
    """The CUDA decisions that depend on the call, asked of the ops (keyed by device,
    no GPU needed): interpolate casts to float32 in every mode but "area" (adaptive
    average pooling, not on the lists); einsum and tensordot cast on every call (CUDA
    lists them themselves), where the CPU casts only the calls reaching bmm or mm."""
    x = tg.randn(1, 2, 4, 4)
    interp = get("interpolate")
    for mode, casts in (("area", False), ("bilinear", True), ("nearest", True)):
        assert interp.autocast_when("cuda", (x,), {"mode": mode}) is casts, mode
    outer = get("einsum")
    a, b = tg.randn(3), tg.randn(4)
    assert outer.autocast_when("cuda", (a, b), {"equation": "i,j->ij"})
    assert not outer.autocast_when("cpu", (a, b), {"equation": "i,j->ij"})
    td = get("tensordot")
    assert td.autocast_when("cuda", (a, a), {"dims": ((0,), (0,))})
    assert not td.autocast_when("cpu", (a, a), {"dims": ((0,), (0,))})


def test_binary_cross_entropy_refused_under_cuda_autocast(monkeypatch):
    """PyTorch's CUDA autocast refuses binary_cross_entropy (RuntimeError: unsafe to
    autocast, use the with_logits form); ours too, in a CUDA region on CUDA tensors
    (simulated here: dispatch is shown CPU arrays as CUDA ones), whatever the dtype;
    a CPU region computes it in float32, as torch.autocast("cpu")."""
    import types

    from tapegrad import dispatch
    x, t = tg.rand(3, 4) * 0.8 + 0.1, tg.rand(3, 4)
    real = dispatch._devices

    class _AsCuda:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def device_of(a):
            return types.SimpleNamespace(type="cuda")
    with monkeypatch.context() as m:
        m.setattr(dispatch, "_devices", _AsCuda())
        m.setattr("tapegrad.amp.autocast_mode._cuda_available", lambda: True)
        for inp in (x, x.half(), x.double()):
            with tg.autocast("cuda"):
                with pytest.raises(RuntimeError, match="unsafe to autocast.*with_logits"):
                    tg.nn.functional.binary_cross_entropy(inp, t.to(inp.dtype))
                with pytest.raises(RuntimeError, match="unsafe to autocast"):
                    tg.nn.BCELoss()(inp, t.to(inp.dtype))
    with tg.autocast("cpu"):
        got = tg.nn.functional.binary_cross_entropy(x.bfloat16(), t)
    with torch.autocast("cpu"):
        want = torch.nn.functional.binary_cross_entropy(torch.tensor(x.numpy()).bfloat16(),
                                                        torch.tensor(t.numpy()))
    assert _name(got.dtype) == _name(want.dtype) == "float32"


def test_attention_float_mask_under_autocast_as_torch():
    """multi_head_attention_forward with a float attn_mask under CPU autocast: the
    mask joins baddbmm in the autocast dtype (PyTorch's baddbmm policy), no dtype
    error; outputs in torch.autocast's dtypes and close to its values."""
    from tapegrad.dispatch import bind
    op = get("multi_head_attention_forward")
    checked = 0
    for s in op.samples(np.float32):
        if not any(isinstance(a, np.ndarray) and a.ndim == 3 and a.dtype == np.float32
                   for a in s.args[9:11]):
            continue  # the samples with a float 3-D attn_mask
        with tg.autocast("cpu"):
            got = bind(op, *[tg.tensor(a) if isinstance(a, np.ndarray) else a for a in s.args],
                       **s.attrs)
        with torch.autocast("cpu"):
            want = op.torch(torch, *[torch.from_numpy(a.copy()) if isinstance(a, np.ndarray)
                                     else a for a in s.args], **s.attrs)
        for g, w in zip(got, want):
            assert _name(g.dtype) == _name(w.dtype)
            np.testing.assert_allclose(g.float().numpy(), w.float().numpy(), rtol=5e-2, atol=5e-2)
        checked += 1
    assert checked


def test_is_autocast_available_as_torch():
    torch = pytest.importorskip("torch")
    for dev in ("cpu", "cuda", "meta", "cuda:1"):
        assert tg.amp.is_autocast_available(dev) == torch.amp.is_autocast_available(dev)
    with pytest.raises(RuntimeError, match="device type"):
        tg.amp.is_autocast_available("foo")
