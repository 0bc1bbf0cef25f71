"""Table lookups of half-width kernels (fusion/tables.py): a costly function of one
bfloat16 or float16 input is looked up in a 65,536-entry table of its float32 values,
built by the float32 kernel of the same expression, so the results equal the
computed ones bit for bit."""
import functools

import ml_dtypes
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import fusion
from tapegrad.devices import cpu
from tapegrad.fusion import codegen_numba, expr as E, tables

torch = pytest.importorskip("torch")

NP = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
BOTH = ("bfloat16", "float16")
GELU = "x * 0.5 * (1 + erf(x * 0.7071067811865476))"
# the tabled functions: activations' forward expressions and a few primitives
FUNCS = [GELU, "x * 0.5 * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))",
         "x * sigmoid(x)", "softplus(x)", "erf(x)", "exp(x)", "tanh(x)", "sigmoid(x)",
         "log(x)", "log1p(x)", "expm1(x)", "sin(x)", "x * tanh(softplus(x))"]


@pytest.fixture
def all_tables(monkeypatch):
    """Tables for both dtypes, gelu looked up in float16 too."""
    monkeypatch.setattr(fusion.config, "tables", BOTH)
    monkeypatch.setattr(tables, "MIN_COST", {d: 1 for d in BOTH})


def _computed(f, x, dtype):
    """``f``'s float32 values at every ``dtype`` pattern by the float32 kernel of
    the expression on the widened values (pattern ``f``: no half-width load)."""
    src = codegen_numba.kernel_source([x], [f], np.float32, "f", True)
    fn = cpu.compile_source(("test-table", src), src, "kernel", parallel=False,
                            fastmath=cpu.FASTMATH, error_model="numpy")
    wide = tables.patterns().view(NP[dtype]).astype(np.float32)
    out = np.empty(1 << 16, np.float32)
    fn(1 << 16, wide, out)
    return out


def _same_f32(a, b):
    nan = np.isnan(a) & np.isnan(b)
    bad = (a.view(np.uint32) != b.view(np.uint32)) & ~nan
    assert not bad.any(), f"{bad.sum()} of 65536 differ, e.g. {a[bad][:4]} vs {b[bad][:4]}"


def _check_table(src, dtype):
    x = E.var("x")
    f = E.parse(src, {"x": x})
    t = tables.table(f, x, dtype, True)
    assert t.shape == (1, 1 << 16) and t.dtype == np.float32
    _same_f32(t[0], _computed(f, x, dtype))


