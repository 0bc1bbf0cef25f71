"""tg.compile of bfloat16/float16 elementwise chains (compiler/program.py's fusion).

The capture records a half-width op as eager runs it: a cast of its operands to
float32, the float32 op and a cast back (one rounding per op). The fusion runs such a
chain as one kernel over the 16-bit elements that keeps every captured rounding, so
the compiled values of arithmetic equal eager's bit for bit (and PyTorch's op-by-op
rounding for operations float32 computes exactly); a fused expression op (gelu) is
the fused kernel's float32 code, within a rounding of eager's."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F

torch = pytest.importorskip("torch")


def _bits(t):
    a = t.detach().numpy()
    return a.view(np.uint16) if a.dtype.itemsize == 2 else a.view(np.uint32)


def _fused_patterns(c):
    return [st.fused[1] for st in c._last.steps if st.kind == "fused"]


def _chain(h):
    return h * 0.5 + h * h - 1.0


@pytest.mark.parametrize("dtype", [tg.bfloat16, tg.float16])
def test_half_chain_is_one_kernel_equal_to_eager_and_torch(dtype):
    tg.manual_seed(0)
    x = tg.randn(33, 65).to(dtype)

    def step(inp):
        return _chain(inp)

    c = tg.compile(step)
    with tg.no_grad():
        want = step(x)
        for _ in range(3):
            got = c(x)
    assert got.dtype == want.dtype == dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))
    tdt = torch.bfloat16 if dtype == tg.bfloat16 else torch.float16
    ref = _chain(torch.from_numpy(x.float().numpy()).to(tdt))
    np.testing.assert_array_equal(_bits(got), ref.view(torch.int16).numpy().view(np.uint16))
    s = c.stats()
    assert s["fused_groups"] == 1 and s["kernels"] == 1, s
    assert _fused_patterns(c) == ["h"]  # the 16-bit elements read as they are


def test_bf16_gelu_chain_and_sum_equal_eager():
    tg.manual_seed(1)
    x = tg.randn(64, 48)

    def step(inp):
        h = inp.bfloat16()
        y = F.gelu(h) * 0.5 + h * h - 1.0
        return (y * y).sum(1)

    c = tg.compile(step)
    with tg.no_grad():
        want = step(x)
        c(x)
        got = c(x)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert c.stats()["fused_groups"] == 1


def test_float32_and_half_values_escaping_one_kernel():
    tg.manual_seed(2)
    x = tg.randn(40, 30)

    def step(inp):
        h = (inp * 3.0).bfloat16()      # a float32 value rounded into the chain
        w = h.float() * 0.25 + 1.0      # float32 from the half-width one
        return w, h * w.bfloat16(), (w * h.float()).sum()

    c = tg.compile(step)
    with tg.no_grad():
        want = step(x)
        c(x)
        got = c(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
    for g, w in zip(got[:2], want[:2]):
        np.testing.assert_array_equal(_bits(g), _bits(w))
    np.testing.assert_allclose(got[2].numpy(), want[2].numpy(), rtol=1e-5)
    assert c.stats()["fused_groups"] >= 1


def test_autocast_linear_chain_training_step_equals_eager():
    def model():
        tg.manual_seed(3)
        return nn.Linear(24, 16)

    def step(m, inp):
        with tg.autocast("cpu"):
            h = m(inp)
            y = F.gelu(h) * 0.5 + h * h - 1.0
        loss = (y.float() * y.float()).mean()
        loss.backward()
        return loss

    x = tg.randn(20, 24)
    eager = model()
    comp = model()
    c = tg.compile(lambda inp: step(comp, inp))
    for _ in range(3):
        for p in eager.parameters():
            p.grad = None
        for p in comp.parameters():
            p.grad = None
        want = step(eager, x)
        got = c(x)
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        for p, q in zip(comp.parameters(), eager.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert c.stats()["fused_groups"] >= 1


def _tol(dtype):
    return (1e-2, 1e-2) if dtype == tg.bfloat16 else (2e-3, 2e-3)


def _ulps(dtype):
    """A few units in the last place of ``dtype`` (and of its smallest subnormals)."""
    return (2 * 2.0 ** -7, 1e-30) if dtype == tg.bfloat16 else (2 * 2.0 ** -10, 4 * 2.0 ** -24)


def _grad_step(chain):
    def step(a, b):
        out = chain(a, b)
        (out.float() * out.float()).sum().backward()
        return out.detach()
    return step


def _run_both(step, x0, y0, dtype):
    def leaves():
        return (x0.to(dtype).requires_grad_(), y0.to(dtype).requires_grad_())
    c = tg.compile(step)
    for _ in range(3):
        a, b = leaves()
        got = c(a, b)
    ea, eb = leaves()
    want = step(ea, eb)
    return c, (got, a.grad, b.grad), (want, ea.grad, eb.grad)


@pytest.mark.parametrize("dtype", [tg.bfloat16, tg.float16])
def test_two_input_arithmetic_chain_with_gradients_equals_eager(dtype):
    """Exactly rounded arithmetic over two inputs with its backward: the forward is
    one kernel keeping eager's rounding of every op (float16's inside the kernel
    too), so values and gradients equal eager bit for bit."""
    tg.manual_seed(6)
    x0, y0 = tg.randn(30, 50) * 3, tg.randn(30, 50)
    step = _grad_step(lambda a, b: (a * b + 1.0) * a - b * 0.375)
    c, got, want = _run_both(step, x0, y0, dtype)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == dtype
        np.testing.assert_array_equal(_bits(g), _bits(w))
    with tg.no_grad():
        fwd = tg.compile(lambda p, q: (p * q + 1.0) * p - q * 0.375)
        p, q = x0.to(dtype), y0.to(dtype)
        fwd(p, q)
        np.testing.assert_array_equal(_bits(fwd(p, q)), _bits(want[0]))
    assert fwd.stats()["kernels"] == 1, fwd.stats()


@pytest.mark.parametrize("dtype", [tg.bfloat16, tg.float16])
def test_two_input_gelu_chain_one_kernel_with_gradients(dtype):
    """``gelu(x) * y + 1`` with its backward, the forward one kernel: values and
    gradients within a few units in the last place of eager's (the fused kernel's
    float32 gelu is not the eager op's code: where the float32 values differ by an
    ulp, a rounding can go the other way; in gelu's tail, where ``1 + erf`` cancels,
    by a few), within the dtype's tolerance of PyTorch and of @tg.fuse (which rounds
    once, at the end)."""
    tg.manual_seed(4)
    x0, y0 = tg.randn(24, 40) * 2, tg.randn(24, 40)
    step = _grad_step(lambda a, b: F.gelu(a) * b + 1.0)
    c, got, want = _run_both(step, x0, y0, dtype)
    rtol, atol = _ulps(dtype)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == dtype
        np.testing.assert_allclose(g.float().numpy(), w.float().numpy(), rtol=rtol,
                                   atol=atol * 2)
    tdt = torch.bfloat16 if dtype == tg.bfloat16 else torch.float16
    ta = torch.from_numpy(x0.numpy()).to(tdt).requires_grad_()
    tb = torch.from_numpy(y0.numpy()).to(tdt).requires_grad_()
    tout = torch.nn.functional.gelu(ta) * tb + 1.0
    (tout.float() * tout.float()).sum().backward()
    rtol, atol = _tol(dtype)
    for g, t in zip(got, (tout.detach(), ta.grad, tb.grad)):
        t = t.float().numpy()
        np.testing.assert_allclose(g.float().numpy(), t, rtol=rtol,
                                   atol=atol * float(np.abs(t).max()))

    @tg.fuse
    def fused(p, q):
        return F.gelu(p) * q + 1.0
    with tg.no_grad():
        once = fused(x0.to(dtype), y0.to(dtype))
        fwd = tg.compile(lambda p, q: F.gelu(p) * q + 1.0)
        p, q = x0.to(dtype), y0.to(dtype)
        fwd(p, q)
        np.testing.assert_allclose(fwd(p, q).float().numpy(), once.float().numpy(),
                                   rtol=rtol, atol=atol)
    assert fwd.stats()["kernels"] == 1, fwd.stats()


@pytest.mark.parametrize("dtype", [tg.bfloat16, tg.float16])
def test_single_op_compiled_equals_fuse_and_eager(dtype):
    """One expression op compiled: its one rounding is @tg.fuse's and eager's."""
    tg.manual_seed(5)
    x = (tg.randn(70000) * 3).to(dtype)

    @tg.fuse
    def fused(p):
        return F.gelu(p)
    c = tg.compile(lambda p: F.gelu(p))
    with tg.no_grad():
        want, once = F.gelu(x), fused(x)
        c(x)
        got = c(x)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    np.testing.assert_array_equal(_bits(got), _bits(once))


@pytest.mark.parametrize("dtype", [tg.bfloat16, tg.float16])
def test_chain_of_one_input_is_a_lookup_equal_to_its_kernel(dtype, monkeypatch):
    """``gelu(x) * x + 1`` over enough elements: the compiled kernel is replaced by
    one lookup an element of its outputs' patterns (``tables.run_whole``, run in
    chunks of at least ``WHOLE_CHUNK``), equal bit for bit to the computing kernel
    (tables off), within a few units in the last place of eager's."""
    from tapegrad.fusion import tables
    tg.manual_seed(7)
    x = (tg.randn(1 << 17) * 3).to(dtype)

    def chain(p):
        return F.gelu(p) * p + 1.0

    def compiled():
        c = tg.compile(chain)
        with tg.no_grad():
            c(x)
            return c, c(x)
    c, got = compiled()
    (st,) = [st for st in c._last.steps if st.kind == "fused"]
    assert st.fused[0].func is tables.run_whole
    assert st.attrs["min_chunk"] == tables.WHOLE_CHUNK
    monkeypatch.setattr(tg.fusion.config, "tables", ())
    c2, computed = compiled()
    (st2,) = [st for st in c2._last.steps if st.kind == "fused"]
    assert "min_chunk" not in st2.attrs
    np.testing.assert_array_equal(_bits(got), _bits(computed))
    with tg.no_grad():
        want = chain(x)
    rtol, atol = _ulps(dtype)
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=rtol, atol=atol)


def test_guards_name_half_width_arguments():
    f = tg.compile(lambda x: x * 2)
    for dt in (tg.bfloat16, tg.float16):
        x = tg.ones(8).to(dt)
        f(x)
        f(x)
        assert f"x: {str(dt).split('.')[-1]}[8]" in f.stats()["guards"]
