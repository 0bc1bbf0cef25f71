"""The default group destroyed and made again many times in one job: no notice of an
earlier group (a rank's exit, a call-check announcement) may reach a later one. The
ranks leave each group at different moments and each group makes a different number
of collectives, so that a stale exit notice would name a rank as gone too early."""
import sys
import time

import numpy as np

import tapegrad as tg
import tapegrad.distributed as dist

LOOPS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
for i in range(LOOPS):
    dist.init_process_group(backend="mpi", timeout=20)
    R, N = dist.get_rank(), dist.get_world_size()
    for k in range(1 + i % 4):
        # a call that changes every time (compared and announced) and one repeated
        t = tg.ones(k + 2) * (R + 1)
        dist.all_reduce(t)
        assert np.allclose(t.numpy(), N * (N + 1) / 2), (i, k, t.numpy())
        b = tg.full((3,), float(R + i))
        dist.broadcast(b, 0)
        assert np.allclose(b.numpy(), float(i)), (i, k, b.numpy())
    if R == i % N:
        time.sleep(0.002 * (i % 3))   # this rank leaves last
    dist.destroy_process_group()
    assert not dist.is_initialized()
print(f"OK rank {R}", flush=True)
