"""tg.compile's fusions across a GEMM and a partial reduction, and its hoisting of
values derived from the targets (compiler/epilogue.py, compiler/hoist.py).

Each is checked against the same step run eagerly and against PyTorch for the
values; the fused loops themselves bitwise against the eager kernels (they do the
same arithmetic in the same order)."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F

from ._models import cross_entropy_step

torch = pytest.importorskip("torch")


def _steps(prog):
    return [st.name for st in prog.steps]


def _model(dtype, bias, seed=0):
    tg.manual_seed(seed)
    return nn.Sequential(nn.Linear(7, 9, bias=bias), nn.ReLU(), nn.Linear(9, 6), nn.ReLU(),
                         nn.Linear(6, 4)).to(dtype)


def _torch_model(m):
    t = torch.nn.Sequential(*[torch.nn.Linear(layer.in_features, layer.out_features,
                                              bias=layer.bias is not None)
                              if isinstance(layer, nn.Linear) else torch.nn.ReLU() for layer in m])
    with torch.no_grad():
        for p, q in zip(t.parameters(), m.parameters()):
            p.copy_(torch.from_numpy(q.detach().numpy().copy()))
    return t.double() if m[0].weight.dtype == tg.float64 else t


@pytest.mark.parametrize("dtype,bias", [(tg.float32, True), (tg.float64, False)])
def test_linear_relu_and_bias_gradient_fused_equal_eager_and_torch(dtype, bias):
    npdt = np.float32 if dtype == tg.float32 else np.float64
    rng = np.random.default_rng(3)
    x = tg.tensor(rng.standard_normal((5, 7)).astype(npdt))
    y = tg.tensor(rng.integers(0, 4, 5))
    me, mc = _model(dtype, bias), _model(dtype, bias)
    mt = _torch_model(me)
    oe = tg.optim.SGD(me.parameters(), lr=0.1)
    oc = tg.optim.SGD(mc.parameters(), lr=0.1)
    ot = torch.optim.SGD(mt.parameters(), lr=0.1)
    eager, comp = cross_entropy_step(me, oe, x, y), tg.compile(cross_entropy_step(mc, oc, x, y))
    xt, yt = torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy())
    tol = 1e-5 if dtype == tg.float32 else 1e-12
    for _ in range(4):
        le, lc = eager(), comp()
        ot.zero_grad()
        lt = torch.nn.functional.cross_entropy(mt(xt), yt)
        lt.backward()
        ot.step()
        np.testing.assert_allclose(lc.item(), le.item(), rtol=tol)
        np.testing.assert_allclose(lc.item(), lt.item(), rtol=tol)
        for a, b, c in zip(mc.parameters(), me.parameters(), mt.parameters()):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=tol, atol=tol)
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol,
                                       atol=tol)
            np.testing.assert_allclose(a.grad.numpy(), c.grad.numpy(), rtol=tol, atol=tol)
    names = _steps(comp._last)
    assert names.count("linear+relu") == 2, names
    # the first layer's input needs no gradient: one masked bias gradient per hidden
    # layer whose bias exists (the first's only with a bias)
    masked = [n for n in names if n.endswith("relu_backward+sum")]
    assert len(masked) == (2 if bias else 1), names
    # each the product of the layer above's gradient, masked where it lands
    assert names.count("matmul+relu_backward+sum") == len(masked), names
    assert "relu" not in names and "relu_backward" not in names or not bias
    assert comp.stats()["replays"] == 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_loops_bitwise_equal_eager_kernels(dtype):
    from tapegrad.compiler import epilogue as E
    from tapegrad.ops.elementwise import RELU_BACKWARD
    rng = np.random.default_rng(1)
    x = rng.standard_normal((33, 17)).astype(dtype)
    w = rng.standard_normal((29, 17)).astype(dtype)
    b = rng.standard_normal(29).astype(dtype)
    x[0, :3] = np.nan
    want = tg.relu(F.linear(tg.tensor(x), tg.tensor(w), tg.tensor(b))).numpy()
    out = np.empty((33, 29), dtype)
    assert E.LINEAR_RELU.kernel(x, w, b, out=out) is out
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(E.LINEAR_RELU.kernel(x, w),
                                  tg.relu(F.linear(tg.tensor(x), tg.tensor(w))).numpy())
    g = rng.standard_normal((33, 29)).astype(dtype)
    y = np.maximum(rng.standard_normal((33, 29)), 0).astype(dtype)
    d_want = RELU_BACKWARD.kernel(g, y)  # the eager adjoint's kernel
    d, s = E.RELU_BACKWARD_SUM0.kernel(g, y)
    np.testing.assert_array_equal(d, d_want)
    np.testing.assert_array_equal(s, d_want.sum(axis=0))
    np.testing.assert_allclose(s, (g * (y > 0)).sum(0), rtol=1e-5)
    g[:, 0], y[:, 0] = -np.abs(g[:, 0]), 0  # a dead unit: its column of d is -0.0
    d, s = E.RELU_BACKWARD_SUM0.kernel(g, y)
    want = RELU_BACKWARD.kernel(g, y).sum(axis=0)
    np.testing.assert_array_equal(np.signbit(s), np.signbit(want))
    np.testing.assert_array_equal(s, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_features_major_loops_equal_the_plain_ones(dtype):
    """The features-major forms (the GEMM run transposed, the result the transpose of a
    C-contiguous array) give eager's values, in that layout; the masked bias gradients'
    sums add the rows in NumPy's order."""
    from tapegrad.compiler import epilogue as E
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 11)).astype(dtype)
    w = rng.standard_normal((13, 11)).astype(dtype)
    b = rng.standard_normal(13).astype(dtype)
    x[0, 0] = np.nan
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    out = np.empty((6, 13), dtype)
    h = E.LINEAR_RELU.kernel(x, w, b, out=out, features_major=True)
    assert h.shape == (6, 13) and h.T.flags.c_contiguous and not h.flags.c_contiguous
    assert np.shares_memory(h, out)
    want = tg.relu(F.linear(tg.tensor(x), tg.tensor(w), tg.tensor(b))).numpy()
    np.testing.assert_allclose(h, want, **tol)
    np.testing.assert_allclose(E.LINEAR_RELU.kernel(x, w, features_major=True),
                               tg.relu(F.linear(tg.tensor(x), tg.tensor(w))).numpy(), **tol)
    a = np.asfortranarray(rng.standard_normal((6, 9)).astype(dtype))
    m = rng.standard_normal((9, 13)).astype(dtype)
    y = h.copy(order="F")
    y[:, 1] = 0  # a dead unit
    mask = ~(y <= 0)  # (a NaN passes the gradient, as eager's relu_backward)
    for fm in (True, False):
        d, s = E.MATMUL_RELU_BACKWARD_SUM0.kernel(
            a, m, y, out=(np.empty((6, 13), dtype), np.empty(13, dtype)), features_major=fm)
        assert d.flags.c_contiguous != fm
        d_want = (a @ m) * mask
        np.testing.assert_allclose(d, d_want, **tol)
        np.testing.assert_allclose(s, d_want.sum(0), **tol)
        assert not np.signbit(s[1])  # (a column of -0.0 sums to +0.0, as NumPy's sum)
    g = np.asfortranarray(rng.standard_normal((6, 13)).astype(dtype))
    d, s = E.RELU_BACKWARD_SUM0.kernel(g, y, features_major=True)
    assert not d.flags.c_contiguous
    np.testing.assert_array_equal(d, g * mask)
    np.testing.assert_allclose(s, (g * mask).sum(0), **tol)
    # a C-contiguous y (the plain path): bitwise the eager kernels
    from tapegrad.ops.elementwise import RELU_BACKWARD
    yc = np.ascontiguousarray(y)
    d, s = E.MATMUL_RELU_BACKWARD_SUM0.kernel(np.ascontiguousarray(a), m, yc)
    d_want = RELU_BACKWARD.kernel(np.ascontiguousarray(a) @ m, yc)
    np.testing.assert_array_equal(d, d_want)
    np.testing.assert_array_equal(s, d_want.sum(0))


