"""Every registered op's samples on the GPU against the NumPy (CPU) result: forward in
float64 and float32, first-order gradients and second-order gradients (a
Hessian-vector product through ``create_graph``), generated from the registry as
``tests/ops/test_registry.py`` is.

Each sample's array inputs become Tensors on ``DEVICE`` (index arrays in the
attributes become device arrays too); the same call on CPU Tensors is the expected
result. Outputs must live on the device (a CuPy buffer) unless the op moves them
(``to(device=...)``). Random ops (an output that changes with the seed on the CPU)
draw from CuPy's generator on the GPU, so there only their shapes and dtypes are
compared; ``empty``'s values are unspecified. Factories (ops without a tensor input)
are covered by ``test_factories_on_device``.

Without a GPU the module skips; ``TAPEGRAD_GPU_TESTS_ON_CPU=1`` runs it on the CPU
backend (``gpu_env``), where it checks the test logic itself.
"""
import numpy as np
import pytest
from gpu_env import (
    DEVICE,
    HAVE_GPU,
    ON_CPU,
    close,
    host,
    on_device,
    raw_to_device,
    require,
    to_device,
)

import tapegrad as tg
from tapegrad.dispatch import bind

require()

F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
TOL = {F64: dict(rtol=1e-7, atol=1e-10), F32: dict(rtol=1e-4, atol=1e-5)}
GRAD_TOL = dict(rtol=1e-6, atol=1e-9)
GRADGRAD_MAX_ELEMENTS = 64
VALUES_UNSPECIFIED = {"empty", "empty_like"}

OPS = tg.ops_registry.list_ops()


def _is_array(a):
    return isinstance(a, np.ndarray)


def _has_float(args):
    return any(_is_array(a) and a.dtype.kind == "f" for a in args)


def _draw(op, dtype):
    return list(op.samples(dtype)) if op.samples is not None else []


SAMPLES = {F64: {op.name: _draw(op, F64) for op in OPS}}
# ops with a tensor input: a factory has nothing to put on the device
DEVICE_OPS = [op for op in OPS if any(any(_is_array(a) for a in s.args)
                                      for s in SAMPLES[F64][op.name])]
FLOAT_OPS = [op for op in DEVICE_OPS
             if any(_has_float(s.args) for s in SAMPLES[F64][op.name])]
SAMPLES[F32] = {op.name: _draw(op, F32) for op in FLOAT_OPS}


def _params(dtypes=(F64,), where=lambda op, s: True):
    out = []
    for dt in dtypes:
        for op in DEVICE_OPS:
            for k, s in enumerate(SAMPLES[dt].get(op.name, ())):
                if any(_is_array(a) for a in s.args) and where(op, s):
                    tag = "" if dt == F64 else "-float32"
                    out.append(pytest.param(op, s, dt, id=f"{op.name}{tag}-sample{k}"))
    return out


def _grad_sample(op, s):
    return op.differentiable and s.grad and _has_float(s.args)


def _small(op, s):
    return sum(a.size for a in s.args if _is_array(a)) <= GRADGRAD_MAX_ELEMENTS


FORWARD_PARAMS = _params((F64, F32))
GRAD_PARAMS = _params(where=_grad_sample)
GRADGRAD_PARAMS = _params(where=lambda op, s: _grad_sample(op, s) and _small(op, s))


def _outs(res):
    return list(res) if isinstance(res, (tuple, list)) else [res]


def _cpu_tensors(args, grad=False):
    out = []
    for a in args:
        if _is_array(a):
            t = tg.tensor(np.array(a, copy=True))
            if grad and a.dtype.kind == "f":
                t.requires_grad_(True)
            out.append(t)
        else:
            out.append(a)
    return out


def _device_tensors(args, grad=False):
    out = []
    for a in args:
        t = to_device(a)
        if grad and _is_array(a) and a.dtype.kind == "f":
            t.requires_grad_(True)
        out.append(t)
    return out


def _device_attrs(attrs):
    return {k: raw_to_device(v) for k, v in attrs.items()}


_RANDOM = {}


def _is_random(op, sample):
    """Whether the op's output on this sample depends on the generator's state (two
    CPU calls from different seeds differ)."""
    key = (op.name, id(sample))
    if key not in _RANDOM:
        res = []
        state = tg.get_rng_state()
        try:
            for seed in (1, 2):
                tg.manual_seed(seed)
                res.append([host(o) for o in _outs(bind(op, *_cpu_tensors(sample.args),
                                                       **sample.attrs))])
        finally:
            tg.set_rng_state(state)
        _RANDOM[key] = any(a.shape != b.shape or not np.array_equal(a, b, equal_nan=True)
                           for a, b in zip(*res))
    return _RANDOM[key]


def _compare_values(op, sample):
    """False where only shapes and dtypes can agree: unspecified values, or a random
    op drawing from CuPy's generator on a real GPU."""
    if op.name in VALUES_UNSPECIFIED:
        return False
    return not (HAVE_GPU and _is_random(op, sample))


def _expected_device(attrs):
    dev = attrs.get("device")
    return tg.device(dev).type if dev is not None else DEVICE


def _check(got, expected, what, tol, values):
    a, e = host(got), host(expected)
    if not values:
        assert a.shape == e.shape and a.dtype == e.dtype, \
            f"{what}: {a.shape} {a.dtype} != expected {e.shape} {e.dtype}"
        return
    close(a, e, what, **tol)


