"""tg.distributed on CUDA tensors (NCCL through CuPy): one rank per GPU, so -n 1 on a
one-GPU machine (every collective's code path, a world of one) and -n 2 where there
are two GPUs. Skipped cleanly without CUDA or NCCL."""
import pytest

import tapegrad as tg
from tapegrad.devices import nccl

from ._launch import run_ok

# the mpiexec jobs run one at a time, on one xdist worker (--dist loadgroup): two jobs
# of two or three ranks each at once on a small machine would stretch the fault tests'
# time limits
pytestmark = pytest.mark.xdist_group("mpiexec")

if not tg.cuda.is_available() or not nccl.available():
    pytest.skip("CUDA with NCCL (CuPy) is not available", allow_module_level=True)


def test_nccl_collectives_and_ddp_one_rank():
    run_ok("mpi_nccl.py", 1, timeout=120)


def test_nccl_collectives_and_ddp_two_gpus():
    import cupy
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs (NCCL runs one rank per GPU)")
    run_ok("mpi_nccl.py", 2, timeout=120)
