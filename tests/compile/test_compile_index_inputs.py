"""tg.compile and tensors used as indices: ``x[i]`` with ``i`` an argument, ``x[x > 0]``,
``x[y.argmax()]``, ``x[:, tg.argsort(y)]``, ``z[i] = v``. The index's arrays are
inputs of the step that reads them (its forward and its adjoint's), so each replay
reads the index the call has, never the one it captured."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn


def _x(seed, shape=(5, 4)):
    return tg.tensor(np.random.default_rng(seed).standard_normal(shape))


def _compare(fn, calls, grad=True, replays=None):
    """``fn`` compiled and eager over ``calls`` (argument tuples): values and the
    first argument's gradient equal."""
    c = tg.compile(fn)
    for args in calls:
        outs = []
        for f in (c, fn):
            a = [t.detach().requires_grad_(grad and k == 0 and t.dtype.is_floating_point)
                 if isinstance(t, tg.Tensor) else t for k, t in enumerate(args)]
            y = f(*a)
            if grad:
                y.sum().backward()
            outs.append((y.detach().numpy(), a[0].grad.numpy() if grad else None))
        np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-12)
        if grad:
            np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-12)
    if replays is not None:  # (the first call captures; with a backward outside, the
        # second captures the backward too)
        assert c.stats()["replays"] == replays - grad, c.stats()["eager_reason"]
        assert c.stats()["eager_calls"] == 0
    return c


def test_an_index_argument_is_read_afresh():
    perms = [tg.tensor(np.random.default_rng(k).permutation(4)) for k in range(4)]
    _compare(lambda x, i: x[:, i] * 2.0, [(_x(0), p) for p in perms], replays=3)


def test_an_index_the_program_computes():
    calls = [(_x(k), _x(10 + k, (4,))) for k in range(4)]
    _compare(lambda x, y: x[:, tg.argsort(y)] * 3.0, calls, replays=3)
    _compare(lambda x, y: x[y.argmax()].exp(), calls, replays=3)


def test_a_mask_the_program_computes():
    # each mask keeps a different count: a data-dependent shape recaptures; a mask
    # of one count replays (values right both ways)
    calls = [(_x(k),) for k in range(4)]
    _compare(lambda x: x[x > 0].sum() * 1.0, calls)
    same = [(tg.tensor(v),) for v in ([1.0, -2.0, 3.0], [-1.0, 2.0, 3.0], [4.0, 5.0, -6.0])]
    _compare(lambda x: (x[x > 0] ** 2).sum(), same, replays=2)


def test_setitem_with_an_index_argument():
    def f(x, i):
        z = x * 1.0
        z[i] = 0.0
        return z * x
    idx = [tg.tensor(np.array(v)) for v in ([0, 2], [1, 4], [3, 3])]
    _compare(f, [(_x(k), i) for k, i in enumerate(idx)], replays=2)


def test_a_shuffled_batch_in_a_compiled_training_step():
    # the step draws a permutation and trains on the rows it picks: the parameters
    # follow eager's exactly
    x = _x(1, (8, 3)).float()
    y = _x(2, (8, 1)).float()
    res = []
    for compiled in (False, True):
        tg.manual_seed(0)
        lin = nn.Linear(3, 1)
        opt = tg.optim.SGD(lin.parameters(), lr=0.1)

        def step(x, y):
            p = tg.randperm(8)[:4]
            loss = ((lin(x[p]) - y[p]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        run = tg.compile(step) if compiled else step
        tg.manual_seed(7)
        losses = [run(x, y).item() for _ in range(5)]
        res.append((losses, lin.weight.detach().numpy().copy()))
        if compiled:
            assert run.stats()["replays"] == 4, run.stats()["eager_reason"]
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-6)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-6)


class _Pick(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, i):
        return self.lin(x)[i]


def test_compiled_module_with_an_index_argument_backward_outside():
    tg.manual_seed(0)
    m = _Pick()
    c = tg.compile(m)
    x = _x(3).float()
    for k in range(3):
        i = tg.tensor(np.random.default_rng(k).integers(0, 5, 3))
        got = []
        for f in (c, m):
            m.zero_grad()
            y = f(x, i)
            (y ** 2).sum().backward()
            got.append((y.detach().numpy(), m.lin.weight.grad.numpy().copy()))
        np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-6)
        np.testing.assert_allclose(got[0][1], got[1][1], rtol=1e-6)
    assert c.stats()["eager_calls"] == 0


@pytest.mark.parametrize("fn", [lambda x, i: x[i] * 2.0, lambda x, i: x[:, i],
                                lambda x, i: x[..., i], lambda x, i: x[:, i, ...],
                                lambda x, i: x[i[0, 0]] + 1.0],
                         ids=["rows", "columns", "last-dim", "middle-dim", "0-d"])
def test_onnx_exports_an_index_input_as_a_gather(fn, tmp_path):
    # the exported model reads the index it is given, not the one exported with
    ort = pytest.importorskip("onnxruntime")
    x = _x(0, (4, 5, 3)).float()
    path = str(tmp_path / "g.onnx")
    tg.onnx.export(fn, (x, tg.tensor([[2, 1], [0, 0]])), path)
    sess = ort.InferenceSession(path)
    names = [n.name for n in sess.get_inputs()]
    i2 = tg.tensor([[0, 2], [1, 1]])
    got = sess.run(None, {names[0]: x.numpy(), names[1]: i2.numpy()})[0]
    np.testing.assert_allclose(got, fn(x, i2).numpy(), rtol=1e-6)


def test_onnx_index_inputs_beside_partial_slices_are_refused(tmp_path):
    # (masks and several index tensors export: tests/compile/test_onnx.py)
    x = tg.randn(4, 5)
    with pytest.raises(tg.onnx.UnsupportedOperatorError, match="index tensor computed"):
        tg.onnx.export(lambda x, i: x[i, 1:3], (x, tg.tensor([0, 2])),
                       str(tmp_path / "i.onnx"))
    with pytest.raises(tg.onnx.UnsupportedOperatorError, match="index tensor computed"):
        tg.onnx.export(lambda x: x[x[:, 0] > 0, 1:], (x,), str(tmp_path / "m.onnx"))


def test_python_numbers_read_from_index_tensors_are_guarded():
    # x[:n] with a one-element tensor n, tensor_split at tensor indices, repeats given
    # as a tensor: each value is read as Python ints, which the capture guards (a new
    # value captures again, never replays the old one)
    x = tg.arange(10.0)
    ns = [tg.tensor(k) for k in (3, 5, 3, 3)]
    for fn, calls in (
            (lambda x, n: x[:n] * 2.0, [(x, n) for n in ns]),
            (lambda x, n: tg.tensor_split(x, tg.stack([n, n + 1]))[0] * 2.0,
             [(x, n) for n in ns]),
            (lambda x, r: tg.repeat_interleave(x[:3], r) * 2.0,
             [(x, tg.tensor([1, k % 3 + 1, 2])) for k in (0, 1, 0, 0)])):
        c = tg.compile(fn)
        for args in calls:
            np.testing.assert_array_equal(c(*args).numpy(), fn(*args).numpy())
        assert c.stats()["replays"] >= 1 and c.stats()["recaptures"]
