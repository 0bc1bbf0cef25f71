"""tg.distributed, DistributedDataParallel and the fault behaviour, under
``mpiexec -n 2`` and ``-n 3`` on this machine (each job has a timeout: a hang fails)."""
import os
import re
import time

import pytest

from ._launch import run, run_ok

# the mpiexec jobs run one at a time, on one xdist worker (--dist loadgroup): two jobs
# of two or three ranks each at once on a small machine would stretch the fault tests'
# time limits
pytestmark = pytest.mark.xdist_group("mpiexec")
# three ranks on a small machine cost about twice two: the main suite runs the two-rank
# jobs, the exhaustive tier (marked slow) the three-rank ones too
RANKS = [2, pytest.param(3, marks=pytest.mark.slow)]
SLOW = pytest.mark.slow  # a further variant of a fault the main suite checks once


@pytest.mark.parametrize("n", RANKS)
def test_collectives_values(n):
    run_ok("mpi_collectives.py", n, n)


@pytest.mark.parametrize("n", RANKS)
def test_ddp_matches_one_process_on_the_whole_batch(n):
    run_ok("mpi_ddp.py", n)


@pytest.mark.parametrize("n", RANKS)
def test_the_group_is_destroyed_and_made_again_many_times(n):
    # twenty groups one after another in one job, each rank leaving them at different
    # moments: no notice of a group may reach the next (MPI may reuse the freed
    # communicators' contexts)
    run_ok("mpi_reinit.py", n, 20)


def _failed(mode, n=2, timeout_arg=None, limit=30):
    args = [mode] + ([timeout_arg] if timeout_arg is not None else [])
    start = time.monotonic()
    rc, out, err = run("mpi_faults.py", n, *args, timeout=limit)
    took = time.monotonic() - start
    assert rc != 0, f"{mode}: the job succeeded\n{out}\n{err}"
    return out, err, took


def test_a_rank_that_raises_stops_the_others_naming_it():
    out, err, took = _failed("raise", n=3)
    assert "ValueError: boom on purpose" in err
    # both other ranks stop, each with an error naming rank 2
    for r in (0, 1):
        assert re.search(rf"rank 2 failed \(ValueError: boom on purpose\); rank {r} stops",
                         err), err
    assert "OK rank" not in out
    assert took < 20


def test_a_late_failure_is_reported_at_exit():
    out, err, _ = _failed("raise_later")
    assert "KeyError: 'late failure'" in err
    assert re.search(r"\[rank 1\] DistBackendError: destroy_process_group: rank 0 failed", err), err


@pytest.mark.parametrize("mode, words", [
    ("shape", r"rank 0: all_reduce\(shape=\(3,\).*rank 1: all_reduce\(shape=\(4,\)"),
    pytest.param("dtype", r"rank 0: broadcast\(shape=\(3,\), dtype=tapegrad.float32.*"
                 r"rank 1: broadcast\(shape=\(3,\), dtype=tapegrad.float64", marks=SLOW),
    pytest.param("order", r"rank 0: all_reduce\(.*rank 1: broadcast\(", marks=SLOW),
    ("model", r"DistributedDataParallel: the ranks hold different models"),
])
def test_mismatched_calls_give_a_clear_error_on_every_rank(mode, words):
    out, err, _ = _failed(mode)
    assert len(re.findall(words, err)) >= 2, err  # both ranks say it
    assert "OK rank" not in out


def test_mismatched_shapes_every_rank_raises_its_own_error():
    # every rank gets the comparison's answer: none may stop with a report of another
    # rank's error (DistBackendError) before it has raised its own
    out, err, _ = _failed("gather_shape", n=3)
    for r in range(3):
        assert f"rank {r} of 3: uncaught RuntimeError" in err, err
    assert "DistBackendError" not in err, err
    assert len(re.findall(r"rank 0: all_gather\(shape=\(2,\).*rank 1: all_gather\(shape=\(3,\)"
                          r".*rank 2: all_gather\(shape=\(4,\)", err)) >= 3, err


@pytest.mark.parametrize("mode", ["changed", pytest.param("changed_late", marks=SLOW)])
@pytest.mark.parametrize("n", RANKS)
def test_a_call_changed_on_one_rank_is_caught(mode, n):
    # a repeated call is compared across ranks once; a rank that changes it tells the
    # others, and whoever made the old call without comparing joins the comparison
    out, err, took = _failed(mode, n=n)
    # lazy: two ranks' tracebacks may interleave on the shared stderr, one message
    # then running on after another on one line (each message is still counted)
    words = (rf"different collective calls: rank 0: all_reduce\(shape=\(3,\).*?"
             rf"rank {n - 1}: all_reduce\(shape=\(4,\)")
    assert len(re.findall(words, err)) >= n, err  # every rank says it
    assert "OK rank" not in out
    assert took < 20


