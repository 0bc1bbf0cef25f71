"""Does ``tg.compile`` pay? Captured-and-replayed steps against eager tapegrad, PyTorch
eager, ``jax.jit``, ``torch.compile`` and hand-written NumPy, in one run, contenders
taking turns (round-robin rounds, median per contender). Each library's contenders run in
their own process (numpy, tapegrad, PyTorch, JAX), driven through pipes: every round each
process times its contenders in turn while the others wait, with a short pause between
turns so one library's spinning threads (PyTorch's OpenMP, OpenBLAS) are asleep when the
next starts; ``--in-process`` races them all in this one process instead. The targets:

- the 200-op chain on (8,) float32, forward and backward: compiled <= 2x hand-written
  NumPy (about 0.35x PyTorch eager);
- the MLP step (784-512-512-10, batch 128, SGD, ``bench_mlp_step.py``): compiled <=
  1.0x hand-written NumPy;
- the CNN step of ``bench_cnn_step.py``: compiled <= 1.0x PyTorch eager;
- ``model = tg.compile(model)`` with the backward and the update outside ("tapegrad
  compiled model", as ``torch.compile`` is used): the MLP step <= 1.0x hand-written
  NumPy, the CNN step <= 0.85x PyTorch eager, both <= 1.0x ``torch.compile``'s step;
  the guards on Python state checked per replay, in microseconds;
- the charlm Transformer and LSTM training steps (``tapegrad.examples.charlm``, AdamW
  and clipping outside) with ``model = tg.compile(model)``: <= 0.8x eager tapegrad;
- the elementwise chain of ``bench_fusion.py`` written as plain ops (no ``@tg.fuse``):
  compiled within 1.5x of the hand-fused (``@tg.fuse``) time;
- that chain's whole step (loss and gradient) in one ``tg.compile`` at 4M float32,
  the backward recomputing the forward's values (rematerialization): <= 1.2x
  ``@tg.fuse`` and <= 0.6x ``torch.compile``;
- the per-call overhead of a replay (guards, wrapping), in microseconds;
- the capture cost (first call), and what a replay allocates (tracemalloc).

    python benchmarks/bench_compile.py [--rounds 7] [--no-torch-compile] [--no-jax]
                                       [--clock wall|cpu] [--in-process]
                                       [--only chain,mlp,cnn,charlm,ew,remat,overhead,
                                               capture]

Every library at its own default thread count by default (BLAS, OpenMP, Numba, PyTorch
and XLA each use the machine's cores, as a user's program does); BENCH_THREADS=n gives
every contender n threads instead. The counts in use are printed first.
``torch.compile`` (inductor, which needs a C compiler) and ``jax.jit`` compile once
before timing (their first calls are printed, not timed); a JAX step returns its new
parameters (functional), and each call waits for its result (``block_until_ready``).
"""
import argparse
import math
import os
import statistics
import sys
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
THREADS = os.environ.get("BENCH_THREADS")  # None: each library's own default
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS")
if THREADS is not None:
    for _var in _THREAD_VARS:
        os.environ.setdefault(_var, THREADS)
if THREADS == "1":  # XLA's CPU client: one Eigen thread for its kernels
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false"
                               " intra_op_parallelism_threads=1").strip()

import numpy as np  # noqa: E402

import tapegrad as tg  # noqa: E402


def _set_torch_threads(torch):
    if THREADS is not None:
        torch.set_num_threads(int(THREADS))


LIBS = {"numpy", "tapegrad", "torch", "jax"}  # the libraries this process runs


def _lib(contender):
    """The library a contender's name belongs to."""
    if contender.startswith("numpy"):
        return "numpy"
    if contender in ("pytorch eager", "torch.compile"):
        return "torch"
    if contender.startswith("jax"):
        return "jax"
    return "tapegrad"


def _torch():
    """PyTorch, at the benchmark's thread count; None when not installed or when
    this process does not run PyTorch's contenders."""
    if "torch" not in LIBS:
        return None
    try:
        import torch
    except ImportError:
        return None
    _set_torch_threads(torch)
    return torch


def _bench(name):
    """Benchmark module ``name`` (``bench_mlp_step``, ``bench_cnn_step``), imported
    without its thread settings: each sets the thread variables to its own default when
    BENCH_THREADS is unset, which PyTorch, imported later, would read."""
    import importlib
    kept = {v: os.environ.get(v) for v in _THREAD_VARS}
    mod = importlib.import_module(name)
    for v, val in kept.items():
        if val is None:
            os.environ.pop(v, None)
        else:
            os.environ[v] = val
    return mod


def _thread_counts():
    """What each library runs with, as a string (with the kernels OpenBLAS chose: an
    environment's ``OPENBLAS_CORETYPE`` changes them, and GEMM speeds by up to ~1.8x)."""
    out = []
    try:
        from threadpoolctl import threadpool_info
        for p in threadpool_info():
            arch = f" ({p['architecture']} kernels)" if p.get("architecture") else ""
            out.append(f"{p.get('internal_api', p['user_api'])} {p['num_threads']}{arch}")
    except ImportError:
        pass
    try:
        import numba
        out.append(f"numba {numba.get_num_threads()}")
    except ImportError:
        pass
    torch = _torch()
    if torch is not None:
        out.append(f"torch {torch.get_num_threads()}")
    return ", ".join(out)


CLOCK = time.perf_counter  # --clock cpu: time.process_time (this process's CPU seconds,
#                           all its threads: robust to neighbours taking the cores)


