"""Every basic/workspace kernel that takes ``out=``: the kernel writing into a given
``out`` (what ``tg.compile``'s arena and the torch export call) against the same kernel
allocating its result, in one run (writing into the caller's memory should cost no
more than allocating).

Inputs: each op's first float64 sample that scales, its arrays tiled until the output
has about ``--elements`` elements (the samples tests/interop/test_out_kernels.py scales,
and its large inputs for kernels whose samples do not scale). Medians of ``--reps``
calls, the two calls interleaved; BLAS and Numba on one thread. Ratio = out= / fresh;
over 1.2 is flagged ``SLOWER``.

    python benchmarks/bench_out_kernels.py [--filter SUBSTRING] [--elements N] [--reps N]
"""
import argparse
import os
import statistics
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, os.environ.get("BENCH_THREADS", "1"))

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "interop"))


def _case(t, op, elements):
    """(args, attrs, spec) with the output near ``elements`` elements, or None."""
    if op.name in t.BIG_INPUTS:
        return t._made_big(op)
    for s in op.samples(np.float64):
        if not t._arrays(s):
            continue
        best = None
        for k in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
            got = t._scaled(op, s, k)
            if got is None:
                break
            n = int(np.prod(got[1].shape))
            if best is not None and n <= best[0]:
                break
            best = (n, got)
            if n >= elements:
                break
        if best is not None:
            args, spec = best[1]
            return args, s.attrs, spec
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--filter", default="")
    ap.add_argument("--elements", type=int, default=1 << 18)
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    import threadpoolctl
    threadpoolctl.threadpool_limits(1)
    import test_out_kernels as t

    import tapegrad as tg
    print(f"{'op':24s} {'output':>18s} {'fresh ms':>9s} {'out= ms':>9s} {'ratio':>6s}")
    for op in t.ONE_OUT:
        if a.filter not in op.name:
            continue
        case = _case(t, op, a.elements)
        if case is None:
            continue
        args, attrs, spec = case
        kw = t._kw(op, args, attrs)
        out = np.empty(spec.shape, spec.dtype)
        fresh, into = [], []
        tg.manual_seed(0)
        op.kernel(*args, **kw)
        op.kernel(*args, out=out, **kw)  # warm (compiled loops)
        for _ in range(a.reps):
            s = time.perf_counter()
            op.kernel(*args, **kw)
            fresh.append(time.perf_counter() - s)
            s = time.perf_counter()
            op.kernel(*args, out=out, **kw)
            into.append(time.perf_counter() - s)
        f, i = statistics.median(fresh) * 1e3, statistics.median(into) * 1e3
        flag = "  SLOWER" if i > 1.2 * f else ""
        shape = "x".join(map(str, spec.shape))
        print(f"{op.name:24s} {shape:>18s} {f:9.3f} {i:9.3f} {i / f:6.2f}{flag}")


if __name__ == "__main__":
    main()
