"""Every registry op's samples that ``tg.onnx.support()`` lists as exportable export,
and onnxruntime reproduces the eager outputs (float32 and float64); every op declares
its ONNX form; coverage of the ops that are not random draws is at least 85%. The main suite exports
each op's first float32 sample; the exhaustive tier (``-m slow``) the others."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.dispatch import bind

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

OPS = tg.ops_registry.list_ops()
SUPPORT = tg.onnx.support()
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
TOL = {F32: dict(rtol=2e-4, atol=2e-5), F64: dict(rtol=1e-9, atol=1e-11)}
# onnxruntime has no float64 ConvTranspose and ONNX's reference evaluator (the
# fallback below) fails on its groups and output_padding: float32 only
NO_FLOAT64_RUNTIME = {"conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
                      "conv2d_input_grad"}


def _samples(op, dtype):
    try:
        return list(op.samples(dtype))
    except TypeError:
        return list(op.samples())


def _params():
    """Each exportable op's samples in float32 and float64: its first float32 sample
    runs in the main suite, the others in the exhaustive tier (marked slow)."""
    out = []
    for op in OPS:
        if SUPPORT[op.name] not in ("lowered", "decomposed"):
            continue
        first = True
        for dt in ((F32,) if op.name in NO_FLOAT64_RUNTIME else (F32, F64)):
            for k, s in enumerate(_samples(op, dt)):
                if any(isinstance(a, np.ndarray) and a.dtype.kind == "c" for a in s.args):
                    continue
                tag = "f32" if dt == F32 else "f64"
                out.append(pytest.param(op, s, dt, id=f"{op.name}-{tag}-{k}",
                                        marks=() if first else pytest.mark.slow))
                first = False
    return out


def _tensors(args):
    return [tg.tensor(a.copy()) if isinstance(a, np.ndarray) else a for a in args]


def run_model(path, feeds):
    """onnxruntime's outputs and whether it ran them; where it has no kernel for a
    node's type (float64 Conv, Erf, Resize...), ONNX's reference evaluator runs the
    graph instead (it computes erf and cubic weights in float32: float32 tolerance)."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime's NotImplemented has no public class
        if "NOT_IMPLEMENTED" not in str(e):
            raise
        from onnx.reference import ReferenceEvaluator
        return ReferenceEvaluator(str(path)).run(None, feeds), False
    return sess.run(None, feeds), True


def check(op, sample, dtype, path):
    """Export ``op`` on ``sample``, run it in onnxruntime, compare with eager."""
    args = _tensors(sample.args)

    def fn(*ts):
        return bind(op, *ts, **sample.attrs)

    with tg.no_grad():
        ref = fn(*args)
    refs = [r for r in (ref if isinstance(ref, tuple) else (ref,))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tg.onnx.export(fn, tuple(args), str(path))
        except tg.onnx.UnsupportedOperatorError as e:
            if "opset_version 18" not in str(e):  # integer bitwise ops, scatter max/min
                raise
            tg.onnx.export(fn, tuple(args), str(path), opset_version=18)
    feeds = {f"input{k}": np.asarray(a.numpy())
             for k, a in enumerate(a for a in args if isinstance(a, tg.Tensor))}
    outs, exact = run_model(path, feeds)
    refs = [r for r in refs if isinstance(r, tg.Tensor)]
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        r = r.numpy()
        assert o.shape == r.shape, (o.shape, r.shape)
        assert o.dtype == r.dtype, (o.dtype, r.dtype)
        tol = TOL.get(np.dtype(r.dtype), TOL[F64]) if exact else TOL[F32]
        np.testing.assert_allclose(o, r, **tol)


@pytest.mark.parametrize("op,sample,dtype", _params())
def test_exported_op_matches_eager(op, sample, dtype, tmp_path):
    check(op, sample, dtype, tmp_path / "op.onnx")


def test_every_op_declares_its_onnx_form():
    missing = [k for k, v in SUPPORT.items() if v == "no ONNX form declared"]
    assert not missing, f"ops without an ONNX form (set OpDef.onnx): {missing}"
    assert set(SUPPORT) == {op.name for op in OPS}


def test_coverage_of_the_ops_that_are_not_random():
    from tapegrad.onnx.support import RANDOM
    counted = [k for k, v in SUPPORT.items() if not v.startswith(RANDOM)]
    ok = [k for k in counted if SUPPORT[k] in ("lowered", "decomposed")]
    assert len(ok) >= 0.85 * len(counted), (len(ok), len(counted))