def _time(fn, n):
    t0 = CLOCK()
    for _ in range(n):
        fn()
    return (CLOCK() - t0) / n


def _turn(fn, n):
    """Seconds per call of ``fn`` in one contender's turn: untimed calls for WARM_S
    seconds (one at least), then ``n`` timed, so a turn measures steady state as a
    training loop runs it. After the others' turns a process finds caches cold and
    its worker threads asleep; on a KVM guest it also finds the host's halt polling
    shrunk by the idle time, so each hand-off to a sleeping thread first pays a full
    vCPU wake-up: on 2 vCPUs of an AMD EPYC (Zen 5), after 50 ms idle, the compiled CNN
    model step took 2.5 ms for its first ~10 calls and 1.6-1.7 ms from then on, while
    PyTorch's, whose OpenMP threads spin between regions, was steady from its second
    call (2.1 ms). ``--cold-turns`` times every call of the turn instead."""
    if not COLD_TURNS:
        t0 = time.perf_counter()
        fn()
        while time.perf_counter() - t0 < WARM_S:
            fn()
    return _time(fn, n)


COLD_TURNS = []  # [True]: time each turn's first call as well
WARM_S = 0.05  # untimed calls at the start of a turn, in seconds


def race(contenders, rounds, inner):
    """{name: median seconds per call}, contenders taking turns each round."""
    for fn in contenders.values():
        fn()
        fn()
    times = {k: [] for k in contenders}
    for _ in range(rounds):
        for k, fn in contenders.items():
            times[k].append(_turn(fn, inner))
    return {k: statistics.median(v) for k, v in times.items()}


def report(title, res, unit="ms", ref=("numpy (hand-written)", "pytorch eager")):
    scale = 1e3 if unit == "ms" else 1e6
    print(f"\n== {title}")
    refs = [r for r in ref if r in res]
    head = f"{'contender':34s} {unit:>9s}" + "".join(f"  {'/ ' + r[:14]:>16s}" for r in refs)
    print(head)
    for k, t in res.items():
        print(f"{k:34s} {t * scale:9.3f}" + "".join(f"  {t / res[r]:16.2f}" for r in refs))


def capture_cost(make_compiled):
    """(first call s, median replay s, bytes one replay leaves allocated)."""
    step = make_compiled()
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    replay = statistics.median(_time(step, 3) for _ in range(5))
    tracemalloc.start()
    step()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(20):
        step()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return first, replay, after - base, step


# ---------------------------------------------------------------- 200-op chain
N_CHAIN = 100  # x (mul, add): 200 ops


def chain_tapegrad(compiled):
    x = tg.tensor(np.linspace(0.1, 0.9, 8).astype(np.float32), requires_grad=True)
    c = tg.tensor(np.full(8, 0.999, np.float32))

    def step(x):
        y = x
        for _ in range(N_CHAIN):
            y = y * c
            y = y + x
        y.sum().backward()
        g = x.grad
        x.grad = None
        return g
    f = tg.compile(step) if compiled else step
    def run():
        return f(x)
    run.compiled = f
    return run


def chain_torch():
    import torch
    x = torch.tensor(np.linspace(0.1, 0.9, 8).astype(np.float32), requires_grad=True)
    c = torch.tensor(np.full(8, 0.999, np.float32))

    def step():
        y = x
        for _ in range(N_CHAIN):
            y = y * c
            y = y + x
        y.sum().backward()
        g = x.grad
        x.grad = None
        return g
    return step


def chain_numpy():
    x = np.linspace(0.1, 0.9, 8).astype(np.float32)
    c = np.full(8, 0.999, np.float32)

    def step():
        y = x
        for _ in range(N_CHAIN):
            y = y * c
            y = y + x
        g = np.ones_like(x)
        gx = np.zeros_like(x)
        for _ in range(N_CHAIN):
            gx = gx + g
            g = g * c
        return gx + g, y
    return step


def _jax():
    try:
        import jax
        jax.config.update("jax_platforms", "cpu")
        return jax
    except Exception as e:  # not installed, or failing to start
        print(f"jax unavailable: {type(e).__name__}: {e}")
        return None


def _jax_first(fn, what):
    """The first call (tracing and XLA compilation), printed; the timed callable."""
    t0 = time.perf_counter()
    fn()
    print(f"jax.jit ({what}): first call (trace + compile) {time.perf_counter() - t0:.2f} s")
    return fn


def chain_jax(jax):
    import jax.numpy as jnp
    x = jnp.asarray(np.linspace(0.1, 0.9, 8).astype(np.float32))
    c = jnp.asarray(np.full(8, 0.999, np.float32))

    def f(x):
        y = x
        for _ in range(N_CHAIN):
            y = y * c
            y = y + x
        return y.sum()
    g = jax.jit(jax.grad(f))
    return _jax_first(lambda: g(x).block_until_ready(), "chain")


def _jax_xent(jnp, z, y):
    m = z.max(axis=1, keepdims=True)
    logp = z - m - jnp.log(jnp.exp(z - m).sum(axis=1, keepdims=True))
    return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()


def mlp_jax(jax, params, x, y):
    M = _bench("bench_mlp_step")
    import jax.numpy as jnp
    ps = [jnp.asarray(a) for a in params]
    xj, yj = jnp.asarray(x), jnp.asarray(y)

    def loss(ps):
        h = xj
        for i in range(0, len(ps), 2):
            h = h @ ps[i].T + ps[i + 1]
            if i + 2 < len(ps):
                h = jnp.maximum(h, 0)
        return _jax_xent(jnp, h, yj)

    @jax.jit
    def step(ps):
        val, gs = jax.value_and_grad(loss)(ps)
        return [p - M.LR * g for p, g in zip(ps, gs)], val
    state = [ps]

    def run():
        state[0], val = step(state[0])
        return val.block_until_ready()
    return _jax_first(run, "MLP")


