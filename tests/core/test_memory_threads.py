"""The record is freed by reference counting alone; memory stays flat without
backward; saved values go after backward; threads keep separate recording state."""
import gc
import sys
import threading
import tracemalloc
import weakref

import numpy as np
import pytest

import tapegrad as tg


class _GcDisabled:
    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            gc.enable()


def _mlp_params(seed=0):
    r = np.random.default_rng(seed)
    return [tg.tensor(r.standard_normal((4, 8)) * 0.3, requires_grad=True),
            tg.tensor(np.zeros(8), requires_grad=True),
            tg.tensor(r.standard_normal((8, 1)) * 0.3, requires_grad=True)]


def _loss(params, x, y):
    w1, b1, w2 = params
    h = tg.tanh(x @ w1 + b1)
    r = h @ w2 - y
    return (r * r).mean()


def test_node_freed_by_refcount_alone():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with _GcDisabled():
        y = tg.exp(x * 2) * x      # mul saves its inputs, exp its output
        z = y.sum()
        refs = [weakref.ref(z.grad_fn), weakref.ref(y.grad_fn)]
        del y, z
        assert all(r() is None for r in refs), "the record has a reference cycle"


def test_node_freed_after_backward_by_refcount():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with _GcDisabled():
        y = (tg.sin(x) * tg.exp(x)).sum()
        ref = weakref.ref(y.grad_fn)
        y.backward()
        del y
        assert ref() is None
    assert x.grad is not None


def test_hooks_and_retain_grad_make_no_cycles():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with _GcDisabled():
        h = x * 3
        h.retain_grad()
        h.register_hook(lambda g: g)
        y = (h * h).sum()
        refs = [weakref.ref(h), weakref.ref(h.grad_fn), weakref.ref(y.grad_fn)]
        y.backward()
        del h, y
        assert all(r() is None for r in refs)


def test_saved_arrays_freed_after_backward():
    x = tg.tensor(np.random.default_rng(0).standard_normal(1000), requires_grad=True)
    with _GcDisabled():
        y = (tg.exp(x) * tg.sin(x)).sum()
        mul_node = y.grad_fn.edges[0][0]
        saved = [s for s in (mul_node.saved or []) if s is not None]
        assert saved, "mul should save its inputs"
        refs = [weakref.ref(getattr(s, "_data", s)) for s in saved]
        del saved
        assert all(r() is not None for r in refs)
        y.backward()
        assert all(r() is None for r in refs), "saved arrays still alive after backward"
        # the record itself is still reachable from y, with nothing saved
        assert y.grad_fn is not None


def test_retain_graph_keeps_saved_arrays():
    x = tg.tensor([0.5, 1.5], requires_grad=True)
    y = (tg.exp(x) * tg.sin(x)).sum()
    y.backward(retain_graph=True)
    g1 = x.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * g1)


def test_forward_loop_without_backward_holds_memory_flat():
    params = _mlp_params()
    r = np.random.default_rng(1)
    x = tg.tensor(r.standard_normal((16, 4)))
    y = tg.tensor(r.standard_normal((16, 1)))
    for _ in range(200):  # warm caches
        _loss(params, x, y)
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(300):
            _loss(params, x, y)
        base, _ = tracemalloc.get_traced_memory()
        for _ in range(2_500):
            loss = _loss(params, x, y)
        cur, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert loss.grad_fn is not None
    # one record is a few KB; 2,500 leaked records would be several MB
    assert cur - base < 200_000, f"memory grew by {cur - base} bytes over 2,500 forwards"


def test_training_loop_holds_memory_flat():
    params = _mlp_params()
    r = np.random.default_rng(2)
    x = tg.tensor(r.standard_normal((16, 4)))
    y = tg.tensor(r.standard_normal((16, 1)))

    def step():
        loss = _loss(params, x, y)
        loss.backward()
        with tg.no_grad():
            for p in params:
                p -= 0.01 * p.grad
                p.grad = None

    for _ in range(100):
        step()
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(100):
            step()
        base, _ = tracemalloc.get_traced_memory()
        for _ in range(500):
            step()
        cur, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # a step records several nodes of a few KB each: 500 leaked steps would be MBs
    assert cur - base < 200_000, f"memory grew by {cur - base} bytes over 500 steps"


# ---------------------------------------------------------------- threads
def _train(seed, steps=30):
    params = _mlp_params(seed)
    r = np.random.default_rng(seed + 100)
    x = tg.tensor(r.standard_normal((8, 4)))
    y = tg.tensor(r.standard_normal((8, 1)))
    losses = []
    for _ in range(steps):
        loss = _loss(params, x, y)
        loss.backward()
        losses.append(loss.item())
        with tg.no_grad():
            for p in params:
                p -= 0.1 * p.grad
                p.grad = None
    return losses, [p.detach().numpy().copy() for p in params]


def test_two_threads_train_like_sequential():
    expected = [_train(1), _train(2)]
    results = [None, None]
    errors = []
    barrier = threading.Barrier(2)

    def work(k):
        try:
            barrier.wait()
            results[k] = _train(k + 1)
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # interleave the two threads finely
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    for (l1, p1), (l2, p2) in zip(expected, results):
        assert l1 == l2
        for a, b in zip(p1, p2):
            np.testing.assert_array_equal(a, b)


def test_no_grad_in_one_thread_leaves_other_recording():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    entered, done = threading.Event(), threading.Event()
    out = {}

    def quiet():
        with tg.no_grad():
            entered.set()
            done.wait(5)
            out["quiet"] = (x * 2).requires_grad
            out["quiet_mode"] = tg.is_grad_enabled()

    t = threading.Thread(target=quiet)
    t.start()
    assert entered.wait(5)
    try:
        assert tg.is_grad_enabled()
        y = x * 2
        assert y.requires_grad and y.grad_fn is not None
    finally:
        done.set()
        t.join()
    assert out == {"quiet": False, "quiet_mode": False}


def test_tape_in_one_thread_is_invisible_to_another():
    x = tg.tensor(3.0, dtype=tg.float64)
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def other():
        inside.wait(5)
        seen["tapes"] = list(tg.tape.state.tapes)
        seen["recorded"] = (x * x).grad_fn is not None
        release.set()

    t = threading.Thread(target=other)
    t.start()
    with tg.Tape() as tape:
        tape.watch(x)
        inside.set()
        release.wait(5)
        y = x * x
    t.join()
    assert seen == {"tapes": [], "recorded": False}
    assert tape.gradient(y, x).item() == 6.0


def test_anomaly_mode_is_thread_local():
    flags = {}

    def other():
        flags["other"] = tg.tape.state.anomaly

    with tg.detect_anomaly():
        t = threading.Thread(target=other)
        t.start()
        t.join()
        flags["main"] = tg.tape.state.anomaly
    assert flags == {"other": False, "main": True}


@pytest.mark.parametrize("n_threads", [4])
def test_many_threads_grad(n_threads):
    errors = []
    results = {}

    def work(k):
        try:
            for _ in range(50):
                x = tg.tensor([float(k)], dtype=tg.float64, requires_grad=True)
                g, = tg.grad((x * x * x).sum(), x)
                assert g.item() == 3.0 * k * k
            results[k] = True
        except BaseException as e:
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    assert len(results) == n_threads
