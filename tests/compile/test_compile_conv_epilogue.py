"""tg.compile's CNN-layer fusions (compiler/epilogue.py): ``conv2d -> relu
[-> max_pool2d]`` as one step with the ReLU and the pooling in the conv's epilogue,
and ``relu_backward(max_pool2d_input_grad(.))`` as one pass. Each does the eager
kernels' arithmetic, so the compiled results are checked bitwise against eager
(and the values against PyTorch), over geometries where the fast path applies and
where the fused step falls back to the registry kernels."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


class _Layer(tg.nn.Module):
    """conv2d -> relu [-> max_pool2d], the ReLU's output also returned with ``both``."""

    def __init__(self, cin, cout, k, conv, pool, bias=True, both=False, dtype=np.float32):
        super().__init__()
        r = np.random.default_rng(cin * 7 + cout)
        w = r.standard_normal((cout, cin // conv.get("groups", 1), *k)) / 3
        self.w = tg.nn.Parameter(tg.tensor(w.astype(dtype)))
        self.b = tg.nn.Parameter(tg.tensor(r.standard_normal(cout).astype(dtype))) \
            if bias else None
        self.conv, self.pool, self.both = conv, pool, both

    def forward(self, x):
        y = tg.relu(tg.conv2d(x, self.w, self.b, **self.conv))
        if self.pool is None:
            return y
        m = tg.max_pool2d(y, **self.pool)
        return (m, y) if self.both else m


CASES = [  # (x shape, cout, kernel, conv attrs, pool attrs, bias, dtype)
    ((3, 2, 9, 9), 4, (3, 3), {}, dict(kernel_size=2), True, np.float32),
    ((2, 3, 8, 7), 4, (3, 3), dict(padding=1, stride=2), dict(kernel_size=3, stride=2, padding=1),
     False, np.float64),
    ((2, 4, 9, 10), 6, (2, 3), dict(dilation=2, groups=2),
     dict(kernel_size=(2, 3), ceil_mode=True), True, np.float32),
    ((2, 3, 6, 6), 5, (1, 1), {}, dict(kernel_size=2), True, np.float32),  # pointwise
    ((2, 2, 7, 7), 3, (3, 3), dict(padding=1), None, True, np.float64),    # no pooling
]


def _run(model, x, seeds=2):
    """(outputs, gradients of the parameters) over a few calls of ``model``."""
    res = []
    for s in range(seeds):
        for p in model.parameters():
            p.grad = None
        xs = tg.tensor(x * (1 + s))
        out = model(xs)
        outs = out if isinstance(out, tuple) else (out,)
        loss = sum((o * o).sum() for o in outs)
        loss.backward()
        res.append([o.detach().numpy().copy() for o in outs] +
                   [p.grad.numpy().copy() for p in model.parameters()])
    return res


def _assert_bitwise_equal(eager, compiled, x):
    """``_run`` of the eager and the compiled model give the same bits."""
    for a, b in zip(_run(eager, x), _run(compiled, x)):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("case,both", [(c, b) for c in range(len(CASES))
                                       for b in ((False, True) if CASES[c][4] else (False,))])
def test_conv_relu_pool_fused_bitwise_eager(case, both):
    """``both``: the ReLU's output is a result too (and its gradient a sum of two)."""
    xs, cout, k, conv, pool, bias, dt = CASES[case]
    x = np.random.default_rng(case).standard_normal(xs).astype(dt)
    x.flat[5] = np.nan if case == 0 else x.flat[5]  # a NaN passes the ReLU and wins the max
    e = _Layer(xs[1], cout, k, conv, pool, bias, both, dt)
    c = _Layer(xs[1], cout, k, conv, pool, bias, both, dt)
    cm = tg.compile(c)
    _assert_bitwise_equal(e, cm, x)
    names = [st.name for st in cm._joint._last.steps]
    fused = "conv2d+relu" if pool is None else "conv2d+relu+max_pool2d"
    assert fused in names and "relu" not in names, names
    if pool is not None and not both:  # (with both, y's gradient is a sum of two)
        prog = cm._joint._last
        names = [st.name for st in prog.backward.steps]
        assert any(n.startswith("max_pool2d_input_grad+relu_backward") for n in names), names
        assert "relu_backward" not in names, names
        # the backward's mask comes from the pooled values: the ReLU's result is not saved
        y = next(st for st in prog.steps if st.name.startswith("conv2d+relu")).outs[0]
        assert y not in prog.graph.output_values()


def test_fused_cnn_step_matches_torch():
    """The whole step (forward, backward, SGD) compiled, against PyTorch's."""
    r = np.random.default_rng(0)
    x0 = r.standard_normal((4, 1, 14, 14)).astype(np.float32)
    y0 = r.integers(0, 3, 4)
    p0 = {"w1": r.standard_normal((4, 1, 3, 3)) / 3, "b1": r.standard_normal(4) / 3,
          "w2": r.standard_normal((6, 4, 3, 3)) / 6, "b2": r.standard_normal(6) / 3,
          "w3": r.standard_normal((3, 24)) / 5, "b3": np.zeros(3)}
    p0 = {k: v.astype(np.float32) for k, v in p0.items()}

    def body(lib, F, p, x, y):
        h = F.max_pool2d(F.relu(F.conv2d(x, p["w1"], p["b1"])), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["w2"], p["b2"])), 2)
        return F.cross_entropy(F.linear(h.reshape(4, 24), p["w3"], p["b3"]), y)

    p = {k: tg.tensor(v, requires_grad=True) for k, v in p0.items()}
    x, y = tg.tensor(x0), tg.tensor(y0)

    def step():
        loss = body(tg, tg.nn.functional, p, x, y)
        loss.backward()
        with tg.no_grad():
            for t in p.values():
                t -= 0.1 * t.grad
                t.grad = None
        return loss
    comp = tg.compile(step)
    pt = {k: torch.tensor(v, requires_grad=True) for k, v in p0.items()}
    xt, yt = torch.from_numpy(x0), torch.from_numpy(y0)
    for _ in range(3):
        lc = comp()
        lt = body(torch, torch.nn.functional, pt, xt, yt)
        lt.backward()
        with torch.no_grad():
            for t in pt.values():
                t -= 0.1 * t.grad
                t.grad = None
        np.testing.assert_allclose(lc.item(), lt.item(), rtol=1e-5)
    for k in p:
        np.testing.assert_allclose(p[k].detach().numpy(), pt[k].detach().numpy(), rtol=1e-4,
                                   atol=1e-5)
    names = [st.name for st in comp._last.steps]
    assert names.count("conv2d+relu[+max_pool2d] x2") == 1, names
    # both layers' backward in one step, the masks from the pooled values
    chain = [st for st in comp._last.steps if st.name == _GRAD_CHAIN]
    assert len(chain) == 1, names
    assert chain[0].attrs["first"]["pooled"] and chain[0].attrs["second"]["pooled"]


