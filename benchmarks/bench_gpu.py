"""tapegrad on the GPU against PyTorch CUDA, in one run: contenders take turns each
repeat (interleaved), each call timed between device synchronisations (CuPy's and
torch's), medians reported. Cases (sizes for an H200; ``--scale`` shrinks them):

- ``mlp_step``: 784-2048-2048-10 MLP, batch 1024, cross-entropy, backward, Adam step
- ``cnn_step``: two conv3x3+ReLU+maxpool blocks and a linear head on 3x32x32, batch 256
- ``fused_chain``: ``sum(gelu_tanh(x) * sigmoid(x) + x * x)`` forward and gradient on
  64M float32 (benchmarks/bench_fusion.py's chain): ``@tg.fuse`` vs PyTorch eager
- ``softmax``: softmax forward over the last dim of (8192, 8192) float32
- ``cross_entropy``: cross-entropy forward and backward, (8192, 32000) logits
- ``layer_norm``: layer_norm forward and backward over 4096 of (16384, 4096), affine
- ``adam_update``: one Adam step over 100M float32 parameters in 100 tensors
  (PyTorch ``foreach=True``)

A table follows: medians, the ratio tapegrad / PyTorch, the issue's target ratio, and
for the memory-bound cases the bandwidth tapegrad achieves (the bytes it must move at
least, over its time) against a device-to-device copy measured in the same run
(about 4.3 TB/s on an H200). Each case also compares the two results (``check``).
A case that fails or passes ``--case-timeout`` prints its error and the others run.

    python benchmarks/bench_gpu.py [--repeat 10] [--only a,b] [--scale 1.0]
    python benchmarks/bench_gpu.py --dry-run     # the same logic on CPU (NumPy and
                                                 # torch CPU), tiny sizes, in seconds
"""
import argparse
import os
import signal
import statistics
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tapegrad as tg  # noqa: E402
import tapegrad.nn.functional as F  # noqa: E402

TARGETS = {"mlp_step": 1.3, "cnn_step": 1.3, "fused_chain": 0.2, "softmax": 1.2,
           "cross_entropy": 1.2, "layer_norm": 1.2, "adam_update": 1.0}


class Env:
    """The device both contenders use, and how to wait for it."""

    def __init__(self, dry_run):
        import torch
        self.torch = torch
        self.dry = dry_run
        if dry_run:
            self.tg_dev, self.torch_dev = "cpu", "cpu"
            torch.set_num_threads(1)  # tapegrad's BLAS is not pinned here: a logic check
        else:
            if not tg.cuda.is_available():
                raise SystemExit("bench_gpu: CUDA is not available to tapegrad (CuPy and a GPU "
                                 "are needed); --dry-run runs the logic on the CPU")
            if not torch.cuda.is_available():
                raise SystemExit("bench_gpu: PyTorch has no CUDA here")
            self.tg_dev, self.torch_dev = "cuda", "cuda"

    def sync(self):
        if not self.dry:
            tg.cuda.synchronize()
            self.torch.cuda.synchronize()

    def tg_tensor(self, a, requires_grad=False):
        return tg.tensor(a, device=self.tg_dev, requires_grad=requires_grad)

    def torch_tensor(self, a, requires_grad=False):
        return self.torch.tensor(a, device=self.torch_dev, requires_grad=requires_grad)


def _n(scale, n, lo=1):
    return max(lo, int(round(n * scale)))


def _host(x):
    if isinstance(x, tg.Tensor):
        return np.asarray(x.detach().cpu().numpy(), dtype=np.float64)
    return x.detach().cpu().double().numpy()


