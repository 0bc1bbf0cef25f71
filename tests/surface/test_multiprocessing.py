"""``tapegrad.multiprocessing`` as ``torch.multiprocessing``: tensors in shared memory
(``share_memory_``, ``is_shared``, ``Module.share_memory``), sent through queues as
views of one memory, a Hogwild loop whose processes update the parent's model, and
``spawn``. Processes are forked (the platform's default here, as PyTorch's examples
use it): cheap, and the test module's functions need no import in the child."""
import multiprocessing
import sys

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.multiprocessing as mp

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork start method: Linux")
CTX = mp.get_context("fork")


def test_the_module_is_pythons_multiprocessing_plus_spawn():
    for name in ("Process", "Queue", "SimpleQueue", "Pool", "Event", "Lock", "get_context",
                 "set_start_method", "cpu_count", "spawn", "ProcessRaisedException"):
        assert hasattr(mp, name), name
    assert mp.Queue is multiprocessing.Queue
    assert mp.get_sharing_strategy() in mp.get_all_sharing_strategies()


def test_share_memory_keeps_values_identity_and_autograd():
    x = tg.arange(6.0).reshape(2, 3).requires_grad_()
    assert not x.is_shared()
    y = x * 2
    assert x.share_memory_() is x
    assert x.is_shared() and x.requires_grad
    np.testing.assert_array_equal(x.detach().numpy(), np.arange(6.0).reshape(2, 3))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 2.0))
    v = x.detach()[1]  # a view of shared memory is shared
    assert v.is_shared()
    assert x.share_memory_() is x and x.is_shared()  # again: a no-op


def test_module_share_memory_shares_parameters_and_buffers():
    m = tg.nn.Sequential(tg.nn.Linear(3, 2), tg.nn.BatchNorm1d(2))
    assert m.share_memory() is m
    assert all(p.is_shared() for p in m.parameters())
    assert all(b.is_shared() for b in m.buffers())


def _add_one(t, q):
    t.add_(1.0)
    q.put(tg.full((2,), 7.0))


def test_tensors_through_a_queue_share_memory():
    x = tg.zeros(3).share_memory_()
    q = CTX.Queue()
    p = CTX.Process(target=_add_one, args=(x, q))
    p.start()
    r = q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    np.testing.assert_array_equal(x.numpy(), [1.0, 1.0, 1.0])  # the child's write
    np.testing.assert_array_equal(r.numpy(), [7.0, 7.0])
    assert r.is_shared()


def _echo_back(q_in, q_out):
    t = q_in.get(timeout=60)
    t.mul_(3.0)  # written into the parent's memory
    q_out.put("done")


def test_a_tensor_not_yet_shared_is_moved_to_shared_memory_when_sent():
    x = tg.ones(4)
    q_in, q_out = CTX.Queue(), CTX.Queue()
    p = CTX.Process(target=_echo_back, args=(q_in, q_out))
    p.start()
    q_in.put(x)
    assert q_out.get(timeout=60) == "done"
    p.join(60)
    assert x.is_shared()
    np.testing.assert_array_equal(x.numpy(), [3.0] * 4)


def _hogwild(rank, model, steps, lr):
    tg.manual_seed(rank)
    opt = tg.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        model(tg.ones(1, 2)).sum().backward()  # d/dw = 1, d/db = 1
        opt.step()


def test_hogwild_processes_update_the_parents_model():
    """Two processes train one shared model (PyTorch's mnist_hogwild loop): the
    parent's parameters carry both processes' SGD steps."""
    model = tg.nn.Linear(2, 1)
    model.share_memory()
    w0 = model.weight.detach().numpy().copy()
    steps, lr = 5, 0.01
    procs = [CTX.Process(target=_hogwild, args=(r, model, steps, lr)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    drop = w0 - model.weight.detach().numpy()
    # each step lowers every weight by lr; Hogwild's unsynchronized writes may lose a
    # step of one process to the other, never more than one process's worth
    assert np.all(drop > steps * lr - 1e-6) and np.all(drop < 2 * steps * lr + 1e-6), drop


def _fail(i):
    if i == 1:
        raise ValueError("rank one fails")


def _write_rank(i, t):
    t[i] = i + 1.0


def test_spawn_runs_each_rank_and_raises_a_failure():
    t = tg.zeros(3).share_memory_()
    mp.spawn(_write_rank, args=(t,), nprocs=3, start_method="fork")
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0, 3.0])
    with pytest.raises(mp.ProcessRaisedException, match="rank one fails"):
        mp.spawn(_fail, nprocs=2, start_method="fork")