def cnn_jax(jax):
    C = _bench("bench_cnn_step")
    import jax.numpy as jnp
    x0, y0, p0 = C._init()
    B, LR = C.B, C.LR
    xj, yj = jnp.asarray(x0), jnp.asarray(y0)
    dn = ("NCHW", "OIHW", "NCHW")

    def conv(h, w, b):
        return jax.lax.conv_general_dilated(h, w, (1, 1), "VALID",
                                            dimension_numbers=dn) + b[None, :, None, None]

    def pool(h):
        return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")

    def loss(p):
        h = pool(jnp.maximum(conv(xj, p["w1"], p["b1"]), 0))
        h = pool(jnp.maximum(conv(h, p["w2"], p["b2"]), 0))
        return _jax_xent(jnp, h.reshape(B, 800) @ p["w3"].T + p["b3"], yj)

    @jax.jit
    def step(p):
        val, gs = jax.value_and_grad(loss)(p)
        return {k: p[k] - LR * gs[k] for k in p}, val
    state = [{k: jnp.asarray(v) for k, v in p0.items()}]

    def run():
        state[0], val = step(state[0])
        return val.block_until_ready()
    return _jax_first(run, "CNN")


def ew_jax(jax, x0):
    import jax.numpy as jnp
    xj = jnp.asarray(x0)

    def f(x):
        g = 0.5 * x * (1 + jnp.tanh(K * (x + 0.044715 * x * x * x)))
        return (g * jax.nn.sigmoid(x) + x * x).sum()
    g = jax.jit(jax.grad(f))
    return _jax_first(lambda: g(xj).block_until_ready(), "elementwise chain")


# ---------------------------------------------------------------- MLP step
def mlp_contenders(torch_compile, jax=None):
    M = _bench("bench_mlp_step")
    params, x, y = M._init()
    out = {"numpy (hand-written)": M.make_numpy_step(params, x, y),
           "tapegrad eager": M.make_tapegrad_step(params, x, y)}
    comp = tg.compile(M.make_tapegrad_step(params, x, y))
    out["tapegrad compiled"] = comp
    out["tapegrad compiled model"], cmodel = _tg_compiled_mlp(params, x, y)
    if _torch() is not None:
        out["pytorch eager"] = M.make_torch_step(params, x, y)
        if torch_compile:
            out["torch.compile"] = _torch_compiled_mlp(params, x, y)
    if jax is not None:
        out["jax.jit"] = mlp_jax(jax, params, x, y)
    return out, comp, cmodel


def _tg_compiled_mlp(params, x, y):
    """``model = tg.compile(model)``, the backward and SGD outside (the PyTorch pattern)."""
    nn, F = tg.nn, tg.nn.functional
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    with tg.no_grad():
        for p, a in zip(model.parameters(), params):
            p.copy_(tg.tensor(a))
    cmodel = tg.compile(model)
    opt = tg.optim.SGD(model.parameters(), lr=0.01)
    xt, yt = tg.tensor(x), tg.tensor(y)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(cmodel(xt), yt)
        loss.backward()
        opt.step()
        return loss
    return step, cmodel


def _guard_cost(cmodel):
    """Microseconds of one replay's check of the guards on Python state, and how many."""
    entries = [e for progs in cmodel._joint._programs.values() for e in progs
               if not isinstance(e[0], str)]
    if not entries:
        return float("nan"), 0
    prog, _, check = entries[0]
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        check()
    return (time.perf_counter() - t0) / n * 1e6, len(prog.py_guards)


def _torch_compiled_mlp(params, x, y):
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    with torch.no_grad():
        for p, a in zip(model.parameters(), params):
            p.copy_(torch.from_numpy(a))
    cmodel = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(cmodel(xt), yt)
        loss.backward()
        opt.step()
        return loss
    return _compile_first(step, "MLP")


def _compile_first(step, what):
    t0 = time.perf_counter()
    try:
        step()
    except Exception as e:  # no C compiler, or inductor failing on this machine
        print(f"torch.compile ({what}) failed: {type(e).__name__}: {str(e)[:200]}")
        return None
    print(f"torch.compile ({what}): first call (compile) {time.perf_counter() - t0:.1f} s")
    return step


