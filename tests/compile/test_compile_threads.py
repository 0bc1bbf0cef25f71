"""tg.compile called from several threads at once: each call's results are its own.
A program's buffers serve one replay at a time, so a call that finds another thread
replaying (or capturing) runs eagerly, and the backward replays of a compiled module
take turns; before, concurrent replays overwrote each other's arena and results."""
import threading
import warnings

import numpy as np

import tapegrad as tg

F = tg.nn.functional


def _in_threads(worker, n=3):
    errors = []

    def run(seed):
        try:
            worker(seed)
        except AssertionError as e:
            errors.append(f"thread {seed}: {e}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        threads = [threading.Thread(target=run, args=(s,)) for s in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, "\n".join(errors)


def test_a_compiled_function_in_threads():
    w = tg.tensor(np.random.default_rng(9).standard_normal((128, 128)).astype(np.float32))

    def f(x):
        h = F.gelu(x @ w) * 2.0 + 1.0
        return (h * h).sum(dim=1)
    cf = tg.compile(f)
    x0 = tg.randn(32, 128)
    cf(x0)
    cf(x0)

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(60):
            x = tg.tensor(rng.standard_normal((32, 128)).astype(np.float32))
            np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-4)
    _in_threads(worker)
    assert cf.stats()["replays"] > 60  # (most calls still replay)


def test_a_compiled_module_forward_and_backward_in_threads():
    tg.manual_seed(0)
    net = tg.nn.Sequential(tg.nn.Linear(32, 64), tg.nn.GELU(), tg.nn.Linear(64, 8))
    cm = tg.compile(net)
    for _ in range(3):  # (captured here: a capture refuses the other threads' writes
        #                    into the parameters' .grad while it runs)
        cm(tg.randn(16, 32, requires_grad=True)).sum().backward()
    eager = threading.Lock()

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(40):
            a = rng.standard_normal((16, 32)).astype(np.float32)
            x, xr = tg.tensor(a, requires_grad=True), tg.tensor(a, requires_grad=True)
            y = cm(x)
            (y * y).sum().backward()
            with eager:  # (the module itself, eagerly: one thread at a time)
                yr = net(xr)
                (yr * yr).sum().backward()
            np.testing.assert_allclose(y.detach().numpy(), yr.detach().numpy(), rtol=1e-4,
                                       atol=1e-5)
            np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-4, atol=1e-5)
    _in_threads(worker)
    st = cm.stats()
    assert st["backward_replays"] > 40, (st["recaptures"], st["eager_reason"], st["eager_calls"])
