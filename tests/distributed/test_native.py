"""The blocking all_reduce's compiled path (``devices/mpi.py``: MPI_Iallreduce and
MPI_Test called from Numba code) under ``mpiexec``: its values for every op and dtype
of the short path, that it is taken, its fallbacks to mpi4py's path, and the fault
behaviour (a failed, departed or hung rank, mismatched calls) on it."""
import re

import pytest

from ._launch import run_ok
from .test_distributed import _failed

# the mpiexec jobs run one at a time, on one xdist worker (--dist loadgroup): two jobs
# of two or three ranks each at once on a small machine would stretch the fault tests'
# time limits
pytestmark = pytest.mark.xdist_group("mpiexec")


def test_compiled_path_is_taken_and_gives_the_reductions():
    n = 2
    out = run_ok("mpi_native.py", n, "native")
    for r in range(n):
        m = re.search(rf"rank {r}: (\d+) of (\d+) calls compiled", out)
        assert m and int(m.group(1)) > 0.8 * int(m.group(2)), out


@pytest.mark.parametrize("mode", ["off", pytest.param("missing", marks=pytest.mark.slow)])
def test_mpi4py_path_when_the_compiled_one_is_off_or_unavailable(mode, monkeypatch):
    # off: TAPEGRAD_DISTRIBUTED_NATIVE=0; missing: the MPI library is not found
    if mode == "off":
        monkeypatch.setenv("TAPEGRAD_DISTRIBUTED_NATIVE", "0")
    out = run_ok("mpi_native.py", 2, mode)
    assert "rank 0: 0 of" in out and "rank 1: 0 of" in out, out


@pytest.fixture
def on_compiled_path(monkeypatch):
    monkeypatch.setenv("TG_TEST_NATIVE", "1")


def test_a_rank_that_raises_stops_the_others_on_the_compiled_path(on_compiled_path):
    out, err, took = _failed("raise", n=2)
    assert re.search(r"rank 1 failed \(ValueError: boom on purpose\); rank 0 stops", err), err
    assert took < 20


def test_mismatched_calls_on_the_compiled_path(on_compiled_path):
    # the ranks whose call did not change post their transfer without a comparison
    # (ranks 0 and 1, on the compiled path): they join the one the changed rank
    # announced, from their wait
    n = 3
    out, err, took = _failed("changed_late", n=n)
    words = (r"different collective calls: rank 0: all_reduce\(shape=\(3,\).*"
             r"rank 2: all_reduce\(shape=\(4,\)")
    assert len(re.findall(words, err)) >= n, err
    assert "OK rank" not in out and took < 20


def test_a_rank_that_leaves_early_is_named_on_the_compiled_path(on_compiled_path):
    out, err, _ = _failed("exit")
    assert re.search(r"all_reduce: rank 1 exited after 4 collectives, without joining this "
                     r"one \(collective number 5 on rank 0\)", err), err


def test_a_hung_rank_times_out_on_the_compiled_path(on_compiled_path):
    out, err, _ = _failed("hang", timeout_arg=0.5)
    assert re.search(r"all_reduce: timed out after 0.5 s on rank 0", err), err