def test_a_rank_that_leaves_early_is_named():
    out, err, took = _failed("exit")
    assert "OK rank 1" in out
    assert re.search(r"all_reduce: rank 1 exited after 1 collectives, without joining this "
                     r"one \(collective number 2 on rank 0\)", err), err


def test_a_hung_rank_times_out():
    out, err, took = _failed("hang", timeout_arg=0.5)
    assert re.search(r"all_reduce: timed out after 0.5 s on rank 0", err), err


@pytest.mark.parametrize("mode", ["wait_timeout", pytest.param("monitored_barrier", marks=SLOW)])
def test_a_wait_with_a_timeout_stops_at_it(mode):
    # (the group's timeout is 20 s: Work.wait(timeout=) once waited in the call check,
    # ignoring its own, until the late rank came)
    out, err, took = _failed(mode)
    assert re.search(r"\[tapegrad.distributed\] rank 0 of 2: uncaught DistBackendError.*\n"
                     r"(.*\n)*.*barrier: timed out after 0.5 s on rank 0 of 2", err), err
    assert re.search(r"barrier: rank 0 failed \(DistBackendError: barrier: timed out", err), err
    assert took < 15


@pytest.mark.parametrize("mode, words", [
    ("recv_exit", r"recv: rank 1 exited without the matching send \(rank 0 waited for it\)"),
    pytest.param("recv_raise", r"recv: rank 1 failed \(ValueError: the sender failed\); "
                 r"rank 0 stops", marks=SLOW),
])
def test_a_recv_from_a_rank_that_left_or_failed_names_it(mode, words):
    out, err, took = _failed(mode)
    assert re.search(words, err), err
    assert took < 15


# the demo end to end, in the exhaustive tier (the main suite checks DDP's values with
# test_ddp_matches_one_process_on_the_whole_batch)
@pytest.mark.slow
def test_digits_demo_distributed(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")
    pytest.importorskip("matplotlib")
    import os
    import subprocess
    import sys

    from ._launch import ROOT, mpiexec
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "tapegrad.examples.digits",
                        "--model", "mlp", "--epochs", "4", "--distributed", "--no-progress",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env=env, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert "on 2 processes" in p.stdout
    acc = float(re.search(r"test accuracy: ([0-9.]+)", p.stdout).group(1))
    assert acc > 0.9, p.stdout
    assert p.stdout.count("test accuracy") == 1  # rank 0 reports
    # the same accuracy as one process on the same global batches (up to the order in
    # which the shuffled examples come)
    one = subprocess.run([sys.executable, "-m", "tapegrad.examples.digits", "--model", "mlp",
                          "--epochs", "4", "--no-progress", "--out", str(tmp_path / "one")],
                         capture_output=True, text=True, timeout=120, env=env, cwd=str(tmp_path))
    assert one.returncode == 0, one.stderr
    acc1 = float(re.search(r"test accuracy: ([0-9.]+)", one.stdout).group(1))
    assert abs(acc - acc1) <= 0.03, (acc, acc1)


def _tutorial_scripts():
    """The scripts of docs/tutorials/distributed.md: its ```py blocks that start
    ``# mpiexec -n 2 python <name>``, by name."""
    from ._launch import ROOT
    with open(os.path.join(ROOT, "docs", "tutorials", "distributed.md"),
              encoding="utf-8") as fh:
        text = fh.read()
    blocks = re.findall(r"^```py\n(# mpiexec -n 2 python (\w+)\.py\n.*?)^```", text, re.S | re.M)
    return {name: code for code, name in blocks}


def test_the_tutorial_has_its_two_scripts():
    assert sorted(_tutorial_scripts()) == ["collectives", "train"]


# the training script (three epochs) in the exhaustive tier
@pytest.mark.parametrize("name", ["collectives", pytest.param("train", marks=SLOW)])
def test_the_tutorial_scripts_run_under_mpiexec(name, tmp_path):
    import subprocess
    import sys

    from ._launch import ROOT, mpiexec
    script = tmp_path / f"{name}.py"
    script.write_text(_tutorial_scripts()[name], encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    p = subprocess.run([mpiexec(), "-n", "2", sys.executable, str(script)],
                       capture_output=True, text=True, timeout=120, env=env, cwd=str(tmp_path))
    assert p.returncode == 0, f"docs/tutorials/distributed.md, {name}.py:\n{p.stderr}"
    if name == "train":
        assert (tmp_path / "model.pt").exists()  # rank 0's checkpoint
