"""How many microseconds does one recorded op cost, forward + backward, on tiny
tensors? A chain of 100 elementwise ops on (8,) float32, then backward, against
PyTorch CPU, HIPS autograd, JAX (eager) and hand-written NumPy in the same run, each
in its own process (PyTorch's idle worker threads would otherwise share the cores
with whoever runs after it).

    python benchmarks/bench_dispatch.py
"""
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

N_OPS = 100  # per repetition: 50 x (mul, add)


def _median_us(fn, reps=200, warm=20):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6 / N_OPS


def bench_tapegrad():
    import tapegrad as tg
    x = tg.tensor(np.linspace(0.1, 0.9, 8).astype(np.float32), requires_grad=True)
    c = tg.tensor(np.full(8, 0.999, np.float32))

    def step():
        y = x
        for _ in range(N_OPS // 2):
            y = y * c
            y = y + x
        y = y.sum()
        y.backward()
        x.grad = None
    return _median_us(step)


def bench_torch():
    import torch
    torch.set_num_threads(1)
    x = torch.tensor(np.linspace(0.1, 0.9, 8).astype(np.float32), requires_grad=True)
    c = torch.tensor(np.full(8, 0.999, np.float32))

    def step():
        y = x
        for _ in range(N_OPS // 2):
            y = y * c
            y = y + x
        y = y.sum()
        y.backward()
        x.grad = None
    return _median_us(step)


def bench_autograd():
    import autograd.numpy as anp
    from autograd import grad
    c = np.full(8, 0.999, np.float32)

    def f(x):
        y = x
        for _ in range(N_OPS // 2):
            y = y * c
            y = y + x
        return anp.sum(y)
    g = grad(f)
    x = np.linspace(0.1, 0.9, 8).astype(np.float32)
    return _median_us(lambda: g(x), reps=100)


def bench_jax_eager():
    import jax
    import jax.numpy as jnp
    c = jnp.full(8, 0.999, jnp.float32)

    def f(x):
        y = x
        for _ in range(N_OPS // 2):
            y = y * c
            y = y + x
        return jnp.sum(y)
    g = jax.grad(f)
    x = jnp.linspace(0.1, 0.9, 8, dtype=jnp.float32)
    return _median_us(lambda: g(x).block_until_ready(), reps=20, warm=3)


def bench_numpy():
    x = np.linspace(0.1, 0.9, 8).astype(np.float32)
    c = np.full(8, 0.999, np.float32)

    def step():
        y = x
        for _ in range(N_OPS // 2):
            y = y * c
            y = y + x
        # backward by hand: dy/dx accumulates through the chain
        g = np.ones_like(x)
        gx = np.zeros_like(x)
        for _ in range(N_OPS // 2):
            gx = gx + g
            g = g * c
        gx = gx + g
        return gx
    return _median_us(step)


_CONTENDERS = {"tapegrad": bench_tapegrad, "pytorch": bench_torch,
               "hips-autograd": bench_autograd, "jax (eager grad)": bench_jax_eager,
               "numpy by hand": bench_numpy}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one"]:  # a child process: one contender, one JSON line
        from _isolate import report
        report({"us": _CONTENDERS[argv[1]]()})
        return
    from _isolate import run_each
    res = run_each(os.path.abspath(__file__), list(_CONTENDERS), repeats=5, key="us")
    ref = res["pytorch"]["us"]
    print(f"chain of {N_OPS} ops on (8,) float32, forward + backward: median per process, "
          f"best of 5 fresh processes per library")
    print(f"{'library':<20}{'us/op (fwd+bwd)':>18}{'vs pytorch':>12}")
    for name, r in res.items():
        if r is not None:
            print(f"{name:<20}{r['us']:>18.2f}{r['us'] / ref:>11.2f}x")


if __name__ == "__main__":
    main()