@pytest.mark.parametrize("op,sample,dtype", FORWARD_PARAMS)
def test_forward_on_device(op, sample, dtype):
    args, attrs = sample.args, sample.attrs
    tg.manual_seed(0)
    expected = _outs(bind(op, *_cpu_tensors(args), **attrs))
    tg.manual_seed(0)
    got = _outs(bind(op, *_device_tensors(args), **_device_attrs(attrs)))
    assert len(got) == len(expected), f"{op.name}: {len(got)} outputs, CPU {len(expected)}"
    values = _compare_values(op, sample)
    want = _expected_device(attrs)
    for k, (g, e) in enumerate(zip(got, expected)):
        if isinstance(g, tg.Tensor):
            assert g.device.type == want, f"{op.name} output {k} on {g.device}, not {want}"
            if want == DEVICE:
                assert on_device(g), f"{op.name} output {k}: its buffer is not on {DEVICE}"
        _check(g, e, f"{op.name} output {k} ({dtype}) on {DEVICE} vs CPU", TOL[dtype], values)


def _grads(op, sample, tensors, attrs, order):
    """Gradients of the floating inputs: first order for cotangents drawn from a fixed
    seed; ``order=2``: the gradient of sum(first-order gradient * w) (w fixed), a
    Hessian-vector product. Returns (gradients, what each is)."""
    args = sample.args
    pos = [i for i, a in enumerate(args) if _is_array(a) and a.dtype.kind == "f"]
    dev = tensors[pos[0]].device
    tg.manual_seed(0)
    outs = [o for o in _outs(bind(op, *tensors, **attrs))
            if isinstance(o, tg.Tensor) and o.requires_grad]
    assert outs, f"{op.name}: no output requires grad"
    rng = np.random.default_rng(0)
    vs = [tg.tensor(rng.standard_normal(tuple(o.shape)).astype(host(o).dtype), device=dev)
          for o in outs]
    xs = [tensors[i] for i in pos]
    gs = tg.grad(outs, xs, grad_outputs=vs, allow_unused=True, create_graph=order == 2)
    if order == 1:
        return gs
    terms = []
    for x, g in zip(xs, gs):
        if g is not None and g.requires_grad:
            w = tg.tensor(rng.standard_normal(tuple(x.shape)).astype(host(x).dtype), device=dev)
            terms.append((g * w).sum())
    if not terms:  # the first-order gradients do not depend on the inputs
        return [None] * len(xs)
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return tg.grad(total, xs, allow_unused=True)


def _compare_grads(op, sample, order):
    args, attrs = sample.args, sample.attrs
    expected = _grads(op, sample, _cpu_tensors(args, grad=True), attrs, order)
    got = _grads(op, sample, _device_tensors(args, grad=True), _device_attrs(attrs), order)
    values = _compare_values(op, sample)
    for k, (g, e) in enumerate(zip(got, expected)):
        what = f"{op.name} order-{order} gradient of input {k} on {DEVICE} vs CPU"
        if e is None or g is None:
            # an unused input: None on one side, None or zeros on the other
            other = g if e is None else e
            assert other is None or not np.any(host(other)), f"{what}: None vs nonzero"
            continue
        assert on_device(g), f"{what}: the gradient is not on {DEVICE}"
        _check(g, e, what, GRAD_TOL, values)


@pytest.mark.parametrize("op,sample,dtype", GRAD_PARAMS)
def test_first_order_gradients_on_device(op, sample, dtype):
    _compare_grads(op, sample, 1)


@pytest.mark.parametrize("op,sample,dtype", GRADGRAD_PARAMS)
def test_second_order_gradients_on_device(op, sample, dtype):
    _compare_grads(op, sample, 2)


FACTORIES = [
    ("zeros", lambda d: tg.zeros(2, 3, device=d)),
    ("ones", lambda d: tg.ones(4, dtype=tg.float32, device=d)),
    ("full", lambda d: tg.full((2, 2), 1.5, device=d)),
    ("eye", lambda d: tg.eye(3, device=d)),
    ("arange", lambda d: tg.arange(0, 5, 2, device=d)),
    ("linspace", lambda d: tg.linspace(0.0, 1.0, 5, device=d)),
    ("tensor", lambda d: tg.tensor([[1.0, 2.0]], device=d)),
    ("empty", lambda d: tg.empty(3, device=d)),
    ("rand", lambda d: tg.rand(3, 2, device=d)),
    ("randn", lambda d: tg.randn(3, device=d)),
    ("randint", lambda d: tg.randint(0, 4, (5,), device=d)),
    ("zeros_like", lambda d: tg.zeros_like(tg.ones(2, device=d))),
]


@pytest.mark.parametrize("name,make", [pytest.param(n, f, id=n) for n, f in FACTORIES])
def test_factories_on_device(name, make):
    got, expected = make(DEVICE), make("cpu")
    assert on_device(got), f"{name}(device={DEVICE!r}) is on {got.device}"
    values = name not in ("empty", "rand", "randn", "randint")
    _check(got, expected, f"{name} on {DEVICE} vs CPU", TOL[F64], values)


def test_the_mode_is_what_it_says():
    """The CPU flag runs on the CPU backend; otherwise these tests ran because a GPU
    is here, and the device buffers are CuPy arrays."""
    t = to_device(np.ones(3))
    assert t.device.type == DEVICE
    assert on_device(t)
    assert (DEVICE == "cpu") == (ON_CPU and not HAVE_GPU)
