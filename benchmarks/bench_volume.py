"""conv3d, conv_transpose3d, grid_sample and ctc_loss against PyTorch CPU, interleaved
in one process (contenders take turns call by call, so load hits both alike), one
BLAS / OpenMP thread each (BENCH_THREADS=n to change). Prints medians and ratios
(tapegrad / torch; lower is better).

Shapes: a small 3-D CNN layer, input (8, 4, 16, 16, 16), a 3x3x3 kernel 4 -> 8,
padding 1: the forward alone, and forward + backward (input and weight gradients) of
two such layers (4 -> 8 -> 8, ReLU between); conv_transpose3d 8 -> 4, kernel 2,
stride 2 on (8, 8, 8, 8, 8); grid_sample bilinear of (8, 16, 32, 32) at a 32x32 grid;
ctc_loss of (T=50, N=8, C=20), targets of 10, through log_softmax.

    python benchmarks/bench_volume.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THREADS = os.environ.get("BENCH_THREADS", "1")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = THREADS

import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tapegrad as tg  # noqa: E402

torch.set_num_threads(int(THREADS))
REPS = int(os.environ.get("BENCH_REPS", "15"))


def _cases():
    r = np.random.default_rng(0)

    def a(*s):
        return r.standard_normal(s).astype(np.float32)
    x, w1, b1, w2 = a(8, 4, 16, 16, 16), a(8, 4, 3, 3, 3) / 10, a(8), a(8, 8, 3, 3, 3) / 15
    xt, wt = a(8, 8, 8, 8, 8), a(8, 4, 2, 2, 2) / 5
    img, grid = a(8, 16, 32, 32), np.clip(a(8, 32, 32, 2) / 2, -1.1, 1.1)
    logits = a(50, 8, 20)
    targets = r.integers(1, 20, (8, 10))
    il, tl = np.full(8, 50), np.full(8, 10)

    def make(lib):
        F = lib.nn.functional

        def T(v, grad=False):
            t = lib.tensor(v)
            return t.requires_grad_() if grad else t
        X, W1, B1, W2 = T(x), T(w1, True), T(b1, True), T(w2, True)
        XG = T(x, True)
        XT, WT = T(xt, True), T(wt, True)
        IMG, GRID = T(img, True), T(grid, True)
        LOG = T(logits, True)
        TG, IL, TL = T(targets), T(il), T(tl)

        def conv_fwd():
            with lib.no_grad():
                return F.conv3d(X, W1, B1, padding=1)

        def cnn_step():
            h = F.relu(F.conv3d(XG, W1, B1, padding=1))
            F.conv3d(h, W2, None, padding=1).sum().backward()
            for p in (XG, W1, B1, W2):
                p.grad = None

        def ct_step():
            F.conv_transpose3d(XT, WT, stride=2).sum().backward()
            XT.grad = WT.grad = None

        def grid_step():
            (F.grid_sample(IMG, GRID, align_corners=False) ** 2).sum().backward()
            IMG.grad = GRID.grad = None

        def ctc_step():
            F.ctc_loss(F.log_softmax(LOG, 2), TG, IL, TL).backward()
            LOG.grad = None
        return {"conv3d forward": conv_fwd, "3-D CNN fwd+bwd (2 conv3d)": cnn_step,
                "conv_transpose3d fwd+bwd": ct_step, "grid_sample fwd+bwd": grid_step,
                "ctc_loss fwd+bwd (T=50)": ctc_step}
    return make(tg), make(torch)


def main():
    ours, theirs = _cases()
    print(f"threads {THREADS}, {REPS} interleaved calls each; load: {os.getloadavg()}")
    print(f"{'case':32s} {'tapegrad ms':>12s} {'torch ms':>10s} {'ratio':>7s}")
    for name in ours:
        f, g = ours[name], theirs[name]
        f(), g(), f(), g()  # warm-up (compilation, caches)
        tf, tt = [], []
        for _ in range(REPS):
            t0 = time.perf_counter()
            f()
            tf.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            g()
            tt.append(time.perf_counter() - t0)
        mf, mt = statistics.median(tf) * 1e3, statistics.median(tt) * 1e3
        print(f"{name:32s} {mf:12.2f} {mt:10.2f} {mf / mt:7.2f}")


if __name__ == "__main__":
    main()
