"""tg.distributions against torch.distributions, float32 on the CPU, one thread each, each
library in its own fresh process (best of 3 processes, taking turns): a forward and
backward through

- ``Normal.log_prob`` on 100k values;
- ``Categorical(logits).log_prob`` + ``entropy`` on a (4096, 100) batch;
- ``MultivariateNormal(scale_tril).log_prob`` (d = 16, batch 256, 8 values each);
- ``Gamma.rsample`` (100k draws, implicit reparameterisation) + ``log_prob``;
- ``Dirichlet.rsample`` + ``log_prob`` on (1024, 10);
- ``kl_divergence(Normal, Normal)`` on 100k.

Medians (ms) of 20 runs after 3 warm-ups; ratio = tapegrad / PyTorch.

    python benchmarks/bench_distributions.py
"""
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CASES = ["normal_log_prob", "categorical", "mvn_log_prob", "gamma_rsample",
         "dirichlet_rsample", "kl_normal"]


def _median_ms(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def _cases(L, D):
    r = np.random.default_rng(0)
    f32 = np.float32

    def t(a, grad=False):
        return L.tensor(np.asarray(a, f32), requires_grad=grad)

    def grads(loss, params):
        loss.backward()
        for p in params:
            p.grad = None

    loc, scale, x = t(r.normal(size=100_000), True), t(r.uniform(0.5, 2, 100_000), True), \
        t(r.normal(size=100_000))
    logits = t(r.normal(size=(4096, 100)), True)
    idx = L.tensor(r.integers(0, 100, 4096))
    a = r.normal(size=(256, 16, 16)) * 0.1
    tril = t(np.tril(a) + 2 * np.eye(16), True)
    mloc, mx = t(r.normal(size=(256, 16)), True), t(r.normal(size=(8, 256, 16)))
    conc, rate = t(r.uniform(0.5, 3, 100_000), True), t(r.uniform(0.5, 2, 100_000), True)
    dconc = t(r.uniform(0.5, 3, (1024, 10)), True)
    loc2, scale2 = t(r.normal(size=100_000), True), t(r.uniform(0.5, 2, 100_000), True)
    return {
        "normal_log_prob": lambda: grads(D.Normal(loc, scale).log_prob(x).sum(), [loc, scale]),
        "categorical": lambda: grads(
            (lambda d: d.log_prob(idx).sum() + d.entropy().sum())(D.Categorical(logits=logits)),
            [logits]),
        "mvn_log_prob": lambda: grads(D.MultivariateNormal(mloc, scale_tril=tril)
                                      .log_prob(mx).sum(), [mloc, tril]),
        "gamma_rsample": lambda: grads((lambda d: d.log_prob(d.rsample()).sum())(
            D.Gamma(conc, rate)), [conc, rate]),
        "dirichlet_rsample": lambda: grads((lambda d: d.log_prob(d.rsample()).sum())(
            D.Dirichlet(dconc)), [dconc]),
        "kl_normal": lambda: grads(D.kl_divergence(D.Normal(loc, scale), D.Normal(loc2, scale2))
                                   .sum(), [loc, scale, loc2, scale2]),
    }


def one(name):
    import threadpoolctl
    threadpoolctl.threadpool_limits(1)
    if name == "torch":
        import torch
        torch.set_num_threads(1)
        torch.manual_seed(0)
        cases = _cases(torch, torch.distributions)
    else:
        import tapegrad as tg
        tg.manual_seed(0)
        cases = _cases(tg, tg.distributions)
    return {c: _median_ms(cases[c]) for c in CASES}


def main():
    from _isolate import run_each
    res = run_each(__file__, ["tapegrad", "torch"], repeats=3, key="normal_log_prob")
    print(f"# load average {os.getloadavg()[0]:.1f}; float32, one thread, fresh processes")
    print(f"{'case':<20} {'tapegrad ms':>12} {'torch ms':>10} {'ratio':>7}")
    for c in CASES:
        a, b = res["tapegrad"][c], res["torch"][c]
        print(f"{c:<20} {a:12.3f} {b:10.3f} {a / b:7.2f}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        from _isolate import report
        report(one(sys.argv[2]))
    else:
        main()