# ---------------------------------------------------------------- cases
# each returns (contenders {name: fn}, min bytes moved or None, check fn or None)
def case_mlp_step(env, s):
    torch = env.torch
    dims, batch = [784, _n(s, 2048, 16), _n(s, 2048, 16), 10], _n(s, 1024, 8)
    r = np.random.default_rng(0)
    x = r.standard_normal((batch, 784)).astype(np.float32)
    y = r.integers(0, 10, batch)
    tg.manual_seed(0)
    tm = tg.nn.Sequential(tg.nn.Linear(dims[0], dims[1]), tg.nn.ReLU(),
                          tg.nn.Linear(dims[1], dims[2]), tg.nn.ReLU(),
                          tg.nn.Linear(dims[2], dims[3])).to(env.tg_dev)
    pm = torch.nn.Sequential(torch.nn.Linear(dims[0], dims[1]), torch.nn.ReLU(),
                             torch.nn.Linear(dims[1], dims[2]), torch.nn.ReLU(),
                             torch.nn.Linear(dims[2], dims[3])).to(env.torch_dev)
    return _training(env, tm, pm, x, y)


def case_cnn_step(env, s):
    torch = env.torch
    batch, c1, c2 = _n(s, 256, 4), _n(s, 64, 4), _n(s, 128, 4)
    r = np.random.default_rng(1)
    x = r.standard_normal((batch, 3, 32, 32)).astype(np.float32)
    y = r.integers(0, 10, batch)
    tg.manual_seed(0)
    nn = tg.nn
    tm = nn.Sequential(nn.Conv2d(3, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Flatten(), nn.Linear(c2 * 64, 10)).to(env.tg_dev)
    tn = torch.nn
    pm = tn.Sequential(tn.Conv2d(3, c1, 3, padding=1), tn.ReLU(), tn.MaxPool2d(2),
                       tn.Conv2d(c1, c2, 3, padding=1), tn.ReLU(), tn.MaxPool2d(2),
                       tn.Flatten(), tn.Linear(c2 * 64, 10)).to(env.torch_dev)
    return _training(env, tm, pm, x, y)


def _training(env, tm, pm, x, y):
    """One step (forward, cross-entropy, backward, Adam) of the same model in each
    framework, from the same initial weights (copied from tapegrad's)."""
    torch = env.torch
    with torch.no_grad():
        for pt, pg in zip(pm.parameters(), tm.parameters()):
            pt.copy_(torch.from_numpy(pg.detach().cpu().numpy()))
    xt, yt = env.tg_tensor(x), env.tg_tensor(y)
    xp, yp = env.torch_tensor(x), env.torch_tensor(y)
    topt = tg.optim.Adam(tm.parameters(), lr=1e-4)
    popt = torch.optim.Adam(pm.parameters(), lr=1e-4, foreach=True)

    def tg_step():
        loss = F.cross_entropy(tm(xt), yt)
        topt.zero_grad()
        loss.backward()
        topt.step()
        return loss

    def torch_step():
        loss = torch.nn.functional.cross_entropy(pm(xp), yp)
        popt.zero_grad()
        loss.backward()
        popt.step()
        return loss

    def check():  # the first losses agree (same weights, same batch)
        return _host(F.cross_entropy(tm(xt), yt)), _host(torch.nn.functional.cross_entropy(
            pm(xp), yp)), 1e-3
    return {"tapegrad": tg_step, "torch": torch_step}, None, check


def case_fused_chain(env, s):
    torch = env.torch
    n = _n(s, 64 * 2**20, 1024)
    x0 = np.random.default_rng(2).uniform(-3, 3, n).astype(np.float32)

    @tg.fuse
    def chain(x):
        return tg.sum(tg.gelu(x, approximate="tanh") * tg.sigmoid(x) + x * x)

    xt = env.tg_tensor(x0, requires_grad=True)
    xp = env.torch_tensor(x0, requires_grad=True)

    def tg_run():
        xt.grad = None
        chain(xt).backward()
        return xt.grad

    def torch_run():
        xp.grad = None
        y = (torch.nn.functional.gelu(xp, approximate="tanh") * torch.sigmoid(xp)
             + xp * xp).sum()
        y.backward()
        return xp.grad

    def check():
        return _host(tg_run()), _host(torch_run()), 1e-4
    return {"tapegrad": tg_run, "torch": torch_run}, 12 * n, check


def case_softmax(env, s):
    torch = env.torch
    rows, cols = _n(s, 8192, 4), _n(s, 8192, 16)
    x0 = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)
    xt, xp = env.tg_tensor(x0), env.torch_tensor(x0)

    def check():
        return _host(tg.softmax(xt, dim=-1)), _host(torch.softmax(xp, dim=-1)), 1e-5
    return ({"tapegrad": lambda: tg.softmax(xt, dim=-1),
             "torch": lambda: torch.softmax(xp, dim=-1)}, 8 * rows * cols, check)