@pytest.mark.parametrize("pooled", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pool_relu_grad_pass_bitwise_eager_kernels(overlap, dtype, pooled):
    """``pooled``: the mask taken from the pooled values, in the one pass and in the
    fallback of the fused step (the registry kernels)."""
    from tapegrad.compiler.epilogue import _pool_relu_grad
    from tapegrad.ops.elementwise import RELU_BACKWARD
    from tapegrad.ops.nn.pool import MAX_POOL2D, MAX_POOL2D_INPUT_GRAD, max_pool2d_relu_input_grad
    r = np.random.default_rng(2)
    y = np.maximum(r.standard_normal((3, 4, 9, 8)), 0).astype(dtype)
    y.flat[[0, 17, 40]] = np.nan
    attrs = dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1)) \
        if overlap else dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0),
                             dilation=(1, 1))
    m, idx = MAX_POOL2D.kernel(y, **attrs)
    g = r.standard_normal(idx.shape).astype(dtype)
    g.flat[3] = np.inf
    g.flat[[5, 6]] = np.finfo(dtype).max  # (overlapping windows: sums to inf)
    want = RELU_BACKWARD.kernel(MAX_POOL2D_INPUT_GRAD.kernel(
        g, idx, input_shape=y.shape, overlap=overlap), y)
    out = np.full(y.shape, 7, dtype)
    mask = m if pooled else y
    assert max_pool2d_relu_input_grad(g, idx, mask, input_shape=y.shape, overlap=overlap,
                                      out=out, pooled=pooled)
    np.testing.assert_array_equal(out, want)
    fallback = _pool_relu_grad(g, idx, mask, input_shape=y.shape, overlap=overlap,
                               pooled=pooled)
    np.testing.assert_array_equal(fallback, want)
    assert np.array_equal(np.signbit(fallback), np.signbit(want))
    assert np.array_equal(np.signbit(out), np.signbit(want))


