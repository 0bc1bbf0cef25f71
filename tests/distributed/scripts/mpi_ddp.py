"""DistributedDataParallel on N ranks against one process on the concatenated batch,
step for step; no_sync; unused parameters; a weight read outside its module."""
import numpy as np

import tapegrad as tg
import tapegrad.distributed as dist
import tapegrad.nn as nn
import tapegrad.nn.functional as F
from tapegrad.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend="mpi", timeout=30)
R, N = dist.get_rank(), dist.get_world_size()
B = 4  # per rank
rng = np.random.default_rng(0)
X = rng.standard_normal((6, B * N, 6))
Y = rng.integers(0, 3, (6, B * N))
mine = slice(B * R, B * R + B)


def mlp(seed):
    tg.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 3)).double()


def check(a, b, what, tol=1e-10):
    a = a.detach().numpy() if isinstance(a, tg.Tensor) else a
    b = b.detach().numpy() if isinstance(b, tg.Tensor) else b
    err = float(np.max(np.abs(a - b))) if np.size(a) else 0.0
    assert err <= tol, f"rank {R}: {what}: max |diff| {err}"


def same_params(m, ref, what, grads=True):
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        check(p, q, f"{what}: {name}")
        if grads:
            assert (p.grad is None) == (q.grad is None), (what, name)
            if p.grad is not None:
                check(p.grad, q.grad, f"{what}: {name}.grad")


# ---- step for step with Adam; each rank starts from a different init (rank 0's wins);
# tiny buckets, so that several all-reduces overlap the backward
model = DDP(mlp(seed=100 + R), bucket_cap_mb=400 / 2 ** 20)
ref = mlp(seed=100)
same_params(model.module, ref, "broadcast at construction", grads=False)
assert len(model._buckets) >= 3, model._buckets
opt = tg.optim.Adam(model.parameters(), lr=1e-2)
ropt = tg.optim.Adam(ref.parameters(), lr=1e-2)
for step in range(4):
    opt.zero_grad()
    ropt.zero_grad()
    F.cross_entropy(model(tg.tensor(X[step, mine])), tg.tensor(Y[step, mine])).backward()
    F.cross_entropy(ref(tg.tensor(X[step])), tg.tensor(Y[step])).backward()
    same_params(model.module, ref, f"step {step}")
    # buckets (but the last, completed by the first layer's gradients) started while
    # the walk was still going
    st = model._stats
    assert st["started_during_backward"] >= st["buckets"] - 1, st
    opt.step()
    ropt.step()
    same_params(model.module, ref, f"after step {step}", grads=False)

# ---- no_sync: two local micro-batches then a synchronised one == the three global ones
opt.zero_grad()
ropt.zero_grad()
for k in range(3):
    ctx = model.no_sync() if k < 2 else None
    if ctx is not None:
        with ctx:
            F.cross_entropy(model(tg.tensor(X[k, mine])), tg.tensor(Y[k, mine])).backward()
        # local gradients only: they differ from the reference's
    else:
        F.cross_entropy(model(tg.tensor(X[k, mine])), tg.tensor(Y[k, mine])).backward()
    F.cross_entropy(ref(tg.tensor(X[k])), tg.tensor(Y[k])).backward()
same_params(model.module, ref, "no_sync accumulation")


# ---- unused parameters, a weight read outside its module's call, a module called twice
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(6, 8)
        self.mid = nn.Linear(8, 8)
        self.extra = nn.Linear(8, 8)     # used on rank 0 only
        self.never = nn.Linear(8, 8)     # used by no rank
        self.head = nn.Linear(8, 3)

    def forward(self, x, use_extra):
        h = self.emb(x).tanh()
        h = self.mid(h).tanh()
        h = self.mid(h).tanh()           # twice
        if use_extra:
            h = self.extra(h).tanh()
        h = h + h @ self.emb.weight @ self.emb.weight.T * 0.1   # read directly
        return self.head(h)


def net(seed):
    tg.manual_seed(seed)
    return Net().double()


model = DDP(net(7 + R), find_unused_parameters=True, bucket_cap_mb=600 / 2 ** 20)
ref = net(7)
opt = tg.optim.SGD(model.parameters(), lr=0.1)
ropt = tg.optim.SGD(ref.parameters(), lr=0.1)
for step in range(2):
    opt.zero_grad()
    ropt.zero_grad()
    loss = F.cross_entropy(model(tg.tensor(X[step, mine]), use_extra=R == 0),
                           tg.tensor(Y[step, mine]))
    loss.backward()
    # the reference: the mean over ranks of each rank's loss on its own batch
    total = 0
    for r in range(N):
        rows = slice(B * r, B * r + B)
        total = total + F.cross_entropy(ref(tg.tensor(X[step, rows]), use_extra=r == 0),
                                        tg.tensor(Y[step, rows]))
    (total / N).backward()
    same_params(model.module, ref, f"unused/tied/twice step {step}")
    assert model.module.never.weight.grad is None
    opt.step()
    ropt.step()

# without find_unused_parameters the unused one is named
strict = DDP(net(7))
try:
    strict(tg.tensor(X[0, mine]), use_extra=True)
except RuntimeError as e:
    assert "never.weight" in str(e) and "find_unused_parameters=True" in str(e), e
else:
    raise AssertionError("no error for an unused parameter")

# a second backward through the same forward is refused
m2 = DDP(mlp(1))
loss = m2(tg.tensor(X[0, mine])).sum()
loss.backward(retain_graph=True)
try:
    loss.backward()
except RuntimeError as e:
    assert "second backward" in str(e), e
else:
    raise AssertionError("no error for a second backward")

# eval under no_grad: no synchronisation, plain forward
with tg.no_grad():
    out = model(tg.tensor(X[0, mine]), use_extra=False)
assert out.shape == (B, 3)

dist.barrier()
print(f"OK rank {R}", flush=True)
