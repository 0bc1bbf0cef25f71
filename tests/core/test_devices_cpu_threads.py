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


def _tuned_in_child(env_extra):
    import os
    import subprocess
    import sys
    env = dict(os.environ, **env_extra)
    for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        if k not in env_extra:
            env.pop(k, None)
    code = "import tapegrad.devices.cpu as c, tapegrad; print(bool(c.malloc_tuned))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip() == "True"


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="glibc only")
def test_malloc_tuning_at_import_and_its_opt_outs():
    import platform
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert _tuned_in_child({})
    assert not _tuned_in_child({"TAPEGRAD_TUNE_MALLOC": "0"})
    assert not _tuned_in_child({"MALLOC_TRIM_THRESHOLD_": "1000000"})
