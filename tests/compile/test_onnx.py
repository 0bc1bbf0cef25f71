"""tg.onnx.export: onnx.checker passes and onnxruntime reproduces the outputs."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _run(path, feeds):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _digits(kind):
    from tapegrad.examples.digits import make_model
    tg.manual_seed(0)
    m = make_model(kind)
    m.eval()
    return m


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_digits_models_with_a_dynamic_batch(kind, tmp_path):
    m = _digits(kind)
    path = tmp_path / f"{kind}.onnx"
    model = tg.onnx.export(m, (tg.randn(3, 64),), str(path), input_names=["x"],
                           output_names=["logits"],
                           dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    onnx.checker.check_model(onnx.load(str(path)))
    assert [i.name for i in model.graph.input] == ["x"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for n in (1, 3, 9):
        x = np.random.default_rng(n).standard_normal((n, 64)).astype(np.float32)
        with tg.no_grad():
            ref = m(tg.tensor(x)).numpy()
        (out,) = _run(path, {"x": x})
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_plain_function_with_expression_ops(tmp_path):
    def f(a, b):
        h = (a * b).tanh().sigmoid() + F.gelu(a) - a.exp().log1p()
        return F.softmax(h, dim=1), (h * 2).sum(dim=0)

    a, b = np.random.default_rng(0).standard_normal((2, 4, 5)).astype(np.float32)
    path = tmp_path / "f.onnx"
    tg.onnx.export(f, (tg.tensor(a), tg.tensor(b)), str(path), input_names=["a", "b"],
                   dynamic_axes={"a": [0], "b": [0]})
    onnx.checker.check_model(onnx.load(str(path)))
    refs = f(tg.tensor(a), tg.tensor(b))
    outs = _run(path, {"a": a, "b": b})
    for o, r in zip(outs, refs):
        np.testing.assert_allclose(o, r.numpy(), rtol=1e-5, atol=1e-5)
    a2, b2 = np.random.default_rng(1).standard_normal((2, 7, 5)).astype(np.float32)
    outs = _run(path, {"a": a2, "b": b2})
    for o, r in zip(outs, f(tg.tensor(a2), tg.tensor(b2))):
        np.testing.assert_allclose(o, r.numpy(), rtol=1e-5, atol=1e-5)


def test_an_op_without_lowering_is_named_with_its_reason(tmp_path):
    with pytest.raises(tg.onnx.UnsupportedOperatorError, match="'lgamma'.*no ONNX operator"):
        tg.onnx.export(lambda x: tg.lgamma(x) * 2, (tg.randn(3),), str(tmp_path / "g.onnx"))


def test_a_value_drawn_at_random_in_the_forward_is_refused(tmp_path):
    with pytest.raises(tg.onnx.UnsupportedOperatorError, match="random generator"):
        tg.onnx.export(lambda x: x + tg.randn(3), (tg.randn(3),), str(tmp_path / "r.onnx"))


def test_a_value_computed_with_numpy_from_the_input_is_refused(tmp_path):
    def f(x):
        return x * tg.tensor(x.numpy() * 2)
    with pytest.raises(tg.onnx.UnsupportedOperatorError, match="inputs' values"):
        tg.onnx.export(f, (tg.randn(3),), str(tmp_path / "n.onnx"))


def test_opset_version_is_honored_and_checked(tmp_path):
    for v in (13, 17, 18, tg.onnx.MAX_OPSET):
        m = tg.onnx.export(lambda x: x.sum(1, keepdim=True).amax(0), (tg.randn(3, 4),),
                           str(tmp_path / f"o{v}.onnx"), opset_version=v)
        assert [o.version for o in m.opset_import if o.domain == ""] == [v]
        x = np.random.default_rng(v).standard_normal((3, 4)).astype(np.float32)
        (out,) = _run(tmp_path / f"o{v}.onnx", {"input0": x})
        np.testing.assert_allclose(out, x.sum(1, keepdims=True).max(0), rtol=1e-5)
    with pytest.raises(ValueError, match="opset_version"):
        tg.onnx.export(lambda x: x + 1, (tg.randn(3),), str(tmp_path / "b.onnx"),
                       opset_version=12)


def test_names_must_match_the_arguments(tmp_path):
    with pytest.raises(ValueError, match="input names"):
        tg.onnx.export(lambda x: x + 1, (tg.randn(3),), str(tmp_path / "h.onnx"),
                       input_names=["a", "b"])


def _inputs(path):
    return [i.name for i in ort.InferenceSession(
        str(path), providers=["CPUExecutionProvider"]).get_inputs()]


def test_a_tensor_given_for_several_arguments_is_an_input_per_argument(tmp_path):
    # as torch.onnx.export: f(q, q) and self-attention mha(x, x, x) keep one input each
    q = tg.randn(2, 3)
    p = tmp_path / "sub.onnx"
    tg.onnx.export(lambda a, b: a - b, (q, q), str(p), input_names=["a", "b"])
    assert _inputs(p) == ["a", "b"]
    a, b = np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)
    np.testing.assert_array_equal(_run(p, {"a": a, "b": b})[0], a - b)
    tg.manual_seed(0)
    mha = tg.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x, y = tg.randn(2, 4, 8), tg.randn(2, 4, 8)
    p = tmp_path / "mha.onnx"
    tg.onnx.export(mha, (x, x, x), str(p), input_names=["q", "k", "v"])
    assert _inputs(p) == ["q", "k", "v"]
    with tg.no_grad():
        ref = mha(x, y, y)[0].numpy()
    out = _run(p, {"q": x.numpy(), "k": y.numpy(), "v": y.numpy()})[0]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    qq = tg.randn(1, 2, 5, 4)
    p = tmp_path / "sdpa.onnx"
    tg.onnx.export(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                   (qq, qq, qq), str(p))
    k2 = tg.randn(1, 2, 5, 4)
    out = _run(p, dict(zip(_inputs(p), [qq.numpy(), k2.numpy(), k2.numpy()])))[0]
    ref = F.scaled_dot_product_attention(qq, k2, k2, is_causal=True).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_tensors_in_nested_tuples_are_inputs(tmp_path):
    # an LSTM's (input, (h0, c0)): three graph inputs, as torch.onnx.export
    tg.manual_seed(0)
    lstm = tg.nn.LSTM(4, 5, batch_first=True).eval()
    x, h0, c0 = tg.randn(2, 6, 4), tg.randn(1, 2, 5), tg.randn(1, 2, 5)
    p = tmp_path / "lstm.onnx"
    tg.onnx.export(lstm, (x, (h0, c0)), str(p), input_names=["x", "h0", "c0"])
    assert _inputs(p) == ["x", "h0", "c0"]
    h1, c1 = h0 * 2, c0 - 1
    with tg.no_grad():
        ref = lstm(x, (h1, c1))[0].numpy()
    out = _run(p, {"x": x.numpy(), "h0": h1.numpy(), "c0": c1.numpy()})[0]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def _put_rows(x, i, v):
    y = tg.zeros(5, 4)
    y[i] = v
    return y


def _relu_by_mask(x):
    y = x * 1
    y[y < 0] = 0
    return y


_R = np.random.default_rng(0)
_X = _R.standard_normal((4, 5)).astype(np.float32)
_X3 = _R.standard_normal((3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize("fn, feeds", [
    (lambda x: x[x > 0], [[_X], [-_X]]),                          # NonZero, GatherND
    (lambda x: x[x[:, :, 0] > 0], [[_X3], [-_X3]]),               # a mask on leading dims
    (lambda x, i, j: x[i, j], [[_X, np.array([0, 2, -1]), np.array([1, 4, 0])],
                               [_X, np.array([3, 3, 1]), np.array([2, -5, 0])]]),
    (lambda x, i: x[i], [[_X, np.array([[0, 1], [3, -2]])]]),
    (lambda x, j: x[:, j], [[_X, np.array([1, 4, 0])]]),
    (lambda x, i, j: x[:, i, j], [[_X3, np.array([0, 3]), np.array([4, 1])]]),
    (_put_rows, [[np.zeros(1, np.float32), np.array([0, 2, 4]), np.ones((3, 4), np.float32)],
                 [np.zeros(1, np.float32), np.array([1, 3, 4]),
                  2 * np.ones((3, 4), np.float32)]]),                # ScatterND
    (_relu_by_mask, [[_X], [-_X]]),                               # Where
])
def test_indexing_by_tensors_of_the_inputs(fn, feeds, tmp_path):
    # index tensors computed from the inputs (or given): the same results in
    # onnxruntime at other index values, as torch.onnx.export's forms
    p = tmp_path / "idx.onnx"
    tg.onnx.export(fn, tuple(tg.tensor(f) for f in feeds[0]), str(p))
    names = _inputs(p)
    for f in feeds:
        want = fn(*[tg.tensor(a) for a in f]).numpy()
        (got,) = _run(p, dict(zip(names, f)))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("fn, shape, axes", [
    (lambda x: x.sum(1) / x.shape[1], (2, 3), {1: "t"}),
    (lambda x: tg.ones_like(x) * 2, (2, 3), {0: "b"}),
    (lambda x: x + tg.arange(x.shape[1]), (2, 3), {1: "t"}),
    # (a forward with a guard: the finite check before the bin matrices, sized H, W)
    (lambda x: tg.nn.functional.adaptive_avg_pool2d(x, (2, 2)), (1, 3, 8, 8),
     {2: "h", 3: "w"}),
])
def test_a_size_read_in_python_on_a_dynamic_axis_is_refused(fn, shape, axes, tmp_path):
    # the graph would hold the size as a constant, silently wrong at another size
    with pytest.raises(tg.onnx.UnsupportedOperatorError, match="dynamic axes"):
        tg.onnx.export(fn, (tg.randn(*shape),), str(tmp_path / "d.onnx"),
                       input_names=["x"], dynamic_axes={"x": axes})
    assert not (tmp_path / "d.onnx").exists()


def test_sizes_taken_by_ops_stay_dynamic(tmp_path):
    p = tmp_path / "v.onnx"
    tg.onnx.export(lambda x: x.view(x.shape[0], -1) * 2, (tg.randn(2, 3, 4),), str(p),
                   input_names=["x"], dynamic_axes={"x": {0: "b"}})
    x = np.ones((5, 3, 4), np.float32)
    np.testing.assert_array_equal(_run(p, {"x": x})[0], np.full((5, 12), 2.0))


def test_global_adaptive_pooling_stays_dynamic(tmp_path):
    p = tmp_path / "gap.onnx"
    pool = tg.nn.AdaptiveAvgPool2d(1)
    tg.onnx.export(pool, (tg.randn(1, 3, 8, 8),), str(p), input_names=["x"],
                   dynamic_axes={"x": {0: "b", 2: "h", 3: "w"}})
    for shape in [(2, 3, 8, 8), (1, 3, 5, 7), (3, 3, 16, 2)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(_run(p, {"x": x})[0], pool(tg.tensor(x)).numpy(),
                                   rtol=1e-5, atol=1e-6)


_EXTREMES = {"max": lambda x: x.max(), "min": lambda x: x.min(), "amax": lambda x: x.amax(1),
             "amin": lambda x: x.amin(0), "max_dim": lambda x: x.max(1),
             "min_dim": lambda x: x.min(0, keepdim=True), "argmax": lambda x: x.argmax(),
             "argmin_dim": lambda x: x.argmin(1), "argmax_dim": lambda x: x.argmax(0)}


@pytest.mark.parametrize("name", sorted(_EXTREMES))
def test_extremes_propagate_nan_as_torch(name, tmp_path):
    # onnxruntime's ReduceMax/ArgMax skip a NaN after the first element; PyTorch's don't
    fn = _EXTREMES[name]
    nan = np.nan
    x = np.array([[1.0, nan, 3.0, 2.0], [nan, 0.5, -1.0, 4.0], [2.0, 1.0, 0.0, nan],
                  [1.0, 2.0, 3.0, 4.0]], np.float32)
    p = tmp_path / "e.onnx"
    tg.onnx.export(fn, (tg.tensor(x),), str(p), input_names=["x"])
    want = fn(tg.tensor(x))
    want = list(want) if isinstance(want, tuple) else [want]
    got = _run(p, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.numpy())
    torch = pytest.importorskip("torch")
    tw = fn(torch.tensor(x))  # the same results as PyTorch
    tw = list(tw) if isinstance(tw, tuple) else [tw]
    for g, w in zip(got, tw):
        np.testing.assert_array_equal(g, w.numpy())


def test_keep_initializers_as_inputs(tmp_path):
    m = tg.nn.Sequential(tg.nn.Linear(3, 4), tg.nn.ReLU(), tg.nn.Linear(4, 2)).eval()
    x = tg.randn(5, 3)
    p = tmp_path / "k.onnx"
    model = tg.onnx.export(m, (x,), str(p), input_names=["x"], keep_initializers_as_inputs=True)
    inits = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input]
    assert inputs[0] == "x" and set(inputs[1:]) == inits and len(inits) == 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_allclose(_run(p, {"x": x.numpy()})[0], m(x).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
        # fed, an initializer's value is the caller's: zero weights and biases give zeros
        zeros = {i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim],
                                  np.float32) for i in model.graph.input[1:]}
        np.testing.assert_array_equal(_run(p, {"x": x.numpy(), **zeros})[0],
                                      np.zeros((5, 2), np.float32))
    with pytest.raises(NotImplementedError, match="export_params"):
        tg.onnx.export(m, (x,), str(p), export_params=False)
