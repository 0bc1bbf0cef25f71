"""linear on a batch_first RNN's output: a (batch, time, features) view of a
(time, batch, features) array. The kernel runs the product in the array's own order
and swaps the result back; values and gradients (first and second order, eager,
compiled and on an ``out=`` buffer) equal PyTorch's and the plain layout's."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.ops.nn import affine

F = tg.nn.functional


def _swapped(shape, seed):
    T, B, H = shape
    return np.random.default_rng(seed).standard_normal((T, B, H)).transpose(1, 0, 2)


@pytest.mark.parametrize("bias_shape", [(3,), (1,), (), None])
@pytest.mark.parametrize("n_out", [3, 8])   # narrower than the input (the swapped
def test_swapped_input_matches_torch(bias_shape, n_out):  # path) and as wide
    rng = np.random.default_rng(1)
    x = _swapped((5, 4, 8), 0)
    assert affine._swapped(x, n_out)
    w = rng.standard_normal((n_out, 8))
    b = None if bias_shape is None else rng.standard_normal(bias_shape if bias_shape != (3,)
                                                           else (n_out,))
    g = rng.standard_normal((4, 5, n_out))
    tx, tw = tg.tensor(x, requires_grad=True), tg.tensor(w, requires_grad=True)
    tb = None if b is None else tg.tensor(b, requires_grad=True)
    X, W = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    Bt = None if b is None else torch.tensor(b, requires_grad=True)
    y, Y = F.linear(tx, tw, tb), torch.nn.functional.linear(X, W, Bt)
    np.testing.assert_allclose(y.detach().numpy(), Y.detach().numpy(), rtol=1e-12, atol=1e-12)
    ins, INS = [tx, tw] + ([tb] if b is not None else []), [X, W] + ([Bt] if b is not None else [])
    gs = tg.autograd.grad((y * tg.tensor(g)).sum(), ins, create_graph=True)
    GS = torch.autograd.grad((Y * torch.tensor(g)).sum(), INS, create_graph=True)
    for a, e in zip(gs, GS):
        assert tuple(a.shape) == tuple(e.shape)
        np.testing.assert_allclose(a.detach().numpy(), e.detach().numpy(), rtol=1e-12,
                                   atol=1e-12)
    # second order: through the recorded adjoint
    h = tg.autograd.grad(sum((a ** 2).sum() for a in gs), [tw])[0]
    H = torch.autograd.grad(sum((a ** 2).sum() for a in GS), [W])[0]
    np.testing.assert_allclose(h.numpy(), H.numpy(), rtol=1e-10, atol=1e-10)


def test_swapped_input_into_a_buffer():
    x = _swapped((6, 3, 4), 2)
    w = np.random.default_rng(3).standard_normal((2, 4))
    b = np.arange(2.0)
    out = np.full((3, 6, 2), np.nan)
    res = affine._linear_kernel(x, w, b, out=out)
    assert res is out
    np.testing.assert_allclose(out, np.ascontiguousarray(x) @ w.T + b, rtol=1e-13)


def test_not_swapped_when_wider_or_plain():
    x = _swapped((6, 3, 4), 2)
    assert not affine._swapped(x, 5)                       # a wider result: copy x
    assert not affine._swapped(np.ascontiguousarray(x), 2)  # contiguous already
    assert not affine._swapped(x.transpose(0, 2, 1), 2)     # another permutation


def test_batch_first_lstm_head_compiled_equals_eager():
    tg.manual_seed(0)

    class M(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = tg.nn.LSTM(6, 8, batch_first=True)
            self.head = tg.nn.Linear(8, 5)

        def forward(self, x):
            return self.head(self.lstm(x)[0])

    m = M()
    x = tg.randn(3, 7, 6)
    target = tg.randint(0, 5, (21,))

    def grads(run):
        m.zero_grad()
        loss = F.cross_entropy(run(x).reshape(-1, 5), target)
        loss.backward()
        return float(loss), [p.grad.numpy().copy() for p in m.parameters()]

    want_loss, want = grads(m)
    cm = tg.compile(m)
    for _ in range(3):
        loss, got = grads(cm)
        assert loss == pytest.approx(want_loss, rel=1e-5)
        for a, e in zip(got, want):
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-6)
    assert cm.stats()["replays"] >= 2


def test_per_sample_gradients_through_linear():
    # vmap(grad(...)) reaches linear's adjoint with batched tensors (no one array)
    G = tg.func
    w, X = tg.randn(2, 3), tg.randn(4, 3)
    got = G.vmap(G.grad(lambda p, x: F.linear(x, p["w"]).sum()), in_dims=(None, 0))(
        {"w": w}, X)["w"]
    want = np.stack([np.ones((2, 1)) * X.numpy()[i][None] for i in range(4)])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    xs = tg.randn(4, 5, 2, 3).transpose(1, 2)   # (batch, ..) swapped per sample too
    got = G.vmap(G.grad(lambda w, x: F.linear(x, w).sum()), in_dims=(None, 0))(w, xs)
    want = np.stack([np.ones((2, 1)) * xs.numpy()[i].sum((0, 1))[None] for i in range(4)])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
