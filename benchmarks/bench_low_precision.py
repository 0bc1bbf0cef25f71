"""Low precision against PyTorch CPU: GEMM, conv, a fused elementwise chain and an
autocast MLP training step, in float32, bfloat16 and float16.

    python benchmarks/bench_low_precision.py [--rounds 15] [--gemm 1024]
                                             [--clock wall|cpu] [--only SUBSTRING]

Contenders take turns in each round (tapegrad, then PyTorch, per case and dtype, the
cases in turn), so a busy neighbour slows them alike. The table gives each one's
median over the rounds (the first round warms up and is dropped) and its best, in
milliseconds; the ratio columns come from the medians: tapegrad over PyTorch, and
tapegrad's half-width time over its own float32 time (the targets: at most 1.3x for
GEMM and conv, at most 0.7x for the fused chain on 4M elements and no more than 1x
on 1M). The chain rows: tapegrad's @tg.fuse (one kernel) and eager ops against
PyTorch's eager ops. ``--clock cpu`` times the process's CPU time (all threads)
instead of wall time: steadier on a loaded machine, for relative comparisons.
``--only`` keeps the cases whose name contains the substring (their float32 row
is kept for the ratio).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import tapegrad as tg  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")


def _cases(n):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    x = rng.standard_normal((8, 32, 56, 56)).astype(np.float32)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32) * 0.05
    v4, v1 = (rng.standard_normal(size).astype(np.float32) for size in (1 << 22, 1 << 20))

    @tg.fuse
    def chain(x):  # one half-width kernel in bfloat16/float16 (fusion/codegen_numba.py)
        return tg.nn.functional.gelu(x) * x + 1.0
    cases = {}
    for dt in DTYPES:
        T, P = getattr(tg, dt), getattr(torch, dt)
        ta, tb = tg.tensor(a).to(T), tg.tensor(b).to(T)
        pa, pb = torch.tensor(a).to(P), torch.tensor(b).to(P)
        tx, tw = tg.tensor(x).to(T), tg.tensor(w).to(T)
        px, pw = torch.tensor(x).to(P), torch.tensor(w).to(P)
        cases[f"GEMM {n}^3 {dt}"] = (lambda ta=ta, tb=tb: ta @ tb, lambda pa=pa, pb=pb: pa @ pb)
        cases[f"conv 8x32x56x56 * 64x3x3 {dt}"] = (
            lambda tx=tx, tw=tw: tg.nn.functional.conv2d(tx, tw, padding=1),
            lambda px=px, pw=pw: torch.nn.functional.conv2d(px, pw, padding=1))
        for v, size in ((v4, "4M"), (v1, "1M")):
            tv, pv = tg.tensor(v).to(T), torch.tensor(v).to(P)
            cases[f"chain gelu(x)*x+1 fused ({size}) {dt}"] = (
                lambda tv=tv: chain(tv), lambda pv=pv: torch.nn.functional.gelu(pv) * pv + 1.0)
        tv, pv = tg.tensor(v4).to(T), torch.tensor(v4).to(P)
        cases[f"chain gelu(x)*x+1 eager (4M) {dt}"] = (
            lambda tv=tv: tg.nn.functional.gelu(tv) * tv + 1.0,
            lambda pv=pv: torch.nn.functional.gelu(pv) * pv + 1.0)
    return cases


def _mlp_step(lib, amp):
    torch.manual_seed(0)
    L = tg if lib == "tg" else torch
    m = L.nn.Sequential(L.nn.Linear(512, 1024), L.nn.ReLU(), L.nn.Linear(1024, 10))
    opt = L.optim.SGD(m.parameters(), lr=0.01)
    rng = np.random.default_rng(1)
    x = L.tensor(rng.standard_normal((256, 512)).astype(np.float32))
    y = L.tensor(rng.integers(0, 10, 256))

    def step():
        opt.zero_grad()
        if amp:
            with L.autocast("cpu", dtype=L.bfloat16):
                loss = L.nn.functional.cross_entropy(m(x), y)
        else:
            loss = L.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--gemm", type=int, default=1024)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    cases = _cases(args.gemm)
    for amp in (False, True):
        name = "MLP step 256x512-1024-10 " + ("autocast bf16" if amp else "float32")
        cases[name] = (_mlp_step("tg", amp), _mlp_step("torch", amp))
    if args.only:
        keep = {k for k in cases if args.only in k}
        keep |= {_base(k) for k in keep}
        cases = {k: v for k, v in cases.items() if k in keep}
    times = {k: ([], []) for k in cases}
    for _ in range(args.rounds + 1):
        for k, (ft, fp) in cases.items():
            grad = "MLP" in k
            for i, f in enumerate((ft, fp)):
                ctx = ((tg.enable_grad(), torch.enable_grad()) if grad
                       else (tg.no_grad(), torch.no_grad()))
                with ctx[0], ctx[1]:
                    t0 = clock()
                    f()
                    times[k][i].append((clock() - t0) * 1e3)
    print(f"{'case':44s} {'tg med':>9s} {'tg best':>9s} {'torch med':>10s} {'torch best':>11s} "
          f"{'tg/torch':>9s} {'vs tg f32':>9s}   ({args.clock} clock, {args.rounds} rounds)")
    med = {k: (statistics.median(tt[1:]), statistics.median(pt[1:]))
           for k, (tt, pt) in times.items()}  # the first round warms up
    for k, (tt, pt) in times.items():
        tt, pt = tt[1:], pt[1:]
        base = _base(k)
        ratio32 = f"{med[k][0] / med[base][0]:.2f}x" if base != k and base in med else ""
        print(f"{k:44s} {med[k][0]:9.2f} {min(tt):9.2f} {med[k][1]:10.2f} {min(pt):11.2f} "
              f"{med[k][0] / med[k][1]:8.2f}x {ratio32:>9s}")


def _base(k):
    """The float32 case a half-width case compares with (itself for float32)."""
    if "autocast" in k:
        return k.replace("autocast bf16", "float32")
    return k.replace("bfloat16", "float32").replace("float16", "float32")


if __name__ == "__main__":
    main()
