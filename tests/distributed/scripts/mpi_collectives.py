"""Every collective's values on every rank, against NumPy on what each rank holds
(each rank can build every other rank's input: it depends on the rank only)."""
import datetime
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
            v0 = t._version
            assert dist.all_reduce(t,
                                   op=op.upper() if op != "product"
                                   else dist.ReduceOp.PRODUCT) is None
            close(t, want.astype(dtype), f"all_reduce {op} {dtype} {shape}")
            assert t._version > v0  # the write is counted
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

# bad calls are refused locally, before any communication, in the user's terms, of
# PyTorch's exception class (and of the Python convention's, where they differ)
for call, excs, words in (
        (lambda: dist.all_reduce(np.ones(3)), [TypeError], "must be a tg.Tensor"),
        (lambda: dist.all_reduce(tg.ones(3), op="median"), [TypeError, ValueError],
         "unknown reduce op"),
        (lambda: dist.all_reduce(tg.ones(3), op=99), [TypeError], "unknown reduce op"),
        (lambda: dist.all_reduce(tg.ones(3, dtype=tg.int64), op="avg"), [RuntimeError],
         "AVG needs a floating point"),
        (lambda: dist.all_reduce(tg.ones(3), op=dist.ReduceOp.BXOR), [RuntimeError],
         "BXOR needs an integer"),
        (lambda: dist.broadcast(tg.ones(3), src=N), [RuntimeError, ValueError],
         "src must be a rank"),
        (lambda: dist.broadcast(tg.ones(3), src=-1), [RuntimeError, ValueError],
         "src must be a rank"),
        (lambda: dist.all_gather([tg.ones(3)] * (N + 1), tg.ones(3)), [RuntimeError, ValueError],
         "world_size"),
        (lambda: dist.all_gather(tg.ones(3), tg.ones(3)), [TypeError], "must be a list"),
        (lambda: dist.all_gather([1] * N, tg.ones(3)), [TypeError], "tensor_list[0]"),
        (lambda: dist.reduce_scatter(tg.ones(3), [tg.ones(3)] * (N + 1)),
         [RuntimeError, ValueError], "world_size"),
        (lambda: dist.all_gather([tg.ones(2)] * N, tg.ones(3)), [RuntimeError],
         "shape (2,)"),
        (lambda: dist.all_gather_into_tensor(tg.ones(N + 5), tg.ones(1)), [RuntimeError],
         "world_size * input"),
        (lambda: dist.reduce(tg.ones(3), dst=N), [RuntimeError, ValueError], "dst must be"),
        (lambda: dist.send(tg.ones(3), dst=R), [RuntimeError, ValueError], "own rank"),
        (lambda: dist.gather(tg.ones(3), [tg.ones(3)] * N, dst=(R + 1) % N), [ValueError],
         "must NOT be specified"),
        (lambda: dist.all_to_all_single(tg.ones(N + 1), tg.ones(N + 1)),
         [RuntimeError, ValueError], "does not split evenly"),
        (lambda: dist.init_process_group(), [RuntimeError, ValueError], "twice")):
    try:
        call()
    except excs[0] as e:
        assert words in str(e), (words, str(e))
        assert all(isinstance(e, x) for x in excs), (words, type(e).__mro__)
    else:
        raise AssertionError(f"no {excs[0].__name__} for {words}")

# checkpoints: written by rank 0 only, read back on every rank from rank 0's bytes
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, f"ckpt_{R}.tg")
    dist.save_checkpoint({"w": tg.ones(3) * (R + 5), "step": 7}, path.replace(f"_{R}", "_0"))
    assert os.path.exists(path) == (R == 0)
    got = dist.load_checkpoint(path.replace(f"_{R}", "_0"))
    assert got["step"] == 7
    close(got["w"], np.full(3, 5.0, np.float32), "checkpoint")
del io

# ---- torch.distributed's other names: bitwise reductions, reduce / gather / scatter,
# all-to-all, point to point, Python objects, the default group's handles
W = dist.group.WORLD
vals = np.array([(r + 1) * 3 for r in range(N)])
for op, f in ((dist.ReduceOp.BAND, np.bitwise_and), (dist.ReduceOp.BOR, np.bitwise_or),
              (dist.ReduceOp.BXOR, np.bitwise_xor)):
    t = tg.tensor([vals[R], 5], dtype=tg.int32)
    dist.all_reduce(t, op=op, group=W)
    assert t.numpy().tolist() == [int(f.reduce(vals)), int(f.reduce(np.full(N, 5)))], (op, t)
