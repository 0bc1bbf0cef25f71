"""``tapegrad.interop.torch_ops()``, driven by the registry: every registered op, called
on torch.Tensors, agrees with PyTorch's own op (its ``torch`` oracle) or, without one,
with tapegrad's; every differentiable op passes ``torch.autograd.gradcheck`` and
``gradgradcheck`` in float64 on its samples (one sample per op, its smallest with a
gradient; the whole Jacobian on small samples, a random projection of it on larger
ones; every sixth op in the main suite, all in the exhaustive tier), so PyTorch
differentiates the registry's adjoints again. Nothing is skipped: an op the export
cannot handle fails here.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.dispatch import bind
from tapegrad.interop import torch_ops

torch = pytest.importorskip("torch")

F64 = np.dtype(np.float64)
OPS = tg.ops_registry.list_ops()
NS = torch_ops()


def _is_array(a):
    return isinstance(a, np.ndarray)


def _has_float(args):
    return any(_is_array(a) and a.dtype.kind == "f" for a in args)


def _size(s):
    return sum(a.size for a in s.args if _is_array(a))


def _grad_sample(op):
    """The op's smallest non-empty float64 sample with a gradient (None: it has none)."""
    cands = [s for s in op.samples(F64) if s.grad and _has_float(s.args)
             and all(a.size for a in s.args if _is_array(a))]
    return min(cands, key=_size) if cands else None


# Ops the export cannot run, each with its reason (strict xfails: one that starts
# working must leave the list).
NOT_EXPORTED = set()


def _param(op, s, failing=NOT_EXPORTED):
    marks = [pytest.mark.xfail(strict=True, reason="composite not exported to torch yet")] \
        if op.name in failing else []
    return pytest.param(op, s, id=op.name, marks=marks)


FORWARD = [_param(op, op.samples(F64)[0]) for op in OPS]
# every differentiable op's gradient runs through the export, reverse and forward mode
GRAD = [_param(op, s) for op in OPS if op.differentiable for s in [_grad_sample(op)]
        if s is not None]
JVP = GRAD
# PyTorch's gradcheck and gradgradcheck of every sixth op run in the main suite (about
# 0.1 s each; test_registry checks every op's gradients of both orders there), all of
# them in the exhaustive tier (marked slow)
GRAD_TIERED = [pytest.param(*p.values, id=p.id,
                            marks=list(p.marks) + ([] if k % 6 == 0 else [pytest.mark.slow]))
               for k, p in enumerate(GRAD)]


def _t(a, grad=False):
    if not _is_array(a):
        return a
    # gradcheck perturbs elements one by one: a fresh C-contiguous copy for it
    t = torch.from_numpy(np.array(a, copy=True, order="C" if grad else "K"))
    if grad and a.dtype.kind == "f":
        t.requires_grad_(True)
    return t


def _outs(r):
    return list(r) if isinstance(r, tuple) else [r]


def _np(x):
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


# differentiable ops whose gradients no finite difference can check, with the reason
# (the set is exact: an op that gains a gradient sample must leave it)
NO_GRAD_SAMPLE = {
    "_standard_gamma": "random draws (each call draws anew); its implicit gradient is "
                       "checked in tests/distributions against SciPy and PyTorch",
    "_standard_gamma_grad": "no derivative of its own, as PyTorch: its vjp raises",
    "normal": "random draws (each call draws anew); its gradient (mean + std * eps) is "
              "checked in tests/ops/test_random.py",
    "mode": "the mode repeats by definition: a perturbation changes which value it is; "
            "its gradient is checked against PyTorch's in tests/ops/test_sorting.py",
    "linalg_svd": "the singular vectors' signs are arbitrary: only gauge-invariant "
                  "functions have a gradient (tests/ops/test_linalg_decomp.py, against PyTorch)",
    "svd": "as linalg_svd",
    "igamma": "no derivative in its first input (as PyTorch); the other's is checked "
              "against PyTorch's in tests/ops/test_special.py",
    "igammac": "as igamma",
    "lu_unpack": "its P output takes no gradient; L's and U's are checked against "
                 "PyTorch's in tests/ops/test_linalg_decomp.py",
    "linalg_lu": "as lu_unpack",
    "linalg_eigh": "it reads one triangle while its gradient (PyTorch's) is the symmetric "
                   "one: checked through a symmetric parametrization and against PyTorch's "
                   "in tests/ops/test_linalg_decomp.py (and through lobpcg's samples)",
    "linalg_eigvalsh": "as linalg_eigh",
}