# ---------------------------------------------------------------- CNN step
def cnn_contenders(torch_compile, jax=None):
    C = _bench("bench_cnn_step")
    x0, y0, p0 = C._init()
    B, LR = C.B, C.LR

    def tg_step():
        x, y = tg.tensor(x0), tg.tensor(y0)
        p = {k: tg.tensor(v, requires_grad=True) for k, v in p0.items()}

        def step(x, y):
            h = tg.max_pool2d(tg.relu(tg.conv2d(x, p["w1"], p["b1"])), 2)
            h = tg.max_pool2d(tg.relu(tg.conv2d(h, p["w2"], p["b2"])), 2)
            loss = tg.cross_entropy(tg.linear(tg.reshape(h, (B, 800)), p["w3"], p["b3"]), y)
            loss.backward()
            with tg.no_grad():
                for t in p.values():
                    t -= LR * t.grad
                    t.grad = None
            return loss
        return step, x, y

    e, ex, ey = tg_step()
    c, cx, cy = tg_step()
    comp = tg.compile(c)
    out = {"tapegrad eager": lambda: e(ex, ey), "tapegrad compiled": lambda: comp(cx, cy)}

    class Net(tg.nn.Module):
        def __init__(self):
            super().__init__()
            for k, v in p0.items():
                setattr(self, k, tg.nn.Parameter(tg.tensor(v)))

        def forward(self, x):
            h = tg.max_pool2d(tg.relu(tg.conv2d(x, self.w1, self.b1)), 2)
            h = tg.max_pool2d(tg.relu(tg.conv2d(h, self.w2, self.b2)), 2)
            return tg.linear(tg.reshape(h, (B, 800)), self.w3, self.b3)
    net = Net()
    cnet = tg.compile(net)
    nx, ny = tg.tensor(x0), tg.tensor(y0)

    def module_step():
        loss = tg.cross_entropy(cnet(nx), ny)
        loss.backward()
        with tg.no_grad():
            for t in net.parameters():
                t -= LR * t.grad
                t.grad = None
        return loss
    out["tapegrad compiled model"] = module_step

    def module_parts(n=60):
        """Median ms of each part of ``module_step``, timed apart: where the compiled
        model's step spends what the whole step compiled does not."""
        ts = {"forward (compiled call, node)": [], "cross_entropy": [],
              "backward (adjoint replay, .grad)": [], "update": []}
        clock = time.perf_counter
        for _ in range(n):
            t0 = clock()
            z = cnet(nx)
            t1 = clock()
            loss = tg.cross_entropy(z, ny)
            t2 = clock()
            loss.backward()
            t3 = clock()
            with tg.no_grad():
                for t in net.parameters():
                    t -= LR * t.grad
                    t.grad = None
            t4 = clock()
            for k, a, b in zip(ts, (t0, t1, t2, t3), (t1, t2, t3, t4)):
                ts[k].append(b - a)
        return {k: statistics.median(v) * 1e3 for k, v in ts.items()}
    module_step.parts = module_parts
    torch = _torch()
    if torch is not None:
        import torch.nn.functional as TF
        x, y = torch.from_numpy(x0), torch.from_numpy(y0)

        def torch_step(fwd):
            p = {k: torch.tensor(v, requires_grad=True) for k, v in p0.items()}

            def step():
                loss = fwd(x, y, p)
                loss.backward()
                with torch.no_grad():
                    for t in p.values():
                        t -= LR * t.grad
                        t.grad = None
                return loss
            return step

        def fwd(x, y, p):
            h = TF.max_pool2d(TF.relu(TF.conv2d(x, p["w1"], p["b1"])), 2)
            h = TF.max_pool2d(TF.relu(TF.conv2d(h, p["w2"], p["b2"])), 2)
            return TF.cross_entropy(TF.linear(h.reshape(B, 800), p["w3"], p["b3"]), y)
        out["pytorch eager"] = torch_step(fwd)
        if torch_compile:
            cs = _compile_first(torch_step(torch.compile(fwd)), "CNN")
            if cs is not None:
                out["torch.compile"] = cs
    if jax is not None:
        out["jax.jit"] = cnn_jax(jax)
    return out, comp, cnet


# ---------------------------------------------------------------- charlm training steps
def charlm_contenders(kind, torch_compile=False):
    """The training step of ``tapegrad.examples.charlm`` (its default model sizes, AdamW
    and gradient clipping outside the model), eager against ``model = tg.compile(model)``,
    each on its own copy of the model, the same batch; and the same step in PyTorch,
    eager and ``torch.compile(model)`` (``_torch_charlm``). The LSTM also races the compiled
    model whose backward is the general program (the zeros of the unused ``h_n``,
    ``c_n`` carried through it: ``compiler/zero_cotangents.py`` off), the compiled
    model without the embedding-projection rewrite (``compiler/embedding_projection.py``:
    the embedding and the LSTM's input projection as a gather from the projected table),
    the rewrite's share of the speed-up, and the step's ``lstm_layer`` op alone (its
    forward and backward kernels on the step's shapes, the same in eager and compiled
    steps): the part of the step no rewrite of the program around it changes; and that
    op run as one loop over all rows with BLAS on its threads instead of its default, a
    loop per thread over its block of batch rows."""
    from tapegrad.compiler import embedding_projection as EP, zero_cotangents as ZC
    from tapegrad.examples import charlm as CL
    data = CL.CharData(CL.load_text())
    d = CL.DEFAULTS[kind]
    xb, yb = data.batch(np.random.default_rng(0), d["batch_size"], d["seq_len"])
    torch = _torch()
    out = {} if torch is None else _torch_charlm(torch, kind, data.vocab, d["seq_len"], xb, yb,
                                                 torch_compile)
    if "tapegrad" not in LIBS:
        return out, None
    cmodel = None
    names = ["tapegrad eager", "tapegrad compiled model"]
    if kind == "lstm":
        names += [NO_PROJECTION, GENERAL_BACKWARD]
    for name in names:
        tg.manual_seed(0)
        model = CL.make_model(kind, data.vocab, d["seq_len"], 0.0)
        run = model
        if name == NO_PROJECTION:  # (the rewrite is off while this one captures)
            run = _captured_without_projection(tg.compile(model), EP)
        elif name != "tapegrad eager":
            run = tg.compile(model)
            if name == "tapegrad compiled model":
                cmodel = run
        opt = tg.optim.AdamW(model.parameters(), lr=1e-4)

        def step(run=run, model=model, opt=opt, general=name == GENERAL_BACKWARD):
            loss = CL.loss_of(run, xb, yb)
            opt.zero_grad()
            ZC.ENABLED = not general
            try:
                loss.backward()
            finally:
                ZC.ENABLED = True
            tg.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return loss
        out[name] = step
    if kind == "lstm":
        out[LSTM_ALONE] = _lstm_layer_alone(d["batch_size"], d["seq_len"])
        out[LSTM_ONE_LOOP] = _lstm_layer_alone(d["batch_size"], d["seq_len"], one_loop=True)
    return out, cmodel


