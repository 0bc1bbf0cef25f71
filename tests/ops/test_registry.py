"""Registry-driven tests: every registered op, every sample.

For each op: it declares samples, error samples and an oracle (``torch=``, PyTorch's
version, or ``reference=``, an independent NumPy implementation); ``infer`` agrees
with the real output; the public path (``bind`` on Tensors) agrees with the oracle in
values and dtype, in float64 and, for ops with floating inputs, in float32 too;
gradients of first and second order agree with central differences in float64, and
first-order float32 gradients agree with PyTorch's; the raw-array ``compute`` API
agrees with ``bind`` on NumPy arrays and on torch tensors (a DLPack producer); bad
inputs raise the declared exception naming the op; view ops alias their input.
Random ops (``rand``, ``dropout``...) are compared with the draw their reference
makes from a copy of tapegrad's generator, and two calls that are compared start
from one generator state; ``empty``'s values are unspecified (shape and dtype only).

Each test is parametrized, at collection, over exactly the (op, sample) pairs it
applies to (differentiable ops, samples with floating inputs, ...): nothing is
skipped for good. The main suite runs each op's first such sample; the others run in
the exhaustive tier (``-m slow``).
"""
import contextlib

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import fusion
from tapegrad.dispatch import bind
from tapegrad.ops_registry import TensorSpec
from tapegrad.tensor import buffer, mark_written
from tapegrad.testing import gradcheck, gradgradcheck

try:
    import torch
except ImportError:  # the PyTorch comparisons skip, nothing else does
    torch = None

F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
# float32: about 3x the worst difference from PyTorch's float32 kernels over several
# sample draws (the approximate float32 erf of gelu, conv2d's GEMM order)
TOL = {F64: {"rtol": 1e-7, "atol": 1e-10}, F32: {"rtol": 2e-5, "atol": 2e-6}}
GRAD_TOL32 = {"rtol": 3e-5, "atol": 3e-6}
# randomized algorithms (a Gaussian sketch, then power iterations with a QR each): in
# float32 our sketch and PyTorch's differ, and their rounding reaches the gradient at
# ~1e-4 relative (a wrong adjoint is off by O(1))
SKETCHED = {"svd_lowrank", "pca_lowrank"}
SKETCHED_GRAD_TOL32 = {"rtol": 3e-4, "atol": 3e-5}
GRADGRAD_MAX_ELEMENTS = 64

OPS = tg.ops_registry.list_ops()
# ops whose values are whatever memory held (torch.empty's too): their outputs are
# compared by shape and dtype only
VALUES_UNSPECIFIED = {"empty", "empty_like"}


def _is_array(a):
    return isinstance(a, np.ndarray)


def _has_float(args):
    return any(_is_array(a) and a.dtype.kind == "f" for a in args)


def _draw(op, dtype):
    return list(op.samples(dtype)) if op.samples is not None else []


# samples are drawn once at collection, so every test sees the same inputs
SAMPLES = {F64: {op.name: _draw(op, F64) for op in OPS}}
FLOAT_OPS = [op for op in OPS if any(_has_float(s.args) for s in SAMPLES[F64][op.name])]
SAMPLES[F32] = {op.name: _draw(op, F32) for op in FLOAT_OPS}


def _params(dtypes=(F64,), where=lambda op, s: True):
    """Each op's samples the test applies to: the first one runs in the main suite,
    the others in the exhaustive tier (marked slow)."""
    out = []
    for dt in dtypes:
        for op in OPS:
            first = True
            for k, s in enumerate(SAMPLES[dt].get(op.name, ())):
                if where(op, s):
                    tag = "" if dt == F64 else "-float32"
                    out.append(pytest.param(op, s, dt, id=f"{op.name}{tag}-sample{k}",
                                            marks=() if first else pytest.mark.slow))
                    first = False
    return out


def _grad_sample(op, s):
    return op.differentiable and s.grad and _has_float(s.args)


def _small(op, s):
    return sum(a.size for a in s.args if _is_array(a)) <= GRADGRAD_MAX_ELEMENTS


OP_PARAMS = [pytest.param(op, id=op.name) for op in OPS]
SAMPLE_PARAMS = _params()
FORWARD_PARAMS = _params((F64, F32))
GRAD_PARAMS = _params(where=_grad_sample)
GRADGRAD_PARAMS = _params(where=lambda op, s: _grad_sample(op, s) and _small(op, s))
# pca_lowrank is svd_lowrank on the centred input: its second order (seconds on a small
# machine) in the exhaustive tier, svd_lowrank's in the main suite
GRADGRAD_PARAMS = [pytest.param(*p.values, id=p.id, marks=pytest.mark.slow)
                   if p.values[0].name == "pca_lowrank" else p for p in GRADGRAD_PARAMS]
