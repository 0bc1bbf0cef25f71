"""What does sharing ops across frameworks cost? The speed targets, in one run:

1. a ``from_torch`` op inside a tapegrad training step (an MLP 784-256-10 whose
   activation is ``from_torch(torch.tanh)``), against the same step with ``tg.tanh``
   (first: PyTorch's thread pool, once awake, slows what runs after it);
2. an exported op (``torch_ops().mul``) called from PyTorch on (8,) float32, forward,
   and forward + backward, against PyTorch's own ``torch.mul`` (target: at most 3x);
3. the exported ``conv2d`` on the CNN benchmark's shapes (batch 32: 1x28x28 -> 16,
   3x3; 16x13x13 -> 32, 3x3), forward and forward + backward, against tapegrad's own
   ``conv2d`` on the same data (target: within 1.1x).

Contenders are timed interleaved (one call of each in turn, in a shuffled order each
round, many rounds: a burst of load on the shared machine hits all), medians; BLAS, OpenMP, Numba
and PyTorch on one thread (BENCH_THREADS=n to change). The load average is printed with the figures.

    python benchmarks/bench_interop.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THREADS = os.environ.get("BENCH_THREADS", "1")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = THREADS

import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tapegrad as tg  # noqa: E402
from tapegrad.interop import from_torch, torch_ops  # noqa: E402

torch.set_num_threads(int(THREADS))


CLOCK = os.environ.get("BENCH_CLOCK", "wall")


def interleaved_us(fns, reps=300, warm=30):
    """Medians (us) of ``fns``, timed one call of each in turn for ``reps`` rounds, in
    a freshly shuffled order each round (seeded): a call finds the caches as the call
    before it left them (a conv step here touches ~2 MB, the L2 is 1 MB), so in a
    fixed order of three the one after a contender that reads other memory pays for
    refilling them every time, and the one after a contender that shares its inputs
    never does. BENCH_CLOCK=cpu times this thread's CPU time instead of the wall
    clock (on one thread everything runs here: time the machine gave to other
    processes drops out, a fairer ratio on a loaded machine)."""
    for _ in range(warm):
        for fn in fns:
            fn()
    ts = [[] for _ in fns]
    clock = time.thread_time if CLOCK == "cpu" else time.perf_counter
    order = list(range(len(fns)))
    rng = random.Random(0)
    for _ in range(reps):
        rng.shuffle(order)
        for i in order:
            fn = fns[i]
            t0 = clock()
            fn()
            ts[i].append(clock() - t0)
    return [statistics.median(t) * 1e6 for t in ts]


def row(what, ours, theirs, target=None):
    r = ours / theirs
    t = "" if target is None else f"  (target <= {target}x: {'met' if r <= target else 'NOT met'})"
    print(f"{what:<46} {ours:10.1f} us  vs {theirs:10.1f} us  ratio {r:5.2f}{t}")


def small_op(ns):
    print("2. exported mul on (8,) float32, called from PyTorch, vs torch.mul")
    x = torch.rand(8, requires_grad=True)
    y = torch.rand(8, requires_grad=True)
    g = torch.ones(8)
    with torch.no_grad():
        row("forward (no grad)", *interleaved_us([lambda: ns.mul(x, y),
                                                  lambda: torch.mul(x, y)], 3000, 300), 3)
    row("forward + backward (autograd.grad)", *interleaved_us(
        [lambda: torch.autograd.grad(ns.mul(x, y), (x, y), g),
         lambda: torch.autograd.grad(torch.mul(x, y), (x, y), g)], 2000, 200), 3)


class _Floor(torch.autograd.Function):
    """What any PyTorch autograd.Function around tapegrad's conv kernels costs: the
    three registry kernels on ``Tensor.numpy()`` views with a kept workspace whose
    size is worked out once per shape, nothing else (no checks, no registry adjoint,
    no per-call shape rule). Its gap to tapegrad's own step is PyTorch's autograd
    machinery (``Function.apply``, the engine), which the export pays too."""
    A = dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
    ws = [np.empty(0, np.uint8)]  # one kept scratch buffer, as tapegrad and the export
    sizes = {}  # (op name, input shapes) -> (op, workspace bytes)

    @staticmethod
    def run(name, *arrays, **attrs):
        key = (name,) + tuple(None if a is None else a.shape for a in arrays)
        hit = _Floor.sizes.get(key)
        if hit is None:
            op = tg.ops_registry.get(name)
            specs = [None if a is None else tg.ops_registry.TensorSpec(a.shape, a.dtype)
                     for a in arrays]
            hit = _Floor.sizes[key] = (op, op.workspace_bytes(*specs, **attrs))
        op, n = hit
        if _Floor.ws[0].nbytes < n:
            _Floor.ws[0] = np.empty(n, np.uint8)
        return torch.from_numpy(op.kernel(*arrays, workspace=_Floor.ws[0][:n], **attrs))

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return _Floor.run("conv2d", x.numpy(), w.numpy(), None, **_Floor.A)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gn, A = g.numpy(), _Floor.A
        return (_Floor.run("conv2d_input_grad", gn, w.numpy(), input_shape=tuple(x.shape), **A),
                _Floor.run("conv2d_weight_grad", x.numpy(), gn, weight_shape=tuple(w.shape),
                           **A))


def conv(ns):
    print("3. exported conv2d (torch tensors) vs tapegrad's conv2d, CNN benchmark shapes")
    rng = np.random.default_rng(0)
    for shape, wshape in (((32, 1, 28, 28), (16, 1, 3, 3)), ((32, 16, 13, 13), (32, 16, 3, 3))):
        x = rng.standard_normal(shape).astype(np.float32)
        w = rng.standard_normal(wshape).astype(np.float32)
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        gx, gw = tg.tensor(x), tg.tensor(w)
        reps = 400  # (150 rounds gave run-to-run spreads of +-4% on the small conv)

        def export_fwd():
            with torch.no_grad():
                ns.conv2d(tx, tw, None)
        row(f"forward {shape}", *interleaved_us(
            [export_fwd, lambda: tg.nn.functional.conv2d(gx, gw)], reps, 10), 1.1)
        txg, twg = tx.clone().requires_grad_(), tw.clone().requires_grad_()
        gxg, gwg = tg.tensor(x, requires_grad=True), tg.tensor(w, requires_grad=True)
        gy = np.ones((shape[0], wshape[0], shape[2] - 2, shape[3] - 2), np.float32)
        tgy, ggy = torch.from_numpy(gy), tg.tensor(gy)
        ours, mine, floor = interleaved_us(
            [lambda: torch.autograd.grad(ns.conv2d(txg, twg, None), (txg, twg), tgy),
             lambda: tg.grad(tg.nn.functional.conv2d(gxg, gwg), [gxg, gwg], ggy),
             lambda: torch.autograd.grad(_Floor.apply(txg, twg), (txg, twg), tgy)], reps, 10)
        row(f"forward + backward {shape}", ours, mine, 1.1)
        row("  floor: a bare autograd.Function, same kernels", floor, mine)


def training_step():
    print("1. a from_torch op (torch.tanh) inside a tapegrad MLP training step")
    act = from_torch(lambda x: torch.tanh(x), name="bench_torch_tanh")
    rng = np.random.default_rng(1)
    X = tg.tensor(rng.standard_normal((64, 784)).astype(np.float32))
    Y = tg.tensor(rng.integers(0, 10, 64))
    l1, l2 = tg.nn.Linear(784, 256), tg.nn.Linear(256, 10)
    params = list(l1.parameters()) + list(l2.parameters())
    opt = tg.optim.SGD(params, lr=0.01)

    def step(f):
        opt.zero_grad()
        loss = tg.nn.functional.cross_entropy(l2(f(l1(X))), Y)
        loss.backward()
        opt.step()

    # PyTorch's intra-op pool beside tapegrad's threads on 2 vCPUs: its waking threads
    # make a (64, 256) torch.tanh take milliseconds (and slow tapegrad's kernels after
    # it); on one PyTorch thread it takes tens of microseconds. Both steps measured so.
    torch.set_num_threads(1)
    ours, mine = interleaved_us([lambda: step(act), lambda: step(tg.tanh)], 200, 20)
    row("step, from_torch(torch.tanh) vs tg.tanh [torch 1 thr]", ours, mine)
    print(f"{'':<46} cost of the foreign op: {ours - mine:.1f} us per step")
    torch.set_num_threads(int(THREADS))
    tg.ops_registry.unregister("bench_torch_tanh")


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {THREADS} thread(s), {CLOCK} clock, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    ns = torch_ops()
    training_step()  # first: PyTorch's thread pool, once awake, slows what follows
    small_op(ns)
    conv(ns)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