for dst in range(N):
    for op, want in (("sum", N * (N + 1) / 2), ("avg", (N + 1) / 2), ("max", N)):
        t = tg.ones(3) * (R + 1)
        assert dist.reduce(t, dst, op=op) is None
        close(t, np.full(3, want if R == dst else R + 1.0), f"reduce {op} to {dst}")
    g = [tg.zeros(2, 2) for _ in range(N)] if R == dst else None
    dist.gather(tg.ones(2, 2) * R, g, dst=dst)
    if R == dst:
        for r in range(N):
            close(g[r], np.full((2, 2), float(r)), "gather")
    o = tg.zeros(3)
    w = dist.scatter(o, [tg.ones(3) * (k + 10 * dst) for k in range(N)] if R == dst else None,
                     src=dst, async_op=True)
    w.wait()
    close(o, np.full(3, R + 10.0 * dst), "scatter")
inp = (tg.arange(float(N * 6)) + 100 * R).reshape(N * 2, 3)
out = tg.zeros(N * 2, 3)
dist.all_to_all_single(out, inp)
close(out, np.concatenate([np.arange(N * 6.0).reshape(N * 2, 3)[2 * R:2 * R + 2] + 100 * r
                           for r in range(N)]), "all_to_all_single")
# uneven: rank r sends k + 1 rows to rank k
inp = tg.tensor(np.concatenate([np.full((k + 1, 2), 10.0 * R + k) for k in range(N)]))
out = tg.zeros(N * (R + 1), 2, dtype=tg.float64)
dist.all_to_all_single(out, inp, output_split_sizes=[R + 1] * N,
                       input_split_sizes=[k + 1 for k in range(N)])
close(out, np.concatenate([np.full((R + 1, 2), 10.0 * r + R) for r in range(N)]),
      "all_to_all_single uneven")
outs = [tg.zeros(R + 1) for _ in range(N)]
dist.all_to_all(outs, [tg.ones(k + 1) * (10 * R + k) for k in range(N)])
for r in range(N):
    close(outs[r], np.full(R + 1, 10.0 * r + R, np.float32), "all_to_all")
# a ring of isend / irecv, then every rank sends to rank 0, which receives from any
nxt, prv = (R + 1) % N, (R - 1) % N
t = tg.zeros(4)
works = [dist.isend(tg.ones(4) * R, nxt), dist.irecv(t, prv)]
for w in works:
    w.wait()
close(t, np.full(4, float(prv), np.float32), "isend/irecv")
if R == 0:
    got = set()
    for _ in range(N - 1):
        t = tg.zeros(1)
        src = dist.recv(t, tag=1)  # (a tag of its own: the batch below sends to rank 0 too)
        close(t, np.array([float(src)], np.float32), "recv from any")
        got.add(src)
    assert got == set(range(1, N)), got
else:
    dist.send(tg.ones(1) * R, 0, tag=1)
t = tg.zeros(2)
for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, tg.ones(2) * R, nxt, tag=2),
                                 dist.P2POp(dist.irecv, t, prv, tag=2)]):
    w.wait()
close(t, np.full(2, float(prv), np.float32), "batch_isend_irecv")
objs = [None] * N
dist.all_gather_object(objs, {"rank": R, "s": "x" * R})
assert objs == [{"rank": r, "s": "x" * r} for r in range(N)], objs
lst = [1, "two", {3: 4}] if R == N - 1 else [None] * 3
dist.broadcast_object_list(lst, src=N - 1)
assert lst == [1, "two", {3: 4}], lst
g = [None] * N if R == 0 else None
dist.gather_object(R * 2, g, dst=0)
assert R != 0 or g == [2 * r for r in range(N)], g
o = [None]
dist.scatter_object_list(o, [f"item{k}" for k in range(N)] if R == 0 else None, src=0)
assert o == [f"item{R}"], o
assert dist.new_group() is W and dist.new_group(list(range(N))) is W
assert W.rank() == R and W.size() == N and dist.get_rank(group=W) == R
assert dist.GroupMember.WORLD is W and dist.get_process_group_ranks(W) == list(range(N))
assert dist.Backend("MPI") == dist.Backend.MPI == "mpi"
assert dist.is_mpi_available() and dist.is_gloo_available()
dist.monitored_barrier(timeout=datetime.timedelta(seconds=20))

dist.barrier()
dist.destroy_process_group()
assert not dist.is_initialized()
# again, under PyTorch's CPU backend name (the same MPI transport)
dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=30))
assert dist.get_backend() == "gloo" and dist.get_rank() == R and dist.get_world_size() == N
t = tg.ones(2) * (R + 1)
dist.all_reduce(t, op=dist.ReduceOp.MAX)
close(t, np.full(2, float(N), np.float32), "after a second init")
print(f"OK rank {R}", flush=True)
dist.destroy_process_group()
