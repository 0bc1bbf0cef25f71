"""devices.cpu: BLAS kept on one thread inside our batch-parallel GEMMs, restored
after; the batched GEMM helper equals NumPy's matmul; glibc malloc tuned at import
unless opted out."""
import numpy as np
import pytest

from tapegrad.devices import cpu
from tapegrad.devices.cpu_kernels import conv as cpu_conv

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads():
    return [c.num_threads for c in threadpoolctl.ThreadpoolController().lib_controllers
            if c.user_api == "blas"]


@pytest.fixture(autouse=True)
def _fresh_blas_list(monkeypatch):
    """blas_single_thread lists the BLAS libraries at its first use; one loaded since
    (PyTorch's, by a test before) would be missing from that list."""
    monkeypatch.setattr(cpu.blas_single_thread, "_libs", None)
    monkeypatch.setattr(cpu.blas_single_thread, "_calls", None)


def test_blas_single_thread_sets_and_restores():
    before = _blas_threads()
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        outer = _blas_threads()
        with cpu.blas_single_thread():
            assert all(n == 1 for n in _blas_threads())
        assert _blas_threads() == outer
    assert _blas_threads() == before


def test_blas_single_thread_restores_after_an_error():
    before = _blas_threads()
    with pytest.raises(ZeroDivisionError):
        with cpu.blas_single_thread():
            1 / 0
    assert _blas_threads() == before


def test_blas_single_thread_in_another_thread_restores():
    """Off the main thread the limit goes through threadpoolctl (the main thread calls
    OpenBLAS's own functions); either way the count is put back."""
    import threading
    before = _blas_threads()
    seen = []

    def run():
        with cpu.blas_single_thread():
            seen.append(_blas_threads())
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert len(seen) == 1
    assert _blas_threads() == before


@pytest.mark.parametrize("threads", [1, 3])
def test_batched_matmul_in_chunks_equals_matmul(monkeypatch, threads):
    monkeypatch.setattr(cpu, "_pool", [threads])
    r = np.random.default_rng(0)
    a = r.standard_normal((2, 5, 7)).astype(np.float32)       # not batched
    b = r.standard_normal((9, 2, 7, 4)).astype(np.float32)    # batched
    c = r.standard_normal((9, 2, 6, 4)).astype(np.float32).transpose(0, 1, 3, 2)  # a view
    out = np.empty((9, 2, 5, 4), np.float32)
    cpu_conv.bmm(a, b, out)
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5)
    out2 = np.empty((9, 2, 7, 6), np.float32)
    cpu_conv.bmm(b, c, out2)
    np.testing.assert_allclose(out2, np.matmul(b, c), rtol=1e-5, atol=1e-5)


def _tuning_in_child():
    """In one new process: whether importing tapegrad tuned malloc, then what
    ``tune_malloc()`` (the function the import calls) answers under each opt-out."""
    import os
    import subprocess
    import sys
    env = dict(os.environ)
    for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "TAPEGRAD_TUNE_MALLOC"):
        env.pop(k, None)
    code = ("import os, tapegrad.devices.cpu as c, tapegrad\n"
            "print(bool(c.malloc_tuned))\n"
            "for k, v in (('TAPEGRAD_TUNE_MALLOC', '0'), ('MALLOC_TRIM_THRESHOLD_', '1000000')):\n"
            "    del c.malloc_tuned[:]\n"
            "    os.environ[k] = v\n"
            "    print(c.tune_malloc(), bool(c.malloc_tuned))\n"
            "    del os.environ[k]\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.split()


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="glibc only")
def test_malloc_tuning_at_import_and_its_opt_outs():
    import platform
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    # tuned at import; left alone with TAPEGRAD_TUNE_MALLOC=0 or a threshold of the
    # user's own
    assert _tuning_in_child() == ["True", "False", "False", "False", "False"]


