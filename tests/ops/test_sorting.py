"""mode and unique_consecutive where the registry's samples cannot reach: mode's gradient
at ties and keepdim, unique_consecutive along a dim and on an empty input, against
PyTorch."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def test_mode_gradient_and_keepdim_like_pytorch():
    x = np.array([[1.0, 2.0, 2.0, 3.0, 1.0, 2.0], [0.5, 0.5, -1.0, -1.0, 4.0, 4.0]])
    res = []
    for L in (tg, torch):
        X = L.tensor(x, requires_grad=True)
        v, i = L.mode(X, 1, keepdim=True)
        (v * L.tensor([[2.0], [3.0]])).sum().backward()
        res.append((v.detach().numpy(), i.numpy(), X.grad.numpy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b)
    assert tuple(tg.tensor(x).mode().values.shape) == (2,)


def test_unique_consecutive_dim_and_empty_like_pytorch():
    a = np.array([[1, 1, 2], [1, 1, 2], [3, 1, 1], [3, 1, 1]])
    for kw in ({"dim": 0, "return_inverse": True, "return_counts": True},
               {"dim": 1, "return_counts": True}, {"return_inverse": True}):
        ours = tg.unique_consecutive(tg.tensor(a), **kw)
        theirs = torch.unique_consecutive(torch.tensor(a), **kw)
        for o, t in zip(ours, theirs):
            np.testing.assert_array_equal(o.numpy(), t.numpy())
    e = tg.unique_consecutive(tg.tensor(np.zeros(0)))
    assert tuple(e.shape) == (0,)


def test_searchsorted_sorter_and_side_as_torch():
    """``sorter``: indices that sort an unsorted sequence; the result indexes the sorted
    order. Its shape and dtype, and side against right, are checked as PyTorch's."""
    rng = np.random.default_rng(0)
    seq, v = rng.standard_normal((2, 6)), rng.standard_normal((2, 4))
    srt = np.argsort(seq, -1)
    for side in ("left", "right"):
        got = tg.searchsorted(tg.tensor(seq), tg.tensor(v), sorter=tg.tensor(srt), side=side)
        want = torch.searchsorted(torch.tensor(seq), torch.tensor(v),
                                  sorter=torch.tensor(srt), side=side)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        got = tg.searchsorted(tg.tensor(seq[1]), tg.tensor(v[1]), sorter=tg.tensor(srt[1]),
                              side=side)
        np.testing.assert_array_equal(got.numpy(), np.searchsorted(seq[1], v[1], side=side,
                                                                   sorter=srt[1]))
    for bad, match in ((dict(sorter=tg.tensor(srt[:, :3])), "same size"),
                       (dict(sorter=tg.tensor(srt).int()), "long dtype"),
                       (dict(side="left", right=True), "opposites")):
        with pytest.raises(RuntimeError, match=match):
            tg.searchsorted(tg.tensor(seq), tg.tensor(v), **bad)
