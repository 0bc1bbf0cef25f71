"""A Hessian-vector product by double backward, against the same in an older commit
of tapegrad (and PyTorch, and jax.jit where JAX is installed), in one run:
``tanh(A @ w).sum()`` with A 2000x1000 float32, ``grad(create_graph=True)`` then
``grad`` of that with ``grad_outputs=v``.

The older tree is extracted with ``git archive`` into a temporary directory, and each
contender runs in its own process, taking turns (``--rounds``), one BLAS thread each
(``--threads``);
the table gives each one's best median (ms) and its ratio to the current tree, and the
load average it ran under. On a loaded machine only the ratios in one run mean
something. ``--threads`` sets the BLAS threads (1 by default); the NumPy row is the
same HVP written out by hand (its four matrix-vector products and the elementwise
steps, no autograd): the floor the BLAS sets. ``--count`` lists the kernels one HVP
runs in this tree (the ops the first, recorded backward calls, and the matrix
products: four reads of A, two gemvs each way, are the least an HVP of this function
needs).

    python benchmarks/bench_double_backward.py [--against COMMIT] [--rounds 3] [--threads 2]
    python benchmarks/bench_double_backward.py --size 20 10   # the Python overhead alone
    python benchmarks/bench_double_backward.py --count
"""
import argparse
import importlib.util
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
threads = int(sys.argv[5])
if sys.argv[4] == "torch":
    import torch
    torch.set_num_threads(threads)
    A, w, v = torch.tensor(a), torch.tensor(w0, requires_grad=True), torch.tensor(v0)
    def hvp():
        g, = torch.autograd.grad(torch.tanh(A @ w).sum(), w, create_graph=True)
        return torch.autograd.grad(g, w, grad_outputs=v)[0]
elif sys.argv[4] == "numpy":
    def hvp():
        t = np.tanh(a @ w0)
        s = np.float32(1) - t * t
        g = s @ a  # the gradient, which the first grad returns
        return g, (np.float32(-2) * t * s * (a @ v0)) @ a
elif sys.argv[4] == "jax":
    import jax, jax.numpy as jnp
    A, w, v = jnp.asarray(a), jnp.asarray(w0), jnp.asarray(v0)
    f = lambda w: jnp.tanh(A @ w).sum()
    hvp_j = jax.jit(lambda w, v: jax.grad(lambda w: jnp.vdot(jax.grad(f)(w), v))(w))
    def hvp():
        return hvp_j(w, v).block_until_ready()
else:
    import tapegrad as tg
    A, w, v = tg.tensor(a), tg.tensor(w0, requires_grad=True), tg.tensor(v0)
    def hvp():
        g, = tg.grad(tg.tanh(A @ w).sum(), w, create_graph=True)
        return tg.grad(g, w, grad_outputs=v)[0]
with threadpool_limits(threads):
    for _ in range(20):
        hvp()
    ts = []
    for _ in range(200):
        t0 = time.perf_counter()
        hvp()
        ts.append(time.perf_counter() - t0)
print(statistics.median(ts) * 1e3)
"""


COUNT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import tapegrad as tg
from tapegrad import dispatch
rng = np.random.default_rng(0)
A = tg.tensor(rng.standard_normal((2000, 1000)).astype(np.float32))
w = tg.tensor(rng.standard_normal(1000).astype(np.float32), requires_grad=True)
v = tg.tensor(rng.standard_normal(1000).astype(np.float32))
calls = []
def observer(op, kernel, *arrays, **attrs):
    calls.append((op.name, [tuple(getattr(x, "shape", ())) for x in arrays]))
    return kernel(*arrays, **attrs)
with dispatch.observe(observer):
    y = tg.tanh(A @ w).sum()
    n_fwd = len(calls)
    g, = tg.grad(y, w, create_graph=True)
    n_first = len(calls)
    tg.grad(g, w, grad_outputs=v)
for k, (name, shapes) in enumerate(calls):
    part = "forward" if k < n_fwd else "first backward" if k < n_first else "second backward"
    print(f"{part:16s} {name:16s} {shapes}")
big = sum(1 for name, shapes in calls if any(s == (2000, 1000) or s == (1000, 2000) for s in shapes)
          and name in ("matmul", "mm", "mv", "outer", "mul"))
print(f"{len(calls)} op calls; {big} read A (the second backward's elementwise steps on "
      f"plain arrays are NumPy operators, not op calls)")
"""


def _run(tree, kind, size, threads):
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_multi_thread_eigen=false "
               "intra_op_parallelism_threads=1") if kind == "jax" and threads == 1 else None
    out = subprocess.run([sys.executable, "-c", CHILD, tree, str(size[0]), str(size[1]), kind,
                          str(threads)], capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"{kind} in {tree} failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", default="HEAD~20", help="the older commit (default HEAD~20)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--size", type=int, nargs=2, default=(2000, 1000))
    p.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--count", action="store_true", help="list the kernels one HVP runs")
    args = p.parse_args(argv)
    if args.count:
        subprocess.run([sys.executable, "-c", COUNT, ROOT], check=True)
        return
    with tempfile.TemporaryDirectory() as old:
        sha = subprocess.run(["git", "rev-parse", "--short", args.against], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
        archive = subprocess.run(["git", "archive", sha, "tapegrad"], cwd=ROOT,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
        contenders = [("tapegrad (this tree)", ROOT, "tg"), (f"tapegrad at {sha}", old, "tg")]
        if not args.no_torch:
            contenders.append(("PyTorch", ROOT, "torch"))
        if importlib.util.find_spec("jax") is not None:
            contenders.append(("jax.jit", ROOT, "jax"))
        contenders.append(("NumPy by hand (floor)", ROOT, "numpy"))
        best = {name: float("inf") for name, _, _ in contenders}
        for _ in range(args.rounds):
            for name, tree, kind in contenders:
                best[name] = min(best[name], _run(tree, kind, args.size, args.threads))
    base = best[contenders[0][0]]
    print(f"HVP by double backward, tanh(A @ w).sum(), A {args.size[0]}x{args.size[1]} "
          f"float32, {args.threads} BLAS thread(s); best of {args.rounds} medians; load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'':24s} {'ms':>8s} {'vs this tree':>13s}")
    for name, _, _ in contenders:
        print(f"{name:24s} {best[name]:8.3f} {best[name] / base:12.2f}x")


if __name__ == "__main__":
    main()
