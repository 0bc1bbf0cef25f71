"""API.md "Low precision", tg.autocast on the CPU: the output dtype of the common ops of
a training script under `tg.autocast("cpu", dtype=...)` is `torch.autocast`'s for the
same inputs, whether the op is called as `tg.NAME`, `F.NAME` or as a Tensor method
(`x.addmm(...)`, `x.mv(...)`), for the ops PyTorch's CPU list lowers (GEMMs,
convolutions, attention, prelu), those it runs in float32 (the losses, cdist, linalg)
and those it leaves as given (`mv`, `bilinear`, elementwise, reductions, norms); and
the gradients reach float32 leaves in float32."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def _r(*shape, seed=0, pos=False):
    a = np.random.RandomState(seed).randn(*shape).astype(np.float32)
    return np.abs(a) + 0.5 if pos else a


def T(L, *shape, seed=0, dt=None, pos=False):
    t = L.tensor(_r(*shape, seed=seed, pos=pos))
    return t if dt is None else t.to(getattr(L, dt))


CASES = {
    # PyTorch's CPU lower-precision list
    "mm": lambda L, F: L.mm(T(L, 3, 4), T(L, 4, 2, seed=1)),
    "matmul": lambda L, F: L.matmul(T(L, 2, 3, 4), T(L, 4, 2, seed=1)),
    "bmm": lambda L, F: L.bmm(T(L, 2, 3, 4), T(L, 2, 4, 2, seed=1)),
    "baddbmm": lambda L, F: L.baddbmm(T(L, 2, 3, 2), T(L, 2, 3, 4), T(L, 2, 4, 2, seed=1)),
    "addmm": lambda L, F: L.addmm(T(L, 3, 2), T(L, 3, 4), T(L, 4, 2, seed=1)),
    "addbmm": lambda L, F: L.addbmm(T(L, 3, 2), T(L, 2, 3, 4), T(L, 2, 4, 2, seed=1)),
    "linear": lambda L, F: F.linear(T(L, 3, 4), T(L, 2, 4, seed=1), T(L, 2, seed=2)),
    "conv1d": lambda L, F: F.conv1d(T(L, 1, 2, 5), T(L, 3, 2, 3, seed=1)),
    "conv2d": lambda L, F: F.conv2d(T(L, 1, 2, 5, 5), T(L, 3, 2, 3, 3, seed=1)),
    "conv2d bf16 input": lambda L, F: F.conv2d(T(L, 1, 2, 5, 5, dt="bfloat16"),
                                               T(L, 3, 2, 3, 3, seed=1)),
    "conv_transpose2d": lambda L, F: F.conv_transpose2d(T(L, 1, 2, 3, 3), T(L, 2, 3, 2, 2)),
    "einsum": lambda L, F: L.einsum("ij,jk->ik", T(L, 3, 4), T(L, 4, 2, seed=1)),
    "prelu": lambda L, F: F.prelu(T(L, 2, 3), T(L, 1, seed=1)),
    "sdpa": lambda L, F: F.scaled_dot_product_attention(
        T(L, 1, 2, 3, 4), T(L, 1, 2, 3, 4, seed=1), T(L, 1, 2, 3, 4, seed=2)),
    # float32 on the CPU
    "mse_loss": lambda L, F: F.mse_loss(T(L, 3), T(L, 3, seed=1)),
    "l1_loss": lambda L, F: F.l1_loss(T(L, 3), T(L, 3, seed=1)),
    "smooth_l1_loss": lambda L, F: F.smooth_l1_loss(T(L, 3), T(L, 3, seed=1)),
    "huber_loss": lambda L, F: F.huber_loss(T(L, 3), T(L, 3, seed=1)),
    "cross_entropy": lambda L, F: F.cross_entropy(T(L, 3, 4), L.tensor([0, 1, 3])),
    "nll_loss": lambda L, F: F.nll_loss(T(L, 3, 4), L.tensor([0, 1, 3])),
    "bce_with_logits": lambda L, F: F.binary_cross_entropy_with_logits(
        T(L, 3), T(L, 3, seed=1).sigmoid()),
    "kl_div": lambda L, F: F.kl_div(T(L, 3), T(L, 3, seed=1).sigmoid(), reduction="batchmean"),
    "margin_ranking": lambda L, F: F.margin_ranking_loss(T(L, 3), T(L, 3, seed=1),
                                                         T(L, 3, seed=2).sign()),
    "triplet_margin": lambda L, F: F.triplet_margin_loss(T(L, 2, 3), T(L, 2, 3, seed=1),
                                                         T(L, 2, 3, seed=2)),
    "poisson_nll": lambda L, F: F.poisson_nll_loss(T(L, 3), T(L, 3, seed=1, pos=True)),
    "cdist": lambda L, F: L.cdist(T(L, 2, 3), T(L, 4, 3, seed=1)),
    "prod": lambda L, F: T(L, 3).prod(),
    "trace": lambda L, F: L.trace(T(L, 3, 3)),
    "inverse": lambda L, F: L.linalg.inv(T(L, 3, 3) + 3 * L.eye(3)),
    # as given
    "mv": lambda L, F: L.mv(T(L, 3, 4), T(L, 4, seed=1)),
    "bilinear": lambda L, F: F.bilinear(T(L, 2, 3), T(L, 2, 4, seed=1), T(L, 5, 3, 4, seed=2)),
    "addmv": lambda L, F: L.addmv(T(L, 3), T(L, 3, 4), T(L, 4, seed=1)),
    "dot": lambda L, F: L.dot(T(L, 4), T(L, 4, seed=1)),
    "softmax": lambda L, F: L.softmax(T(L, 3, 4), -1),
    "log_softmax": lambda L, F: F.log_softmax(T(L, 3, 4), -1),
    "layer_norm": lambda L, F: F.layer_norm(T(L, 3, 4), (4,)),
    "group_norm": lambda L, F: F.group_norm(T(L, 2, 4, 3), 2),
    "batch_norm": lambda L, F: F.batch_norm(T(L, 3, 4), None, None, training=True),
    "exp": lambda L, F: T(L, 3).exp(),
    "log": lambda L, F: T(L, 3, pos=True).log(),
    "sum": lambda L, F: T(L, 3).sum(),
    "mean": lambda L, F: T(L, 3).mean(),
    "cumsum": lambda L, F: T(L, 3).cumsum(0),
    "norm": lambda L, F: L.norm(T(L, 3, 4)),
    "gelu": lambda L, F: F.gelu(T(L, 3)),
    "max_pool2d": lambda L, F: F.max_pool2d(T(L, 1, 1, 4, 4), 2),
    "embedding": lambda L, F: F.embedding(L.tensor([0, 2]), T(L, 3, 4)),
    "add bf16 f32": lambda L, F: T(L, 3, dt="bfloat16") + T(L, 3),
    "cat bf16 f32": lambda L, F: L.cat([T(L, 3, dt="bfloat16"), T(L, 3)]),
    "where bf16 f32": lambda L, F: L.where(T(L, 3) > 0, T(L, 3, dt="bfloat16"), T(L, 3)),
    # Tensor methods of composite ops take the same policy as the functions
    "x.addmm": lambda L, F: T(L, 2, 2).addmm(T(L, 2, 3), T(L, 3, 2, seed=1)),
    "x.baddbmm": lambda L, F: T(L, 2, 2, 2).baddbmm(T(L, 2, 2, 3), T(L, 2, 3, 2, seed=1)),
    "x.addbmm": lambda L, F: T(L, 2, 2).addbmm(T(L, 2, 2, 3), T(L, 2, 3, 2, seed=1)),
    "x.mm": lambda L, F: T(L, 2, 3).mm(T(L, 3, 2, seed=1)),
    "x.mv": lambda L, F: T(L, 2, 3).mv(T(L, 3, seed=1)),
    "x.addmv": lambda L, F: T(L, 2).addmv(T(L, 2, 3), T(L, 3, seed=1)),
    "x.addr": lambda L, F: T(L, 2, 3).addr(T(L, 2), T(L, 3, seed=1)),
    "x.prelu": lambda L, F: T(L, 2, 3).prelu(L.tensor([0.25])),
    "x.inner": lambda L, F: T(L, 2, 3).inner(T(L, 2, 3, seed=1)),
    "x.pinverse bf16": lambda L, F: T(L, 3, 3, dt="bfloat16").pinverse(),
}


def _dtype(lib, case, dtype):
    try:
        with lib.autocast("cpu", dtype=getattr(lib, dtype)):
            out = case(lib, lib.nn.functional)
    except Exception as e:  # noqa: BLE001 (PyTorch's refusal is the oracle too)
        return type(e).__name__
    return str(out.dtype).rsplit(".", 1)[-1]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_output_dtypes_as_torch_autocast(dtype):
    got = {name: _dtype(tg, case, dtype) for name, case in CASES.items()}
    want = {name: _dtype(torch, case, dtype) for name, case in CASES.items()}
    if dtype == "float16":  # PyTorch refuses to mix bfloat16 into a float16 region's cat
        del got["cat bf16 f32"], want["cat bf16 f32"]
    assert {k: v for k, v in got.items() if v != want[k]} == {}, want


@pytest.mark.parametrize("method", [False, True])
def test_gradients_through_lowered_and_kept_ops_reach_float32_leaves(method):
    a = tg.tensor(_r(2, 3), requires_grad=True)
    b = tg.tensor(_r(3, 2, seed=1), requires_grad=True)
    v = tg.tensor(_r(2, seed=2), requires_grad=True)
    c = tg.tensor(_r(2, 2, seed=3), requires_grad=True)
    pa, pb, pv, pc = (torch.tensor(t.detach().numpy(), requires_grad=True) for t in (a, b, v, c))

    def run(lib, a, b, v, c):
        with lib.autocast("cpu"):
            if method:
                y = c.addmm(a, b)
                z = y.float().mv(v)
            else:
                y = lib.addmm(c, a, b)
                z = lib.mv(y.float(), v)
        return y, z

    y, z = run(tg, a, b, v, c)
    py, pz = run(torch, pa, pb, pv, pc)
    assert (y.dtype, z.dtype) == (tg.bfloat16, tg.float32)
    assert (py.dtype, pz.dtype) == (torch.bfloat16, torch.float32)
    z.sum().backward()
    pz.sum().backward()
    for t, p in ((a, pa), (b, pb), (v, pv), (c, pc)):
        assert t.grad.dtype == tg.float32
        np.testing.assert_allclose(t.grad.numpy(), p.grad.numpy(), rtol=2e-2, atol=2e-2)