@pytest.mark.parametrize("whole_step", [False, True])
def test_hidden_layers_features_major_and_nothing_escapes_in_that_order(whole_step):
    """A batch narrower than the layers: the hidden activations and their gradients run
    features major inside the program; the outputs, the saved values the caller never
    sees aside, and the gradients keep eager's C order, and the values equal eager's."""
    rng = np.random.default_rng(4)
    x = tg.tensor(rng.standard_normal((8, 20)).astype(np.float32))
    y = tg.tensor(rng.integers(0, 5, 8))

    def make():
        tg.manual_seed(1)
        return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                             nn.Linear(32, 24), nn.ReLU())  # (the output a ReLU's)

    me, mc = make(), make()
    oe, oc = tg.optim.SGD(me.parameters(), lr=0.1), tg.optim.SGD(mc.parameters(), lr=0.1)
    cm = tg.compile(mc)

    def step(model, opt):
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out[:, :5], y)
        loss.backward()
        opt.step()
        return out, loss

    run = tg.compile(lambda: step(mc, oc)) if whole_step else (lambda: step(cm, oc))
    for _ in range(4):
        (oute, le), (outc, lc) = step(me, oe), run()
        assert outc.is_contiguous() and outc.detach().numpy().flags.c_contiguous
        np.testing.assert_allclose(outc.detach().numpy(), oute.detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-5)
        for a, b in zip(mc.parameters(), me.parameters()):
            assert a.grad.numpy().flags.c_contiguous
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6)
    prog = run._last if whole_step else cm._joint._last
    steps = list(prog.steps) + list(getattr(prog, "backward", None).steps
                                     if getattr(prog, "backward", None) else [])
    major = [st.name for st in steps if st.attrs.get("features_major")]
    # the two hidden layers (the last ReLU's result is an output: its own order)
    assert major.count("linear+relu") == 2, [(st.name, st.attrs) for st in steps]
    assert any(n.endswith("relu_backward+sum") for n in major), major


