"""The blocking all_reduce's compiled path (devices/mpi.py) against NumPy on what
every rank holds, and its fallbacks. argv[1]: ``native`` (the compiled path must be
taken), ``off`` (run with TAPEGRAD_DISTRIBUTED_NATIVE=0), ``missing`` (the MPI library
is not found: mpi4py's path). Each rank prints how many calls went each way."""
import sys
import time

import numpy as np

import tapegrad as tg
import tapegrad.devices.mpi as native
import tapegrad.distributed as dist
from tapegrad.tensor import buffer

mode = sys.argv[1]
if mode == "missing":
    native._libmpi = lambda: None
dist.init_process_group(backend="mpi", timeout=30)
R, N = dist.get_rank(), dist.get_world_size()
g = dist.setup._WORLD
dist.collectives._NATIVE_AFTER = 3

counts = {"native": 0, "pending": 0, "expected": 0, "calls": 0}
wrapped = []


def counted(f):
    def call(*args):
        counts["native"] += 1
        return f(*args)
    return call


real_wait = dist.collectives._native_wait


def counted_wait(g, r):
    counts["pending"] += 1
    return real_wait(g, r)


dist.collectives._native_wait = counted_wait


def data(r, shape, dtype, it):
    x = (np.arange(int(np.prod(shape))).reshape(shape) % 5 + 1 + it) * (r + 1) - 2 * r
    return x.astype(dtype)


def reduce(op, stack):
    return {"sum": stack.sum(0), "avg": stack.mean(0), "max": stack.max(0),
            "min": stack.min(0), "product": stack.prod(0)}[op]


for dtype in (np.float32, np.float64, np.int32, np.int64):
    ops = ("sum", "avg", "max", "min", "product") if np.dtype(dtype).kind == "f" else \
        ("sum", "max", "min", "product")
    for shape in ((1,), (5,), (2, 3), ()):
        for op in ops:
            t = tg.tensor(np.zeros(shape, dtype))
            b = buffer(t)
            for it in range(6):
                b[...] = data(R, shape, dtype, it)
                if g.native and not wrapped:
                    g.native = counted(g.native)
                    wrapped.append(True)
                counts["expected"] += bool(g.native)
                counts["calls"] += 1
                if it == 4 and R == N - 1:
                    time.sleep(0.005)  # the others' compiled tests give up: Python waits
                v0 = t._version
                assert dist.all_reduce(t, op=op) is None
                assert t._version == v0 + 1   # the write is counted
                assert buffer(t) is b            # in place
                want = reduce(op, np.stack([data(r, shape, dtype, it) for r in range(N)]))
                if op == "avg":
                    assert np.allclose(b, want.astype(dtype), rtol=1e-6), (op, dtype, b, want)
                else:
                    assert np.array_equal(b, want.astype(dtype)), (op, dtype, shape, b, want)

# a fresh tensor each call (a miss of the repeat cache) takes the compiled path too
for it in range(3):
    counts["expected"] += bool(g.native)
    counts["calls"] += 1
    t = tg.tensor(data(R, (4,), np.float32, it))
    dist.all_reduce(t)
    assert np.array_equal(t.numpy(), sum(data(r, (4,), np.float32, it) for r in range(N)))

if mode == "native":
    assert g.native, "the compiled path was not loaded"
    assert counts["native"] == counts["expected"] > 0.8 * counts["calls"], counts
    if R != N - 1:
        assert counts["pending"] > 0, counts   # the Python wait finished some
else:
    assert g.native is False, g.native
    assert counts["native"] == counts["pending"] == 0, counts
print(f"rank {R}: {counts['native']} of {counts['calls']} calls compiled, "
      f"{counts['pending']} finished in Python", flush=True)
dist.barrier()
print(f"OK rank {R}", flush=True)
dist.destroy_process_group()
