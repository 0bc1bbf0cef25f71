"""A Hessian-vector product by double backward, against the same in an older commit
of tapegrad (and PyTorch), in one run: ``tanh(A @ w).sum()`` with A 2000x1000 float32,
``grad(create_graph=True)`` then ``grad`` of that with ``grad_outputs=v``.

The older tree is extracted with ``git archive`` into a temporary directory, and each
contender runs in its own process, taking turns (``--rounds``), one BLAS thread each;
the table gives each one's best median (ms) and its ratio to the current tree. On a
loaded machine only the ratios in one run mean something.

    python benchmarks/bench_double_backward.py [--against COMMIT] [--rounds 3]
    python benchmarks/bench_double_backward.py --size 20 10   # the Python overhead alone
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import statistics, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from threadpoolctl import threadpool_limits
m, n = int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
a = (rng.standard_normal((m, n)) / np.sqrt(n)).astype(np.float32)
w0 = rng.standard_normal(n).astype(np.float32)
v0 = rng.standard_normal(n).astype(np.float32)
if sys.argv[4] == "torch":
    import torch
    torch.set_num_threads(1)
    A, w, v = torch.tensor(a), torch.tensor(w0, requires_grad=True), torch.tensor(v0)
    def hvp():
        g, = torch.autograd.grad(torch.tanh(A @ w).sum(), w, create_graph=True)
        return torch.autograd.grad(g, w, grad_outputs=v)[0]
else:
    import tapegrad as tg
    A, w, v = tg.tensor(a), tg.tensor(w0, requires_grad=True), tg.tensor(v0)
    def hvp():
        g, = tg.grad(tg.tanh(A @ w).sum(), w, create_graph=True)
        return tg.grad(g, w, grad_outputs=v)[0]
with threadpool_limits(1):
    for _ in range(20):
        hvp()
    ts = []
    for _ in range(200):
        t0 = time.perf_counter()
        hvp()
        ts.append(time.perf_counter() - t0)
print(statistics.median(ts) * 1e3)
"""


def _run(tree, kind, size):
    out = subprocess.run([sys.executable, "-c", CHILD, tree, str(size[0]), str(size[1]), kind],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{kind} in {tree} failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", default="HEAD~20", help="the older commit (default HEAD~20)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--size", type=int, nargs=2, default=(2000, 1000))
    p.add_argument("--no-torch", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as old:
        sha = subprocess.run(["git", "rev-parse", "--short", args.against], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
        archive = subprocess.run(["git", "archive", sha, "tapegrad"], cwd=ROOT,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
        contenders = [("tapegrad (this tree)", ROOT, "tg"), (f"tapegrad at {sha}", old, "tg")]
        if not args.no_torch:
            contenders.append(("PyTorch", ROOT, "torch"))
        best = {name: float("inf") for name, _, _ in contenders}
        for _ in range(args.rounds):
            for name, tree, kind in contenders:
                best[name] = min(best[name], _run(tree, kind, args.size))
    base = best[contenders[0][0]]
    print(f"HVP by double backward, tanh(A @ w).sum(), A {args.size[0]}x{args.size[1]} "
          f"float32, one thread; best of {args.rounds} medians")
    print(f"{'':24s} {'ms':>8s} {'vs this tree':>13s}")
    for name, _, _ in contenders:
        print(f"{name:24s} {best[name]:8.3f} {best[name] / base:12.2f}x")


if __name__ == "__main__":
    main()