@pytest.mark.parametrize("dtype", BOTH)
def test_gelu_table_equals_float32_kernel(dtype):
    _check_table(GELU, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("src", FUNCS[1:])
def test_every_table_equals_float32_kernel(src, dtype):
    _check_table(src, dtype)


@pytest.mark.parametrize("cpu", ["zen4", "spr"])
def test_plan_picks_costly_functions_of_one_input(cpu, monkeypatch):
    """The thresholds measured on each CPU: on Zen 4 cheap functions are computed
    and float16 looks up only the costliest; on a Sapphire Rapids Xeon a lookup beats
    computing any transcendental."""
    least, whole = tables._ZEN4 if cpu == "zen4" else tables._SPR
    monkeypatch.setattr(tables, "MIN_COST", dict(least))
    monkeypatch.setattr(tables, "WHOLE_MIN_COST", dict(whole))
    x, y = E.var("x"), E.var("y")
    gelu = E.parse(GELU, {"x": x})
    out = E.mul(gelu, y)
    assert tables.plan([x, y], [out], "hh", "bfloat16") == [(gelu, 0)]
    assert tables.plan([x, y], [out], "hf", "bfloat16") == [(gelu, 0)]
    assert tables.plan([x, y], [out], "ff", "bfloat16") == []  # float32 inputs: no table
    # a function of two inputs: computed
    assert tables.plan([x, y], [E.parse("erf(x * y)", {"x": x, "y": y})], "hh",
                       "bfloat16") == []
    # a cheap one (exp): computed on Zen 4, looked up on the Xeon
    ex = E.parse("exp(x) * 2", {"x": x})
    assert tables.plan([x], [ex], "h", "bfloat16") == ([] if cpu == "zen4" else [(ex, 0)])
    # the whole chain is a function of x: one table for it
    chain = E.add(E.mul(gelu, x), 1.0)
    assert tables.plan([x], [chain], "h", "bfloat16") == [(chain, 0)]
    # float16's tables are read from L2: on Zen 4 only costlier functions are looked up
    assert tables.plan([x], [chain], "h", "float16") == ([] if cpu == "zen4" else [(chain, 0)])
    sp = E.parse("softplus(x) * x", {"x": x})
    assert tables.plan([x], [sp], "h", "float16") == [(sp, 0)]
    # arithmetic alone stays computed everywhere
    assert tables.plan([x], [E.parse("x * 2 + 1", {"x": x})], "h", "float16") == []
    assert tables.whole_input([x], [E.parse("x * 2 + 1", {"x": x})], "h", "float16") is None
    th = E.parse("tanh(x) * x", {"x": x})
    assert tables.whole_input([x], [th], "h", "float16") == (None if cpu == "zen4" else 0)


def test_thresholds_fill_for_this_cpu_once(monkeypatch):
    monkeypatch.setattr(tables, "MIN_COST", {})
    monkeypatch.setattr(tables, "WHOLE_MIN_COST", {"float16": 99})  # set by a caller: kept
    least, whole = tables.thresholds()
    assert least in (tables._ZEN4[0], tables._SPR[0]) and whole == {"float16": 99}
    assert tables.thresholds()[0] is least


def _patterns_plus(dtype, extra=1000):
    """Every ``dtype`` value, then ``extra`` randn values (not a whole block: the
    kernel's tail loop runs too)."""
    r = np.random.default_rng(0).standard_normal(extra).astype(NP[dtype])
    return np.concatenate([tables.patterns().view(NP[dtype]), r])


@pytest.mark.parametrize("dtype", BOTH)
def test_fused_chain_same_bits_with_and_without_tables(dtype, all_tables):
    chain = tg.fuse(lambda x: tg.nn.functional.gelu(x) * x + 1.0)
    x = tg.tensor(_patterns_plus(dtype))
    with_tables = chain(x).numpy()
    fusion.config.tables = ()
    without = chain(x).numpy()
    _same_f32(with_tables.astype(np.float32), without.astype(np.float32))


@pytest.mark.parametrize("dtype", BOTH)
def test_fused_chain_against_torch(dtype, all_tables):
    v = np.random.default_rng(1).standard_normal(1 << 14).astype(np.float32)
    x = tg.tensor(v).to(getattr(tg, dtype))
    xf = x.float().numpy()
    got = (tg.nn.functional.gelu(x) * x).numpy()  # gelu's own kernel, tabled
    tx = torch.tensor(xf).to(getattr(torch, dtype))
    ref = (torch.nn.functional.gelu(tx) * tx).float().numpy()
    np.testing.assert_allclose(got.astype(np.float32), ref,
                               rtol=2 ** -7 if dtype == "bfloat16" else 2 ** -10, atol=1e-6)
    fused = tg.fuse(lambda x: tg.nn.functional.gelu(x) * x + 1.0)(x).numpy()
    one = (torch.nn.functional.gelu(torch.tensor(xf)) * torch.tensor(xf) + 1).to(
        getattr(torch, dtype)).float().numpy()  # float32, rounded once
    close = np.isclose(fused.astype(np.float32), one, rtol=2 ** -7, atol=0)
    assert close.all() and (fused.astype(np.float32) != one).mean() < 0.01


@pytest.mark.parametrize("dtype", BOTH)
def test_gelu_gradient_with_tables(dtype, all_tables):
    v = np.concatenate([np.random.default_rng(2).standard_normal(5000), [0.0, -3.5, 7.0]])
    x = tg.tensor(v.astype(np.float32)).to(getattr(tg, dtype)).requires_grad_()
    tg.nn.functional.gelu(x).sum().backward()
    g_tab = x.grad.numpy().astype(np.float32)
    fusion.config.tables = ()
    x.grad = None
    tg.nn.functional.gelu(x).sum().backward()
    g_no = x.grad.numpy().astype(np.float32)
    # the adjoint multiplies the looked-up derivative by the cotangent: computed, the
    # kernel may contract or reassociate across that product, so the two can differ
    # by a float32 rounding, which rarely moves the half-width result by one unit
    rtol = 2 ** -7 if dtype == "bfloat16" else 2 ** -10
    np.testing.assert_allclose(g_tab, g_no, rtol=rtol, atol=0)
    assert (g_tab != g_no).mean() < 0.01
    tx = torch.tensor(x.detach().float().numpy(), requires_grad=True)
    torch.nn.functional.gelu(tx).sum().backward()
    np.testing.assert_allclose(g_tab, tx.grad.numpy(), rtol=rtol, atol=1e-6)


def _eager_lookup_equals_widened(name, dtype, monkeypatch):
    fn = getattr(tg, name)
    x = tg.tensor(_patterns_plus(dtype))
    monkeypatch.setattr(fusion.config, "tables", BOTH)
    looked = fn(x).numpy()
    monkeypatch.setattr(fusion.config, "tables", ())
    widened = fn(x).numpy()
    assert looked.dtype == widened.dtype == NP[dtype]
    _same_f32(looked.astype(np.float32), widened.astype(np.float32))


@pytest.mark.parametrize("dtype", BOTH)
def test_compiled_chain_looks_up(dtype, all_tables, monkeypatch):
    """tg.compile's fused kernel over a half-width chain of one input is one lookup
    (the chain's roundings inside the table), equal bit for bit to the kernel that
    computes it."""
    x = tg.tensor(_patterns_plus(dtype))

    def step(h):
        return tg.tanh(tg.exp(h)) * h

    def run():
        c = tg.compile(step)
        with tg.no_grad():
            for _ in range(3):
                got = c(x).numpy()
        return got, [st.fused[0] for st in c._last.steps if st.kind == "fused"]
    got, fused = run()
    assert any(isinstance(f, functools.partial) for f in fused)
    monkeypatch.setattr(fusion.config, "tables", ())
    want, fused = run()
    assert fused and not any(isinstance(f, functools.partial) for f in fused)
    _same_f32(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("name", ["exp", "sin", "sigmoid", "erf"])
def test_eager_unary_lookup_equals_widened(name, dtype, monkeypatch):
    """A unary registry op on a half-width array: one lookup an element equals
    widening, the float32 kernel and the rounding, at every value."""
    _eager_lookup_equals_widened(name, dtype, monkeypatch)


def _unary_ops():
    from tapegrad.ops_registry import get, list_ops
    ops = [get(n) if isinstance(n, str) else n for n in list_ops()]
    return sorted(o.name for o in ops if o.expr and o.elementwise and len(o.args) == 1
                  and o.nout == 1 and o.kind == "basic" and getattr(o, "fusion", None) is None
                  and hasattr(tg, o.name))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("name", _unary_ops())
def test_every_eager_unary_lookup_equals_widened(name, dtype, monkeypatch):
    _eager_lookup_equals_widened(name, dtype, monkeypatch)


# ---------------------------------------------------------------- whole kernels
def test_whole_input_picks_costly_kernels_of_one_input():
    x, y = E.var("x"), E.var("y")
    gelu_chain = E.add(E.mul(E.parse(GELU, {"x": x}), x), 1.0)
    affine = E.parse("x * 2 + 1", {"x": x})
    assert tables.whole_input([x], [gelu_chain], "h", "bfloat16") == 0
    assert tables.whole_input([x], [gelu_chain], "h", "float16") == 0
    assert tables.whole_input([x], [affine], "h", "bfloat16") is None  # bound by bytes
    poly = E.parse("x * x * x + x * 2 + 1 - x / 3", {"x": x})
    assert tables.whole_input([x], [poly], "h", "bfloat16") is None
    assert tables.whole_input([x], [E.parse("exp(x) + 1", {"x": x})], "h", "bfloat16") == 0
    assert tables.whole_input([x], [E.parse("exp(x) + 1", {"x": x})], "h", "float16") is None
    two = E.mul(E.parse(GELU, {"x": x}), y)
    assert tables.whole_input([x, y], [two], "hh", "bfloat16") is None
    assert tables.whole_input([x, y], [two], "hf", "bfloat16") is None
    assert tables.whole_input([x, y], [two], "hs", "bfloat16") == 0
    assert tables.whole_input([x, y], [two], "sh", "bfloat16") is None  # y is the input
    assert tables.whole_input([x], [gelu_chain], "f", "bfloat16") is None


def _rounded_once(f, x, dtype, extra):
    """``f`` at ``_patterns_plus(dtype, extra)`` by the float32 kernel of the
    expression on the widened values, rounded once to ``dtype``."""
    vals = _patterns_plus(dtype, extra).astype(np.float32)
    src = codegen_numba.kernel_source([x], [f], np.float32, "f", True)
    fn = cpu.compile_source(("test-table", src), src, "kernel", parallel=False,
                            fastmath=cpu.FASTMATH, error_model="numpy")
    out = np.empty_like(vals)
    fn(len(vals), vals, out)
    with np.errstate(over="ignore"):
        return out.astype(NP[dtype])


def _same_bits(a, b):
    """The same 16-bit patterns, a NaN's payload aside."""
    nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    a, b = a.view(np.uint16), b.view(np.uint16)
    bad = (a != b) & ~nan
    assert not bad.any(), f"{bad.sum()} of {bad.size} differ, e.g. {a[bad][:4]} vs {b[bad][:4]}"


@pytest.fixture
def fresh_whole(monkeypatch):
    monkeypatch.setattr(tables, "_WHOLE", type(tables._WHOLE)())


@pytest.mark.parametrize("dtype", BOTH)
def test_whole_chain_is_one_lookup_of_the_computed_bits(dtype, all_tables, fresh_whole,
                                                        monkeypatch):
    """A fused chain of one half-width input at every pattern (and a tail that is
    not a whole word): looked up, computed with and without tables, and the float32
    kernel rounded once give the same bits."""
    chain = tg.fuse(lambda x: tg.nn.functional.gelu(x) * x + 1.0)
    x = tg.tensor(_patterns_plus(dtype, 1003))
    looked = chain(x).numpy()
    assert len(tables._WHOLE) == 1
    v = E.var("x")
    _same_bits(looked, _rounded_once(E.add(E.mul(E.parse(GELU, {"x": v}), v), 1.0), v,
                                     dtype, 1003))
    _same_bits(looked[1:-2], chain(x[1:-2]).numpy())  # not 8-byte aligned
    monkeypatch.setattr(tables, "WHOLE_MIN_NUMEL", 1 << 40)  # tables of parts only
    _same_bits(looked, chain(x).numpy())
    fusion.config.tables = ()
    _same_bits(looked, chain(x).numpy())


@pytest.mark.parametrize("dtype", BOTH)
def test_whole_kernel_of_two_outputs_and_a_scalar(dtype, all_tables, fresh_whole):
    """Two outputs, one table each; a size-one input's value keys the table."""
    f = tg.fuse(lambda x, s: (tg.exp(x) * s, tg.sin(x) + x))
    x = tg.tensor(_patterns_plus(dtype, 7))
    got = {}
    for s in (0.5, -3.0):
        st = tg.tensor([s]).to(getattr(tg, dtype))
        got[s] = [o.numpy() for o in f(x, st)]
    assert len(tables._WHOLE) == 2 and all(t.shape == (2, 1 << 16)
                                           for t in tables._WHOLE.values())
    fusion.config.tables = ()
    for s in (0.5, -3.0):
        st = tg.tensor([s]).to(getattr(tg, dtype))
        for a, b in zip(got[s], f(x, st)):
            _same_bits(a, b.numpy())


def test_whole_tables_are_bounded(all_tables, fresh_whole, monkeypatch):
    monkeypatch.setattr(tables, "WHOLE_CACHE", 2)
    x = tg.tensor(_patterns_plus("bfloat16", 0))
    for c in (1.0, 2.0, 3.0):
        tg.fuse(lambda x, c=c: tg.exp(x) + c)(x)
    assert len(tables._WHOLE) == 2


def test_cheap_chain_is_computed(fresh_whole):
    x = tg.tensor(_patterns_plus("bfloat16", 0))
    tg.fuse(lambda x: x * 2.0 + 1.0)(x)
    assert not tables._WHOLE


@pytest.mark.parametrize("dtype", BOTH)
def test_whole_chain_against_torch(dtype, fresh_whole):
    """bfloat16/float16 gelu(x) * x + 1 over 2**17 randn values, looked up, against
    PyTorch computing it in float32 and rounding once."""
    v = np.random.default_rng(3).standard_normal(1 << 17).astype(np.float32) * 2
    x = tg.tensor(v).to(getattr(tg, dtype))
    got = tg.fuse(lambda x: tg.nn.functional.gelu(x) * x + 1.0)(x).numpy()
    assert tables._WHOLE
    tx = torch.tensor(x.float().numpy())
    ref = (torch.nn.functional.gelu(tx) * tx + 1).to(getattr(torch, dtype)).float().numpy()
    close = np.isclose(got.astype(np.float32), ref, rtol=2 ** -7, atol=0)
    assert close.all() and (got.astype(np.float32) != ref).mean() < 0.01


def test_compiled_whole_chain(all_tables, fresh_whole, monkeypatch):
    """tg.compile's bfloat16 group of one input (constants aside): one lookup an
    element, bit for bit the kernel's values (a float16 group ends at each rounding:
    its single ops run eagerly)."""
    x = tg.tensor(_patterns_plus("bfloat16", 5))

    def step(h):
        return tg.tanh(tg.exp(h)) * h + 0.25

    def run():
        c = tg.compile(step)
        with tg.no_grad():
            for _ in range(3):
                got = c(x).numpy()
        return got, [st.fused[0] for st in c._last.steps if st.kind == "fused"]
    got, fused = run()
    assert any(isinstance(f, functools.partial) and f.func is tables.run_whole
               for f in fused)
    monkeypatch.setattr(fusion.config, "tables", ())
    want, fused = run()
    assert fused and not any(isinstance(f, functools.partial) for f in fused)
    _same_bits(got, want)


CHAINS = FUNCS + ["x * 2 + 1", "exp(x) * x + 1", "where(x > 0, x, exp(x) - 1)",
                  "sin(x) * cos(x) / (1 + x * x)"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("k", range(len(CHAINS)))
def test_every_whole_chain_equals_computed(k, dtype, fresh_whole, monkeypatch):
    """Each chain of one input at every pattern, looked up where its cost says so,
    against the kernel computing every value (no tables at all)."""
    ex = tg.elementwise(f"_test_whole_chain_{k}", CHAINS[k], ["x"])
    x = tg.tensor(_patterns_plus(dtype, 11))
    got = ex(x).numpy()
    monkeypatch.setattr(fusion.config, "tables", ())
    _same_bits(got, ex(x).numpy())


def test_kernels_compiled_from_many_threads_at_once(tmp_path, monkeypatch):
    """Chunks of one call run on worker threads and may ask for the same new kernel
    together: every thread gets the compiled kernel, none a half-loaded module."""
    import threading
    monkeypatch.setenv("TAPEGRAD_CACHE_DIR", str(tmp_path))
    src = "def kernel(n, a):\n    return a[:n].sum() + %d\n" % threading.get_ident()
    start, got, errors = threading.Barrier(8), [], []

    def ask():
        start.wait()
        try:
            got.append(cpu.compile_source(("threads", src), src, "kernel", parallel=False))
        except BaseException as e:  # (re-raised below)
            errors.append(e)
    workers = [threading.Thread(target=ask) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert len({id(f) for f in got}) == 1
    assert got[0](3, np.arange(5.0)) == 3.0 + threading.get_ident()
