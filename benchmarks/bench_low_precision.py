"""Low precision against PyTorch CPU: GEMM, conv, a fused elementwise chain and an
autocast MLP training step, in float32, bfloat16 and float16.

    python benchmarks/bench_low_precision.py [--rounds 15] [--repeat 3] [--gemm 1024]
                                             [--clock wall|cpu] [--only SUBSTRING]
                                             [--tables on|off]

tapegrad and PyTorch each run in their own process (in one, PyTorch's OpenMP threads
spin after each op while OpenBLAS and Numba threads want the same cores), and each
library's elementwise chains in a process apart from its GEMM, conv and MLP cases
(OpenBLAS's idle workers spin for ~0.1 s after each call and held a core from the
chain kernels timed next: float32 ``x*2+1`` on 4M took 2.2 ms after the conv case
against 0.8 ms alone). The processes are driven through pipes so they take turns:
each round each one times every case it has ``--repeat`` times back to back and
keeps the best (its buffers and caches warm: a neighbour's burst lands in one of
them, not in the round), while the others wait; a busy neighbour slows them alike.
The table gives each one's median over the rounds (the first round warms up and is
dropped) and its best, in milliseconds; the ratio columns come from the medians:
tapegrad over PyTorch, and tapegrad's half-width time over its own float32 time (the
targets: at most 1.3x for GEMM and conv, at most 0.7x for the fused chain on 4M
elements and no more than 1x on 1M). The chain rows: tapegrad's @tg.fuse (one
kernel) and eager ops against PyTorch's eager ops; ``gelu(x)*x+1`` is bound by
arithmetic (erf) in float32, and in half width one lookup an element of its output's
16-bit patterns (a function of one 16-bit input: ``tapegrad/fusion/tables.py``); in
``gelu(x)*y+1`` (two inputs) gelu(x) is looked up where the CPU's thresholds say so
(``tables.thresholds``) and the rest computed; ``x*2+1`` is bound by the bytes moved,
where half width halves them. The ``compiled`` rows: tg.compile of the eager chain
(one kernel keeping eager's rounding of each op) against PyTorch's eager ops.
``--clock cpu`` times the process's CPU time (all threads) instead of wall time:
steadier on a loaded machine, for relative comparisons.
``--only`` keeps the cases whose name contains the substring (their float32 row
is kept for the ratio). ``--tables off`` turns off the half-width kernels' table
lookups (``tapegrad/fusion/tables.py``), for an A/B of them.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import tapegrad as tg  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")


def _cases(n, lib):
    """{case: callable} of library ``lib`` ("tg" or "torch"); only ``lib`` is
    imported and run."""
    if lib == "tg":
        L = tg
    else:
        import torch as L
    F = L.nn.functional
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    x = rng.standard_normal((8, 32, 56, 56)).astype(np.float32)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32) * 0.05
    v4, v1, u4 = (rng.standard_normal(size).astype(np.float32)
                  for size in (1 << 22, 1 << 20, 1 << 22))

    @tg.fuse
    def chain(x):  # one half-width kernel in bfloat16/float16 (fusion/codegen_numba.py)
        return tg.nn.functional.gelu(x) * x + 1.0

    @tg.fuse
    def chain2(x, y):  # two inputs: computed (no table is a function of one input)
        return tg.nn.functional.gelu(x) * y + 1.0

    @tg.fuse
    def affine(x):  # memory-bound: two flops an element, its time is the bytes moved
        return x * 2.0 + 1.0

    def eager(v):
        return F.gelu(v) * v + 1.0

    def eager2(v, w):
        return F.gelu(v) * w + 1.0

    def eager_affine(v):
        return v * 2.0 + 1.0

    compiled = tg.compile(eager) if lib == "tg" else eager
    compiled2 = tg.compile(eager2) if lib == "tg" else eager2
    cases = {}
    for dt in DTYPES:
        def t(arr, dt=dt):
            return L.tensor(arr).to(getattr(L, dt))
        ta, tb, tx, tw = t(a), t(b), t(x), t(w)
        cases[f"GEMM {n}^3 {dt}"] = lambda ta=ta, tb=tb: ta @ tb
        cases[f"conv 8x32x56x56 * 64x3x3 {dt}"] = (
            lambda tx=tx, tw=tw: F.conv2d(tx, tw, padding=1))
        for v, size in ((v4, "4M"), (v1, "1M")):
            # PyTorch's row: its eager ops (it has no hand-fused form)
            tv = t(v)
            cases[f"chain gelu(x)*x+1 fused ({size}) {dt}"] = (
                lambda tv=tv: chain(tv) if lib == "tg" else eager(tv))
            cases[f"chain x*2+1 fused ({size}) {dt}"] = (
                lambda tv=tv: affine(tv) if lib == "tg" else eager_affine(tv))
        cases[f"chain gelu(x)*y+1 fused (4M) {dt}"] = (
            lambda tv=t(v4), tu=t(u4): chain2(tv, tu) if lib == "tg" else eager2(tv, tu))
        cases[f"chain gelu(x)*x+1 compiled (4M) {dt}"] = lambda tv=t(v4): compiled(tv)
        cases[f"chain gelu(x)*y+1 compiled (4M) {dt}"] = (
            lambda tv=t(v4), tu=t(u4): compiled2(tv, tu))
        cases[f"chain gelu(x)*x+1 eager (4M) {dt}"] = lambda tv=t(v4): eager(tv)
    for amp in (False, True):
        name = "MLP step 256x512-1024-10 " + ("autocast bf16" if amp else "float32")
        cases[name] = _mlp_step(lib, amp)
    return cases


def _mlp_step(lib, amp):
    if lib == "tg":
        L = tg
    else:
        import torch as L
    L.manual_seed(0)
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


def _worker(lib, args):
    """A child process: library ``lib``'s cases, each timed once per round asked."""
    from _isolate import serve
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    if lib == "tg":
        L = tg
        if args.tables == "off":
            tg.fusion.config.tables = ()
    else:
        import torch as L
    cases = {}

    def handle(cmd):
        if cmd == "build":
            cases.update(_cases(args.gemm, lib))
            keep = {k for k in cases if args.only in k}
            keep |= {_base(k) for k in keep}
            for k in set(cases) - keep:
                del cases[k]
            for k in [k for k in cases if k.startswith("chain") != (args.part == "chains")]:
                del cases[k]  # (the other part's process times it)
            return list(cases)
        out = {}
        for k, f in cases.items():
            with L.enable_grad() if "MLP" in k else L.no_grad():
                best = float("inf")
                for _ in range(args.repeat):  # back to back: caches and buffers warm
                    t0 = clock()
                    f()
                    best = min(best, clock() - t0)
                out[k] = best * 1e3
        return out
    serve(handle)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gemm", type=int, default=1024)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--only", default="")
    ap.add_argument("--tables", choices=("on", "off"), default="on")
    ap.add_argument("--worker", choices=("tg", "torch"), help=argparse.SUPPRESS)
    ap.add_argument("--part", choices=("blas", "chains"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args.worker, args)
        return
    from _isolate import Workers
    argv = ["--gemm", str(args.gemm), "--clock", args.clock, "--only", args.only,
            "--tables", args.tables, "--repeat", str(args.repeat)]
    parts = [(lib, part) for part in ("blas", "chains") for lib in ("tg", "torch")]
    workers = Workers(os.path.abspath(__file__),
                      {f"{lib} {part}": ["--worker", lib, "--part", part, *argv]
                       for lib, part in parts})
    try:
        names = workers.ask_each("build")
        times = {k: ([], []) for part in ("blas", "chains") for k in names.get(f"tg {part}", [])}
        for _ in range(args.rounds + 1):
            for key, res in workers.ask_each("round").items():
                i = 0 if key.startswith("tg") else 1
                for k, t in res.items():
                    if k in times:
                        times[k][i].append(t)
    finally:
        workers.close()
    if len(names) < len(parts):
        raise SystemExit("a contender's process failed (see above)")
    print(f"{'case':44s} {'tg med':>9s} {'tg best':>9s} {'torch med':>10s} {'torch best':>11s} "
          f"{'tg/torch':>9s} {'vs tg f32':>9s}   ({args.clock} clock, {args.rounds} rounds, best "
          f"of {args.repeat} in each; tapegrad and PyTorch in their own processes, taking "
          f"turns each round)")
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