def _torch_charlm(torch, kind, vocab, context, xb, yb, torch_compile):
    """charlm's model (``charlm_vs_torch.build``: the same modules and sizes as
    ``charlm.make_model``) and training step in PyTorch, eager and with
    ``model = torch.compile(model)``."""
    build = _bench("charlm_vs_torch").build

    def contender(compiled):
        torch.manual_seed(0)
        model = build(torch, kind, vocab, context)
        run = torch.compile(model) if compiled else model
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            logits = run(torch.tensor(xb))
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                                     torch.tensor(yb.reshape(-1)))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return loss
        return step
    out = {"pytorch eager": contender(False)}
    if torch_compile:
        cs = _compile_first(contender(True), f"charlm {kind}")
        if cs is not None:
            out["torch.compile"] = cs
    return out


LSTM_ALONE = "tapegrad lstm_layer op alone"
LSTM_ONE_LOOP = "tapegrad lstm_layer op, one loop"


def _lstm_layer_alone(B, T, H=256, one_loop=False):
    """The charlm LSTM's recurrence, forward and backward (the gradients of the input
    gates and W_hh, as the step's), on raw float32 arrays. ``one_loop=True``: one loop
    over all batch rows with BLAS on its threads instead of a loop per thread over its
    block of rows (``ops/nn/rnn.py``'s ``_seq_parts``, the default at these shapes)."""
    from tapegrad.ops.nn import rnn as R
    from tapegrad.ops_registry import get
    op = get("lstm_layer")
    rng = np.random.default_rng(0)
    xg = rng.standard_normal((T, B, 4 * H)).astype(np.float32)
    w = (rng.standard_normal((4 * H, H)) * 0.1).astype(np.float32)
    h0 = np.zeros((B, H), np.float32)
    gy = rng.standard_normal((T, B, H)).astype(np.float32)

    class Ctx:
        inputs, attrs, needs_input_grad = (xg, h0, h0, w), {}, (True, False, False, True)

    def run():
        Ctx.out = op.kernel(xg, h0, h0, w)
        return op.vjp(Ctx, (gy, np.zeros_like(gy), None))

    def in_one_loop():
        keep, R.SEQ_PART_MIN = R.SEQ_PART_MIN, float("inf")
        try:
            return run()
        finally:
            R.SEQ_PART_MIN = keep
    return in_one_loop if one_loop else run


NO_PROJECTION = "tapegrad compiled (no emb proj)"
# the compiled model whose backward runs the general program (zeros for h_n, c_n) instead
# of compiler/zero_cotangents.py's
GENERAL_BACKWARD = "tapegrad compiled (general bwd)"


def _captured_without_projection(cm, EP):
    """``cm`` whose calls capture with ``EP.ENABLED`` off (its programs keep the
    embedding and the input projection as they are)."""
    def run(*args, **kwargs):
        if cm.stats()["captures"]:
            return cm(*args, **kwargs)
        EP.ENABLED = False
        try:
            return cm(*args, **kwargs)
        finally:
            EP.ENABLED = True
    return run


# ---------------------------------------------------------------- elementwise chain
K = math.sqrt(2.0 / math.pi)


def ew_contenders(n, jax=None):
    x0 = np.random.default_rng(0).standard_normal(n).astype(np.float32)

    @tg.fuse
    def fused_chain(x):
        return tg.sum(tg.gelu(x, approximate="tanh") * tg.sigmoid(x) + x * x)

    def plain(x):
        g = 0.5 * x * (1 + tg.tanh(K * (x + 0.044715 * x * x * x)))
        tg.sum(g * tg.sigmoid(x) + x * x).backward()
        gx = x.grad
        x.grad = None
        return gx

    def hand():
        x = tg.from_numpy(x0).requires_grad_()
        fused_chain(x).backward()
        return x.grad

    xc = tg.from_numpy(x0.copy()).requires_grad_()
    comp = tg.compile(plain)
    xe = tg.from_numpy(x0.copy()).requires_grad_()
    out = {"@tg.fuse (hand-fused)": hand, "plain ops eager": lambda: plain(xe),
           "plain ops compiled": lambda: comp(xc)}
    if jax is not None:
        out["jax.jit"] = ew_jax(jax, x0)
    return out, comp