GRAD32_PARAMS = _params((F32,), where=_grad_sample)
OUT_PARAMS = _params(where=lambda op, s: op.nout == 1 and op.kind != "dynamic")
VIEW_PARAMS = _params(where=lambda op, s: op.kind == "view")
NONDIFF_PARAMS = _params(where=lambda op, s: not op.differentiable)


def _as_tensors(args, grad=False):
    """NumPy arrays become Tensors, in their own copy of the sample's memory layout
    (float ones require grad when ``grad``)."""
    out = []
    for a in args:
        if _is_array(a):
            t = tg.from_numpy(a.copy(order="K")) if a.flags.writeable else tg.tensor(a)
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


def _close(actual, expected, what, tol=TOL[F64], check_dtype=True, values=True):
    a, e = _host(actual), _host(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != expected {e.shape}"
    if check_dtype:
        assert a.dtype == e.dtype, f"{what}: dtype {a.dtype} != expected {e.dtype}"
    if not values:
        return
    if a.dtype.kind in "biu" and e.dtype.kind in "biu":
        np.testing.assert_array_equal(a, e, err_msg=what)
    else:
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64),
                                   equal_nan=True, err_msg=what, **tol)


def _to_torch(a):
    if _is_array(a):
        return torch.from_numpy(np.array(a, order="C", copy=True))
    return a


@contextlib.contextmanager
def _fast_kernels(op):
    """An expression op runs the NumPy evaluation of its IR (its reference) below
    ``fusion.config.min_numel`` elements; compile its kernel instead, so that a
    comparison with the reference compares two implementations."""
    if getattr(op, "fusion", None) is None:
        yield
        return
    old = fusion.config.min_numel
    fusion.config.min_numel = 0
    try:
        yield
    finally:
        fusion.config.min_numel = old


def _oracle(op, args, attrs):
    """(expected outputs, what they are): PyTorch's version, else the NumPy reference."""
    if op.torch is not None:
        if torch is None:
            pytest.skip("torch is not installed")
        return _outs(op.torch(torch, *[_to_torch(a) for a in args], **attrs)), "torch"
    if op.reference is not None:
        ref = op.reference(*[a.copy() if _is_array(a) else a for a in args], **attrs)
        return _outs(ref), "its NumPy reference"
    pytest.fail(f"op {op.name!r} has no oracle")


# ---------------------------------------------------------------- declarations
@pytest.mark.parametrize("op", OP_PARAMS)
def test_op_has_samples(op):
    assert SAMPLES[F64][op.name], f"op {op.name!r} declares no samples"


@pytest.mark.parametrize("op", OP_PARAMS)
def test_op_has_error_samples(op):
    errs = op.error_samples() if op.error_samples is not None else []
    assert errs, f"op {op.name!r} declares no error samples"


@pytest.mark.parametrize("op", OP_PARAMS)
def test_op_has_an_independent_oracle(op):
    assert op.torch is not None or op.reference is not None, (
        f"op {op.name!r} declares no oracle: give its register(...) block torch= (PyTorch's "
        f"version) or reference= (an independent NumPy implementation)")
    assert op.reference is not op.kernel, f"op {op.name!r}: its reference is its kernel"


@pytest.mark.parametrize("op", [pytest.param(op, id=op.name) for op in FLOAT_OPS])
def test_float32_samples_are_float32(op):
    """``samples(float32)`` gives the float64 samples' counterparts in float32, so the
    float32 tests test float32."""
    s64, s32 = SAMPLES[F64][op.name], SAMPLES[F32][op.name]
    assert len(s32) == len(s64), f"{op.name}: {len(s32)} float32 samples, {len(s64)} float64"
    for k, (a, b) in enumerate(zip(s64, s32)):
        for i, (x, y) in enumerate(zip(a.args, b.args)):
            if _is_array(x) and x.dtype.kind == "f":
                assert _is_array(y) and y.dtype == F32, \
                    f"{op.name} sample {k} input {i}: {getattr(y, 'dtype', y)} for float32"


@pytest.mark.parametrize("op", OP_PARAMS)
def test_op_kind_is_plain_string(op):
    assert type(op.kind) is str and op.kind in ("basic", "workspace", "dynamic", "view")
    assert tg.ops_registry.get(op.name) is op
    assert op in tg.ops_registry.list_ops(kind=op.kind)