class _Two(tg.nn.Module):
    """Two conv layers: the second's input and weight gradients come from one g."""

    def __init__(self, conv2, dtype):
        super().__init__()
        r = np.random.default_rng(5)
        self.w1 = tg.nn.Parameter(tg.tensor((r.standard_normal((8, 2, 3, 3)) / 3).astype(dtype)))
        self.w2 = tg.nn.Parameter(tg.tensor((r.standard_normal((6, 8, 3, 3)) / 5).astype(dtype)))
        self.b2 = tg.nn.Parameter(tg.tensor(r.standard_normal(6).astype(dtype)))
        self.conv2 = conv2

    def forward(self, x):
        h = tg.relu(tg.conv2d(x, self.w1))
        return tg.conv2d(h, self.w2, self.b2, **self.conv2)


@pytest.mark.parametrize("conv2,dtype", [
    ({}, np.float32),                          # the channels-last path: one region
    (dict(padding=1), np.float64),             # with padding, float64
    (dict(stride=2), np.float32),              # no channels-last path: the two kernels
])
def test_conv_grads_fused_bitwise_eager(conv2, dtype):
    x = np.random.default_rng(6).standard_normal((3, 2, 10, 9)).astype(dtype)
    e, c = _Two(conv2, dtype), _Two(conv2, dtype)
    cm = tg.compile(c)
    _assert_bitwise_equal(e, cm, x)
    names = [st.name for st in cm._joint._last.backward.steps]
    assert "conv2d_input_grad+conv2d_weight_grad" in names, names
    assert "conv2d_input_grad" not in names, names


def test_conv_grads_one_region_bitwise_two_kernels():
    from tapegrad.ops.nn.conv import CONV2D_INPUT_GRAD, CONV2D_WEIGHT_GRAD, conv2d_input_weight_grad
    from tapegrad.ops_registry import TensorSpec
    r = np.random.default_rng(7)
    x = r.standard_normal((5, 8, 7, 6)).astype(np.float32)
    w = r.standard_normal((4, 8, 3, 2)).astype(np.float32)
    attrs = dict(stride=(1, 1), padding=((1, 0), (0, 1)), dilation=(1, 1), groups=1)
    g = r.standard_normal((5, 4, 6, 6)).astype(np.float32)
    si = CONV2D_INPUT_GRAD.workspace(TensorSpec(g.shape, g.dtype), TensorSpec(w.shape, w.dtype),
                                     input_shape=x.shape, **attrs)
    sw = CONV2D_WEIGHT_GRAD.workspace(TensorSpec(x.shape, x.dtype),
                                      TensorSpec(g.shape, g.dtype), weight_shape=w.shape, **attrs)
    ws = np.zeros(si + sw, np.uint8)
    gx, gw = np.empty_like(x), np.empty_like(w)
    assert conv2d_input_weight_grad(g, w, x, gx, gw, **attrs, workspace=ws, split=si)
    np.testing.assert_array_equal(gx, CONV2D_INPUT_GRAD.kernel(
        g, w, input_shape=x.shape, **attrs, workspace=np.zeros(si, np.uint8)))
    np.testing.assert_array_equal(gw, CONV2D_WEIGHT_GRAD.kernel(
        x, g, weight_shape=w.shape, **attrs, workspace=np.zeros(sw, np.uint8)))


