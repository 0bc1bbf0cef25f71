"""Registry-driven tests: every registered op, every sample.

For each op: it declares samples and error samples; ``infer`` agrees with the real
output; the public path (``bind`` on Tensors) agrees with PyTorch (when the op names
a torch oracle) or with its raw kernel; gradients of first and second order agree
with central differences in float64; the raw-array ``compute`` API agrees with
``bind`` on NumPy arrays and on torch tensors (a DLPack producer); bad inputs raise
the declared exception naming the op; view ops alias their input.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops_registry import TensorSpec
from tapegrad.dispatch import bind
from tapegrad.testing import gradcheck, gradgradcheck

try:
    import torch
except ImportError:  # the oracle comparisons skip, nothing else does
    torch = None

OPS = tg.ops_registry.list_ops()
# samples are drawn once at collection, so every test sees the same inputs
SAMPLES = {op.name: (list(op.samples(np.float64)) if op.samples is not None else [])
           for op in OPS}
GRADGRAD_MAX_ELEMENTS = 64


def _sample_params():
    out = []
    for op in OPS:
        for k, s in enumerate(SAMPLES[op.name]):
            out.append(pytest.param(op, s, id=f"{op.name}-sample{k}"))
    return out


SAMPLE_PARAMS = _sample_params()
OP_PARAMS = [pytest.param(op, id=op.name) for op in OPS]


def _is_array(a):
    return isinstance(a, np.ndarray)


def _as_tensors(args, grad=False):
    """NumPy arrays become Tensors (float ones require grad when ``grad``)."""
    out = []
    for a in args:
        if _is_array(a):
            t = tg.from_numpy(a.copy()) if a.flags.writeable else tg.tensor(a)
            if grad and a.dtype.kind == "f":
                t.requires_grad_(True)
            out.append(t)
        else:
            out.append(a)
    return out


def _spec(a):
    return TensorSpec(tuple(a.shape), a.dtype) if _is_array(a) else a


def _outs(res):
    return list(res) if isinstance(res, tuple) else [res]


def _host(x):
    """A NumPy array from a Tensor, a raw array or a torch tensor."""
    if isinstance(x, tg.Tensor):
        return np.asarray(x.detach())
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _close(actual, expected, what, check_dtype=True):
    a, e = _host(actual), _host(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != expected {e.shape}"
    if check_dtype:
        assert a.dtype == e.dtype, f"{what}: dtype {a.dtype} != expected {e.dtype}"
    if a.dtype.kind in "biu" and e.dtype.kind in "biu":
        np.testing.assert_array_equal(a, e, err_msg=what)
    else:
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=1e-7,
                                   atol=1e-10, equal_nan=True, err_msg=what)


def _numel(args):
    return sum(a.size for a in args if _is_array(a))


def _raw_kernel(op, args, attrs):
    kw = dict(attrs)
    if op.kind == "dynamic":
        kw["alloc"] = lambda shape, dtype: np.empty(shape, dtype=dtype)
    if op.kind == "workspace":
        nbytes = op.workspace(*[_spec(a) for a in args], **attrs)
        kw["workspace"] = np.empty(max(int(nbytes), 1), dtype=np.uint8)
    return op.kernel(*args, **kw)


def _to_torch(a):
    if _is_array(a):
        return torch.from_numpy(np.array(a, order="C", copy=True))
    return a


# ---------------------------------------------------------------- declarations
@pytest.mark.parametrize("op", OP_PARAMS)
def test_op_has_samples(op):
    assert SAMPLES[op.name], f"op {op.name!r} declares no samples"


@pytest.mark.parametrize("op", OP_PARAMS)
def test_op_has_error_samples(op):
    errs = op.error_samples() if op.error_samples is not None else []
    assert errs, f"op {op.name!r} declares no error samples"


@pytest.mark.parametrize("op", OP_PARAMS)
def test_op_kind_is_plain_string(op):
    assert type(op.kind) is str and op.kind in ("basic", "workspace", "dynamic", "view")
    assert tg.ops_registry.get(op.name) is op
    assert op in tg.ops_registry.list_ops(kind=op.kind)


# ---------------------------------------------------------------- per sample
@pytest.mark.parametrize("op,sample", SAMPLE_PARAMS)
def test_infer_matches_output(op, sample):
    args, attrs = sample.args, sample.attrs
    spec = op.infer(*[_spec(a) for a in args], **attrs)
    res = _outs(bind(op, *_as_tensors(args), **attrs))
    specs = list(spec) if op.nout > 1 else [spec]
    assert len(specs) == len(res), f"{op.name}: infer gives {len(specs)} outputs, op {len(res)}"
    for k, (s, r) in enumerate(zip(specs, res)):
        assert isinstance(s, TensorSpec), f"{op.name}: infer returned {type(s).__name__}"
        if s.shape is not None and None not in tuple(s.shape):
            assert tuple(s.shape) == tuple(r.shape), \
                f"{op.name} output {k}: infer shape {tuple(s.shape)} != real {tuple(r.shape)}"
        assert np.dtype(getattr(s.dtype, "np", s.dtype)) == r._data.dtype, \
            f"{op.name} output {k}: infer dtype {s.dtype} != real {r._data.dtype}"


@pytest.mark.parametrize("op,sample", SAMPLE_PARAMS)
def test_forward_matches_oracle(op, sample):
    args, attrs = sample.args, sample.attrs
    res = _outs(bind(op, *_as_tensors(args), **attrs))
    for r in res:
        assert isinstance(r, tg.Tensor)
    if op.torch is not None:
        if torch is None:
            pytest.skip("torch is not installed")
        expected = op.torch(torch, *[_to_torch(a) for a in args], **attrs)
        what = f"{op.name} vs torch"
    else:
        expected = _raw_kernel(op, args, attrs)
        what = f"{op.name} vs its raw kernel"
    expected = _outs(expected)
    assert len(expected) == len(res)
    for r, e in zip(res, expected):
        # the raw kernel skips bind's promotion, so only values are compared there
        _close(r, e, what, check_dtype=op.torch is not None)


def _grad_setup(op, sample):
    if not op.differentiable:
        pytest.skip(f"{op.name} is not differentiable")
    if not sample.grad:
        pytest.skip("forward-only sample")
    args = list(sample.args)
    pos = [i for i, a in enumerate(args) if _is_array(a) and a.dtype.kind == "f"]
    if not pos:
        pytest.skip("no floating-point input")
    tensors = _as_tensors(args, grad=True)
    diff = [tensors[i] for i in pos]

    def fn(*ts):
        full = list(tensors)
        for i, t in zip(pos, ts):
            full[i] = t
        return bind(op, *full, **sample.attrs)

    outs = _outs(fn(*diff))
    if not any(o.requires_grad for o in outs):
        pytest.fail(f"{op.name}: a differentiable op on inputs that require grad gave "
                    f"outputs that do not require grad")
    return fn, diff


@pytest.mark.parametrize("op,sample", SAMPLE_PARAMS)
def test_gradcheck(op, sample):
    fn, diff = _grad_setup(op, sample)
    assert gradcheck(fn, diff)


@pytest.mark.parametrize("op,sample", SAMPLE_PARAMS)
def test_gradgradcheck(op, sample):
    fn, diff = _grad_setup(op, sample)
    if _numel(sample.args) > GRADGRAD_MAX_ELEMENTS:
        pytest.skip(f"more than {GRADGRAD_MAX_ELEMENTS} input elements")
    assert gradgradcheck(fn, diff)


@pytest.mark.parametrize("op,sample", SAMPLE_PARAMS)
def test_compute_api_numpy_and_dlpack(op, sample):
    args, attrs = sample.args, sample.attrs
    expected = _outs(bind(op, *_as_tensors(args), **attrs))
    got = _outs(op.compute(*[a.copy() if _is_array(a) else a for a in args], **attrs))
    for g, e in zip(got, expected):
        assert not isinstance(g, tg.Tensor), f"{op.name}.compute returned a Tensor"
        _close(g, e, f"{op.name}.compute on NumPy arrays vs bind")
    if torch is None:
        return
    got = _outs(op.compute(*[_to_torch(a) for a in args], **attrs))
    for g, e in zip(got, expected):
        _close(g, e, f"{op.name}.compute on torch tensors vs bind")


@pytest.mark.parametrize("op,sample", SAMPLE_PARAMS)
def test_compute_writes_into_out(op, sample):
    if op.nout != 1 or op.kind == "dynamic":
        pytest.skip("single-output, static-shape ops only")
    args, attrs = sample.args, sample.attrs
    expected = bind(op, *_as_tensors(args), **attrs)
    out = np.full(expected.shape, 7, dtype=expected._data.dtype)
    ret = op.compute(*args, out=out, **attrs)
    assert ret is out
    _close(out, expected, f"{op.name}.compute(out=...)")


@pytest.mark.parametrize("op", OP_PARAMS)
def test_error_samples_raise_naming_op(op):
    errs = op.error_samples() if op.error_samples is not None else []
    if not errs:
        pytest.fail(f"op {op.name!r} declares no error samples")
    for k, (args, attrs, exc) in enumerate(errs):
        with pytest.raises(exc) as info:
            bind(op, *_as_tensors(args), **attrs)
        assert op.name in str(info.value), \
            f"{op.name} error sample {k}: message does not name the op: {info.value}"


@pytest.mark.parametrize("op,sample",
                         [p for p in SAMPLE_PARAMS if p.values[0].kind == "view"])
def test_view_ops_alias_input(op, sample):
    args, attrs = sample.args, sample.attrs
    raw_in = np.array(args[0])  # own, writable copy
    raw_out = _raw_kernel(op, [raw_in] + list(args[1:]), attrs)
    if not np.shares_memory(raw_out, raw_in):
        pytest.skip("NumPy copies for this sample (e.g. advanced indexing)")
    x = tg.from_numpy(raw_in)
    y = bind(op, x, *args[1:], **attrs)
    assert np.shares_memory(y._data, x._data), f"{op.name}: the output does not alias its input"
    assert y._version is x._version, f"{op.name}: a view must share its base's version counter"


@pytest.mark.parametrize("op,sample",
                         [p for p in SAMPLE_PARAMS if not p.values[0].differentiable])
def test_non_differentiable_ops_record_nothing(op, sample):
    tensors = _as_tensors(sample.args, grad=True)
    for r in _outs(bind(op, *tensors, **sample.attrs)):
        assert not r.requires_grad and r.grad_fn is None, \
            f"{op.name} is not differentiable but its output was recorded"