# ---------------------------------------------------------------- per sample
@pytest.mark.parametrize("op,sample,dtype", FORWARD_PARAMS)
def test_infer_matches_output(op, sample, dtype):
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
        assert np.dtype(getattr(s.dtype, "np", s.dtype)) == buffer(r).dtype, \
            f"{op.name} output {k}: infer dtype {s.dtype} != real {buffer(r).dtype}"


@pytest.mark.parametrize("op,sample,dtype", FORWARD_PARAMS)
def test_forward_matches_oracle(op, sample, dtype):
    args, attrs = sample.args, sample.attrs
    expected, what = _oracle(op, args, attrs)
    with _fast_kernels(op) if op.torch is None else contextlib.nullcontext():
        res = _outs(bind(op, *_as_tensors(args), **attrs))
    assert len(expected) == len(res), f"{op.name}: {len(res)} outputs, {what} {len(expected)}"
    for k, (r, e) in enumerate(zip(res, expected)):
        assert isinstance(r, tg.Tensor)
        _close(r, e, f"{op.name} output {k} ({dtype}) vs {what}", TOL[dtype],
               values=op.name not in VALUES_UNSPECIFIED)


def _grad_setup(op, sample):
    args = list(sample.args)
    pos = [i for i, a in enumerate(args) if _is_array(a) and a.dtype.kind == "f"]
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


@pytest.mark.parametrize("op,sample,dtype", GRAD_PARAMS)
def test_gradcheck(op, sample, dtype):
    fn, diff = _grad_setup(op, sample)
    assert gradcheck(fn, diff)


@pytest.mark.parametrize("op,sample,dtype", GRADGRAD_PARAMS)
def test_gradgradcheck(op, sample, dtype):
    fn, diff = _grad_setup(op, sample)
    assert gradgradcheck(fn, diff)


def _first_order(op, args, attrs, vs):
    """Our gradients of the floating inputs for cotangents ``vs`` (one per output that
    requires grad), as NumPy arrays (zeros for an unused input)."""
    ts = _as_tensors(args, grad=True)
    pos = [i for i, a in enumerate(args) if _is_array(a) and a.dtype.kind == "f"]
    outs = [o for o in _outs(bind(op, *ts, **attrs)) if o.requires_grad]
    assert len(outs) == len(vs)
    gs = tg.grad(outs, [ts[i] for i in pos], grad_outputs=[tg.tensor(v) for v in vs],
                 allow_unused=True)
    return [np.zeros(args[i].shape, args[i].dtype) if g is None else _host(g)
            for i, g in zip(pos, gs)]


