"""SyncBatchNorm on N ranks with different batch sizes per rank against PyTorch's
BatchNorm on the concatenated batch: outputs, running statistics, input/weight/bias
gradients (float64 and float32), second-order gradients, finite differences, eval
mode; DDP + convert_sync_batchnorm against one process, step for step. With N == 1
(world size 1): the plain BatchNorm path, no collective."""
import numpy as np
import torch

import tapegrad as tg
import tapegrad.distributed as dist
import tapegrad.nn as nn
import tapegrad.nn.functional as F
from tapegrad.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend="mpi", timeout=30)
R, N = dist.get_rank(), dist.get_world_size()
rng = np.random.default_rng(0)


def check(a, b, what, tol):
    a = a.detach().numpy() if isinstance(a, tg.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a.shape == b.shape, f"rank {R}: {what}: shapes {a.shape} vs {b.shape}"
    err = float(np.max(np.abs(a - b) / (1 + np.abs(b)))) if a.size else 0.0
    assert err <= tol, f"rank {R}: {what}: max rel diff {err}"


def summed(t, like):
    """A local gradient summed over the ranks (weight and bias gradients stay local,
    as PyTorch's: the sum is the gradient of the sum of the ranks' losses); None (no
    dependence: the bias in second order) as zeros."""
    s = tg.zeros(*like.shape, dtype=like.dtype) if t is None else t.detach().clone()
    dist.all_reduce(s)
    return s


if N == 1:
    # world size 1: plain BatchNorm, no collective at all
    def refuse(*a, **k):
        raise AssertionError("SyncBatchNorm reduced across a world of one rank")
    real, dist.all_reduce = dist.all_reduce, refuse
    x = rng.standard_normal((5, 3, 4))
    m, ref = nn.SyncBatchNorm(3).double(), nn.BatchNorm1d(3).double()
    xt, xr = tg.tensor(x, requires_grad=True), tg.tensor(x, requires_grad=True)
    (m(xt) ** 3).sum().backward()
    (ref(xr) ** 3).sum().backward()
    check(xt.grad, xr.grad.numpy(), "world 1: input grad", 1e-12)
    check(m.weight.grad, ref.weight.grad.numpy(), "world 1: weight grad", 1e-12)
    check(m.running_var, ref.running_var.numpy(), "world 1: running_var", 1e-12)
    dist.all_reduce = real
    dist.barrier()
    print(f"OK rank {R}", flush=True)
    raise SystemExit(0)

SIZES = {2: [3, 5], 3: [3, 1, 4]}[N]   # per-rank batch sizes, different
TORCH_BN = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d,
            5: torch.nn.BatchNorm3d}


def case(tail, dtype, sizes=SIZES, affine=True, track=True, momentum=0.1, C=3, steps=2,
         second=False):
    what = f"tail={tail} {dtype} sizes={sizes} affine={affine} track={track} " \
           f"momentum={momentum}"
    tol, offset = (1e-10, 1e4) if dtype == "float64" else (1e-5, 1.0)
    tdt = getattr(torch, dtype)
    start = [sum(sizes[:r]) for r in range(N + 1)]
    mine = slice(start[R], start[R + 1])
    m = nn.SyncBatchNorm(C, momentum=momentum, affine=affine,
                         track_running_stats=track).to(getattr(tg, dtype))
    ref = TORCH_BN[2 + len(tail)](C, momentum=momentum, affine=affine,
                                  track_running_stats=track, dtype=tdt)
    if affine:
        w, b = rng.standard_normal(C) + 1.5, rng.standard_normal(C)
        with tg.no_grad():
            m.weight.copy_(tg.tensor(w, dtype=m.weight.dtype))
            m.bias.copy_(tg.tensor(b, dtype=m.bias.dtype))
        with torch.no_grad():
            ref.weight.copy_(torch.tensor(w))
            ref.bias.copy_(torch.tensor(b))
    for step in range(steps):
        # an offset per channel: in float64 a plain sum of squares would lose the digits
        # checked here (float32 holds too few for any offset)
        X = (rng.standard_normal((start[-1], C) + tail) * 2
             + offset * np.arange(1, C + 1).reshape((1, C) + (1,) * len(tail))).astype(dtype)
        W = rng.standard_normal(X.shape).astype(dtype)
        x = tg.tensor(X[mine], requires_grad=True)
        xr = torch.tensor(X, requires_grad=True)
        y, yr = m(x), ref(xr)
        check(y, yr[mine], f"{what}: step {step}: output", tol)
        if second:   # the input gradient differentiated again: through both all-reduces
            g, = tg.autograd.grad((y * tg.tensor(W[mine])).sum(), x, create_graph=True)
            gr, = torch.autograd.grad((yr * torch.tensor(W)).sum(), xr, create_graph=True)
            check(g, gr[mine], f"{what}: step {step}: input grad", tol)
            V = rng.standard_normal(X.shape).astype(dtype)
            (g * tg.tensor(V[mine])).sum().backward()
            (gr * torch.tensor(V)).sum().backward()
        else:
            (y * tg.tensor(W[mine])).sum().backward()
            (yr * torch.tensor(W)).sum().backward()
        check(x.grad, xr.grad[mine], f"{what}: step {step}: x.grad", tol)
        if affine:
            for p, q in ((m.weight, ref.weight), (m.bias, ref.bias)):
                qg = torch.zeros_like(q) if q.grad is None else q.grad
                check(summed(p.grad, p), qg, f"{what}: step {step}: grad of {tuple(p.shape)}",
                      tol * 10)
            assert m.weight.grad is not None
            m.weight.grad = m.bias.grad = None
            ref.weight.grad = ref.bias.grad = None
        if track:
            check(m.running_mean, ref.running_mean, f"{what}: step {step}: running_mean", tol)
            check(m.running_var, ref.running_var, f"{what}: step {step}: running_var", tol)
            assert int(m.num_batches_tracked) == int(ref.num_batches_tracked) == step + 1
        else:
            assert m.running_mean is None and m.running_var is None
    # eval: the running statistics (or, without them, this rank's own batch); no sync
    m.eval()
    ref.eval()
    X = np.random.default_rng(R).standard_normal((max(sizes[R], 2), C) + tail).astype(dtype)
    if track:
        check(m(tg.tensor(X)), ref(torch.tensor(X)), f"{what}: eval", tol)
    else:
        check(m(tg.tensor(X)), ref(torch.tensor(X)), f"{what}: eval, batch stats", tol)