def test_run_chunked_in_a_forked_child_starts_its_own_workers(monkeypatch):
    import os
    monkeypatch.setattr(cpu, "_pool", [2])
    x = np.arange(1 << 12, dtype=np.float64)

    def total():
        return sum(cpu.run_chunked(lambda n, a: float(a.sum()), x.size, x, min_chunk=64,
                                   collect=True))
    assert total() == float(x.sum())
    parent_queues = cpu._pool[1]
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if it computed the sum on new workers
        ok = total() == float(x.sum()) and cpu._pool[1] is not parent_queues
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _blas_spin_in_child(**env_vars):
    """In a new process with ``env_vars``: whether importing tapegrad tuned OpenBLAS,
    the timeout OpenBLAS now holds, whether a threaded GEMM after the import equals
    the one before it bitwise, and whether the variable stayed out of the environment."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_THREAD_TIMEOUT", "TAPEGRAD_TUNE_BLAS")}
    env.update(env_vars)
    code = (
        "import ctypes, os, numpy as np\n"
        "a = np.random.default_rng(0).standard_normal((600, 600))\n"
        "ref = a @ a\n"
        "import tapegrad\n"
        "from tapegrad.devices import cpu\n"
        "from tapegrad.devices.cpu_kernels.blas import numpy_openblas\n"
        "lib = ctypes.CDLL(numpy_openblas())\n"
        "same = bool(np.array_equal(a @ a, ref))\n"
        "print(bool(cpu.blas_tuned), lib.openblas_thread_timeout(), same,\n"
        "      'OPENBLAS_THREAD_TIMEOUT' in os.environ)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return out[0] == "True", int(out[1]), out[2] == "True", out[3] == "True"


def _numpy_openblas_pthreads():
    import ctypes

    from tapegrad.devices.cpu_kernels.blas import numpy_openblas
    path = numpy_openblas()
    if path is None:
        return False
    lib = ctypes.CDLL(path)
    return any(getattr(lib, n)() == 1 for n in (
        "scipy_openblas_get_parallel64_", "openblas_get_parallel64_",
        "openblas_get_parallel") if hasattr(lib, n))


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux") or
                    not _numpy_openblas_pthreads(),
                    reason="NumPy's BLAS is not its wheel's OpenBLAS (pthreads)")
def test_blas_workers_sleep_soon_after_import_and_its_opt_outs():
    """Importing tapegrad has NumPy's OpenBLAS restart its workers with a short spin
    (``cpu.BLAS_SPIN``): GEMMs give the same bits as before, the variable it set for
    OpenBLAS is gone from the environment. ``TAPEGRAD_TUNE_BLAS=0`` or the user's own
    ``OPENBLAS_THREAD_TIMEOUT`` is left alone."""
    tuned, timeout, same, leaked = _blas_spin_in_child()
    assert (tuned, timeout, same, leaked) == (True, cpu.BLAS_SPIN, True, False)
    off = _blas_spin_in_child(TAPEGRAD_TUNE_BLAS="0")
    assert off[:3] == (False, 0, True)
    mine = _blas_spin_in_child(OPENBLAS_THREAD_TIMEOUT="22")
    assert mine[:3] == (False, 22, True)


def test_run_on_workers_from_a_worker_runs_in_turn():
    """A job on a worker thread that runs work on the workers itself (a float32 product
    split over the threads inside a job) runs it in turn on that thread, instead of
    waiting for its own queue for ever."""
    import threading
    cpu.threads()
    seen, names = [], []

    def inner(i):
        seen.append(i)
        names.append(threading.current_thread().name)

    def outer():
        cpu.run_on_workers([lambda: inner(0), lambda: inner(1)])
    done = threading.Event()
    t = threading.Thread(target=lambda: (cpu.run_on_workers([outer, lambda: None]),
                                         done.set()), daemon=True)
    t.start()
    assert done.wait(20), "run_on_workers inside a worker job never returned"
    assert sorted(seen) == [0, 1] and len(set(names)) == 1