# ---------------------------------------------------------------- rematerialization
def remat_contenders(n, torch_compile):
    """The chain of ``bench_fusion.py`` as plain ops, the whole step (the loss and its
    gradient) in one ``tg.compile``: the backward kernel recomputes the forward's
    elementwise values from ``x`` (``compiler/remat.py``) instead of storing them; the
    same program with every value stored (rematerialization off) beside it."""
    from tapegrad.compiler import remat
    x0 = np.random.default_rng(0).standard_normal(n).astype(np.float32)

    @tg.fuse
    def fused_chain(x):
        return tg.sum(tg.gelu(x, approximate="tanh") * tg.sigmoid(x) + x * x)

    def plain(x):
        g = 0.5 * x * (1 + tg.tanh(K * (x + 0.044715 * x * x * x)))
        loss = tg.sum(g * tg.sigmoid(x) + x * x)
        loss.backward()
        gx = x.grad
        x.grad = None
        return loss, gx

    def hand():
        x = tg.from_numpy(x0).requires_grad_()
        loss = fused_chain(x)
        loss.backward()
        return loss, x.grad

    def compiled(enabled):
        x = tg.from_numpy(x0.copy()).requires_grad_()
        comp = tg.compile(plain)
        remat.ENABLED = enabled
        try:
            comp(x)  # the capture builds the program
        finally:
            remat.ENABLED = True
        return (lambda: comp(x)), comp

    run = comp = run_stored = stored = None
    if "tapegrad" in LIBS:  # the captures run here: not in another library's process
        run, comp = compiled(True)
        run_stored, stored = compiled(False)
    out = {"@tg.fuse (hand-fused)": hand, "plain ops compiled (recomputed)": run,
           "plain ops compiled (all stored)": run_stored}
    torch = _torch()
    if torch is None:
        return out, comp, stored

    def loss_t(x):
        g = 0.5 * x * (1 + torch.tanh(K * (x + 0.044715 * x * x * x)))
        return (g * torch.sigmoid(x) + x * x).sum()

    def torch_step(f):
        def step():
            x = torch.from_numpy(x0).requires_grad_()
            loss = f(x)
            loss.backward()
            return loss, x.grad
        return step
    out["pytorch eager"] = torch_step(loss_t)
    if torch_compile:
        cs = _compile_first(torch_step(torch.compile(loss_t)), "elementwise chain")
        if cs is not None:
            out["torch.compile"] = cs
    return out, comp, stored


def call_overhead(comp, *args):
    """Microseconds a compiled call spends outside its program's replay function: the
    guards (signature, Python state, references, owners, paths, entry) and wrapping
    the results (the call's time minus the replay function's, called directly)."""
    from tapegrad.compiler.api import _arrays
    comp(*args)
    prog = comp._last
    arrays = _arrays(args, {})
    rounds = []
    for _ in range(7):
        t_call = _time(lambda: comp(*args), 200)
        t_run = _time(lambda: prog.run(arrays, args, {}), 200)
        rounds.append(t_call - t_run)
    return statistics.median(rounds) * 1e6


def guard_checks(comp, *args):
    """Microseconds of the latest program's guard checks, timed alone: Python state,
    requires_grad, references (bindings and modules' parameters), owners, paths,
    entry (``.grad`` and buffers)."""
    from tapegrad.compiler import api
    comp(*args)
    for progs in comp._programs.values():
        for prog, leaves, pyg in progs:
            if prog is comp._last:
                owners = prog.graph.owners

                def check():  # (what Compiled.__call__ checks before a replay)
                    return (pyg(), api._rg_ok(owners), prog.refs.ok(),
                            api._owners_ok(owners), api._paths_ok(prog.paths),
                            prog.entry_ok(lambda t: api._leaf(t, leaves, args, {}))
                            if leaves else api._entry_ok(prog))
                return statistics.median(_time(check, 2000) for _ in range(5)) * 1e6
    return float("nan")


def _section(name, args, jax):
    """Section ``name``'s contenders of the libraries in LIBS: (contenders, timed calls
    per round, rounds, a callable printing the lines that follow the table)."""
    tc = not args.no_torch_compile and "torch" in LIBS
    after = None
    if name == "chain":
        cont = {"numpy (hand-written)": chain_numpy(), "tapegrad eager": chain_tapegrad(False)}
        comp = chain_tapegrad(True)
        cont["tapegrad compiled"] = comp
        if _torch() is not None:
            cont["pytorch eager"] = chain_torch()
        if jax is not None:
            cont["jax.jit"] = chain_jax(jax)
        inner, rounds = 50, args.rounds

        def after():
            print("   compiled:", _brief(comp.compiled.stats()))
    elif name in ("mlp", "cnn"):
        make = mlp_contenders if name == "mlp" else cnn_contenders
        cont, comp, cmodel = make(tc, jax)
        inner, rounds = 5, args.rounds

        def after():
            print("   compiled:", _brief(comp.stats()))
            us, n = _guard_cost(cmodel)
            print(f"   compiled model: {_brief(cmodel.stats())}; guards on Python state "
                  f"checked per replay: {n} in {us:.2f} us")
            parts = getattr(cont.get("tapegrad compiled model"), "parts", None)
            if parts is not None:
                print("   compiled model's step in parts (median ms): " +
                      ", ".join(f"{k} {v:.3f}" for k, v in parts().items()))
    elif name.startswith("charlm-"):
        cont, cmodel = charlm_contenders(name[len("charlm-"):], tc)
        first = None
        if cmodel is not None:
            t0 = time.perf_counter()
            cont["tapegrad compiled model"]()
            first = time.perf_counter() - t0
        inner, rounds = 2, args.rounds  # (the steps' times vary by 10-20% on a shared VM)

        def after():
            s = cmodel.stats()
            print(f"   compiled model: first call {first:.2f} s (capture, partition, "
                  f"codegen); forward kernels {s['kernels']}, backward kernels "
                  f"{s['backward_kernels']}, saved values {s['saved_values']}, "
                  f"eager_calls={s['eager_calls']}, eager_reason={s['eager_reason']}")
    elif name == "ew":
        cont, comp = ew_contenders(args.n, jax)
        inner, rounds = 3, args.rounds

        def after():
            print("   compiled:", _brief(comp.stats()))
    else:  # remat
        cont, comp, stored = remat_contenders(args.remat_n, tc)
        inner, rounds = 3, args.rounds

        def after():
            for what, c in (("recomputed", comp), ("all stored", stored)):
                s = c.stats()
                print(f"   compiled ({what}): arena {s['arena_bytes']} bytes, peak_bytes "
                      f"{s['peak_bytes']}, kernels {s['kernels']}")
    cont = {k: v for k, v in cont.items() if v is not None and _lib(k) in LIBS}
    if "tapegrad" not in LIBS:
        after = None
    return cont, inner, rounds, after


