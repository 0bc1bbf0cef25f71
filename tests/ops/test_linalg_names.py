"""tg.linalg's composite names (cross, vecdot, multi_dot, matrix_rank, cond, diagonal,
vander, the _ex forms, tensorinv, tensorsolve) against torch.linalg: values and
gradients in float64, result types, and errors."""
import numpy as np
import pytest
import torch

import tapegrad as tg

R = np.random.default_rng(11)
TL = torch.linalg


def _check(tg_fn, torch_fn, arrays, grad=True, rtol=1e-9):
    """Values (and, when ``grad``, the gradients of a random weighting of the output
    with respect to every array) of ``tg_fn`` against ``torch_fn``."""
    xs = [tg.tensor(a, requires_grad=grad) for a in arrays]
    ts = [torch.tensor(a, requires_grad=grad) for a in arrays]
    y, ty = tg_fn(*xs), torch_fn(*ts)
    assert tuple(y.shape) == tuple(ty.shape)
    assert str(y.dtype).split(".")[-1] == str(ty.dtype).split(".")[-1]
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=rtol, atol=1e-12)
    if grad:
        w = R.normal(size=tuple(ty.shape))
        g = tg.grad((y * tg.tensor(w)).sum(), xs)
        tgr = torch.autograd.grad((ty * torch.tensor(w)).sum(), ts)
        for a, b in zip(g, tgr):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-7, atol=1e-10)


def _wc(*shape):
    return R.normal(size=shape) + 3 * np.eye(shape[-1])


def test_cross():
    a, b = R.normal(size=(4, 3)), R.normal(size=(1, 3))
    _check(tg.linalg.cross, TL.cross, [a, b])
    a, b = R.normal(size=(3, 2)), R.normal(size=(3, 2))
    _check(lambda x, y: tg.linalg.cross(x, y, dim=0), lambda x, y: TL.cross(x, y, dim=0), [a, b])
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        tg.linalg.cross(tg.ones(3), tg.ones(4, 3))
    with pytest.raises(RuntimeError, match="length 3"):
        tg.linalg.cross(tg.ones(4, 2), tg.ones(4, 2))


def test_vecdot():
    _check(tg.linalg.vecdot, TL.vecdot, [R.normal(size=(3,)), R.normal(size=(4, 3))])
    _check(lambda x, y: tg.linalg.vecdot(x, y, dim=0), lambda x, y: TL.vecdot(x, y, dim=0),
           [R.normal(size=(2, 5)), R.normal(size=(2, 1))])
    with pytest.raises(RuntimeError, match="same dtype"):
        tg.linalg.vecdot(tg.ones(3), tg.ones(3, dtype=tg.float64))
    with pytest.raises(RuntimeError, match="floating"):
        tg.linalg.vecdot(tg.arange(3), tg.arange(3))


@pytest.mark.parametrize("shapes", [[(3, 4), (4, 5)], [(4,), (4, 2), (2, 3), (3,)],
                                    [(2, 3), (3, 4), (4,)], [(3,), (3,)]])
def test_multi_dot(shapes):
    _check(lambda *t: tg.linalg.multi_dot(list(t)), lambda *t: TL.multi_dot(list(t)),
           [R.normal(size=s) for s in shapes])


def test_multi_dot_errors():
    x = tg.ones(3, 3, dtype=tg.float64)
    with pytest.raises(RuntimeError, match="at least 2"):
        tg.linalg.multi_dot([x])
    with pytest.raises(RuntimeError, match="first tensor must be 1D or 2D"):
        tg.linalg.multi_dot([tg.ones(2, 3, 3, dtype=tg.float64), x])
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        tg.linalg.multi_dot([tg.ones(3, 4, dtype=tg.float64), x])
    with pytest.raises(RuntimeError, match="same dtype"):
        tg.linalg.multi_dot([tg.ones(3, 3), x])


def test_matrix_rank():
    low = R.normal(size=(2, 5, 2)) @ R.normal(size=(2, 2, 4))  # rank 2 of 4
    full = R.normal(size=(3, 4))
    for a in (low, full, np.zeros((3, 3)), np.zeros((2, 0, 3))):
        _check(tg.linalg.matrix_rank, TL.matrix_rank, [a], grad=False)
    spd = low @ np.swapaxes(low, -1, -2)
    for kw in ({"hermitian": True}, {"atol": 1.0}, {"rtol": 0.5}, {"atol": 0.1, "rtol": 0.2}):
        _check(lambda x: tg.linalg.matrix_rank(x, **kw), lambda x: TL.matrix_rank(x, **kw),
               [spd], grad=False)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        tg.linalg.matrix_rank(tg.ones(3))


