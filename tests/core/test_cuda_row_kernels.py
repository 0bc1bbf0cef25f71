"""The CUDA row kernels (softmax, log_softmax, layer_norm) as source text, and their
launchers' plumbing, on any machine (tests/gpu runs them on a GPU): every constant
defined, dtype-named math functions, the launch arguments in the order and of the
types the kernel declares (checked by running the launcher against a stand-in
kernel that reads its arguments by the declared names and computes the row op with
NumPy)."""
import re

import numpy as np
import pytest

from tapegrad.devices import cuda, cuda_kernels as ck

SOURCES = [(ck.softmax_source, (False,)), (ck.softmax_source, (True,)),
           (ck.layer_norm_source, (False,)), (ck.layer_norm_source, (True,))]


@pytest.mark.parametrize("dtype,ctype", [(np.float32, "float"), (np.float64, "double")])
@pytest.mark.parametrize("make,extra", SOURCES, ids=["softmax", "log_softmax", "layer_norm",
                                                      "layer_norm_affine"])
def test_source_is_self_contained(make, extra, dtype, ctype):
    src, name = make(dtype, *extra)
    assert f'extern "C" __global__\nvoid {name}(' in src
    assert "CUDART" not in src and "#include" not in src
    for const in set(re.findall(r"\bTG_[A-Z]+\b", src)):
        assert re.search(rf"^#define {const} __longlong_as_double\(0x[0-9a-f]+ULL\)$", src, re.M)
    calls = set(re.findall(r"\b(exp|log|sqrt)f?\(", src))
    assert calls, src
    for fn in calls:  # float kernels call expf, double ones exp
        assert (f"{fn}f(" in src) == (ctype == "float") and \
            (re.search(rf"\b{fn}\(", src) is not None) == (ctype == "double")
    assert f"__shared__ {ctype} red[32];" in src and ck.BLOCK % 32 == 0 and ck.BLOCK <= 1024
    assert "__shfl_xor_sync(0xffffffffu" in src


def test_max_propagates_nan():
    src, _ = ck.softmax_source(np.float32, False)
    assert "return (a != a || a > b) ? a : b;" in src


def test_unsupported_dtype_is_refused():
    with pytest.raises(ValueError, match="float16"):
        ck.softmax_source(np.float16, False)


class _StandIn:
    """A RawKernel stand-in: binds the launch arguments to the kernel's declared
    parameters (names and C types) and computes its row op with NumPy."""

    def __init__(self, source, name):
        params = re.search(rf"void {name}\((.*?)\) {{", source, re.S).group(1)
        self.params = []
        for p in params.split(","):
            words = [w for w in p.split() if w not in ("const", "__restrict__")]
            self.params.append((" ".join(words[:-1]), words[-1]))
        self.name = name

    def __call__(self, grid, block, args):
        assert block == (ck.BLOCK,)
        assert len(args) == len(self.params), (self.params, args)
        env = {}
        for (ctype, pname), a in zip(self.params, args):
            pname = pname.lstrip("*")
            if ctype.endswith("*"):
                assert isinstance(a, np.ndarray) and a.flags.c_contiguous
                assert a.dtype == {"float*": np.float32, "double*": np.float64}[ctype], \
                    f"{pname}: a {a.dtype} array for {ctype}"
            elif ctype == "long long":
                assert type(a) is int
            else:
                assert type(a) is {"float": np.float32, "double": np.float64}[ctype], \
                    f"{pname}: {type(a)} for {ctype}"
            env[pname] = a
        rows, cols = grid[0], env["cols"]
        x = env["x"].reshape(rows, cols).astype(np.float64)
        y = env["y"].reshape(rows, cols)
        if "softmax" in self.name:
            sh = x - x.max(axis=1, keepdims=True)
            lse = np.log(np.exp(sh).sum(axis=1, keepdims=True))
            y[...] = sh - lse if "log_" in self.name else np.exp(sh - lse)
        else:
            mu = x.mean(axis=1, keepdims=True)
            r = 1 / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + float(env["eps"]))
            out = (x - mu) * r
            if "w" in env:
                out = out * env["w"] + env["b"]
            y[...] = out


@pytest.fixture
def numpy_as_cupy(monkeypatch):
    monkeypatch.setattr(cuda, "cupy", lambda: np)
    monkeypatch.setattr(cuda, "raw_kernel", lambda src, name: _StandIn(src, name))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_launcher(numpy_as_cupy, dtype, log):
    x = np.random.default_rng(0).standard_normal((2, 3, 7)).astype(dtype)
    y = ck.softmax(x, 2, log=log)
    sh = x - x.max(-1, keepdims=True)
    ref = sh - np.log(np.exp(sh).sum(-1, keepdims=True))
    np.testing.assert_allclose(y, ref if log else np.exp(ref), rtol=1e-6)
    assert y.dtype == dtype and y.shape == x.shape
    assert ck.softmax(x, 1) is None and ck.softmax(x.astype(np.float16), 2) is None
    assert ck.softmax(np.ones((0, 3), dtype), 1) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_launcher(numpy_as_cupy, dtype, affine):
    r = np.random.default_rng(1)
    x = r.standard_normal((4, 3, 5)).astype(dtype)
    w, b = (r.standard_normal((3, 5)).astype(dtype) for _ in range(2))
    y = ck.layer_norm(x, 2, w if affine else None, b if affine else None, 1e-3)
    mu = x.mean((1, 2), keepdims=True)
    ref = (x - mu) / np.sqrt(x.var((1, 2), keepdims=True) + 1e-3)
    if affine:
        ref = ref * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    assert ck.layer_norm(x, 2, w, None) is None  # weight without bias: the composite