def case_cross_entropy(env, s):
    torch = env.torch
    rows, cols = _n(s, 8192, 4), _n(s, 32000, 16)
    r = np.random.default_rng(4)
    x0 = r.standard_normal((rows, cols)).astype(np.float32)
    y0 = r.integers(0, cols, rows)
    xt, yt = env.tg_tensor(x0, requires_grad=True), env.tg_tensor(y0)
    xp, yp = env.torch_tensor(x0, requires_grad=True), env.torch_tensor(y0)

    def tg_run():
        xt.grad = None
        F.cross_entropy(xt, yt).backward()
        return xt.grad

    def torch_run():
        xp.grad = None
        torch.nn.functional.cross_entropy(xp, yp).backward()
        return xp.grad

    def check():
        return _host(tg_run()), _host(torch_run()), 1e-4
    return {"tapegrad": tg_run, "torch": torch_run}, 12 * rows * cols, check


def case_layer_norm(env, s):
    torch = env.torch
    rows, cols = _n(s, 16384, 4), _n(s, 4096, 16)
    r = np.random.default_rng(5)
    x0 = r.standard_normal((rows, cols)).astype(np.float32)
    w0, b0 = r.standard_normal(cols).astype(np.float32), r.standard_normal(cols).astype(np.float32)
    g0 = r.standard_normal((rows, cols)).astype(np.float32)
    xt, wt, bt = (env.tg_tensor(a, requires_grad=True) for a in (x0, w0, b0))
    xp, wp, bp = (env.torch_tensor(a, requires_grad=True) for a in (x0, w0, b0))
    gt, gp = env.tg_tensor(g0), env.torch_tensor(g0)

    def tg_run():
        xt.grad = wt.grad = bt.grad = None
        F.layer_norm(xt, (cols,), wt, bt).backward(gt)
        return xt.grad

    def torch_run():
        xp.grad = wp.grad = bp.grad = None
        torch.nn.functional.layer_norm(xp, (cols,), wp, bp).backward(gp)
        return xp.grad

    def check():
        return _host(tg_run()), _host(torch_run()), 1e-3
    return {"tapegrad": tg_run, "torch": torch_run}, 20 * rows * cols, check


def case_adam_update(env, s):
    torch = env.torch
    count, size = 100, _n(s, 10**6, 64)
    r = np.random.default_rng(6)
    p0 = [r.standard_normal(size).astype(np.float32) for _ in range(count)]
    g0 = [r.standard_normal(size).astype(np.float32) for _ in range(count)]
    tps = [tg.nn.Parameter(env.tg_tensor(a)) for a in p0]
    pps = [torch.nn.Parameter(env.torch_tensor(a)) for a in p0]
    for p, g in zip(tps, g0):
        p.grad = env.tg_tensor(g)
    for p, g in zip(pps, g0):
        p.grad = env.torch_tensor(g)
    topt = tg.optim.Adam(tps, lr=1e-3, weight_decay=0.01)
    popt = torch.optim.Adam(pps, lr=1e-3, weight_decay=0.01, foreach=True)

    def check():  # after the same number of steps (warm-up + repeats, interleaved)
        return _host(tps[0]), _host(pps[0]), 1e-5
    return ({"tapegrad": topt.step, "torch": popt.step}, 28 * count * size, check)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


# ---------------------------------------------------------------- timing
def copy_bandwidth(env, scale, repeat):
    """Device-to-device copy, GB/s (read + write), as the reference bandwidth."""
    n = _n(scale, 2**28, 1024)  # 1 GiB of float32
    a = env.tg_tensor(np.ones(1, np.float32)).expand(n).contiguous()
    b = tg.empty_like(a)
    ts = []
    for _ in range(repeat + 1):
        env.sync()
        t0 = time.perf_counter()
        b.copy_(a)
        env.sync()
        ts.append(time.perf_counter() - t0)
    return 8 * n / statistics.median(ts[1:]) / 1e9