for dtype in ("float64", "float32"):
    case((), dtype)                          # BatchNorm1d on (N, C)
    case((4,), dtype)                        # (N, C, L)
    case((3, 2), dtype)                      # BatchNorm2d
    case((2, 2, 2), dtype, C=2, steps=1)     # BatchNorm3d
case((3, 2), "float64", affine=False, track=False)
case((), "float64", momentum=None, steps=3)  # a cumulative average
case((4,), "float64", sizes=SIZES[:-1] + [0])   # the last rank has no examples
case((3,), "float64", second=True)           # second order, vs PyTorch's double backward
case((), "float32", second=True)

# ---- finite differences (float64) of the global loss sum_r <y_r, W_r> in x on one rank
C, tail = 2, (3,)
start = [sum(SIZES[:r]) for r in range(N + 1)]
X = rng.standard_normal((start[-1], C) + tail)
W = rng.standard_normal(X.shape)
m = nn.SyncBatchNorm(C, track_running_stats=False).double()
with tg.no_grad():
    m.weight.copy_(tg.tensor(rng.standard_normal(C)))
mine = slice(start[R], start[R + 1])


def global_loss(Xs):
    with tg.no_grad():
        v = (m(tg.tensor(Xs[mine])) * tg.tensor(W[mine])).sum().reshape(1)
    dist.all_reduce(v)
    return float(v)


x = tg.tensor(X[mine], requires_grad=True)
(m(x) * tg.tensor(W[mine])).sum().backward()
eps = 1e-6
for s in range(N):
    for idx in [(start[s], 0, 0), (start[s + 1] - 1, 1, 2)]:
        Xp, Xm = X.copy(), X.copy()
        Xp[idx] += eps
        Xm[idx] -= eps
        fd = (global_loss(Xp) - global_loss(Xm)) / (2 * eps)
        if s == R:
            an = float(x.grad.numpy()[(idx[0] - start[R],) + idx[1:]])
            assert abs(fd - an) <= 1e-6 * (1 + abs(an)), (R, idx, fd, an)

# ---- forward mode: the all-reduce's tangent is the all-reduce of the tangents
T = rng.standard_normal(X.shape)
mt = nn.SyncBatchNorm(C, track_running_stats=False).double()
tref = torch.nn.BatchNorm1d(C, track_running_stats=False).double()
out, tan = tg.functional.jvp(mt, (tg.tensor(X[mine]),), (tg.tensor(T[mine]),))
rout, rtan = torch.func.jvp(tref, (torch.tensor(X),), (torch.tensor(T),))
check(out, rout[mine], "jvp: output", 1e-10)
check(tan, rtan[mine], "jvp: tangent", 1e-10)


# ---- DDP + convert_sync_batchnorm: N ranks == one process on the concatenated batch
def convnet(seed):
    tg.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 5 * 5, 8), nn.BatchNorm1d(8), nn.Tanh(),
                         nn.Linear(8, 3)).double()


B = 4
net = nn.SyncBatchNorm.convert_sync_batchnorm(convnet(11 + R))
assert sum(isinstance(mod, nn.SyncBatchNorm) for mod in net.modules()) == 2
model = DDP(net, bucket_cap_mb=2000 / 2 ** 20)
ref = convnet(11)
opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ropt = tg.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
for step in range(3):
    X = rng.standard_normal((B * N, 2, 5, 5))
    Y = rng.integers(0, 3, B * N)
    rows = slice(B * R, B * R + B)
    opt.zero_grad()
    ropt.zero_grad()
    F.cross_entropy(model(tg.tensor(X[rows])), tg.tensor(Y[rows])).backward()
    F.cross_entropy(ref(tg.tensor(X)), tg.tensor(Y)).backward()
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
        check(p.grad, q.grad.numpy(), f"DDP step {step}: {name}.grad", 1e-10)
    opt.step()
    ropt.step()
    for (name, t), u in zip(model.module.state_dict().items(), ref.state_dict().values()):
        check(t, u.numpy(), f"DDP after step {step}: {name}", 1e-10)
model.eval()
ref.eval()
X = rng.standard_normal((3, 2, 5, 5))
check(model(tg.tensor(X)), ref(tg.tensor(X)).detach().numpy(), "DDP eval", 1e-10)

dist.barrier()
print(f"OK rank {R}", flush=True)
