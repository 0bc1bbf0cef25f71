"""One full training step of a 784-512-512-10 ReLU MLP (batch 128, cross-entropy,
plain SGD), float32 on CPU: tapegrad vs PyTorch vs a hand-written NumPy
forward+backward, in the same process with the same BLAS thread count.

Question answered: how much do tapegrad's tape, dispatch and optimizer add on top of
the NumPy work a training step needs? (Target: tapegrad / numpy <= 1.05.)

    python benchmarks/bench_mlp_step.py [--steps 20] [--rounds 15]

One BLAS/OpenMP/Numba thread for every contender by default (BENCH_THREADS=n to
change): on a shared 2-core machine two threads per contender mostly measure the
neighbours.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THREADS = os.environ.get("BENCH_THREADS", "1")  # the same for every contender
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, THREADS)

import numpy as np  # noqa: E402

import tapegrad as tg  # noqa: E402
import tapegrad.nn as nn  # noqa: E402
import tapegrad.nn.functional as F  # noqa: E402

SIZES = (784, 512, 512, 10)
BATCH = 128
LR = 0.01


def _blas_threads():
    try:
        from threadpoolctl import threadpool_info
        blas = [p for p in threadpool_info() if p.get("user_api") == "blas"
                and "numpy" in p.get("filepath", "") + p.get("prefix", "")]
        blas = blas or [p for p in threadpool_info() if p.get("user_api") == "blas"]
        return blas[0]["num_threads"], blas[0].get("internal_api", "?")
    except Exception:   # threadpoolctl missing: assume one thread per core
        import os
        return os.cpu_count(), "?"


def _init(seed=0):
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        bound = 1 / np.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        params.append(rng.uniform(-bound, bound, fan_out).astype(np.float32))
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH)
    return params, x, y


def make_numpy_step(params, x, y):
    """Forward, backward and SGD update written directly in NumPy."""
    W1, b1, W2, b2, W3, b3 = [p.copy() for p in params]
    rows = np.arange(len(y))

    def step():
        h1 = x @ W1.T + b1
        a1 = np.maximum(h1, 0)
        h2 = a1 @ W2.T + b2
        a2 = np.maximum(h2, 0)
        z = a2 @ W3.T + b3
        m = z.max(axis=1, keepdims=True)
        e = np.exp(z - m)
        s = e.sum(axis=1, keepdims=True)
        loss = -(z[rows, y] - m[:, 0] - np.log(s[:, 0])).mean()
        dz = e / s
        dz[rows, y] -= 1
        dz /= len(y)
        dW3, db3 = dz.T @ a2, dz.sum(0)
        da2 = dz @ W3
        da2 *= h2 > 0
        dW2, db2 = da2.T @ a1, da2.sum(0)
        da1 = da2 @ W2
        da1 *= h1 > 0
        dW1, db1 = da1.T @ x, da1.sum(0)
        for p, g in ((W1, dW1), (b1, db1), (W2, dW2), (b2, db2), (W3, dW3), (b3, db3)):
            p -= LR * g
        return loss
    return step


def make_tapegrad_step(params, x, y):
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    for p, a in zip(model.parameters(), params):
        p._data[...] = a
    opt = tg.optim.SGD(model.parameters(), lr=LR)
    xt, yt = tg.tensor(x), tg.tensor(y)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        return loss
    return step


def make_torch_step(params, x, y):
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    with torch.no_grad():
        for p, a in zip(model.parameters(), params):
            p.copy_(torch.from_numpy(a))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        return loss
    return step


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20, help="steps per timed round")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    threads, blas = _blas_threads()
    params, x, y = _init()
    impls = {"numpy (hand-written)": make_numpy_step(params, x, y),
             "tapegrad": make_tapegrad_step(params, x, y)}
    try:
        import torch
        torch.set_num_threads(threads)
        impls["pytorch"] = make_torch_step(params, x, y)
    except ImportError:
        torch = None
    # same weights and data: the first losses must agree
    first = {k: float(f().item()) for k, f in impls.items()}
    ref = first["numpy (hand-written)"]
    for k, v in first.items():
        assert abs(v - ref) < 1e-4 * max(1, abs(ref)), f"{k} loss {v} != numpy {ref}"
    for f in impls.values():
        for _ in range(3):
            f()
    times = {k: [] for k in impls}
    for _ in range(args.rounds):       # interleaved rounds: machine noise hits all alike
        for k, f in impls.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                f()
            times[k].append((time.perf_counter() - t0) / args.steps)
    base = np.median(times["numpy (hand-written)"])
    ref = np.median(times["pytorch"]) if "pytorch" in times else None
    print(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, float32, SGD; BLAS threads "
          f"{threads} ({blas}); torch threads {torch.get_num_threads() if torch else '-'}")
    print(f"{'implementation':<22}{'median ms':>11}{'min ms':>9}{'vs numpy':>10}"
          f"{'vs torch':>10}")
    for k, ts in times.items():
        med = np.median(ts)
        vs_torch = f"{med / ref:>9.3f}x" if ref else f"{'-':>10}"
        print(f"{k:<22}{med * 1e3:>11.3f}{min(ts) * 1e3:>9.3f}{med / base:>9.3f}x{vs_torch}")


if __name__ == "__main__":
    main()