def test_every_differentiable_op_has_a_gradient_sample():
    """The GRAD list below covers every differentiable op (none left out silently)."""
    missing = {op.name for op in OPS if op.differentiable and _grad_sample(op) is None}
    assert missing == set(NO_GRAD_SAMPLE), (
        f"differentiable ops without a float sample with grad: {sorted(missing)}")


def test_namespace_has_every_registered_op_and_later_ones():
    assert {op.name for op in OPS} <= set(vars(NS))
    f = tg.custom_op("interop_cube_later", lambda x: x ** 3, lambda g, x: g * 3 * x * x)
    try:
        assert not hasattr(NS, "interop_cube_later")
        ns = torch_ops()
        x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        y = ns.interop_cube_later(x)
        np.testing.assert_allclose(_np(y), [1.0, 8.0])
        assert torch.autograd.gradgradcheck(ns.interop_cube_later, (x,))
        assert f.op is tg.ops_registry.get("interop_cube_later")
    finally:
        tg.ops_registry.unregister("interop_cube_later")


# ops whose values are whatever memory held (torch.empty's too): shape and dtype only
VALUES_UNSPECIFIED = {"empty", "empty_like"}


def _bind(op, sample):
    return _outs(bind(op, *[tg.tensor(a) if _is_array(a) else a for a in sample.args],
                      **sample.attrs))


def _same(a, b):
    return all(np.array_equal(_np(x), _np(y), equal_nan=True) for x, y in zip(a, b))


@pytest.mark.parametrize("op,sample", FORWARD)
def test_forward_matches_torch(op, sample):
    """The export agrees with tapegrad's own op (from the same generator state: a
    random op draws tapegrad's numbers) and, for a deterministic op with a PyTorch
    oracle, with PyTorch's op."""
    state = tg.get_rng_state()
    got = _outs(getattr(NS, op.name).raw(*[_t(a) for a in sample.args], **sample.attrs))
    tg.set_rng_state(state)
    own = _bind(op, sample)
    random = not _same(own, _bind(op, sample))  # a second draw differs
    checks = [(own, "tapegrad's op")]
    if op.torch is not None and not random:
        checks.append((_outs(op.torch(torch, *[_t(a) for a in sample.args], **sample.attrs)),
                       "PyTorch's op"))
    values = op.name not in VALUES_UNSPECIFIED
    for expected, what in checks:
        assert len(got) == len(expected), f"{op.name}: {len(got)} outputs, {what} {len(expected)}"
        for k, (g, e) in enumerate(zip(got, expected)):
            assert isinstance(g, torch.Tensor), f"{op.name} output {k}: {type(g).__name__}"
            g, e = _np(g), _np(e)
            assert g.shape == e.shape, f"{op.name} output {k}: shape {g.shape} vs {what} {e.shape}"
            assert g.dtype == e.dtype, f"{op.name} output {k}: dtype {g.dtype} vs {what} {e.dtype}"
            if values:
                np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=1e-7,
                                           atol=1e-10, equal_nan=True,
                                           err_msg=f"{op.name} vs {what}")


def _fn(op, sample):
    args = [_t(a, grad=True) for a in sample.args]
    pos = [i for i, a in enumerate(sample.args) if _is_array(a) and a.dtype.kind == "f"]
    fn_ = getattr(NS, op.name).raw

    def fn(*ts):
        full = list(args)
        for i, t in zip(pos, ts):
            full[i] = t
        outs = _outs(fn_(*full, **sample.attrs))
        outs = tuple(o for o in outs if o.is_floating_point())
        return outs[0] if len(outs) == 1 else outs

    return fn, [args[i] for i in pos]


# up to this many elements in the inputs and outputs together, PyTorch's checks build
# the whole Jacobian (of the op, and of its vjp); above it, their fast mode compares one
# random projection of it (u^T J v: one backward against finite differences along v),
# which a wrong entry still fails, at the cost of a few calls instead of one per element
# (adaptive_max_pool3d's 240 inputs: 18 s of second-order checks in full)
FULL_JACOBIAN_MAX_ELEMENTS = 64


def _checks(fn, inputs, whole=False):
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    size = sum(t.numel() for t in inputs) + sum(o.numel() for o in outs)
    fast = not whole and size > FULL_JACOBIAN_MAX_ELEMENTS
    kw = dict(eps=1e-6, atol=1e-5, rtol=1e-3, fast_mode=fast)
    assert torch.autograd.gradcheck(fn, inputs, **kw)
    assert torch.autograd.gradgradcheck(fn, inputs, **kw)


