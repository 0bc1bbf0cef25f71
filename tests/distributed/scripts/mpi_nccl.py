"""The collectives and DDP on CUDA tensors (NCCL through CuPy), one GPU per rank."""
import cupy
import numpy as np

import tapegrad as tg
import tapegrad.distributed as dist
import tapegrad.nn as nn
import tapegrad.nn.functional as F

dist.init_process_group(backend="nccl", timeout=60)
R, N = dist.get_rank(), dist.get_world_size()
cupy.cuda.Device(R % cupy.cuda.runtime.getDeviceCount()).use()


def cu(a):
    return tg.tensor(a).cuda()


def close(t, want, what):
    got = t.detach().cpu().numpy()
    assert np.allclose(got, want, rtol=1e-6, atol=1e-6), (what, got, want)


inputs = [np.arange(6.0).reshape(2, 3) * (r + 1) - r for r in range(N)]
stack = np.stack(inputs)
for op, want in (("sum", stack.sum(0)), ("avg", stack.mean(0)), ("max", stack.max(0)),
                 ("min", stack.min(0))):
    t = cu(inputs[R])
    dist.all_reduce(t, op=op)
    close(t, want, op)
t = cu(inputs[R])
dist.all_reduce(t, async_op=True).wait()
close(t, stack.sum(0), "async")
t = cu(inputs[R])
dist.broadcast(t, N - 1)
close(t, inputs[N - 1], "broadcast")
outs = [cu(np.zeros((2, 3))) for _ in range(N)]
dist.all_gather(outs, cu(inputs[R]))
for r in range(N):
    close(outs[r], inputs[r], "all_gather")
out = cu(np.zeros((2, 3)))
dist.reduce_scatter(out, [cu(inputs[R] + 10 * k) for k in range(N)])
close(out, sum(inputs[r] + 10 * R for r in range(N)), "reduce_scatter")

# DDP on the GPU against one process on the whole batch
rng = np.random.default_rng(0)
X, Y = rng.standard_normal((4 * N, 5)), rng.integers(0, 3, 4 * N)


def mlp(seed):
    tg.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).double()


model = nn.parallel.DistributedDataParallel(mlp(R).cuda(), bucket_cap_mb=1e-4)
ref = mlp(0)
F.cross_entropy(model(cu(X[4 * R:4 * R + 4])), cu(Y[4 * R:4 * R + 4])).backward()
F.cross_entropy(ref(tg.tensor(X)), tg.tensor(Y)).backward()
for p, q in zip(model.module.parameters(), ref.parameters()):
    close(p.grad, q.grad.numpy(), "ddp grad")
dist.barrier()
print(f"OK rank {R}", flush=True)