_GRAD_CHAIN = "(max_pool2d_input_grad+relu_backward+conv2d grads) x2"


class _Cnn(tg.nn.Module):
    """conv -> relu -> pool, twice: each pool's gradient feeds a conv's gradients."""

    def __init__(self, conv2, dtype):
        super().__init__()
        r = np.random.default_rng(8)
        self.w1 = tg.nn.Parameter(tg.tensor((r.standard_normal((8, 1, 3, 3)) / 3).astype(dtype)))
        self.b1 = tg.nn.Parameter(tg.tensor(r.standard_normal(8).astype(dtype)))
        self.w2 = tg.nn.Parameter(tg.tensor((r.standard_normal((6, 8, 3, 3)) / 5).astype(dtype)))
        self.conv2 = conv2

    def forward(self, x):
        h = tg.max_pool2d(tg.relu(tg.conv2d(x, self.w1, self.b1)), 2)
        return tg.max_pool2d(tg.relu(tg.conv2d(h, self.w2, **self.conv2)), 2)


@pytest.mark.parametrize("conv2,dtype", [({}, np.float32), (dict(padding=1), np.float64),
                                         (dict(stride=2), np.float32)])
def test_pool_grads_joined_with_conv_grads_bitwise_eager(conv2, dtype):
    x = np.random.default_rng(9).standard_normal((3, 1, 16, 14)).astype(dtype)
    e, c = _Cnn(conv2, dtype), _Cnn(conv2, dtype)
    cm = tg.compile(c)
    _assert_bitwise_equal(e, cm, x)
    names = [st.name for st in cm._joint._last.backward.steps]
    assert _GRAD_CHAIN in names, names  # (one region, or the two steps in turn: stride 2)
    assert not any(n.startswith("max_pool2d_input_grad+relu_backward+") for n in names), names
    names = [st.name for st in cm._joint._last.steps]  # both layers in one step
    assert names[0] == "conv2d+relu[+max_pool2d] x2", names


class _Pointwise(tg.nn.Module):
    """conv 3x3 -> relu -> conv 1x1 -> relu: the layers joined, the second (a 1x1
    conv, its own im2col) off the one-region path."""

    def __init__(self):
        super().__init__()
        r = np.random.default_rng(10)
        self.w1 = tg.nn.Parameter(tg.tensor((r.standard_normal((5, 2, 3, 3)) / 3)
                                            .astype(np.float32)))
        self.w2 = tg.nn.Parameter(tg.tensor((r.standard_normal((4, 5, 1, 1)) / 2)
                                            .astype(np.float32)))

    def forward(self, x):
        return tg.relu(tg.conv2d(tg.relu(tg.conv2d(x, self.w1)), self.w2))


def test_joined_layers_fallback_bitwise_eager():
    x = np.random.default_rng(11).standard_normal((2, 2, 7, 6)).astype(np.float32)
    e, c = _Pointwise(), _Pointwise()
    cm = tg.compile(c)
    _assert_bitwise_equal(e, cm, x)
    assert [st.name for st in cm._joint._last.steps][0] == "conv2d+relu[+max_pool2d] x2"


class _Cnn3(tg.nn.Module):
    """Three conv -> relu -> pool layers: the last two layers' gradient steps (each
    with its input gradient) join, the first's stays apart."""

    def __init__(self):
        super().__init__()
        r = np.random.default_rng(12)
        shapes = [(8, 2, 3, 3), (8, 8, 3, 3), (6, 8, 2, 2)]
        self.ws = tg.nn.ParameterList(
            [tg.nn.Parameter(tg.tensor((r.standard_normal(s) / 4).astype(np.float32)))
             for s in shapes])

    def forward(self, x):
        for w in self.ws:
            x = tg.max_pool2d(tg.relu(tg.conv2d(x, w)), 2)
        return x


