"""Caller-owned memory: ``compute(alloc=)`` for every dynamic op calls the caller's
allocator once per output and writes there; ``out=`` and ``workspace=`` are the
memory written, with no result-sized allocation besides (NumPy's allocations are
traced by ``tracemalloc``); the PyTorch export writes into memory PyTorch allocated."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.dispatch import bind
from tapegrad.ops_registry import TensorSpec

from ._memory import peak as _peak

F64 = np.dtype(np.float64)
DYNAMIC = [pytest.param(op, s, id=f"{op.name}-sample{k}")
           for op in tg.ops_registry.list_ops(kind="dynamic")
           for k, s in enumerate(op.samples(F64))]


def _outs(r):
    return list(r) if isinstance(r, tuple) else [r]


class Counting:
    """An allocator handing out sentinel-filled arrays, keeping each."""

    def __init__(self, make=None):
        self.given = []
        self.specs = []
        self.make = make or (lambda spec: np.full(spec.shape, 99, spec.dtype))

    def __call__(self, spec):
        assert isinstance(spec, TensorSpec)
        self.specs.append(spec)
        a = self.make(spec)
        self.given.append(a)
        return a


def test_there_are_dynamic_ops():
    assert len(DYNAMIC) >= 4


@pytest.mark.parametrize("op,sample", DYNAMIC)
def test_dynamic_op_writes_into_the_callers_memory(op, sample):
    expected = _outs(bind(op, *[tg.tensor(a) if isinstance(a, np.ndarray) else a
                                for a in sample.args], **sample.attrs))
    alloc = Counting()
    got = _outs(op.compute(*sample.args, alloc=alloc, **sample.attrs))
    assert len(alloc.given) == op.nout, \
        f"{op.name}: the allocator was called {len(alloc.given)} times for {op.nout} outputs"
    for k, (g, a, e) in enumerate(zip(got, alloc.given, expected)):
        assert g is a, f"{op.name} output {k}: not the memory the allocator gave"
        assert alloc.specs[k].shape == tuple(e.shape)
        np.testing.assert_array_equal(a, np.asarray(e.detach()), err_msg=f"{op.name} out {k}")


def test_allocator_may_return_torch_tensors():
    torch = pytest.importorskip("torch")
    from tapegrad.interop._torch import torch_dtype, torch_module
    torch_module()
    alloc = Counting(lambda spec: torch.empty(spec.shape, dtype=torch_dtype(spec.dtype)))
    x = np.array([[0.0, 1.5], [2.0, 0.0]])
    r = tg.ops_registry.get("masked_select").compute(x, x > 0, alloc=alloc)
    assert r is alloc.given[0] and isinstance(r, torch.Tensor)
    np.testing.assert_array_equal(r.numpy(), [1.5, 2.0])


def test_allocator_errors_name_the_op():
    op = tg.ops_registry.get("nonzero")
    with pytest.raises(ValueError, match="nonzero.*allocator returned shape"):
        op.compute(np.ones(3), alloc=lambda spec: np.empty((1,), np.int64))
    with pytest.raises(TypeError, match="add: alloc= is for dynamic ops"):
        tg.ops_registry.get("add").compute(np.ones(3), np.ones(3), alloc=lambda s: None)


@pytest.mark.parametrize("name,make", [
    ("mul", lambda r: (r.random((500, 400)), r.random((500, 400)))),
    ("exp", lambda r: (r.random((500, 400)),)),
    ("lt", lambda r: (r.random((500, 400)), r.random((500, 400)))),
])
def test_out_is_written_and_nothing_result_sized_is_allocated(name, make):
    op = tg.ops_registry.get(name)
    args = make(np.random.default_rng(0))
    expected = op.compute(*args)
    out = np.full(expected.shape, 7, expected.dtype)
    op.compute(*args, out=out)  # warm
    out[...] = 7
    peak = _peak(lambda: op.compute(*args, out=out))
    np.testing.assert_array_equal(out, expected)
    assert peak < out.nbytes // 4, f"{name}: {peak} bytes allocated beside out= ({out.nbytes})"


def _conv_args():
    r = np.random.default_rng(1)
    x, w = r.random((4, 8, 24, 24)), r.random((16, 8, 3, 3))
    specs = (TensorSpec(x.shape, x.dtype), TensorSpec(w.shape, w.dtype), None)
    return x, w, specs


def test_conv2d_writes_into_callers_out_and_workspace():
    op = tg.ops_registry.get("conv2d")
    x, w, specs = _conv_args()
    shape = op.infer(*specs, padding=1).shape
    nbytes = op.workspace_bytes(*specs, padding=1)
    out, ws = np.empty(shape), np.full(nbytes, 7, np.uint8)
    op.compute(x, w, None, out=out, workspace=ws, padding=1)
    ws[...] = 7
    peak = _peak(lambda: op.compute(x, w, None, out=out, workspace=ws, padding=1))
    assert np.count_nonzero(ws != 7) > nbytes // 2, "the caller's workspace was not used"
    expected = op.compute(x, w, None, padding=1)
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    assert peak < min(out.nbytes, nbytes) // 4, f"conv2d allocated {peak} bytes of its own"


def test_torch_export_writes_into_memory_pytorch_allocated(monkeypatch):
    """The export's outputs and workspace come from torch.empty (counted: the
    workspace is one buffer per thread, made by the first call and reused, as
    tapegrad's own), the kernel writes there, and NumPy allocates nothing of their
    size."""
    torch = pytest.importorskip("torch")
    from tapegrad.interop import _torch as export, torch_ops
    ns = torch_ops()
    made = []
    real_empty = torch.empty

    def empty(*a, **k):
        t = real_empty(*a, **k)
        made.append(t)
        return t

    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(export, "_ws", __import__("threading").local())  # no buffer yet
    x, w, _ = _conv_args()
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    ns.conv2d(tx, tw, None, padding=1)
    scratch = [t for t in made if t.dtype == torch.uint8]
    assert len(scratch) == 1, "no workspace from torch.empty"
    scratch[0].fill_(7)
    made.clear()
    peak = _peak(lambda: made.append(ns.conv2d(tx, tw, None, padding=1)))
    y = made[-1]
    assert any(t.data_ptr() == y.data_ptr() for t in made[:-1]), "output not torch.empty's"
    assert not any(t.dtype == torch.uint8 for t in made[:-1]), "a second workspace"
    assert (scratch[0] != 7).sum() > scratch[0].numel() // 2, "the workspace was not used"
    assert peak < y.numel() * 8 // 4, f"NumPy allocated {peak} bytes in the export"
    np.testing.assert_allclose(y.numpy(), torch.nn.functional.conv2d(tx, tw, padding=1).numpy(),
                               rtol=1e-10)
    made.clear()
    m = torch.tensor([[True, False], [True, True]])
    r = ns.masked_select(torch.ones(2, 2, dtype=torch.float64), m)
    assert [t.data_ptr() for t in made] == [r.data_ptr()], "dynamic output not torch.empty's"


# ---------------------------------------------------------------- the export's out= / workspace=
def _ns():
    pytest.importorskip("torch")
    from tapegrad.interop import torch_ops
    return torch_ops()


@pytest.mark.parametrize("name", ["sin", "abs", "add", "softmax"])
def test_torch_export_out_is_written_and_returned(name):
    """``ns.f(..., out=o)`` as ``torch.f(..., out=o)``: o is written and returned, for a
    kernel that takes ``out=`` (sin, add), one that does not (abs: copied in) and a
    composite (softmax)."""
    import torch
    ns = _ns()
    x = torch.randn(3, 4, dtype=torch.float64)
    args, attrs, ref = {"sin": ((x,), {}, torch.sin(x)), "abs": ((x,), {}, x.abs()),
                        "add": ((x, x), {}, x + x),
                        "softmax": ((x,), {"dim": 1}, torch.softmax(x, 1))}[name]
    o = torch.full((3, 4), 7.0, dtype=torch.float64)
    r = getattr(ns, name)(*args, out=o, **attrs)
    assert r is o
    torch.testing.assert_close(o, ref)


def test_torch_export_out_writes_in_place_without_a_result_sized_allocation():
    import torch
    ns = _ns()
    x = torch.from_numpy(np.random.default_rng(0).random((500, 400)))
    o = torch.empty(500, 400, dtype=torch.float64)
    ns.sin(x, out=o)  # warm
    o.fill_(7)
    ptr = o.data_ptr()
    peak = _peak(lambda: ns.sin(x, out=o))
    assert o.data_ptr() == ptr
    torch.testing.assert_close(o, torch.sin(x))
    assert peak < o.numel() * 8 // 4, f"{peak} bytes allocated beside out="


@pytest.mark.parametrize("name", ["max", "cummax", "frexp"])
def test_torch_export_writes_several_outputs_into_the_callers_tensors(name):
    """A kernel with several outputs writes each into the caller's out tensors (and,
    without out=, into torch.empty's), NumPy allocating nothing of their size; the
    values as PyTorch's."""
    import torch
    ns = _ns()
    x = torch.from_numpy(np.random.default_rng(1).random((4000, 50)))
    call, ref = {"max": (lambda **k: ns.max(x, dim=1, **k), torch.max(x, 1)),
                 "cummax": (lambda **k: ns.cummax(x, dim=1, **k), torch.cummax(x, 1)),
                 "frexp": (lambda **k: ns.frexp(x, **k), torch.frexp(x))}[name]
    outs = tuple(torch.empty_like(r) for r in ref)
    call(out=outs)  # warm
    for o in outs:
        o.fill_(7)
    ptrs = [o.data_ptr() for o in outs]
    peak = _peak(lambda: call(out=outs))
    assert [o.data_ptr() for o in outs] == ptrs
    for o, r in zip(outs, ref):
        torch.testing.assert_close(o, r)
    nbytes = sum(o.numel() * o.element_size() for o in outs)
    assert peak < nbytes // 4, f"{name}: {peak} bytes allocated beside outs of {nbytes}"
    peak = _peak(call)  # torch.empty's memory, not NumPy's
    assert peak < nbytes // 4, f"{name}: {peak} bytes of NumPy's made for the results"
    for o, r in zip(call(), ref):
        torch.testing.assert_close(o, r)


