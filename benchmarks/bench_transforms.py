"""Function transforms against torch.func (and JAX where it has the same transform),
each library in its own process, float32 on the CPU:

- jacobian of ``tanh(W @ x)`` for ``x`` in R^400 (W 400x400): ``jacrev``;
- per-sample gradients of a 2-layer MLP (784-128-10, cross-entropy) over a batch of 64:
  ``vmap(grad(loss), in_dims=(None, 0, 0))`` with ``functional_call``;
- a Hessian-vector product of that MLP's loss in its first weight, forward over
  reverse (``jvp`` of ``grad``), against PyTorch's double backward
  (``torch.autograd.grad`` of ``grad`` with ``create_graph``) and torch.func's
  ``jvp(grad)``; eagerly, and the same function under ``tg.compile`` (captured once,
  replayed as straight-line kernel calls: eagerly, about 50 small ops each pay
  Python's dispatch, which PyTorch's C++ autograd does not).

Medians of the step (ms), best of 3 fresh processes; ratios against torch.func. Both
libraries compute on one thread (``torch.set_num_threads(1)``; NumPy's BLAS through
threadpoolctl): on a shared 2-vCPU machine a multithreaded BLAS under load measured
8x slower than one thread for a 400x400 GEMM, which says nothing about either library.

    python benchmarks/bench_transforms.py
"""
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

N = 400
B, D_IN, H, C = 64, 784, 128, 10


def _median_ms(fn, reps=30, warm=5):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def _data():
    rng = np.random.default_rng(0)
    return {
        "W": (rng.standard_normal((N, N)) / np.sqrt(N)).astype(np.float32),
        "x": rng.standard_normal(N).astype(np.float32),
        "w1": (rng.standard_normal((H, D_IN)) / np.sqrt(D_IN)).astype(np.float32),
        "b1": np.zeros(H, np.float32),
        "w2": (rng.standard_normal((C, H)) / np.sqrt(H)).astype(np.float32),
        "b2": np.zeros(C, np.float32),
        "X": rng.standard_normal((B, D_IN)).astype(np.float32),
        "Y": rng.integers(0, C, B),
        "v": rng.standard_normal((H, D_IN)).astype(np.float32),
    }


def bench_tapegrad():
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)
    import tapegrad as tg
    from tapegrad import functional as F
    d = {k: tg.tensor(v) for k, v in _data().items()}
    W = d["W"]
    jac = F.jacrev(lambda x: tg.tanh(W @ x))
    params = {k: d[k] for k in ("w1", "b1", "w2", "b2")}

    def loss(p, x, y):
        h = tg.tanh(tg.nn.functional.linear(x, p["w1"], p["b1"]))
        return tg.nn.functional.cross_entropy(tg.nn.functional.linear(h, p["w2"], p["b2"]),
                                              y)

    def one(p, x, y):
        return loss(p, x[None], y[None])
    per_sample = tg.vmap(F.grad(one), in_dims=(None, 0, 0))

    def lw1(w1):
        return loss(dict(params, w1=w1), d["X"], d["Y"])

    def hvp():
        return F.jvp(F.grad(lw1), (d["w1"],), (d["v"],))[1]

    # the same function captured once and replayed (tg.compile): no dispatch per op
    compiled = tg.compile(lambda w, t: F.jvp(F.grad(lw1), (w,), (t,))[1])
    np.testing.assert_allclose(compiled(d["w1"], d["v"]).numpy(), hvp().numpy(),
                               rtol=1e-4, atol=1e-6)
    return {"jacrev": _median_ms(lambda: jac(d["x"])),
            "per_sample_grads": _median_ms(lambda: per_sample(params, d["X"], d["Y"])),
            "hvp_fwd_over_rev": _median_ms(hvp),
            "hvp_fwd_over_rev_compiled": _median_ms(lambda: compiled(d["w1"], d["v"]))}


def bench_torch():
    import torch
    from torch import func
    torch.set_num_threads(1)
    d = {k: torch.tensor(v) for k, v in _data().items()}
    W = d["W"]
    jac = func.jacrev(lambda x: torch.tanh(W @ x))
    params = {k: d[k] for k in ("w1", "b1", "w2", "b2")}
    F = torch.nn.functional

    def loss(p, x, y):
        h = torch.tanh(F.linear(x, p["w1"], p["b1"]))
        return F.cross_entropy(F.linear(h, p["w2"], p["b2"]), y)

    def one(p, x, y):
        return loss(p, x[None], y[None])
    per_sample = func.vmap(func.grad(one), in_dims=(None, 0, 0))

    def lw1(w1):
        return loss(dict(params, w1=w1), d["X"], d["Y"])

    def hvp_func():
        return func.jvp(func.grad(lw1), (d["w1"],), (d["v"],))[1]

    def double_backward():
        w1 = d["w1"].clone().requires_grad_(True)
        g, = torch.autograd.grad(lw1(w1), w1, create_graph=True)
        return torch.autograd.grad(g, w1, grad_outputs=d["v"])[0]
    return {"jacrev": _median_ms(lambda: jac(d["x"])),
            "per_sample_grads": _median_ms(lambda: per_sample(params, d["X"], d["Y"])),
            "hvp_fwd_over_rev": _median_ms(hvp_func),
            "hvp_double_backward": _median_ms(double_backward)}


_CONTENDERS = {"tapegrad": bench_tapegrad, "torch.func": bench_torch}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one"]:
        from _isolate import report
        r = _CONTENDERS[argv[1]]()
        r["total"] = sum(r.values())
        report(r)
        return
    from _isolate import run_each
    res = run_each(os.path.abspath(__file__), list(_CONTENDERS), repeats=3, key="total")
    ours, ref = res["tapegrad"], res["torch.func"]
    print("function transforms, float32, CPU: median ms per call, best of 3 processes")
    print(f"{'transform':<34}{'tapegrad':>10}{'torch':>10}{'ratio':>8}   target")
    rows = [("jacrev tanh(W@x), x in R^400", "jacrev", "jacrev", "<= 1.5x"),
            ("per-sample grads, MLP, batch 64", "per_sample_grads", "per_sample_grads",
             "<= 1.5x"),
            ("HVP fwd-over-rev vs torch jvp(grad)", "hvp_fwd_over_rev", "hvp_fwd_over_rev", ""),
            ("HVP fwd-over-rev vs double backward", "hvp_fwd_over_rev", "hvp_double_backward",
             ""),
            ("  the same, tg.compile'd", "hvp_fwd_over_rev_compiled", "hvp_double_backward",
             "<= 1.0x")]
    for label, k_ours, k_ref, target in rows:
        if ours and ref:
            print(f"{label:<34}{ours[k_ours]:>10.2f}{ref[k_ref]:>10.2f}"
                  f"{ours[k_ours] / ref[k_ref]:>7.2f}x   {target}")


if __name__ == "__main__":
    main()
