"""Caller-owned memory: ``compute(alloc=)`` for every dynamic op calls the caller's
allocator once per output and writes there; ``out=`` and ``workspace=`` are the
memory written, with no result-sized allocation besides (NumPy's allocations are
traced by ``tracemalloc``); the PyTorch export writes into memory PyTorch allocated."""
import tracemalloc

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.dispatch import bind
from tapegrad.ops_registry import TensorSpec

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


def _peak(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


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
    from tapegrad.interop import torch_ops
    from tapegrad.interop import _torch as export
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