@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", float("inf"), float("-inf"), 1, -1])
def test_cond(p):
    a = _wc(2, 3, 3)
    _check(lambda x: tg.linalg.cond(x, p), lambda x: TL.cond(x, p), [a], grad=False)
    # (torch.linalg.cond's own backward fails for these p: its definition's instead)
    ref = ((lambda x: TL.cond(x, p)) if p in (None, 2, -2)
           else (lambda x: TL.matrix_norm(x, p) * TL.matrix_norm(TL.inv(x), p)))
    _check(lambda x: tg.linalg.cond(x, p), ref, [a])


def test_cond_rectangular_singular_and_errors():
    _check(tg.linalg.cond, TL.cond, [R.normal(size=(3, 5))])
    a = np.stack([np.zeros((3, 3)), _wc(3, 3)])
    _check(lambda x: tg.linalg.cond(x, 1), lambda x: TL.cond(x, 1), [a], grad=False)
    with pytest.raises(RuntimeError, match="square"):
        tg.linalg.cond(tg.ones(3, 4, dtype=tg.float64), "fro")
    with pytest.raises(RuntimeError, match="invalid norm type"):
        tg.linalg.cond(tg.eye(3, dtype=tg.float64), 3)


def test_diagonal():
    a = R.normal(size=(2, 3, 4))
    _check(tg.linalg.diagonal, TL.diagonal, [a])
    _check(lambda x: tg.linalg.diagonal(x, offset=1, dim1=0, dim2=2),
           lambda x: TL.diagonal(x, offset=1, dim1=0, dim2=2), [a])


def test_vander():
    _check(tg.linalg.vander, TL.vander, [R.normal(size=(2, 4))])
    _check(lambda x: tg.linalg.vander(x, N=3), lambda x: TL.vander(x, N=3),
           [np.array([0.0, 1.5, -2.0])])
    y = tg.linalg.vander(tg.arange(3))
    assert y.dtype == tg.int64
    np.testing.assert_array_equal(y.numpy(), TL.vander(torch.arange(3)).numpy())
    with pytest.raises(RuntimeError, match="N must be greater than 1"):
        tg.linalg.vander(tg.ones(3), N=1)


def _info_equal(info, tinfo):
    assert info.dtype == tg.int32
    np.testing.assert_array_equal(info.numpy(), tinfo.numpy())


def test_inv_ex():
    a = _wc(2, 3, 3)
    _check(lambda x: tg.linalg.inv_ex(x).inverse, lambda x: TL.inv_ex(x).inverse, [a])
    r = tg.linalg.inv_ex(tg.tensor(a))
    assert type(r).__name__ == "linalg_inv_ex" and r._fields == ("inverse", "info")
    _info_equal(r.info, TL.inv_ex(torch.tensor(a)).info)
    bad = np.stack([a[0], np.diag([1.0, 0.0, 2.0]), np.zeros((3, 3))])
    r, tr = tg.linalg.inv_ex(tg.tensor(bad)), TL.inv_ex(torch.tensor(bad))
    _info_equal(r.info, tr.info)
    np.testing.assert_allclose(r.inverse.numpy()[0], tr.inverse.numpy()[0], rtol=1e-10)
    with pytest.raises(tg.linalg.LinAlgError):
        tg.linalg.inv_ex(tg.tensor(bad), check_errors=True)


def test_cholesky_ex():
    a = _wc(2, 3, 3)
    spd = a @ np.swapaxes(a, -1, -2)
    for upper in (False, True):
        _check(lambda x: tg.linalg.cholesky_ex(x, upper=upper).L,
               lambda x: TL.cholesky_ex(x, upper=upper).L, [spd])
    r = tg.linalg.cholesky_ex(tg.tensor(spd))
    assert type(r).__name__ == "linalg_cholesky_ex" and r._fields == ("L", "info")
    _info_equal(r.info, TL.cholesky_ex(torch.tensor(spd)).info)
    bad = np.stack([spd[0], -np.eye(3), np.diag([1.0, 2.0, -1.0])])
    r, tr = tg.linalg.cholesky_ex(tg.tensor(bad)), TL.cholesky_ex(torch.tensor(bad))
    _info_equal(r.info, tr.info)
    np.testing.assert_allclose(r.L.numpy()[0], tr.L.numpy()[0], rtol=1e-10)
    with pytest.raises(tg.linalg.LinAlgError):
        tg.linalg.cholesky_ex(tg.tensor(bad), check_errors=True)


@pytest.mark.parametrize("bshape,left", [((3,), True), ((2, 3), True), ((2, 3, 4), True),
                                         ((4, 3), False)])