def test_three_layers_grads_joined_bitwise_eager():
    x = np.random.default_rng(13).standard_normal((4, 2, 30, 30)).astype(np.float32)
    e, c = _Cnn3(), _Cnn3()
    cm = tg.compile(c)
    _assert_bitwise_equal(e, cm, x)
    steps = cm._joint._last.backward.steps
    chain = [st for st in steps if st.name == _GRAD_CHAIN]
    assert len(chain) == 1 and chain[0].attrs["kinds"] == ("conv", "conv"), \
        [st.name for st in steps]


def test_native_layer_found_with_numpys_openblas():
    """With NumPy's bundled OpenBLAS, a fused layer's chunk is one native call (the
    bitwise tests above then check that path against eager's kernels)."""
    import glob
    import os

    from tapegrad.devices.cpu_kernels import conv as cpu_conv
    if not glob.glob(os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs",
                                  "libscipy_openblas*.so")):
        pytest.skip("NumPy without its bundled OpenBLAS")
    assert cpu_conv._native_layer("s") is not None and cpu_conv._native_layer("d") is not None


@pytest.mark.parametrize("dtype,cin,attrs", [
    (np.float32, 9, dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)),
    (np.float64, 9, dict(stride=(1, 1), padding=((1, 1), (0, 1)), dilation=(1, 1), groups=1)),
    (np.float32, 9, dict(stride=(2, 1), padding=((1, 1), (1, 1)), dilation=(1, 2), groups=1)),
    (np.float32, 2, dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)),
])
def test_native_chunks_bitwise_separate_calls(monkeypatch, dtype, cin, attrs):
    """The one-native-call chunks (the GEMMs through NumPy's OpenBLAS from Numba)
    against the separate calls (NumPy's matmul between the loops), bitwise."""
    from tapegrad.devices.cpu_kernels import conv as cpu_conv
    from tapegrad.ops.nn.conv import (
        CONV2D,
        CONV2D_INPUT_GRAD,
        conv2d_input_weight_grad,
        conv2d_relu_pool,
        conv2d_weight_grad_after,
    )
    from tapegrad.ops_registry import TensorSpec
    r = np.random.default_rng(14)
    x = r.standard_normal((6, cin, 12, 11)).astype(dtype)
    w = r.standard_normal((5, cin, 3, 2)).astype(dtype)
    b = r.standard_normal(5).astype(dtype)
    ws = np.zeros(1 << 22, np.uint8)
    y0 = CONV2D.kernel(x, w, b, **attrs, workspace=ws)
    g = r.standard_normal(y0.shape).astype(dtype)
    si = CONV2D_INPUT_GRAD.workspace(TensorSpec(g.shape, g.dtype), TensorSpec(w.shape, w.dtype),
                                     input_shape=x.shape, **attrs)
    pool = dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))
    res = []
    for native in (False, True):
        monkeypatch.setattr(cpu_conv, "NATIVE", native)
        y = np.empty_like(y0)
        hq, wq = y.shape[2] // 2, y.shape[3] // 2
        v = np.empty(y.shape[:2] + (hq, wq), dtype)
        i = np.empty(v.shape, np.int64)
        geo = tuple(pool.values()) + (v, i)
        assert conv2d_relu_pool(x, w, b, y, geo, **attrs, workspace=ws)
        gw = np.empty_like(w)
        assert conv2d_weight_grad_after(None, x, g, gw, weight_shape=w.shape, **attrs,
                                        workspace=ws)
        gx2, gw2 = np.empty_like(x), np.empty_like(w)
        both = conv2d_input_weight_grad(g, w, x, gx2, gw2, **attrs, workspace=ws, split=si)
        res.append([y, v, i, gw] + ([gx2, gw2] if both else []))
    for u, v in zip(*res):
        np.testing.assert_array_equal(u, v)