@pytest.mark.parametrize("op,sample", GRAD_TIERED)
def test_gradcheck_and_gradgradcheck(op, sample):
    _checks(*_fn(op, sample))


@pytest.mark.slow
@pytest.mark.parametrize("op,sample", GRAD)
def test_gradcheck_and_gradgradcheck_whole_jacobian(op, sample):
    """The exhaustive tier: the whole Jacobians, whatever the sample's size."""
    _checks(*_fn(op, sample), whole=True)


VIEWS = [pytest.param(op, s, id=f"{op.name}-sample{k}") for op in OPS if op.kind == "view"
         for k, s in enumerate(op.samples(F64)) if s.args[0].size]


@pytest.mark.parametrize("op,sample", VIEWS)
def test_view_ops_are_torch_views_of_their_input(op, sample):
    """A view op's result shares its input's memory, as a torch view (``._base``),
    unless NumPy had to copy (a reshape no strides give) or its view has negative
    strides (``x[::-2]``), which PyTorch cannot express: then it is a copy."""
    x = _t(sample.args[0])
    y = getattr(NS, op.name).raw(x, *[_t(a) for a in sample.args[1:]], **sample.attrs)
    base = x.numpy()
    got = y.numpy()
    expected = op.compute(base, *sample.args[1:], **sample.attrs)
    np.testing.assert_array_equal(got, expected)
    if np.shares_memory(expected, base) and all(st >= 0 for st in expected.strides):
        assert y._base is x or y._base is x._base, f"{op.name}: not a torch view of its input"
        assert np.shares_memory(got, base)
    else:  # NumPy copied, or gave negative strides, which PyTorch has not: a copy
        assert not np.shares_memory(got, base)


def test_zero_copy_inputs_and_outputs():
    """The kernel reads the tensors' own memory: a tensor written after the call is
    not seen by the result, but a custom op reading its input's address sees it."""
    seen = []

    def kernel(x):
        seen.append(x.__array_interface__["data"][0])
        return x * 2

    tg.custom_op("interop_addr", kernel, lambda g, x: g * 2)
    try:
        ns = torch_ops()
        x = torch.arange(6.0, dtype=torch.float64).reshape(2, 3).t()  # non-contiguous
        y = ns.interop_addr(x)
        assert seen[-1] == x.data_ptr()  # (infer ran it on zeros first)
        np.testing.assert_array_equal(y.numpy(), x.numpy() * 2)
    finally:
        tg.ops_registry.unregister("interop_addr")


def test_bad_input_gives_the_ops_error_from_pytorch():
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(TypeError, match="add: argument 'other' must be a (torch\\.)?Tensor"):
        NS.add(x, object())
    with pytest.raises(RuntimeError, match="exp: input 'x' is on meta.*CPU"):
        NS.exp(torch.ones(3, device="meta"))
    with pytest.raises(RuntimeError, match="matmul: shapes"):
        NS.matmul(torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="conv2d"):  # integer input: the op refuses the dtype
        NS.conv2d(torch.ones(1, 1, 3, 3, dtype=torch.int64), torch.ones(1, 1, 1, 1,
                                                                        dtype=torch.int64), None)


def test_backward_of_broadcasting_and_multi_output_ops():
    x = torch.randn(3, 1, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, dtype=torch.float64, requires_grad=True)
    NS.mul(x, y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((3, 1), y.detach().sum().item()))
    v = torch.randn(5, dtype=torch.float64, requires_grad=True)
    vals, idx = NS.sort(v, dim=0, descending=False)
    assert not idx.requires_grad and idx.dtype == torch.int64
    (vals * torch.arange(5.0, dtype=torch.float64)).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy()[idx.numpy()], np.arange(5.0))