def test_relu_nan_and_negative_zero_pass_as_eager():
    w = tg.tensor(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), requires_grad=True)
    b = tg.tensor(np.array([0.0, -0.0, np.nan]), requires_grad=True)

    def f(x):
        h = tg.relu(F.linear(x, w, b))
        h.sum().backward()
        gw, gb = w.grad, b.grad
        w.grad = b.grad = None
        return h, gw, gb
    c = tg.compile(f)
    x = tg.tensor(np.array([[-1.0, 2.0], [-0.0, -3.0], [np.nan, 1.0]]))
    ref = f(x)
    for _ in range(2):
        got = c(x)
        for a, r in zip(got, ref):
            a, r = a.detach().numpy(), r.detach().numpy()
            np.testing.assert_array_equal(a, r)
            assert np.array_equal(np.signbit(a), np.signbit(r))
    assert "linear+relu" in _steps(c._last)


def test_linear_output_read_elsewhere_is_not_fused():
    w = tg.tensor(np.ones((3, 2)))

    def f(x):
        h = F.linear(x, w)
        return tg.relu(h) + h
    c = tg.compile(f)
    x = tg.tensor(np.array([[-1.0, 2.0]]))
    c(x)
    np.testing.assert_array_equal(c(x).detach().numpy(), f(x).detach().numpy())
    assert "linear+relu" not in _steps(c._last)


def test_targets_hoisted_and_recomputed_when_changed_in_place():
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((6, 7)).astype(np.float32))
    ye = tg.tensor(rng.integers(0, 4, 6))
    yc = tg.tensor(ye.numpy().copy())
    me, mc = _model(tg.float32, True), _model(tg.float32, True)
    eager = cross_entropy_step(me, tg.optim.SGD(me.parameters(), lr=0.1), x, ye)
    comp = tg.compile(cross_entropy_step(mc, tg.optim.SGD(mc.parameters(), lr=0.1), x, yc))
    for k in range(5):
        if k in (2, 4):  # new targets written into the same tensors
            new = rng.integers(0, 4, 6)
            with tg.no_grad():
                ye.numpy()[...] = new
                yc.numpy()[...] = new
        np.testing.assert_allclose(comp().item(), eager().item(), rtol=1e-5)
        for a, b in zip(mc.parameters(), me.parameters()):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)
    h = comp._last.hoisted
    assert h is not None and comp.stats()["captures"] == 1
    assert {st.name for st in h.steps} >= {"one_hot", "sum"}
    # ignore_index masks a target: the hoisted mask follows it
    with tg.no_grad():
        ye.numpy()[0] = yc.numpy()[0] = -100
    np.testing.assert_allclose(comp().item(), eager().item(), rtol=1e-5)


