"""DistributedDataParallel on N ranks against one process on the concatenated batch,
step for step (PyTorch's default copies and gradient_as_bucket_view); no_sync; unused
parameters; a weight read outside its module; tg.compile; the errors."""
import warnings

import numpy as np

import tapegrad as tg
import tapegrad.distributed as dist
import tapegrad.nn as nn
import tapegrad.nn.functional as F
from tapegrad.nn.parallel import DistributedDataParallel as DDP
from tapegrad.tensor import buffer

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
    # buckets started while the walk still had layers to go: all but the first layer's
    # two (its weight's and bias's gradients come from one vjp, the weight's first)
    st = model._stats
    assert st["started_during_backward"] >= st["buckets"] - 2, st
    opt.step()
    ropt.step()
    same_params(model.module, ref, f"after step {step}", grads=False)

# the wrapped module called directly: a plain local backward, nothing averaged
opt.zero_grad()
ropt.zero_grad()
F.cross_entropy(model.module(tg.tensor(X[0, mine])), tg.tensor(Y[0, mine])).backward()
F.cross_entropy(ref(tg.tensor(X[0, mine])), tg.tensor(Y[0, mine])).backward()
same_params(model.module, ref, "the module called directly")
F.cross_entropy(model(tg.tensor(X[0, mine])), tg.tensor(Y[0, mine])).backward()
assert not any(np.shares_memory(buffer(p.grad), b.flat) for p in model.parameters()
               for b in model._buckets)  # PyTorch's default: .grad is not the bucket


def bucket_view(p, ddp):
    return any(np.shares_memory(buffer(p.grad), b.flat) for b in ddp._buckets)


# ---- gradient_as_bucket_view: .grad is the bucket's memory; kept between steps
# (zero_grad(set_to_none=False)) the walker accumulates into it, nothing copied
view = DDP(mlp(seed=200 + R), bucket_cap_mb=400 / 2 ** 20, gradient_as_bucket_view=True)
vref = mlp(seed=200)
vopt = tg.optim.SGD(view.parameters(), lr=0.1, momentum=0.9)
vropt = tg.optim.SGD(vref.parameters(), lr=0.1, momentum=0.9)
for step in range(4):
    vopt.zero_grad(set_to_none=step < 2)
    vropt.zero_grad()
    F.cross_entropy(view(tg.tensor(X[step, mine])), tg.tensor(Y[step, mine])).backward()
    F.cross_entropy(vref(tg.tensor(X[step])), tg.tensor(Y[step])).backward()
    same_params(view.module, vref, f"bucket view, step {step}")
    assert all(bucket_view(p, view) for p in view.parameters())
    vopt.step()
    vropt.step()
    same_params(view.module, vref, f"bucket view, after step {step}", grads=False)

# ---- tg.compile: a step with a DDP forward and backward runs eagerly, saying why
cm = DDP(mlp(seed=300 + R))
cref = mlp(seed=300)
copt = tg.optim.SGD(cm.parameters(), lr=0.1)
cropt = tg.optim.SGD(cref.parameters(), lr=0.1)


@tg.compile
def train_step(x, y):
    copt.zero_grad()
    loss = F.cross_entropy(cm(x), y)
    loss.backward()
    copt.step()
    return loss


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for step in range(3):
        train_step(tg.tensor(X[step, mine]), tg.tensor(Y[step, mine]))
        cropt.zero_grad()
        F.cross_entropy(cref(tg.tensor(X[step])), tg.tensor(Y[step])).backward()
        cropt.step()
        same_params(cm.module, cref, f"tg.compile step {step}")
assert any("runs eagerly" in str(w.message) and "DistributedDataParallel" in str(w.message)
           for w in caught), [str(w.message) for w in caught]
assert train_step.stats()["replays"] == 0

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

# a parameter no rank uses keeps its .grad as it was, also as a bucket view that holds
# a local (no_sync) gradient: here extra's, on rank 0 only
model = DDP(net(7 + R), find_unused_parameters=True, gradient_as_bucket_view=True)
opt = tg.optim.SGD(model.parameters(), lr=0.1)
F.cross_entropy(model(tg.tensor(X[0, mine]), use_extra=True), tg.tensor(Y[0, mine])).backward()
assert bucket_view(model.module.extra.weight, model)
opt.zero_grad(set_to_none=False)
with model.no_sync():
    model(tg.tensor(X[1, mine]), use_extra=R == 0).sum().backward()
before = model.module.extra.weight.grad.numpy().copy()
assert (np.abs(before).max() > 0) == (R == 0)
F.cross_entropy(model(tg.tensor(X[2, mine]), use_extra=False), tg.tensor(Y[2, mine])).backward()
check(model.module.extra.weight.grad, before, "a parameter no rank used keeps its .grad", 0)
assert model.module.never.weight.grad is None

# without find_unused_parameters the unused one is named
strict = DDP(net(7))
try:
    strict(tg.tensor(X[0, mine]), use_extra=True)
except RuntimeError as e:
    assert "never.weight" in str(e) and "find_unused_parameters=True" in str(e), e
else:
    raise AssertionError("no error for an unused parameter")

# a module with no parameter that requires grad: PyTorch's RuntimeError
frozen = mlp(1)
for p in frozen.parameters():
    p.requires_grad_(False)
try:
    DDP(frozen)
except RuntimeError as e:
    assert "doesn't have any parameter that requires a gradient" in str(e), e
else:
    raise AssertionError("no error for a module without trainable parameters")

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

# an output the loss does not use: its parameters get no gradient, the buckets cannot
# finish; the next forward says which
class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 2)
        self.b = nn.Linear(6, 2)

    def forward(self, x):
        return self.a(x), self.b(x)


tg.manual_seed(0)
two = DDP(Two().double())
a, _ = two(tg.tensor(X[0, mine]))
a.sum().backward()
try:
    two(tg.tensor(X[0, mine]))
except RuntimeError as e:
    assert "b.weight" in str(e) and "a.weight" not in str(e) and "did not finish" in str(e), e
else:
    raise AssertionError("no error for an unfinished backward")

# eval under no_grad: no synchronisation, plain forward
with tg.no_grad():
    out = model(tg.tensor(X[0, mine]), use_extra=False)
assert out.shape == (B, 3)

# the digits demo's training loop, its global batch (64) not a multiple of the ranks
# on 3: it rounds the share of each (it once refused to start); every rank ends with
# the same model
from tapegrad.examples import digits  # noqa: E402

drng = np.random.default_rng(5)
dx, dy = drng.random((150, 64)).astype(np.float32), drng.integers(0, 10, 150)
tg.manual_seed(R)
dnet = digits.make_model("mlp")
_, hist = digits.train(DDP(dnet), (dx, dy, dx[:30], dy[:30]), 1, 64, 1e-3, progress=False,
                       distributed=True)
assert len(hist["loss"]) == 1 and hist["steps"] == -(-150 // (N * round(64 / N))), hist
w = dnet[0].weight.detach().clone()
every = [tg.zeros(*w.shape) for _ in range(N)]
dist.all_gather(every, w)
for r in range(N):
    check(every[r], w, f"digits: rank {r}'s model", 0)

dist.barrier()
print(f"OK rank {R}", flush=True)