@pytest.mark.parametrize("op,sample", JVP)
def test_forward_mode_torch_func_jvp(op, sample):
    """``torch.func.jvp`` through the export runs the registry's jvp rule (with the
    exported ops): it agrees with tapegrad's own forward mode on the same sample."""
    fn, inputs = _fn(op, sample)
    rng = np.random.default_rng(0)
    tangents = tuple(torch.from_numpy(rng.standard_normal(tuple(t.shape))) for t in inputs)
    prim = tuple(t.detach() for t in inputs)
    _, got = torch.func.jvp(fn, prim, tangents)
    got = got if isinstance(got, tuple) else (got,)

    targs = [tg.tensor(a) if _is_array(a) else a for a in sample.args]
    pos = [i for i, a in enumerate(sample.args) if _is_array(a) and a.dtype.kind == "f"]

    def tfn(*ts):
        full = list(targs)
        for i, t in zip(pos, ts):
            full[i] = t
        outs = _outs(bind(op, *full, **sample.attrs))
        return tuple(o for o in outs if o.dtype.is_floating_point)

    _, expected = tg.functional.jvp(tfn, tuple(targs[i] for i in pos),
                                    tuple(tg.tensor(t.numpy()) for t in tangents))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(_np(g), e.detach().numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{op.name}: jvp through the export")


def test_forward_ad_dual_tensors():
    import torch.autograd.forward_ad as fwAD
    x = torch.rand(3, 4, dtype=torch.float64)
    t = torch.rand(3, 4, dtype=torch.float64)
    with fwAD.dual_level():
        y = NS.sum(NS.mul(NS.exp(fwAD.make_dual(x, t)), x), dim=(1,), keepdim=False)
        got = fwAD.unpack_dual(y).tangent
    np.testing.assert_allclose(got.numpy(), (np.exp(x.numpy()) * x.numpy() * t.numpy()).sum(1),
                               rtol=1e-12)


def test_small_calls_read_the_tensors_current_memory():
    """The export's lane keeps NumPy views of small tensors by address, shape,
    strides and dtype: in-place writes, fresh tensors at a reused address, strided
    views and mixed dtypes all compute on what the tensors hold now."""
    x = torch.rand(8)
    np.testing.assert_allclose(NS.exp(x).numpy(), np.exp(x.numpy()), rtol=1e-6)
    x.add_(1.0)
    np.testing.assert_allclose(NS.exp(x).numpy(), np.exp(x.numpy()), rtol=1e-6)
    for i in range(40):  # freed and reallocated: often the same address
        a = torch.full((4,), float(i))
        assert NS.neg(a).tolist() == [-float(i)] * 4
    v = torch.arange(10.0)[::3]
    assert NS.mul(v, v).tolist() == [0.0, 9.0, 36.0, 81.0]
    r = NS.add(torch.ones(3, dtype=torch.float32), torch.ones(3, dtype=torch.float64))
    assert r.dtype == torch.float64 and r.tolist() == [2.0] * 3
    g = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        assert not NS.mul(g, g).requires_grad
    y = NS.mul(g, torch.full((3,), 2.0))
    assert y.requires_grad
    y.sum().backward()
    assert g.grad.tolist() == [2.0] * 3
    with pytest.raises(ValueError, match=r"add: shapes \(3,\) and \(4,\)"):  # the op's error
        NS.add(torch.ones(3), torch.ones(4))


class _FakeCuda:
    """A DLPack producer that says it lives on a CUDA device (none is needed)."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kw):  # pragma: no cover - never reached: refused first
        raise AssertionError("the export read a CUDA array")


def test_a_non_host_dlpack_array_gets_the_ops_device_error():
    with pytest.raises(RuntimeError, match="mul: input 'other' is on cuda.*CPU"):
        NS.mul(torch.ones(3), _FakeCuda())


def test_repeated_calls_with_other_shapes_dtypes_and_attributes():
    """The export keeps, per (op, dtype, shapes, attributes), what a call needs (shape
    rule, workspace size, backward bookkeeping): calls that differ in any of them,
    in turn, each compute their own result and gradients (vs PyTorch's conv2d), and
    a call the shape rule refuses still gets the op's error after a kept one."""
    F = torch.nn.functional
    r = np.random.default_rng(3)
    cases = [((2, 3, 7, 7), (4, 3, 3, 3), {}), ((2, 3, 7, 7), (4, 3, 3, 3), {"padding": 1}),
             ((1, 3, 6, 5), (4, 3, 3, 3), {"padding": 1}),
             ((2, 4, 7, 7), (4, 2, 3, 3), {"padding": (1, 0), "stride": 2, "groups": 2})]
    for _ in range(2):
        for dtype in (torch.float32, torch.float64):
            for xs, ws, attrs in cases:
                x = torch.from_numpy(r.standard_normal(xs)).to(dtype).requires_grad_()
                w = torch.from_numpy(r.standard_normal(ws)).to(dtype).requires_grad_()
                y = NS.conv2d(x, w, None, **attrs)
                ref = F.conv2d(x, w, None, **attrs)
                assert y.dtype == dtype and y.shape == ref.shape
                g = torch.from_numpy(r.standard_normal(tuple(ref.shape))).to(dtype)
                got = torch.autograd.grad(y, (x, w), g)
                want = torch.autograd.grad(ref, (x, w), g)
                tol = 1e-4 if dtype == torch.float32 else 1e-10
                for a, b in zip((y, *got), (ref, *want)):
                    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(),
                                               rtol=tol, atol=tol)
                gw, = torch.autograd.grad(NS.conv2d(x.detach(), w, None, **attrs), (w,), g)
                np.testing.assert_allclose(gw.numpy(), want[1].numpy(), rtol=tol, atol=tol)
    with pytest.raises(RuntimeError, match="conv2d"):
        NS.conv2d(torch.ones(2, 3, 7, 7), torch.ones(4, 2, 3, 3), None)


def _other_samples():
    """Gradient samples beyond each op's first whose adjoints once built host NumPy
    constants (``np.eye(like=...)``, ``.astype``) the export's torch.Tensors cannot
    take: prod and cumprod with zeros (their exact branch), the inf norms' tie masks,
    and every scatter_reduce reduction (its weights)."""
    picks = {"prod": lambda s: any((a == 0).any() for a in s.args if _is_array(a)),
             "cumprod": lambda s: any((a == 0).any() for a in s.args if _is_array(a)),
             "norm": lambda s: abs(s.attrs.get("p", 2.0)) == np.inf,
             "scatter_reduce": lambda s: True}
    out = []
    for name, pick in picks.items():
        op = tg.ops_registry.get(name)
        for k, s in enumerate(op.samples(F64)):
            if s.grad and all(a.size for a in s.args if _is_array(a)) and pick(s):
                out.append(pytest.param(op, s, id=f"{name}-sample{k}"))
    return out


OTHER = _other_samples()


def test_other_samples_cover_the_cases():
    ids = {p.id.split("-")[0] for p in OTHER}
    assert ids == {"prod", "cumprod", "norm", "scatter_reduce"}
    reduces = {(p.values[1].attrs["reduce"], p.values[1].attrs["include_self"])
               for p in OTHER if p.id.startswith("scatter_reduce")}
    assert len(reduces) == 10  # five reductions, include_self True and False


@pytest.mark.parametrize("op,sample", OTHER)
def test_gradients_of_other_samples_through_the_export(op, sample):
    _checks(*_fn(op, sample))
    test_forward_mode_torch_func_jvp(op, sample)


def test_scatter_reduce_gradients_match_pytorchs_through_the_export():
    """Every reduction, include_self both ways, ties (amax/amin) and zeros (prod):
    the export's gradient equals PyTorch's own scatter_reduce's, first and second
    order (a double-backward vector through both)."""
    r = np.random.default_rng(5)
    x = np.array([[0.0, 2.0, 3.0, 1.0], [1.5, -0.5, 2.0, 0.5]])
    src = np.array([[1.5, 0.0, 2.0, 3.0, 1.0], [2.0, 1.1, 0.5, 0.0, -0.5]])
    idx = torch.tensor([[0, 1, 1, 2, 0], [0, 0, 2, 3, 3]])
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for inc in (True, False):
            g = torch.from_numpy(r.standard_normal((2, 4)))
            v = torch.from_numpy(r.standard_normal((2, 4)))
            res = []
            for f in (lambda a, s: NS.scatter_reduce(a, 1, idx, s, reduce,
                                                     include_self=inc),
                      lambda a, s: torch.scatter_reduce(a, 1, idx, s, reduce,
                                                        include_self=inc)):
                a = torch.from_numpy(x.copy()).requires_grad_()
                s = torch.from_numpy(src.copy()).requires_grad_()
                ga, gs = torch.autograd.grad(f(a, s), (a, s), g, create_graph=True)
                second = (ga * v).sum() + gs.sum()
                gga, ggs = torch.autograd.grad(second, (a, s), allow_unused=True,
                                               materialize_grads=True) \
                    if second.requires_grad else (torch.zeros_like(a), torch.zeros_like(s))
                res.append([t.detach().numpy() for t in (ga, gs, gga, ggs)])
            for got, want, what in zip(*res, ("input", "src", "input 2nd", "src 2nd")):
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12,
                                           err_msg=f"{reduce}, include_self={inc}: {what}")