def test_a_written_external_is_not_hoisted():
    m = tg.tensor(np.array([1.0, 0.0, 2.0]))
    x = tg.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)

    def f():
        s = (x * tg.exp(m)).sum()
        s.backward()
        g = x.grad
        x.grad = None
        with tg.no_grad():
            m.add_(1.0)   # m changes every call: exp(m) must be recomputed
        return s, g
    c = tg.compile(f)
    ref_m = m.numpy().copy()
    outs = [c() for _ in range(3)]
    for k, (s, g) in enumerate(outs):
        want = np.exp(ref_m + k)
        np.testing.assert_allclose(g.numpy(), want)
        np.testing.assert_allclose(s.item(), (np.array([1.0, 2.0, 3.0]) * want).sum())
    assert c._last.hoisted is None


# ---------------------------------------------------------------- a split's gradient
class _Split(nn.Module):
    """A projection split along its last axis, as attention's q, k, v."""

    def __init__(self, sizes):
        super().__init__()
        self.sizes = sizes
        self.proj = nn.Linear(5, sum(sizes))

    def forward(self, x):
        h = self.proj(x)
        parts, at = [], 0
        for k, n in enumerate(self.sizes):
            parts.append(h[..., at:at + n] * (k + 1.0))
            at += n
        out = parts[0].sum(-1, keepdim=True) * parts[-1][..., :1]
        for p in parts[1:-1]:
            out = out + tg.tanh(p).sum(-1, keepdim=True)
        return out


@pytest.mark.parametrize("sizes", [(3, 3, 3), (2, 4), (1, 3, 2, 2)])
def test_a_split_gradient_is_one_cat_equal_eager_and_torch(sizes):
    tg.manual_seed(0)
    mc = _Split(sizes).to(tg.float64)
    me = _Split(sizes).to(tg.float64)
    me.load_state_dict(mc.state_dict())
    cm = tg.compile(mc)
    x = tg.tensor(np.random.default_rng(2).standard_normal((2, 3, 5)))
    for model in (cm, cm, me):  # (the capture, a replay; eager)
        model.zero_grad()
        model(x).sum().backward()
    for a, b in zip(mc.parameters(), me.parameters()):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-14)
    prog = cm._joint._last.backward
    assert prog.joined == 1
    assert "cat" in _steps(prog)
    full = tuple(x.shape[:-1]) + (sum(sizes),)  # no zero-filled array of the whole split
    assert not [st for st in prog.steps if st.name == "index_add_into" and
                tuple(st.attrs["shape"]) == full]
    # the values against PyTorch's gradient of the same split
    w = torch.from_numpy(mc.proj.weight.detach().numpy().copy()).requires_grad_()
    b = torch.from_numpy(mc.proj.bias.detach().numpy().copy()).requires_grad_()
    h = torch.nn.functional.linear(torch.from_numpy(x.numpy()), w, b)
    parts, at = [], 0
    for k, n in enumerate(sizes):
        parts.append(h[..., at:at + n] * (k + 1.0))
        at += n
    out = parts[0].sum(-1, keepdim=True) * parts[-1][..., :1]
    for p in parts[1:-1]:
        out = out + torch.tanh(p).sum(-1, keepdim=True)
    out.sum().backward()
    np.testing.assert_allclose(mc.proj.weight.grad.numpy(), w.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(mc.proj.bias.grad.numpy(), b.grad.numpy(), rtol=1e-12)


def test_a_split_that_does_not_tile_the_axis_keeps_its_zero_fills():
    class Gap(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 6)

        def forward(self, x):
            h = self.proj(x)
            return (h[..., :2] * h[..., 3:5]).sum(-1)  # column 2 and 5 get no gradient
    tg.manual_seed(1)
    mc, me = Gap().to(tg.float64), Gap().to(tg.float64)
    me.load_state_dict(mc.state_dict())
    cm = tg.compile(mc)
    x = tg.tensor(np.random.default_rng(4).standard_normal((3, 4)))
    for model in (cm, cm, me):
        model.zero_grad()
        model(x).sum().backward()
    for a, b in zip(mc.parameters(), me.parameters()):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-14)
    assert cm._joint._last.backward.joined == 0