def time_case(env, contenders, repeat, warmup=2):
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    env.sync()
    times = {k: [] for k in contenders}
    for _ in range(repeat):
        for k, fn in contenders.items():  # contenders take turns
            env.sync()
            t0 = time.perf_counter()
            fn()
            env.sync()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout()


def run(args):
    env = Env(args.dry_run)
    scale = args.scale if args.scale is not None else (1 / 4096 if args.dry_run else 1.0)
    repeat = args.repeat if args.repeat is not None else (2 if args.dry_run else 10)
    torch = env.torch
    print(f"tapegrad {tg.__version__ if hasattr(tg, '__version__') else ''} on "
          f"{env.tg_dev}; torch {torch.__version__} on {env.torch_dev}; numpy "
          f"{np.__version__}; scale {scale:g}, {repeat} repeats (medians, ms)", flush=True)
    if args.dry_run:
        print("DRY RUN on the CPU at tiny sizes: it checks the cases' logic and results; "
              "its times say nothing about the GPU", flush=True)
    else:
        print(f"device: {torch.cuda.get_device_name(0)}", flush=True)
    bw = copy_bandwidth(env, scale, repeat)
    print(f"copy bandwidth: {bw:.0f} GB/s (device-to-device, read + write)", flush=True)
    names = [n for n in CASES if not args.only or n in args.only.split(",")]
    rows, failed = [], []
    head = (f"{'case':<14} {'tapegrad ms':>12} {'torch ms':>10} {'ratio':>7} {'target':>7} "
            f"{'met':>4} {'tg GB/s':>8} {'% copy':>7} {'check':>9}")
    print(head, flush=True)
    for name in names:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(max(1, int(args.case_timeout)))
        try:
            contenders, nbytes, check = CASES[name](env, scale)
            ms = time_case(env, contenders, repeat)
            ok = "-"
            if check is not None:
                a, b, tol = check()
                err = float(np.max(np.abs(a - b)) / max(1e-30, float(np.max(np.abs(b)))))
                ok = "ok" if err <= tol else f"BAD {err:.0e}"
        except CaseTimeout:
            failed.append(name)
            print(f"{name:<14} TIMEOUT after {args.case_timeout} s", flush=True)
            continue
        except Exception as e:  # one case failing does not stop the others
            failed.append(name)
            print(f"{name:<14} FAILED: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc(limit=6)
            continue
        finally:
            signal.alarm(0)
        ratio = ms["tapegrad"] / ms["torch"]
        target = TARGETS.get(name)
        met = "-" if target is None else ("yes" if ratio <= target else "no")
        gbs = nbytes / (ms["tapegrad"] * 1e-3) / 1e9 if nbytes else None
        row = (f"{name:<14} {ms['tapegrad']:>12.3f} {ms['torch']:>10.3f} {ratio:>7.2f} "
               f"{target if target is not None else '-':>7} {met:>4} "
               f"{(f'{gbs:.0f}' if gbs else '-'):>8} "
               f"{(f'{100 * gbs / bw:.0f}%' if gbs else '-'):>7} {ok:>9}")
        rows.append(row)
        print(row, flush=True)
    print("\nsummary (tapegrad / torch; target: at most)")
    print(head)
    for row in rows:
        print(row)
    if failed:
        print(f"failed or timed out: {', '.join(failed)}")
    return 1 if failed else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dry-run", action="store_true",
                   help="run every case's logic on the CPU (NumPy, torch CPU), tiny sizes")
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--scale", type=float, default=None,
                   help="size factor (default 1; 1/4096 with --dry-run)")
    p.add_argument("--only", default="", help=f"comma-separated cases of {', '.join(CASES)}")
    p.add_argument("--case-timeout", type=float, default=60.0,
                   help="seconds per case before it is abandoned")
    args = p.parse_args(argv)
    unknown = [n for n in args.only.split(",") if n and n not in CASES]
    if unknown:
        p.error(f"unknown case(s) {unknown}: choose from {', '.join(CASES)}")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