def _tables(args):
    """Each race table: (section, libraries it races, title, unit, reference columns)."""
    all4 = ("numpy", "tapegrad", "torch", "jax")
    out = [("chain", all4, "200-op chain on (8,) float32, forward and backward (target: "
            "compiled <= 2x numpy, ~0.35x pytorch)", "us", ("numpy (hand-written)",
                                                           "pytorch eager")),
           ("mlp", all4, "MLP step 784-512-512-10, batch 128, SGD (target: compiled <= 1.0x "
            "numpy; compiled model, backward and SGD outside: <= 1.0x numpy and "
            "torch.compile)", "ms", ("numpy (hand-written)", "pytorch eager")),
           ("cnn", all4[1:], "CNN step of bench_cnn_step.py (target: compiled <= 1.0x "
            "pytorch eager; compiled model <= 0.85x pytorch eager and <= 1.0x "
            "torch.compile)", "ms", ("pytorch eager", "tapegrad eager"))]
    out += [(f"charlm-{kind}", ("tapegrad", "torch"), f"charlm {kind} training step (AdamW "
             f"and clipping outside; target: compiled model <= 0.8x eager)", "ms",
             ("tapegrad eager", "pytorch eager")) for kind in ("transformer", "lstm")]
    out += [("ew", ("tapegrad", "jax"), f"elementwise chain of bench_fusion.py, {args.n} "
             f"float32 (target: compiled <= 1.5x hand-fused)", "ms",
             ("@tg.fuse (hand-fused)",)),
            ("remat", ("tapegrad", "torch"), f"the chain's whole step (loss and gradient), "
             f"plain ops, {args.remat_n} float32 (target: compiled <= 1.2x @tg.fuse and "
             f"<= 0.6x torch.compile)", "ms", ("@tg.fuse (hand-fused)", "torch.compile"))]
    return out


def _worker(spec, args):
    """A child process: section ``spec`` = SECTION:LIB's contenders, a round timed
    each time the parent asks (``_isolate.serve``)."""
    from _isolate import serve
    section, lib = spec.split(":")
    LIBS.clear()
    LIBS.add(lib)
    state = {}

    def handle(cmd):
        if cmd == "build":
            jax = _jax() if lib == "jax" else None
            cont, inner, rounds, after = _section(section, args, jax)
            for fn in cont.values():  # warm-up, as race() does
                fn()
                fn()
            state.update(cont=cont, inner=inner, after=after)
            return {"names": list(cont), "rounds": rounds, "threads": _thread_counts()}
        if cmd == "round":
            return {k: _turn(fn, state["inner"]) for k, fn in state["cont"].items()}
        if cmd == "after" and state["after"] is not None:
            state["after"]()
        return None
    serve(handle)


