"""API.md "Compile and export", ONNX part: `tg.onnx.export`'s signature, models and
functions (slicing, scans, RNNs, attention) that onnxruntime runs with eager's outputs,
names and dynamic axes, and `tg.onnx.support()` over the whole registry."""
import inspect

import numpy as np
import pytest

import tapegrad as tg

ort = pytest.importorskip("onnxruntime")


def _run(path, args):
    sess = ort.InferenceSession(str(path))
    return sess, sess.run(None, {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)})


def test_export_signature():
    params = inspect.signature(tg.onnx.export).parameters
    assert list(params)[:3] == ["model_or_fn", "args", "path"]
    for name in ("input_names", "output_names", "dynamic_axes", "opset_version"):
        assert params[name].default is None, name


def test_support_covers_every_registry_op():
    s = tg.onnx.support()
    names = {op if isinstance(op, str) else op.name for op in tg.ops_registry.list_ops()}
    assert set(s) == names
    for name, how in s.items():
        assert isinstance(how, str) and how, name
    assert sum(v == "lowered" for v in s.values()) > 100
    assert "decomposed" in s.values()


def test_module_with_names_and_dynamic_axes(tmp_path):
    tg.manual_seed(0)
    m = tg.nn.Sequential(tg.nn.Linear(4, 8), tg.nn.GELU(), tg.nn.Linear(8, 2))
    m.eval()
    path = tmp_path / "mlp.onnx"
    tg.onnx.export(m, (tg.randn(3, 4),), str(path), input_names=["x"], output_names=["y"],
                   dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    x = tg.randn(5, 4)  # another batch size than the export's
    sess, (out,) = _run(path, (x,))
    assert [i.name for i in sess.get_inputs()] == ["x"]
    assert [o.name for o in sess.get_outputs()] == ["y"]
    with tg.no_grad():
        np.testing.assert_allclose(out, m(x).numpy(), rtol=1e-5, atol=1e-5)


def test_function_with_slicing_scan_and_reduction(tmp_path):
    def fn(a, b):
        return (a[:, 1:3] * b).cumsum(0), a.max(1)[0], a[a.shape[0] - 1]

    a, b = tg.randn(4, 5), tg.randn(4, 2)
    path = tmp_path / "fn.onnx"
    tg.onnx.export(fn, (a, b), str(path), opset_version=17)
    _, outs = _run(path, (a, b))
    for got, want in zip(outs, fn(a, b)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make, shape", [
    (lambda: tg.nn.LSTM(4, 6, num_layers=2, batch_first=True, bidirectional=True), (2, 5, 4)),
    (lambda: tg.nn.GRU(4, 6), (5, 2, 4)),
    (lambda: tg.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
     (2, 5, 8)),
])
def test_recurrent_and_attention_layers(tmp_path, make, shape):
    tg.manual_seed(0)
    mod = make()
    mod.eval()
    x = tg.randn(*shape)
    path = tmp_path / "layer.onnx"
    tg.onnx.export(mod, (x,), str(path))
    _, outs = _run(path, (x,))
    with tg.no_grad():
        want = mod(x)
    flat = []
    for t in (want if isinstance(want, tuple) else (want,)):
        flat.extend(t if isinstance(t, tuple) else (t,))
    assert len(outs) == len(flat)
    for got, w in zip(outs, flat):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-4, atol=1e-5)