# ---------------------------------------------------------------- last-axis sums
@pytest.mark.parametrize("dtype,rtol", [(np.float32, 1e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("rows", [False, True])
def test_last_axis_sums_and_means_replay_equal_eager(dtype, rtol, rows, monkeypatch):
    # a layer norm written with ops: means over the last axis (one GEMV each in the
    # program; with row fusion, the whole norm one kernel over rows), a sum of a
    # transposed view (not contiguous: NumPy's reduction)
    from tapegrad.compiler import rows as row_fusion
    monkeypatch.setattr(row_fusion, "ENABLED", rows)
    monkeypatch.setattr(row_fusion, "MIN_ELEMENTS", 0)
    def norm(x, w):
        mu = x.mean(-1, keepdim=True)
        xc = x - mu
        var = (xc * xc).mean(dim=-1, keepdim=True)
        y = xc * tg.rsqrt(var + 1e-5) * w
        return y.sum(-1).sum() + x.transpose(0, 1).sum(-1).sum()

    def step(x, w):
        loss = norm(x, w)
        loss.backward()
        return loss, w.grad

    rng = np.random.default_rng(7)
    x = tg.tensor(rng.standard_normal((6, 5, 9)).astype(dtype))
    w = tg.tensor(rng.standard_normal(9).astype(dtype), requires_grad=True)
    c = tg.compile(step)
    for _ in range(3):
        w.grad = None
        lc, gc = c(x, w)
        gc = gc.numpy().copy()
        w.grad = None
        le, ge = step(x, w)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=rtol)
        np.testing.assert_allclose(gc, ge.numpy(), rtol=rtol, atol=rtol)
    assert c.stats()["replays"] == 2
    from tapegrad.compiler.program import _last_axis_sum
    gemv = any(v is _last_axis_sum for v in c._last.fn.__globals__.values())
    fused = any(st.name.startswith("rows[") for st in c._last.steps)
    assert fused == rows and (gemv or rows)


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@hypothesis.settings(max_examples=25, deadline=None, derandomize=True, database=None,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(batch=st.integers(1, 9), widths=st.lists(st.integers(1, 12), min_size=2,
                                                           max_size=4),
                  bias=st.booleans(), relu_last=st.booleans(), dtype=st.sampled_from(
                      [tg.float32, tg.float64]), order=st.sampled_from("CF"))
def test_relu_mlps_of_any_widths_compiled_equal_eager(batch, widths, bias, relu_last, dtype,
                                                      order):
    """``model = tg.compile(model)`` of ReLU MLPs, batches narrower and wider than the
    layers (features-major layers or not), inputs in either order: outputs and
    gradients equal eager's, in eager's C order."""
    def make():
        tg.manual_seed(3)
        layers = []
        for k, (a, b) in enumerate(zip(widths, widths[1:])):
            layers.append(nn.Linear(a, b, bias=bias or k == 0))
            if k < len(widths) - 2 or relu_last:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers).to(dtype)

    me, mc = make(), make()
    cm = tg.compile(mc)
    rng = np.random.default_rng(batch)
    npdt = np.float32 if dtype == tg.float32 else np.float64
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == tg.float32 else dict(rtol=1e-10, atol=1e-12)
    for _ in range(3):
        a = rng.standard_normal((batch, widths[0])).astype(npdt)
        x = tg.tensor(np.asfortranarray(a) if order == "F" else a)
        w = tg.tensor(rng.standard_normal((batch, widths[-1])).astype(npdt))
        for m in (me, mc):
            m.zero_grad()
        oe, oc = me(x), cm(x)
        (oe * w).sum().backward()
        (oc * w).sum().backward()
        assert oc.is_contiguous()
        np.testing.assert_allclose(oc.detach().numpy(), oe.detach().numpy(), **tol)
        for p, q in zip(mc.parameters(), me.parameters()):
            assert p.grad.numpy().flags.c_contiguous
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), **tol)
