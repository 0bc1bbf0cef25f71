"""How long does one small-CNN training step take, against PyTorch CPU, jax.jit and
a hand-written NumPy im2col version, in the same run?

Batch 32 of 1x28x28 float32: conv 3x3 1->16, ReLU, maxpool 2, conv 3x3 16->32,
ReLU, maxpool 2, linear 800->10, cross-entropy, plain SGD (lr 0.01) written
inline. Two threads for everyone (BENCH_THREADS=n to change), each contender in its
own process, taking turns, best of 3 processes each (BENCH_REPEATS=n). Also prints the scratch bytes
conv2d declares against the bytes its kernel really touches.

    python benchmarks/bench_cnn_step.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
THREADS = os.environ.get("BENCH_THREADS", "2")  # the same for every contender
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = THREADS

import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

B, LR = 32, 0.01
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))


def _median_ms(step, reps=60, warm=10):
    for _ in range(warm):
        step()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def _init():
    r = np.random.default_rng(0)
    x = r.standard_normal((B, 1, 28, 28)).astype(np.float32)
    y = r.integers(0, 10, B)
    p = {"w1": r.standard_normal((16, 1, 3, 3)) / 3, "b1": np.zeros(16),
         "w2": r.standard_normal((32, 16, 3, 3)) / 12, "b2": np.zeros(32),
         "w3": r.standard_normal((10, 800)) / 28, "b3": np.zeros(10)}
    return x, y, {k: v.astype(np.float32) for k, v in p.items()}


def bench_tapegrad():
    import tapegrad as tg
    x0, y0, p0 = _init()
    x, y = tg.tensor(x0), tg.tensor(y0)
    p = {k: tg.tensor(v, requires_grad=True) for k, v in p0.items()}

    def step():
        h = tg.max_pool2d(tg.relu(tg.conv2d(x, p["w1"], p["b1"])), 2)
        h = tg.max_pool2d(tg.relu(tg.conv2d(h, p["w2"], p["b2"])), 2)
        loss = tg.cross_entropy(tg.linear(tg.reshape(h, (B, 800)), p["w3"], p["b3"]), y)
        loss.backward()
        with tg.no_grad():
            for t in p.values():
                t -= LR * t.grad
                t.grad = None
        return loss
    return _median_ms(step), float(step().item())


def bench_torch():
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(int(THREADS))
    x0, y0, p0 = _init()
    x, y = torch.from_numpy(x0), torch.from_numpy(y0)
    p = {k: torch.tensor(v, requires_grad=True) for k, v in p0.items()}

    def step():
        h = F.max_pool2d(F.relu(F.conv2d(x, p["w1"], p["b1"])), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["w2"], p["b2"])), 2)
        loss = F.cross_entropy(F.linear(h.reshape(B, 800), p["w3"], p["b3"]), y)
        loss.backward()
        with torch.no_grad():
            for t in p.values():
                t -= LR * t.grad
                t.grad = None
        return loss
    return _median_ms(step), float(step().item())


def bench_jax():
    """The same step under ``jax.jit`` (forward, gradient and SGD update in one
    compiled function). XLA's CPU thread pool is not set per call: with
    BENCH_THREADS=1 its Eigen pool is switched off, otherwise it uses the machine."""
    if THREADS == "1":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false"
                                   " intra_op_parallelism_threads=1").strip()
    import jax
    import jax.numpy as jnp
    x0, y0, p0 = _init()
    x, y = jnp.asarray(x0), jnp.asarray(y0)
    p = {k: jnp.asarray(v) for k, v in p0.items()}
    dn = ("NCHW", "OIHW", "NCHW")

    def conv(h, w, b):
        out = jax.lax.conv_general_dilated(h, w, (1, 1), "VALID", dimension_numbers=dn)
        return out + b[None, :, None, None]

    def pool(h):
        return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")

    def loss_fn(p):
        h = pool(jax.nn.relu(conv(x, p["w1"], p["b1"])))
        h = pool(jax.nn.relu(conv(h, p["w2"], p["b2"])))
        z = h.reshape(B, 800) @ p["w3"].T + p["b3"]
        logp = jax.nn.log_softmax(z)
        return -jnp.mean(logp[jnp.arange(B), y])

    @jax.jit
    def update(p):
        loss, g = jax.value_and_grad(loss_fn)(p)
        return {k: p[k] - LR * g[k] for k in p}, loss

    state = [p, None]

    def step():
        state[0], state[1] = update(state[0])
        state[1].block_until_ready()
        return state[1]
    return _median_ms(step), float(step())


# ---------------------------------------------------------------- hand-written NumPy
def _np_conv(x, w, b):
    win = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))
    cols = np.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3))  # N C kh kw Ho Wo
    N, C, kh, kw, Ho, Wo = cols.shape
    cols = cols.reshape(N, C * kh * kw, Ho * Wo)
    out = np.matmul(w.reshape(w.shape[0], -1), cols) + b[:, None]
    return out.reshape(N, -1, Ho, Wo), cols


def _np_conv_back(g, cols, w, x_shape):
    N, Cout, Ho, Wo = g.shape
    g2 = g.reshape(N, Cout, -1)
    gw = np.einsum("nol,nkl->ok", g2, cols, optimize=True).reshape(w.shape)
    gcols = np.matmul(w.reshape(Cout, -1).T, g2).reshape(N, x_shape[1], *w.shape[2:], Ho, Wo)
    gx = np.zeros(x_shape, g.dtype)
    for i in range(w.shape[2]):
        for j in range(w.shape[3]):
            gx[:, :, i:i + Ho, j:j + Wo] += gcols[:, :, i, j]
    return gx, gw, g.sum((0, 2, 3))


def _np_pool(x):
    N, C, H, W = x.shape
    v = x[:, :, :H // 2 * 2, :W // 2 * 2].reshape(N, C, H // 2, 2, W // 2, 2)
    out = v.max(axis=(3, 5))
    return out, v == out[:, :, :, None, :, None]


def _np_pool_back(g, mask, shape):
    gx = np.zeros(shape, g.dtype)
    N, C, Ho, _, Wo, _ = mask.shape
    gx[:, :, :Ho * 2, :Wo * 2] = (mask * g[:, :, :, None, :, None]).reshape(N, C, Ho * 2, Wo * 2)
    return gx


def bench_numpy():
    x, y, p = _init()

    def step():
        a1, c1 = _np_conv(x, p["w1"], p["b1"])
        r1 = np.maximum(a1, 0)
        h1, m1 = _np_pool(r1)
        a2, c2 = _np_conv(h1, p["w2"], p["b2"])
        r2 = np.maximum(a2, 0)
        h2, m2 = _np_pool(r2)
        f = h2.reshape(B, 800)
        z = f @ p["w3"].T + p["b3"]
        z = z - z.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        loss = -logp[np.arange(B), y].mean()
        gz = np.exp(logp)
        gz[np.arange(B), y] -= 1
        gz /= B
        grads = {"w3": gz.T @ f, "b3": gz.sum(0)}
        gh2 = (gz @ p["w3"]).reshape(h2.shape)
        ga2 = _np_pool_back(gh2, m2, r2.shape) * (a2 > 0)
        gh1, grads["w2"], grads["b2"] = _np_conv_back(ga2, c2, p["w2"], h1.shape)
        ga1 = _np_pool_back(gh1, m1, r1.shape) * (a1 > 0)
        _, grads["w1"], grads["b1"] = _np_conv_back(ga1, c1, p["w1"], x.shape)
        for k, v in grads.items():
            p[k] -= LR * v.astype(np.float32)
        return loss
    return _median_ms(step), float(step())


def workspace_report():
    """Bytes conv2d declares vs the scratch its kernel writes, per layer."""
    import tapegrad as tg
    from tapegrad.ops_registry import TensorSpec
    op = tg.ops_registry.get("conv2d")
    rows = []
    for xs, ws in (((B, 1, 28, 28), (16, 1, 3, 3)), ((B, 16, 13, 13), (32, 16, 3, 3))):
        attrs = dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
        declared = op.workspace(TensorSpec(xs, np.float32), TensorSpec(ws, np.float32), None,
                                **attrs)
        buf = np.full(declared + 256, 0xAB, np.uint8)  # sentinel: count bytes overwritten
        x = np.random.default_rng(1).standard_normal(xs).astype(np.float32)
        w = np.ones(ws, np.float32)
        out = np.empty((xs[0], ws[0], xs[2] - 2, xs[3] - 2), np.float32)
        op.compute(x, w, None, out=out, workspace=buf[:declared], **attrs)
        touched = int(np.nonzero(buf != 0xAB)[0].max()) + 1
        rows.append((f"{xs} * {ws}", declared, touched))
    return rows


_CONTENDERS = {"tapegrad": "bench_tapegrad", "pytorch": "bench_torch", "jax.jit": "bench_jax",
               "numpy im2col": "bench_numpy"}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one"]:  # a child process: one contender, one JSON line
        from _isolate import report
        ms, loss = globals()[_CONTENDERS[argv[1]]]()
        report({"ms": ms, "loss": loss})
        return
    from _isolate import run_each
    # contenders take turns, 3 fresh processes each, best kept: this VM's speed
    # drifts by 2x over minutes, and a single process can land on a slow phase
    res = run_each(os.path.abspath(__file__), list(_CONTENDERS), repeats=REPEATS, key="ms")
    base = res["pytorch"]["ms"]
    print(f"CNN training step, batch {B} of 1x28x28 float32, {THREADS} threads, each "
          f"contender in its own process (median ms, best of {REPEATS} processes)")
    print(f"{'':14s} {'ms/step':>9s} {'vs torch':>9s} {'loss':>9s}")
    for name, r in res.items():
        if r is not None:
            print(f"{name:14s} {r['ms']:9.3f} {r['ms'] / base:8.2f}x {r['loss']:9.4f}")
    print("\nconv2d scratch: declared vs written")
    for name, declared, touched in workspace_report():
        print(f"  {name:36s} declared {declared:9d} B, written {touched:9d} B")


if __name__ == "__main__":
    main()