def _race_isolated(section, libs, args, threads_seen, show):
    """One process per library, the rounds interleaved (each process times its
    contenders once per round, in turn, while the others wait); ``show`` gets
    {name: median seconds}, then the tapegrad process prints the lines that follow."""
    from _isolate import Workers
    extra = ["--rounds", str(args.rounds), "--clock", args.clock, "--n", str(args.n),
             "--remat-n", str(args.remat_n)]
    extra += ["--no-torch-compile"] * args.no_torch_compile + ["--no-jax"] * args.no_jax
    extra += ["--cold-turns"] * args.cold_turns
    workers = Workers(os.path.abspath(__file__), {
        lib: ["--worker", f"{section}:{lib}", *extra] for lib in libs
        if not (lib == "jax" and args.no_jax)})
    try:
        built = workers.ask_each("build")  # one process at a time
        for lib, r in built.items():
            if lib not in threads_seen:
                threads_seen.add(lib)
                print(f"threads in the {lib} process: {r['threads']}")
        rounds = max([r["rounds"] for r in built.values()], default=0)
        times = {k: [] for r in built.values() for k in r["names"]}
        for _ in range(rounds):
            for r in workers.ask_each("round").values():
                for k, t in r.items():
                    times[k].append(t)
        show({k: statistics.median(v) for k, v in times.items() if v})
        workers.ask_each("after", only=("tapegrad",))
    finally:
        workers.close()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: perf_counter; cpu: process_time (a loaded machine)")
    ap.add_argument("--only", default="chain,mlp,cnn,charlm,ew,remat,overhead,capture")
    ap.add_argument("--n", type=int, default=1_000_000, help="elements of the ew chain")
    ap.add_argument("--remat-n", type=int, default=4_000_000,
                    help="elements of the chain's whole step (remat)")
    ap.add_argument("--in-process", action="store_true",
                    help="every contender in this one process (libraries' threads "
                         "interfere: PyTorch's OpenMP threads spin after each op)")
    ap.add_argument("--cold-turns", action="store_true",
                    help="time each turn's first call too (caches cold, worker threads "
                         "asleep after the other libraries' turns) instead of untimed "
                         "calls for WARM_S before the timed ones")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    COLD_TURNS[:] = [True] if args.cold_turns else []
    only = set(args.only.split(","))
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.worker:
        _worker(args.worker, args)
        return
    jax = None if args.no_jax or not args.in_process else _jax()
    how = (f"BENCH_THREADS={THREADS} for every library" if THREADS is not None
           else "each library's default (BENCH_THREADS unset)")
    if args.in_process:
        run = ("every contender in this one process, taking turns each round; "
               f"{_thread_counts()}")
    else:
        run = ("one process per library (numpy, tapegrad, PyTorch, JAX), each timing its "
               "contenders once per round in turn while the others wait")
    turns = ("each turn's calls all timed, its first one included" if args.cold_turns
             else f"each turn untimed calls for {WARM_S * 1e3:.0f} ms, then the timed ones "
                  "(steady state)")
    print(f"threads: {how}; clock: {args.clock}; rounds: {args.rounds} (median); run: "
          f"{run}; {turns}; load average: "
          f"{', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    blas_env = {v: os.environ[v] for v in sorted(os.environ) if v.startswith("OPENBLAS_")}
    if blas_env:
        print("OpenBLAS settings from the environment: " +
              ", ".join(f"{k}={v}" for k, v in blas_env.items()))
    threads_seen = set()
    for section, libs, title, unit, ref in _tables(args):
        if section.split("-")[0] not in only and section not in only:
            continue  # (--only charlm, or one of its rows: charlm-lstm)
        if args.in_process:
            cont, inner, rounds, after = _section(section, args, jax)
            res = race(cont, rounds, inner)
            report(title, res, unit=unit, ref=ref)
            if after is not None:
                after()
        else:
            _race_isolated(section, libs, args, threads_seen,
                           lambda res, t=title, u=unit, r=ref: report(t, res, unit=u, ref=r))

    if "overhead" in only:
        print("\n== per call: guard checks and replay overhead (a call's time minus its "
              "replay function's)")
        x = tg.tensor(np.linspace(0.1, 0.9, 8).astype(np.float32))
        small = tg.compile(lambda x: (x * 2.0 + 1.0).sum())
        print(f"   one fused kernel on (8,): {call_overhead(small, x):.1f} us per call, "
              f"of which guard checks {guard_checks(small, x):.1f} us")
        x.requires_grad_()
        chain = chain_tapegrad(True).compiled
        print(f"   200-op chain step: {call_overhead(chain, x):.1f} us per call, of which "
              f"guard checks {guard_checks(chain, x):.1f} us")
        M = _bench("bench_mlp_step")
        params, xm, ym = M._init()
        mlp = tg.compile(M.make_tapegrad_step(params, xm, ym))
        print(f"   MLP step (a module and SGD inside): guard checks {guard_checks(mlp):.1f} us")
    if "capture" in only:
        M = _bench("bench_mlp_step")
        params, x, y = M._init()
        cases = [("MLP step", lambda: M.make_tapegrad_step(params, x, y)),
                 ("CNN step", _cnn_plain)]
        print("\n== capture cost and memory (planned peak vs tracemalloc)")
        for what, make in cases:
            first, replay, grown, step = capture_cost(lambda: tg.compile(make()))
            s = step.stats()
            eager = make()
            eager_peak = _peak_of(eager, _leaves(eager))
            print(f"{what}: first call {first * 1e3:.1f} ms (eager run observed, passes, "
                  f"codegen, Numba compiles), replay {replay * 1e3:.2f} ms")
            print(f"   planned peak_bytes {s['peak_bytes']}; eager step's measured peak "
                  f"{eager_peak} (tracemalloc, above its start)")
            print(f"   compiled: arena {s['arena_bytes']} + rings {s['ring_bytes']} bytes "
                  f"held across replays; one replay's measured peak {_peak_of(step)} bytes; "
                  f"left allocated by 20 replays: {grown} bytes; steps that still allocate: "
                  f"{s['allocating'] or 'none'}")


def _leaves(step):
    """The parameters a benchmark step closes over (its model's or its dict's)."""
    out = []
    for cell in step.__closure__ or ():
        v = cell.cell_contents
        if isinstance(v, tg.nn.Module):
            out += list(v.parameters())
        elif isinstance(v, dict):
            out += [t for t in v.values() if isinstance(t, tg.Tensor) and t.requires_grad]
    return out


def _peak_of(step, leaves=()):
    """Bytes one call allocates above its start (tracemalloc), after warm-up calls; the
    leaves' .grad cleared first (the step then makes every gradient it leaves)."""
    for _ in range(3):
        step()
    tracemalloc.start()
    try:
        step()
        for t in leaves:
            t.grad = None
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        step()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _cnn_plain():
    """The CNN step of cnn_contenders, as a no-argument callable."""
    C = _bench("bench_cnn_step")
    x0, y0, p0 = C._init()
    x, y = tg.tensor(x0), tg.tensor(y0)
    p = {k: tg.tensor(v, requires_grad=True) for k, v in p0.items()}

    def step():
        h = tg.max_pool2d(tg.relu(tg.conv2d(x, p["w1"], p["b1"])), 2)
        h = tg.max_pool2d(tg.relu(tg.conv2d(h, p["w2"], p["b2"])), 2)
        loss = tg.cross_entropy(tg.linear(tg.reshape(h, (C.B, 800)), p["w3"], p["b3"]), y)
        loss.backward()
        with tg.no_grad():
            for t in p.values():
                t -= C.LR * t.grad
                t.grad = None
        return loss
    return step


def _brief(s):
    return ", ".join(f"{k}={s[k]}" for k in ("captures", "replays", "kernels", "fused_groups",
                                              "peak_bytes", "eager_reason", "allocating"))


if __name__ == "__main__":
    main()
