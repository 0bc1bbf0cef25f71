"""One fault per run (argv[1]); the test reads what each rank printed and the exit
status of the job. With TG_TEST_NATIVE=1 the blocking all_reduce's compiled path is
loaded first (three more collectives), so that the faults happen on it."""
import datetime
import os
import sys
import time

import tapegrad as tg
import tapegrad.distributed as dist

mode = sys.argv[1]
native = os.environ.get("TG_TEST_NATIVE") == "1"
if native:
    from mpi4py import MPI

    import tapegrad.devices.mpi
    assert tapegrad.devices.mpi.load(MPI), "the compiled path cannot be loaded here"
# the ranks join with a generous timeout (on a loaded machine mpiexec starts them seconds
# apart); the timeout under test applies from the first collective on
dist.init_process_group(backend="mpi", timeout=20)
R, N = dist.get_rank(), dist.get_world_size()
dist.all_reduce(tg.ones(2))  # everyone is up
if len(sys.argv) > 2:
    dist.setup._WORLD.timeout = float(sys.argv[2])
if native:
    dist.collectives._NATIVE_AFTER = 1
    w = tg.ones(3)
    for _ in range(3):
        dist.all_reduce(w)
    assert dist.setup._WORLD.native and dist.setup._WORLD.last_fast[5] is not None

if mode == "raise":
    # the last rank fails while the others wait in a collective
    if R == N - 1:
        time.sleep(0.3)
        raise ValueError("boom on purpose")
    dist.all_reduce(tg.ones(3))
elif mode == "raise_later":
    # rank 0 fails after the others have finished their work: they learn it at exit
    if R == 0:
        time.sleep(0.3)
        raise KeyError("late failure")
elif mode == "shape":
    dist.all_reduce(tg.ones(3 + R))
elif mode == "gather_shape":
    dist.all_gather([tg.zeros(2 + R) for _ in range(N)], tg.ones(2 + R))
elif mode == "dtype":
    dist.broadcast(tg.ones(3, dtype=tg.float64 if R else tg.float32), 0)
elif mode == "order":
    if R == 0:
        dist.all_reduce(tg.ones(3))
    else:
        dist.broadcast(tg.ones(3), 0)
elif mode in ("changed", "changed_late"):
    # the ranks repeat a call (compared once), then one rank changes it: the other,
    # whose call did not change, makes it without a comparison
    for _ in range(3):
        dist.all_reduce(tg.ones(3))
    if R == N - 1:
        if mode == "changed_late":
            time.sleep(0.5)  # the others are already waiting in their transfer
        dist.all_reduce(tg.ones(4))
    else:
        if mode == "changed":
            time.sleep(0.5)  # the announcement is in before this rank calls
        dist.all_reduce(tg.ones(3))
elif mode == "exit":
    # rank 0 makes one more collective than the others
    if R == 0:
        dist.all_reduce(tg.ones(3))
elif mode == "hang":
    # the last rank is stuck longer than the timeout
    if R == N - 1:
        time.sleep(3)
    dist.all_reduce(tg.ones(3))
elif mode in ("wait_timeout", "monitored_barrier"):
    # Work.wait(timeout) and monitored_barrier(timeout) bound the wait, not the group's
    if R == N - 1:
        time.sleep(3)
        dist.barrier()
    elif mode == "wait_timeout":
        dist.barrier(async_op=True).wait(timeout=datetime.timedelta(seconds=0.5))
    else:
        dist.monitored_barrier(timeout=0.5)
elif mode == "recv_exit":
    # rank 0 waits for a message that rank 1 never sends: it is told when rank 1 leaves
    if R == 0:
        dist.recv(tg.zeros(2), src=1)
elif mode == "recv_raise":
    if R == 1:
        time.sleep(0.3)
        raise ValueError("the sender failed")
    if R == 0:
        dist.recv(tg.zeros(2), src=1)
elif mode == "model":
    import tapegrad.nn as nn
    nn.parallel.DistributedDataParallel(nn.Linear(3, 4 + R))
print(f"OK rank {R}", flush=True)
