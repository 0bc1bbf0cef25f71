"""Running a script under ``mpiexec -n N`` for the distributed tests, with a timeout
so that a hang fails the test instead of blocking the run."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def mpiexec():
    """The ``mpiexec`` next to this Python (the mpich wheel's), else on PATH."""
    pytest.importorskip("mpi4py", reason="the 'distributed' extra (mpi4py, mpich) is not "
                                         "installed")
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = local if os.path.exists(local) else shutil.which("mpiexec")
    if found is None:
        pytest.skip("no mpiexec (install the 'distributed' extra: mpi4py and mpich)")
    return found


def run(script, n, *args, timeout=60):
    """``mpiexec -n n python scripts/<script> args...``: (returncode, stdout, stderr)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [mpiexec(), "-n", str(n), sys.executable, os.path.join(HERE, "scripts", script),
           *map(str, args)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"{' '.join(cmd)} hung past {timeout} s\nstdout:\n{out}\nstderr:\n{err}")
    return p.returncode, p.stdout, p.stderr


def run_ok(script, n, *args, timeout=60):
    rc, out, err = run(script, n, *args, timeout=timeout)
    assert rc == 0, f"{script} -n {n} failed ({rc})\nstdout:\n{out}\nstderr:\n{err}"
    for r in range(n):
        assert f"OK rank {r}" in out, f"rank {r} did not finish\nstdout:\n{out}\nstderr:\n{err}"
    return out
