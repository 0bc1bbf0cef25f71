"""Every collective's values on every rank, against NumPy on what each rank holds
(each rank can build every other rank's input: it depends on the rank only)."""
import io
import os
import sys
import tempfile

import numpy as np

import tapegrad as tg
import tapegrad.distributed as dist

dist.init_process_group(backend="mpi", timeout=30)
R, N = dist.get_rank(), dist.get_world_size()
assert dist.is_initialized() and dist.get_backend() == "mpi"
assert N == int(sys.argv[1]), (N, sys.argv)


def data(r, shape, dtype):
    x = (np.arange(int(np.prod(shape))).reshape(shape) % 7 + 1) * (r + 1) - r
    return x.astype(dtype)


def close(got, want, what):
    got = got.numpy() if isinstance(got, tg.Tensor) else got
    tol = 1e-3 if got.dtype == np.float16 else 1e-6
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol), \
        (what, got, want)


every = {}
for dtype in (np.float64, np.float32, np.float16, np.int64, np.int32):
    for shape in ((5,), (3, 4), ()):
        inputs = [data(r, shape, dtype) for r in range(N)]
        stack = np.stack(inputs)
        refs = {"sum": stack.sum(0), "max": stack.max(0), "min": stack.min(0),
                "product": stack.prod(0)}
        if np.dtype(dtype).kind == "f":
            refs["avg"] = stack.mean(0)
        for op, want in refs.items():
            t = tg.tensor(inputs[R].copy())
            v0 = t._version[0]
            assert dist.all_reduce(t, op=op.upper() if op != "product" else dist.ReduceOp.PRODUCT) is None
            close(t, want.astype(dtype), f"all_reduce {op} {dtype} {shape}")
            assert t._version[0] > v0  # the write is counted
        # async
        t = tg.tensor(inputs[R].copy())
        w = dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True)
        assert w.wait() is True and w.is_completed()
        close(t, refs["sum"].astype(dtype), "async all_reduce")
        # broadcast from the last rank
        t = tg.tensor(inputs[R].copy())
        dist.broadcast(t, src=N - 1)
        close(t, inputs[N - 1], "broadcast")
        # all_gather
        outs = [tg.zeros(*shape, dtype=tg.tensor(inputs[0]).dtype) for _ in range(N)]
        dist.all_gather(outs, tg.tensor(inputs[R]))
        for r in range(N):
            close(outs[r], inputs[r], "all_gather")
        # reduce_scatter: rank r's list item k is data(r + 10 * k)
        lists = [[data(r + 10 * k, shape, dtype) for k in range(N)] for r in range(N)]
        out = tg.tensor(np.zeros(shape, dtype))
        dist.reduce_scatter(out, [tg.tensor(a) for a in lists[R]])
        close(out, sum(lists[r][R] for r in range(N)).astype(dtype), "reduce_scatter")

# zero-copy: the tensor's own buffer is written; non-contiguous tensors go through a copy
base = tg.tensor(np.arange(12.0).reshape(3, 4) * (R + 1))
buf = base.numpy()
dist.all_reduce(base)
assert np.shares_memory(base.numpy(), buf)
close(base, np.arange(12.0).reshape(3, 4) * sum(range(1, N + 1)), "zero-copy")
col = tg.tensor(np.arange(12.0).reshape(3, 4) * (R + 1))
view = col.T
dist.all_reduce(view, op="max")
close(col, np.arange(12.0).reshape(3, 4) * N, "non-contiguous view writes its base")
# one rank on the fast path (contiguous), the others through a copy (a view): one call
m = np.arange(12.0).reshape(4, 3)
t = tg.tensor(m.copy()) if R == 0 else tg.tensor(m.T.copy()).T
dist.all_reduce(t)
close(t, m * N, "fast and general paths together")
# bool: SUM and MAX are or, MIN is and
b = tg.tensor(np.array([R == 0, False, True]))
dist.all_reduce(b)
close(b, np.array([True, False, True]), "bool or")
b = tg.tensor(np.array([R == 0, False, True]))
dist.all_reduce(b, op="min")
close(b, np.array([N == 1, False, True]), "bool and")

# the tensor versions of gather / reduce-scatter, zero-copy on the output
x = tg.tensor(data(R, (2, 3), np.float32))
out = tg.zeros(2 * N, 3)
dist.all_gather_into_tensor(out, x)
close(out, np.concatenate([data(r, (2, 3), np.float32) for r in range(N)]), "gather_into")
big = tg.tensor(np.stack([data(R + k, (4,), np.float64) for k in range(N)]))
out = tg.zeros(4, dtype=tg.float64)
dist.reduce_scatter_tensor(out, big, op=dist.ReduceOp.AVG)
close(out, np.mean([data(r + R, (4,), np.float64) for r in range(N)], 0), "rs_tensor avg")

# several async ops in flight, waited in reverse order
ts = [tg.tensor(data(R + k, (1000,), np.float64)) for k in range(4)]
works = [dist.all_reduce(t, async_op=True) for t in ts]
for w in reversed(works):
    w.wait()
for k, t in enumerate(ts):
    close(t, sum(data(r + k, (1000,), np.float64) for r in range(N)), "in flight")

# a message larger than MPI's eager limit
t = tg.tensor(np.full(1 << 20, R + 1.0, dtype=np.float32))
dist.all_reduce(t)
close(t, np.full(1 << 20, N * (N + 1) / 2, dtype=np.float32), "1M elements")

# bad calls are refused locally, before any communication, in the user's terms
for call, exc, words in (
        (lambda: dist.all_reduce(np.ones(3)), TypeError, "must be a tg.Tensor"),
        (lambda: dist.all_reduce(tg.ones(3), op="median"), ValueError, "unknown reduce op"),
        (lambda: dist.all_reduce(tg.ones(3, dtype=tg.int64), op="avg"), RuntimeError,
         "AVG needs a floating point"),
        (lambda: dist.broadcast(tg.ones(3), src=N), ValueError, "src must be a rank"),
        (lambda: dist.all_gather([tg.ones(3)] * (N + 1), tg.ones(3)), ValueError,
         "world_size"),
        (lambda: dist.all_gather([tg.ones(2)] * N, tg.ones(3)), RuntimeError,
         "shape (2,)"),
        (lambda: dist.all_gather_into_tensor(tg.ones(N + 5), tg.ones(1)), RuntimeError,
         "world_size * input"),
        (lambda: dist.init_process_group(), RuntimeError, "twice")):
    try:
        call()
    except exc as e:
        assert words in str(e), (words, str(e))
    else:
        raise AssertionError(f"no {exc.__name__} for {words}")

# checkpoints: written by rank 0 only, read back on every rank from rank 0's bytes
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, f"ckpt_{R}.tg")
    dist.save_checkpoint({"w": tg.ones(3) * (R + 5), "step": 7}, path.replace(f"_{R}", "_0"))
    assert os.path.exists(path) == (R == 0)
    got = dist.load_checkpoint(path.replace(f"_{R}", "_0"))
    assert got["step"] == 7
    close(got["w"], np.full(3, 5.0, np.float32), "checkpoint")
del io

dist.barrier()
print(f"OK rank {R}", flush=True)
dist.destroy_process_group()
assert not dist.is_initialized()