def test_solve_ex(bshape, left):
    a, b = _wc(2, 3, 3), R.normal(size=bshape)
    _check(lambda x, y: tg.linalg.solve_ex(x, y, left=left).result,
           lambda x, y: TL.solve_ex(x, y, left=left).result, [a, b])
    bad = np.stack([a[0], np.zeros((3, 3))])
    r, tr = (tg.linalg.solve_ex(tg.tensor(bad), tg.tensor(b), left=left),
             TL.solve_ex(torch.tensor(bad), torch.tensor(b), left=left))
    assert r._fields == ("result", "info") and tuple(r.result.shape) == tuple(tr.result.shape)
    _info_equal(r.info, tr.info)
    np.testing.assert_allclose(r.result.numpy()[0], tr.result.numpy()[0], rtol=1e-10)
    assert np.isnan(r.result.numpy()[1]).all()
    with pytest.raises(tg.linalg.LinAlgError):
        tg.linalg.solve_ex(tg.tensor(bad), tg.tensor(b), left=left, check_errors=True)


def test_tensorinv():
    a = _wc(6, 6).reshape(2, 3, 6)
    _check(lambda x: tg.linalg.tensorinv(x, ind=2), lambda x: TL.tensorinv(x, ind=2), [a])
    _check(lambda x: tg.linalg.tensorinv(x, ind=1), lambda x: TL.tensorinv(x, ind=1),
           [_wc(6, 6).reshape(6, 2, 3)])
    with pytest.raises(RuntimeError, match="prod"):
        tg.linalg.tensorinv(tg.ones(2, 3, 4, dtype=tg.float64), ind=1)
    with pytest.raises(RuntimeError, match="positive"):
        tg.linalg.tensorinv(tg.ones(2, 2, dtype=tg.float64), ind=0)


def test_tensorsolve():
    a, b = _wc(6, 6).reshape(2, 3, 6), R.normal(size=(2, 3))
    _check(tg.linalg.tensorsolve, TL.tensorsolve, [a, b])
    a2 = np.moveaxis(_wc(6, 6).reshape(6, 2, 3), 0, 1)  # (2, 6, 3), dim 0 moved to the end
    _check(lambda x, y: tg.linalg.tensorsolve(x, y, dims=(0,)),
           lambda x, y: TL.tensorsolve(x, y, dims=(0,)), [a2, R.normal(size=(6,))])
    with pytest.raises(RuntimeError, match="tensorsolve"):
        tg.linalg.tensorsolve(tg.ones(2, 3, 4, dtype=tg.float64), tg.ones(2, 3, dtype=tg.float64))


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("ashape,bshape", [((2, 5, 3), (2, 5, 2)), ((5, 3), (5,)),
                                           ((3, 5), (3, 2)), ((2, 4, 4), (2, 4))])
def test_lstsq(driver, ashape, bshape):
    a, b = R.normal(size=ashape), R.normal(size=bshape)
    r = tg.linalg.lstsq(tg.tensor(a), tg.tensor(b), driver=driver)
    tr = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
    assert type(r).__name__ == "linalg_lstsq"
    assert r._fields == ("solution", "residuals", "rank", "singular_values")
    for x, y in zip(r, tr):
        assert tuple(x.shape) == tuple(y.shape)
        assert str(x.dtype).split(".")[-1] == str(y.dtype).split(".")[-1]
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-9, atol=1e-12)
    if driver in (None, "gelsd"):
        _check(lambda x, y: tg.linalg.lstsq(x, y, driver=driver).solution,
               lambda x, y: torch.linalg.lstsq(x, y, driver=driver).solution, [a, b])


def test_lstsq_rank_deficient_and_errors():
    a = R.normal(size=(5, 2)) @ R.normal(size=(2, 3))  # rank 2: the minimum-norm solution
    b = R.normal(size=(5, 2))
    r = tg.linalg.lstsq(tg.tensor(a), tg.tensor(b), driver="gelsd")
    tr = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver="gelsd")
    np.testing.assert_allclose(r.solution.numpy(), tr.solution.numpy(), rtol=1e-8, atol=1e-10)
    assert int(r.rank) == int(tr.rank) == 2
    x = tg.ones(5, 3, dtype=tg.float64)
    with pytest.raises(RuntimeError, match="driver"):
        tg.linalg.lstsq(x, tg.ones(5, 2, dtype=tg.float64), driver="qr")
    with pytest.raises(RuntimeError, match="should match"):
        tg.linalg.lstsq(x, tg.ones(4, 2, dtype=tg.float64))
    with pytest.raises(RuntimeError, match="same dtype"):
        tg.linalg.lstsq(x, tg.ones(5, 2))
