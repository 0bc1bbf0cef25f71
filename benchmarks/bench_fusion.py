"""Does fusion pay? ``y = sum(gelu_tanh(x) * sigmoid(x) + x*x)``, forward and gradient,
on 4,000,000 float32, against PyTorch eager, jax.jit, HIPS autograd, unfused tapegrad
and a hand-written Numba kernel, with the machine's memory bandwidth measured in the
same run. Prints medians and ratios.

    python benchmarks/bench_fusion.py [--n 4000000] [--repeat 7]
"""
import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tapegrad as tg  # noqa: E402

C = math.sqrt(2.0 / math.pi)


def median_ms(fn, repeat):
    fn()  # warm up (compiles)
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def bandwidth_gbs(repeat):
    a = np.ones(64 * 2**20 // 4, np.float32)  # 64 MiB
    b = np.empty_like(a)
    ms = median_ms(lambda: np.copyto(b, a), repeat)
    return 2 * a.nbytes / (ms * 1e-3) / 1e9


def tapegrad_fused(x0):
    """The whole chain, its sum included, fused: the forward sums as it computes and
    stores nothing; the backward is one pass (read x, write its gradient)."""
    @tg.fuse
    def chain(x):
        return tg.sum(tg.gelu(x, approximate="tanh") * tg.sigmoid(x) + x * x)

    def run():
        x = tg.from_numpy(x0).requires_grad_()
        chain(x).backward()
        return x.grad
    return run


def tapegrad_fused_elementwise(x0):
    """Only the elementwise part fused; tg.sum runs as its own op."""
    @tg.fuse
    def chain(x):
        return tg.gelu(x, approximate="tanh") * tg.sigmoid(x) + x * x

    def run():
        x = tg.from_numpy(x0).requires_grad_()
        tg.sum(chain(x)).backward()
        return x.grad
    return run


def tapegrad_unfused(x0):
    def run():
        x = tg.from_numpy(x0).requires_grad_()
        g = 0.5 * x * (1 + tg.tanh(C * (x + 0.044715 * x * x * x)))
        tg.sum(g * tg.sigmoid(x) + x * x).backward()
        return x.grad
    return run


def torch_eager(x0, builtin=False):
    import torch
    torch.set_num_threads(2)
    F = torch.nn.functional

    def run():
        x = torch.from_numpy(x0).requires_grad_()
        if builtin:
            g = F.gelu(x, approximate="tanh")
        else:
            g = 0.5 * x * (1 + torch.tanh(C * (x + 0.044715 * x * x * x)))
        (g * torch.sigmoid(x) + x * x).sum().backward()
        return x.grad
    return run


def jax_jit(x0):
    import jax
    import jax.numpy as jnp

    def f(x):
        g = 0.5 * x * (1 + jnp.tanh(C * (x + 0.044715 * x * x * x)))
        return jnp.sum(g * jax.nn.sigmoid(x) + x * x)
    vg = jax.jit(jax.value_and_grad(f))
    xj = jnp.asarray(x0)
    return lambda: vg(xj)[1].block_until_ready()


def hips_autograd(x0):
    import autograd
    import autograd.numpy as anp

    def f(x):
        g = 0.5 * x * (1 + anp.tanh(C * (x + 0.044715 * x * x * x)))
        return anp.sum(g * (0.5 + 0.5 * anp.tanh(0.5 * x)) + x * x)
    vg = autograd.value_and_grad(f)
    return lambda: vg(x0)[1]


def numba_hand(x0):
    import numba

    @numba.njit(parallel=True, fastmath=True, cache=True)
    def kernel(x, grad):
        total = 0.0
        for i in numba.prange(x.size):
            v = x[i]
            u = np.float32(C) * (v + np.float32(0.044715) * v * v * v)
            t = np.tanh(u)
            s = np.float32(1.0) / (np.float32(1.0) + np.exp(-v))
            g = np.float32(0.5) * v * (np.float32(1.0) + t)
            total += g * s + v * v
            dg = np.float32(0.5) * (np.float32(1.0) + t) + np.float32(0.5) * v * (
                np.float32(1.0) - t * t) * np.float32(C) * (
                np.float32(1.0) + np.float32(3 * 0.044715) * v * v)
            grad[i] = dg * s + g * s * (np.float32(1.0) - s) + np.float32(2.0) * v
        return total
    grad = np.empty_like(x0)
    return lambda: (kernel(x0, grad), grad)[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    x0 = np.random.default_rng(0).uniform(-3, 3, args.n).astype(np.float32)
    from tapegrad import fusion
    t = time.perf_counter()
    ref = tapegrad_fused(x0)()
    first = time.perf_counter() - t
    print(f"tapegrad fused: first call {first:.2f} s (Numba compiled "
          f"{fusion.stats['compiles']} kernels in {fusion.stats['compile_seconds']:.2f} s, "
          f"loaded {fusion.stats['cache_loads']} from the disk cache)")
    cases = [("tapegrad fused (@tg.fuse)", tapegrad_fused),
             ("tapegrad fused, sum outside", tapegrad_fused_elementwise),
             ("tapegrad unfused", tapegrad_unfused),
             ("PyTorch eager composite", torch_eager),
             ("PyTorch eager F.gelu+sigmoid", lambda x: torch_eager(x, builtin=True)),
             ("jax.jit", jax_jit), ("HIPS autograd", hips_autograd),
             ("Numba hand-written", numba_hand)]
    bw = bandwidth_gbs(args.repeat)
    floor_ms = 2 * x0.nbytes / (bw * 1e9) * 1e3  # read x once, write its gradient once
    results = {}
    for name, make in cases:
        try:
            run = make(x0)
            g = np.asarray(run())
            err = float(np.max(np.abs(g - np.asarray(ref.detach()))) / np.max(np.abs(g)))
            results[name] = (median_ms(run, args.repeat), err)
        except ImportError as e:
            results[name] = (float("nan"), f"skipped: {e}")
    base = results["PyTorch eager composite"][0]
    print(f"\nn = {args.n:,} float32, median of {args.repeat}; memory bandwidth "
          f"{bw:.1f} GB/s (64 MiB copy) -> floor {floor_ms:.2f} ms\n")
    print(f"{'case':32s} {'ms':>9s} {'x torch':>8s} {'x floor':>8s}  max rel diff vs fused")
    for name, (ms, err) in results.items():
        e = f"{err:.1e}" if isinstance(err, float) else err
        print(f"{name:32s} {ms:9.2f} {ms / base:8.3f} {ms / floor_ms:8.1f}  {e}")
    fused = results["tapegrad fused (@tg.fuse)"][0]
    print(f"\ntargets: fused <= 0.1x PyTorch eager composite: {fused / base:.3f}x; "
          f"<= 5x the bandwidth floor: {fused / floor_ms:.1f}x")


if __name__ == "__main__":
    main()