def _torch_first_order(op, args, attrs, vs):
    """PyTorch's gradients through the op's torch oracle, or None when the oracle
    does not differentiate (e.g. it calls a backward function of PyTorch's)."""
    if op.torch is None or torch is None:
        return None
    targs = [_to_torch(a) for a in args]
    pos = [i for i, a in enumerate(args) if _is_array(a) and a.dtype.kind == "f"]
    for i in pos:
        targs[i].requires_grad_(True)
    outs = [o for o in _outs(op.torch(torch, *targs, **attrs))
            if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs:
        return None
    assert len(outs) == len(vs), \
        f"{op.name}: {len(vs)} differentiable outputs, torch's oracle {len(outs)}"
    gs = torch.autograd.grad(outs, [targs[i] for i in pos],
                             grad_outputs=[torch.from_numpy(v) for v in vs], allow_unused=True)
    return [np.zeros(args[i].shape, args[i].dtype) if g is None else g.numpy()
            for i, g in zip(pos, gs)]


@pytest.mark.parametrize("op,sample,dtype", GRAD32_PARAMS)
def test_float32_gradient_matches_torch(op, sample, dtype):
    """First-order float32 gradients, against PyTorch's float32 gradients; where the
    op has no differentiable torch oracle, against our float64 gradient at the same
    point (itself checked against finite differences by test_gradcheck)."""
    args, attrs = sample.args, sample.attrs
    outs = [o for o in _outs(bind(op, *_as_tensors(args, grad=True), **attrs))
            if o.requires_grad]
    rng = np.random.default_rng(0)
    vs = [rng.standard_normal(tuple(o.shape)).astype(buffer(o).dtype) for o in outs]
    got = _first_order(op, args, attrs, vs)
    expected = _torch_first_order(op, args, attrs, vs)
    what = "torch"
    if expected is None:
        up = [a.astype(F64) if _is_array(a) and a.dtype.kind == "f" else a for a in args]
        expected = _first_order(op, up, attrs, [v.astype(F64) for v in vs])
        expected = [e.astype(g.dtype) for e, g in zip(expected, got)]
        what = "its float64 gradient"
    for k, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == F32, f"{op.name}: float32 input {k} got a {g.dtype} gradient"
        _close(g, e, f"{op.name} gradient {k} (float32) vs {what}",
               SKETCHED_GRAD_TOL32 if op.name in SKETCHED else GRAD_TOL32)


@pytest.mark.parametrize("op,sample,dtype", SAMPLE_PARAMS)
def test_compute_api_numpy_and_dlpack(op, sample, dtype):
    args, attrs = sample.args, sample.attrs
    values = op.name not in VALUES_UNSPECIFIED
    rng = tg.get_rng_state()  # a random op draws the same numbers in each call
    expected = _outs(bind(op, *_as_tensors(args), **attrs))
    tg.set_rng_state(rng)
    got = _outs(op.compute(*[a.copy() if _is_array(a) else a for a in args], **attrs))
    for g, e in zip(got, expected):
        assert not isinstance(g, tg.Tensor), f"{op.name}.compute returned a Tensor"
        _close(g, e, f"{op.name}.compute on NumPy arrays vs bind", values=values)
    if torch is None:
        return
    tg.set_rng_state(rng)
    got = _outs(op.compute(*[_to_torch(a) for a in args], **attrs))
    for g, e in zip(got, expected):
        _close(g, e, f"{op.name}.compute on torch tensors vs bind", values=values)


@pytest.mark.parametrize("op,sample,dtype", OUT_PARAMS)
def test_compute_writes_into_out(op, sample, dtype):
    args, attrs = sample.args, sample.attrs
    rng = tg.get_rng_state()  # a random op draws the same numbers in each call
    expected = bind(op, *_as_tensors(args), **attrs)
    out = np.full(expected.shape, 7, dtype=buffer(expected).dtype)
    tg.set_rng_state(rng)
    ret = op.compute(*args, out=out, **attrs)
    assert ret is out
    _close(out, expected, f"{op.name}.compute(out=...)", values=op.name not in VALUES_UNSPECIFIED)


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


def _must_copy(x, out):
    """The aliasing rule's one exception: ``out`` holds ``x``'s elements in the same
    row-major order (a reshape), and no strides over ``x``'s buffer give ``out``'s
    shape (NumPy's copy-free reshape refuses), so no view can exist."""
    if not np.array_equal(np.ravel(out), np.ravel(x), equal_nan=True):
        return False
    try:
        np.reshape(x, out.shape, copy=False)
    except ValueError:
        return True
    return False


def _root(a):
    """The array that owns ``a``'s memory (following ``.base``)."""
    while getattr(a, "base", None) is not None:
        a = a.base
    return a


def _check_aliases(op, x_np, out, how):
    """True when ``out`` aliases ``x_np``; False when it is a copy the rule allows. An
    empty view has no memory to share: it aliases when it is derived from x's buffer."""
    if np.shares_memory(out, x_np) or (out.size == 0 and _root(out) is _root(x_np)):
        return True
    assert _must_copy(x_np, out), (
        f"{op.name} ({how}): the view op copied its input of shape {x_np.shape}, strides "
        f"{x_np.strides} (output shape {out.shape}), though a view exists")
    return False


@pytest.mark.parametrize("op,sample,dtype", VIEW_PARAMS)
def test_view_ops_alias_input(op, sample, dtype):
    """A view op's output shares memory with its input (in the sample's own layout,
    non-contiguous ones included), through ``bind`` and through the raw-array
    ``compute`` API, and shares its version counter, unless no view can exist (see
    ``_must_copy``)."""
    x_np = sample.args[0]
    _check_aliases(op, x_np, op.compute(x_np, *sample.args[1:], **sample.attrs), "compute")
    x = tg.from_numpy(x_np)
    y = bind(op, x, *sample.args[1:], **sample.attrs)
    if not _check_aliases(op, x_np, buffer(y), "bind"):
        return
    before = y._version_number
    mark_written(x)
    assert y._version_number == before + 1, \
        f"{op.name}: a view must share its base's version counter"


@pytest.mark.parametrize("op,sample,dtype", NONDIFF_PARAMS)
def test_non_differentiable_ops_record_nothing(op, sample, dtype):
    tensors = _as_tensors(sample.args, grad=True)
    for r in _outs(bind(op, *tensors, **sample.attrs)):
        assert not r.requires_grad and r.grad_fn is None, \
            f"{op.name} is not differentiable but its output was recorded"
