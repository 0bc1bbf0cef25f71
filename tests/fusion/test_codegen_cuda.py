"""The CUDA sources the fusion layer generates, checked as text on any machine (the
GPU runs them in tests/gpu): constants defined by the kernel itself, the one-pass
reduction's structure, the in-place optimizer update; and the generated statements
evaluated with a tiny C-expression interpreter against the NumPy reference."""
import math
import re

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.fusion import codegen_cuda, expr as E
from tapegrad.fusion.update import Update
from tapegrad.optim.adam import _fused as adam_fused
from tapegrad.optim.sgd import _fused as sgd_fused


def _graph(src, names):
    ins = [E.var(n) for n in names]
    return ins, [E.parse(src, dict(zip(names, ins)))]


def _all_text(spec):
    return "\n".join(s for s in spec if isinstance(s, str))


@pytest.mark.parametrize("src", ["where(x > 0, x, -inf)", "x + inf", "where(x > 0, nan, x)"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_infinite_and_nan_constants_are_defined_in_the_kernel(src, dtype):
    ins, outs = _graph(src, ["x"])
    in_p, out_p, body, name, preamble = codegen_cuda.kernel_spec(ins, outs, dtype, "k")
    assert "CUDART" not in body + preamble
    used = set(re.findall(r"\bTG_[A-Z]+\b", body))
    assert used, body
    for const in used:  # each constant the body names is #defined by the preamble
        assert re.search(rf"^#define {const} __longlong_as_double\(0x[0-9a-f]+ULL\)$",
                         preamble, re.M), preamble
    src_r, _ = codegen_cuda.reduce_source(ins, outs[0], dtype, "f", "k")
    assert "CUDART" not in src_r and src_r.startswith(codegen_cuda.PREAMBLE)


def test_constant_bit_patterns_are_ieee_inf_and_nan():
    pats = dict(re.findall(r"#define (TG_\w+) __longlong_as_double\((0x[0-9a-f]+)ULL\)",
                           codegen_cuda.PREAMBLE))
    as_double = {k: np.array([int(v, 16)], np.uint64).view(np.float64)[0] for k, v in pats.items()}
    assert as_double["TG_INF"] == np.inf and np.isnan(as_double["TG_NAN"])


@pytest.mark.parametrize("pattern", ["ff", "fs", "sf"])
@pytest.mark.parametrize("dtype,ctype", [(np.float32, "float"), (np.float64, "double")])
def test_reduction_is_one_pass(pattern, dtype, ctype):
    """The fused sum reads each input once in a grid-stride loop, accumulates in a
    float64 register, stores no elementwise value, and leaves one partial per block."""
    ins, outs = _graph("tanh(x) * sigmoid(y) + x * y", ["x", "y"])
    src, kname = codegen_cuda.reduce_source(ins, outs[0], dtype, pattern, "chain")
    assert f'extern "C" __global__\nvoid {kname}(' in src
    params = re.search(rf"void {kname}\((.*?)\) {{", src).group(1).split(", ")
    assert params == [f"const {ctype}* __restrict__ p0", f"const {ctype}* __restrict__ p1",
                      "double* __restrict__ partial", "const long long n"]
    loops = re.findall(r"\bfor \(", src)
    assert len(loops) == 2  # the grid-stride loop over the elements, the tree in the block
    loop = src[src.index("for (long long i"):src.index("sh[threadIdx.x] = acc;")]
    assert "i += stride" in loop and "acc += (double)" in loop
    for k, c in enumerate(pattern):
        assert (f"p{k}[i]" in loop) == (c == "f")
        assert (f"const {ctype} s{k} = p{k}[0];" in src) == (c == "s")
    # the only global writes: one partial per block, by thread 0
    writes = re.findall(r"(\w+)\[[^\]]*\]\s*(?:\+=|=)(?!=)", src)
    assert set(writes) == {"sh", "partial"}
    assert "if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];" in src
    assert f"__shared__ double sh[{codegen_cuda.REDUCE_BLOCK}];" in src
    assert codegen_cuda.REDUCE_BLOCK & (codegen_cuda.REDUCE_BLOCK - 1) == 0
    assert src.count("__syncthreads();") == 2


def test_reduction_pattern_must_match_inputs():
    ins, outs = _graph("x * y", ["x", "y"])
    with pytest.raises(ValueError, match="pattern"):
        codegen_cuda.reduce_source(ins, outs[0], np.float32, "f", "k")


# ---------------------------------------------------------------- evaluating the C
_C_FN = {"exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1, "sqrt": np.sqrt,
         "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "fabs": np.abs, "pow": np.power,
         "erf": np.vectorize(math.erf)}
_C_FN.update({k + "f": v for k, v in list(_C_FN.items())})  # float's expf, tanhf...


def _run_c(lines, env):
    """Evaluate the generated statement lines (``T t = expr;`` / ``x = expr;``) with
    NumPy: the C operators this generator emits, translated token-wise."""
    env = dict(env, **_C_FN, TG_INF=np.inf, TG_NAN=np.nan)
    for line in lines:
        line = line.strip().rstrip(";")
        m = re.match(r"^(?:const )?(?:float|double|bool)?\s*(\w+) = (.*)$", line)
        target, rhs = m.group(1), m.group(2)
        rhs = re.sub(r"\((float|double)\)", "", rhs)      # casts
        rhs = rhs.replace("&&", " & ").replace("||", " | ").replace("!(", "~(")
        rhs = re.sub(r"!(\w)", r"~\1", rhs)
        rhs = re.sub(r"!=", " != ", rhs)
        rhs = _ternaries(rhs)
        with np.errstate(all="ignore"):
            env[target] = eval(rhs, {"np": np, "_where": _where}, env)
    return env


def _where(c, a, b):
    return np.where(c, a, b)


def _ternaries(s):
    """``(c ? a : b)`` -> ``_where(c, a, b)`` (the generator parenthesises each
    ternary), innermost first."""
    while "?" in s:
        for q in [k for k, ch in enumerate(s) if ch == "?"]:
            depth, start = 0, q
            while depth >= 0:
                start -= 1
                depth += {")": 1, "(": -1}.get(s[start], 0)
            depth, colon, end = 0, None, q
            while depth >= 0:
                end += 1
                depth += {"(": 1, ")": -1}.get(s[end], 0)
                if depth == 0 and s[end] == ":" and colon is None:
                    colon = end
            if "?" in s[start + 1:q] + s[q + 1:end]:
                continue  # an inner ternary first
            c, a, b = s[start + 1:q], s[q + 1:colon], s[colon + 1:end]
            s = f"{s[:start]}_where({c}, {a}, {b}){s[end + 1:]}"
            break
    return s


@pytest.mark.parametrize("src", ["tanh(x) * sigmoid(y) + x * y",
                                 "where(x > y, exp(-x), softplus(y))",
                                 "maximum(x, y) - minimum(x, 0.5) + sign(x) * rsqrt(y * y + 1)",
                                 "where(x > 0, x, -inf)"])
def test_generated_statements_compute_the_reference(src):
    ins, outs = _graph(src, ["x", "y"])
    _, _, body, _, _ = codegen_cuda.kernel_spec(ins, outs, np.float64, "k")
    r = np.random.default_rng(0)
    x, y = r.uniform(-2, 2, 50), r.uniform(0.1, 2, 50)
    env = _run_c(body.split("\n"), {"a0": x, "a1": y})
    from tapegrad.fusion.op import evaluate
    ref = evaluate(outs, {ins[0]: x, ins[1]: y}, np.dtype(np.float64))[0]
    np.testing.assert_allclose(env["o0"], ref, rtol=1e-12)


@pytest.mark.parametrize("upd", [adam_fused(True, False, False, False, True),
                                 adam_fused(False, True, True, True, True),
                                 sgd_fused(True, False, True, True)],
                         ids=["adam-wd", "adamw-amsgrad-maximize", "sgd-nesterov-wd"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_update_kernel_is_one_in_place_pass(upd, dtype):
    """The assigned arrays are the kernel's output parameters, each read once before
    any write; the scalars are of the arrays' dtype; evaluating the statements gives
    the NumPy reference's update."""
    ins, outs, body, name, preamble = upd.cuda_spec(dtype)
    t = np.dtype(dtype).name
    assert name == f"tg_update_{upd.name}" and preamble == codegen_cuda.PREAMBLE
    targets = set(upd.targets)
    assert outs.split(", ") == [f"{t} a{k}" for k in upd.targets]
    assert ins.split(", ") == ([f"{t} a{k}" for k in range(len(upd.arrays)) if k not in targets]
                               + [f"{t} s{k}" for k in range(len(upd.scalars))])
    lines = body.split("\n")
    stores = [i for i, ln in enumerate(lines) if re.match(r"^a\d+ = ", ln)]
    reads = [i for i, ln in enumerate(lines) if re.search(r"= a\d+;$", ln)]
    assert sorted(int(re.match(r"^a(\d+)", lines[i]).group(1)) for i in stores) == \
        sorted(upd.targets)
    assert max(reads) < min(stores)
    r = np.random.default_rng(1)
    n = 40
    arrays = [r.uniform(0.1, 1.0, n).astype(dtype) for _ in upd.arrays]
    scalars = [float(v) for v in r.uniform(0.01, 0.9, len(upd.scalars))]
    expected = [a.copy() for a in arrays]
    upd.reference(*expected, *scalars)
    env = {f"a{k}": a.copy() for k, a in enumerate(arrays)}
    env.update({f"s{k}": np.dtype(dtype).type(s) for k, s in enumerate(scalars)})
    env = _run_c(lines, env)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for k in range(len(arrays)):
        np.testing.assert_allclose(env[f"a{k}"], expected[k], rtol=tol, atol=tol,
                                   err_msg=f"{upd.name} array {upd.arrays[k]}")


def test_update_of_a_boolean_statement_and_every_optimizer_builds():
    upd = Update("flag", [("p", "p > g")], arrays=("p", "g"))
    _, _, body, _, _ = upd.cuda_spec(np.float32)
    assert "a0 = (float)(" in body
    for opt in ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta"):
        assert hasattr(tg.optim, opt)