def test_torch_export_out_follows_pytorch_rules():
    import torch
    ns = _ns()
    x = torch.randn(3, 4, dtype=torch.float64)
    o = torch.empty(0, dtype=torch.float64)
    ns.add(x, x, out=o)  # an empty out is resized silently
    assert o.shape == (3, 4)
    o = torch.empty(2, dtype=torch.float64)
    with pytest.warns(UserWarning, match="resized"):
        ns.add(x, x, out=o)
    torch.testing.assert_close(o, x + x)
    o = torch.empty(3, 4, dtype=torch.float32)  # the result casts to it
    ns.sin(x, out=o)
    torch.testing.assert_close(o, torch.sin(x).float())
    with pytest.raises(RuntimeError, match="add: result type torch.float64 can't be cast to "
                                           "the desired output type torch.int64"):
        ns.add(x, x, out=torch.empty(3, 4, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="sin\\(\\): functions with out=... arguments don't "
                                           "support automatic differentiation"):
        ns.sin(x.clone().requires_grad_(), out=torch.empty(3, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="unique: out= must be a tuple of 3"):
        ns.unique.raw(x, out=torch.empty(0))  # the registry's call: its three outputs


def test_torch_export_dynamic_ops_write_into_out():
    import torch
    ns = _ns()
    o = torch.empty(0, dtype=torch.int64)
    ptrs = []
    r = ns.nonzero(torch.tensor([1.0, 0, 2, 0]), out=o)
    ptrs.append(o.data_ptr())
    assert r is o and o.tolist() == [[0], [2]]
    o = torch.empty(0)
    ns.masked_select(torch.arange(4.0), torch.tensor([True, False, True, True]), out=o)
    assert o.tolist() == [0.0, 2.0, 3.0]
    outs = (torch.empty(0), torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64))
    assert ns.unique.raw(torch.tensor([3.0, 1, 3, 2]), out=outs) is outs
    ref = torch.unique(torch.tensor([3.0, 1, 3, 2]), return_inverse=True, return_counts=True)
    for got, want in zip(outs, ref):
        assert torch.equal(got, want)


def test_torch_export_takes_the_callers_workspace():
    import torch
    ns = _ns()
    op = tg.ops_registry.get("conv2d")
    x, w, specs = _conv_args()
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    nbytes = op.workspace_bytes(*specs, padding=1)
    ws = torch.full((nbytes + 64,), 7, dtype=torch.uint8)
    out = torch.empty(op.infer(*specs, padding=1).shape, dtype=torch.float64)
    r = ns.conv2d(tx, tw, padding=1, out=out, workspace=ws)
    assert r is out
    assert int((ws[:nbytes] != 7).sum()) > nbytes // 2, "the caller's workspace was not used"
    assert int((ws[nbytes:] != 7).sum()) == 0, "written past the declared bytes"
    ref = torch.nn.functional.conv2d(tx, tw, padding=1)
    torch.testing.assert_close(out, ref)
    ws.fill_(7)  # with autograd: the forward's scratch is the caller's, gradients as PyTorch's
    xg = tx.clone().requires_grad_()
    rg = xg.clone().detach().requires_grad_()
    ns.conv2d(xg, tw, padding=1, workspace=ws).sum().backward()
    torch.nn.functional.conv2d(rg, tw, padding=1).sum().backward()
    assert int((ws != 7).sum()) > nbytes // 2
    torch.testing.assert_close(xg.grad, rg.grad)
    with pytest.raises(RuntimeError, match="conv2d: workspace of 10 bytes is smaller than the "
                                           f"{nbytes} bytes"):
        ns.conv2d(tx, tw, padding=1, workspace=torch.empty(10, dtype=torch.uint8))
    with pytest.raises(TypeError, match="sin: workspace= is for workspace ops"):
        ns.sin(tx, workspace=ws)


# ---------------------------------------------------------------- dynamic ops: sized first
def _preallocated(op, *args, **attrs):
    """The op's outputs through an allocator whose memory was made before tracing
    (sized by a first call), and the bytes NumPy allocated meanwhile."""
    first = Counting()
    op.compute(*args, alloc=first, **attrs)
    ready = [np.full(s.shape, 99, s.dtype) for s in first.specs]
    it = iter(ready)
    got = []
    peak = _peak(lambda: got.append(op.compute(*args, alloc=lambda spec: next(it), **attrs)))
    return got[0], ready, peak


@pytest.mark.parametrize("name,make,attrs", [
    ("bincount", lambda r: (r.integers(0, 50, 1000), None), {"minlength": 400_000}),
    ("bincount", lambda r: (r.integers(0, 50, 1000), r.random(1000)), {"minlength": 400_000}),
    ("nonzero", lambda r: (r.random((400, 500)) > 0.1,), {}),
    ("argwhere", lambda r: (r.random((400, 500)) > 0.1,), {}),
    ("masked_select", lambda r: (r.random((400, 500)), r.random((400, 500)) > 0.1), {}),
    ("masked_index", lambda r: (r.random((400, 500)),), {}),
])
def test_dynamic_op_computes_no_output_sized_array_of_its_own(name, make, attrs):
    """Sized first, then written into the caller's memory: no array of the output's
    size is computed and copied in (NumPy's allocations traced)."""
    op = tg.ops_registry.get(name)
    args = make(np.random.default_rng(3))
    if name == "masked_index":
        attrs = {"index": (np.random.default_rng(4).random(400) > 0.1,)}
    got, ready, peak = _preallocated(op, *args, **attrs)
    outs = _outs(got)
    assert all(g is a for g, a in zip(outs, ready))
    expected = _outs(bind(op, *[tg.tensor(a) if isinstance(a, np.ndarray) else a
                                for a in args], **attrs))
    for g, e in zip(outs, expected):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-12)
    size = sum(a.nbytes for a in ready)
    assert peak < size // 4, f"{name}: {peak} bytes of its own beside {size} of output"


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_unique_into_the_callers_memory_matches_torch(dim):
    """unique with an allocator (sorted runs of its input give the sizes, then the
    values, inverse and counts are written into the caller's memory) against
    torch.unique, on data with many repeats, NaN-free, and rows along a dim."""
    torch = pytest.importorskip("torch")
    from hypothesis import given, settings, strategies as st
    from hypothesis.extra.numpy import arrays

    op = tg.ops_registry.get("unique")
    shapes = st.tuples(st.integers(1, 6), st.integers(1, 5))

    @settings(max_examples=40, deadline=None)
    @given(arrays(st.sampled_from([np.float64, np.float32, np.int64]), shapes,
                  elements=st.integers(-2, 2)))
    def check(x):
        alloc = Counting()
        got = op.compute(x, sorted=True, dim=dim, alloc=alloc)
        assert len(alloc.given) == 3 and all(g is a for g, a in zip(got, alloc.given))
        ref = torch.unique(torch.from_numpy(x), sorted=True, return_inverse=True,
                           return_counts=True, dim=dim)
        for g, r in zip(got, ref):
            np.testing.assert_array_equal(g, r.numpy())
    check()


def test_nonzero_into_the_callers_memory_across_blocks():
    """nonzero writes its indices block by block: many blocks, an empty block, a
    broadcast view and 0-d/1-d/3-d inputs all give NumPy's argwhere."""
    op = tg.ops_registry.get("nonzero")
    r = np.random.default_rng(5)
    big = r.random((700, 300)) > 0.4
    big[100:400] = False  # blocks without a nonzero
    cases = [big, np.broadcast_to(big[0], (700, 300)), r.random((7, 5, 3)) > 0.5,
             r.random(200_000) > 0.9, np.array(1.0), np.array(0.0), np.zeros((0, 4))]
    for x in cases:
        alloc = Counting()
        got = op.compute(x, alloc=alloc)
        assert got is alloc.given[0]
        np.testing.assert_array_equal(got, np.argwhere(x))
