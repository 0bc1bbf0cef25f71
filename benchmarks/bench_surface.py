"""The PyTorch-compatible surface against PyTorch, float32 on the CPU, one thread each:

- ``optim.Adadelta.step()`` on 1M parameters (PyTorch ``foreach=False`` and its default);
- a custom ``autograd.Function`` (x -> x*x*x, backward written with ops) forward plus
  backward on 1000 elements and on 1M, against the same Function in PyTorch and against
  the plain op expression (``(x * x * x).sum().backward()``) in the same library.

Medians (ms) of 30 runs after 5 warm-ups; ratio = tapegrad / PyTorch.

    python benchmarks/bench_surface.py
"""
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _median_ms(fn, reps=30, warm=5):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def _cube(lib):
    class Cube(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * 3 * x * x
    return Cube


def main():
    import threadpoolctl
    import torch

    import tapegrad as tg
    torch.set_num_threads(1)
    threadpoolctl.threadpool_limits(1)
    rng = np.random.default_rng(0)
    rows = []

    n = 1_000_000
    init = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    p = tg.nn.Parameter(tg.tensor(init.copy()))
    p.grad = tg.tensor(g)
    o = tg.optim.Adadelta([p])
    t_tg = _median_ms(o.step)
    for foreach in (False, None):
        q = torch.nn.Parameter(torch.tensor(init.copy()))
        q.grad = torch.tensor(g)
        oq = torch.optim.Adadelta([q], foreach=foreach)
        rows.append((f"Adadelta.step 1M (torch foreach={foreach})", t_tg, _median_ms(oq.step)))

    C1, C2 = _cube(tg), _cube(torch)
    for size in (1000, 1_000_000):
        a = rng.standard_normal(size).astype(np.float32)
        x = tg.tensor(a, requires_grad=True)
        tx = torch.tensor(a, requires_grad=True)

        def f_tg():
            C1.apply(x).sum().backward()

        def f_th():
            C2.apply(tx).sum().backward()

        def plain_tg():
            (x * x * x).sum().backward()

        def plain_th():
            (tx * tx * tx).sum().backward()
        rows.append((f"Function fwd+bwd n={size}", _median_ms(f_tg), _median_ms(f_th)))
        rows.append((f"  plain ops fwd+bwd n={size}", _median_ms(plain_tg), _median_ms(plain_th)))

    print(f"{'case':45s} {'tapegrad ms':>12s} {'torch ms':>10s} {'ratio':>7s}")
    for name, a, b in rows:
        print(f"{name:45s} {a:12.3f} {b:10.3f} {a / b:7.2f}")


if __name__ == "__main__":
    main()
