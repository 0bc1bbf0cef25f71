"""The latency of a small blocking all_reduce: tg.distributed against mpi4py, per call.

    python benchmarks/bench_allreduce_latency.py [--ranks 1 2] [--bytes 4 64]
        [--calls 500] [--rounds 201]

Launches ``mpiexec -n N python bench_allreduce_latency.py --worker ...``. Contenders,
on float32 SUM in place, taking turns in short rounds (``--calls`` calls each, after a
barrier), so that a busy neighbour slows them alike: ``mpi4py Allreduce`` (the
blocking ``comm.Allreduce(MPI.IN_PLACE, array)``), ``mpi4py Iallreduce+Test`` (post,
then ``Test`` until done), ``tg`` (``dist.all_reduce(tensor)`` with its call check: a
repeat posts and tests MPI's all-reduce from compiled code, ``devices/mpi.py``), and
``tg, mpi4py path`` (the same with the compiled path off, as
``TAPEGRAD_DISTRIBUTED_NATIVE=0`` runs). Prints rank 0's best round (the machine at
its quietest) and median round per call, and their ratio to mpi4py's ``Allreduce``.
With 1 rank there is no transfer: the time is each contender's own per-call cost.
"""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def worker(nbytes, calls, rounds):
    import numpy as np
    from mpi4py import MPI

    import tapegrad as tg
    import tapegrad.distributed as dist
    dist.init_process_group()
    g = dist.setup._WORLD
    comm = MPI.COMM_WORLD
    n = max(1, nbytes // 4)
    arr = np.ones(n, np.float32)
    t = tg.tensor(np.ones(n, np.float32))
    for _ in range(dist.collectives._NATIVE_AFTER + 3):
        dist.all_reduce(t)
    native = g.native

    def iallreduce_test():
        r = comm.Iallreduce(MPI.IN_PLACE, arr, op=MPI.SUM)
        while not r.Test():
            pass

    def tg_path(on):
        def setup():
            g.native = native if on else False
            g.last_fast = None   # the next call makes the short path's entry again
        return setup

    contenders = [("mpi4py Allreduce", None, lambda: comm.Allreduce(MPI.IN_PLACE, arr)),
                  ("mpi4py Iallreduce+Test", None, iallreduce_test),
                  ("tg", tg_path(True), lambda: dist.all_reduce(t)),
                  ("tg, mpi4py path", tg_path(False), lambda: dist.all_reduce(t))]
    times = {name: [] for name, _, _ in contenders}
    for _ in range(rounds):
        for name, setup, call in contenders:
            if setup is not None:
                setup()
            call()
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(calls):
                call()
            times[name].append((time.perf_counter() - start) / calls)
    g.native, g.last_fast = native, None
    if comm.rank == 0:
        ref_best = min(times["mpi4py Allreduce"])
        ref_med = sorted(times["mpi4py Allreduce"])[rounds // 2]
        print(f"### {4 * n} bytes, {comm.size} rank(s): {rounds} rounds of {calls} calls; "
              f"tg's compiled path {'on' if native else 'unavailable'}\n")
        print("| contender | best round | / mpi4py | median round | / mpi4py |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, _, _ in contenders:
            best, med = min(times[name]), sorted(times[name])[rounds // 2]
            print(f"| {name} | {best * 1e6:.3f} us | {best / ref_best:.3f} | "
                  f"{med * 1e6:.3f} us | {med / ref_med:.3f} |")
        print(flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--bytes", type=int, nargs="+", default=[4])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=201)
    ap.add_argument("--worker", nargs=3, type=int)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        mpiexec = "mpiexec"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    print(f"load average: {os.getloadavg()[0]:.2f}\n")
    for n in args.ranks:
        for b in args.bytes:
            subprocess.run([mpiexec, "-n", str(n), sys.executable, os.path.abspath(__file__),
                            "--worker", str(b), str(args.calls), str(args.rounds)],
                           check=True, env=env)
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
