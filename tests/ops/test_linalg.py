"""tg.linalg.solve_triangular's public function beyond the registry's samples (which
drive the op ``linalg_solve_triangular``: values, gradients of every order, forward
mode, batching): ``left=False``, and its argument errors, against PyTorch."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.testing import gradcheck, gradgradcheck

R = np.random.default_rng(3)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("unitriangular", [False, True])
def test_left_false_matches_torch(upper, unitriangular):
    a = R.normal(size=(2, 3, 3)) + 3 * np.eye(3)
    b = R.normal(size=(4, 3))
    A, B = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
    tA, tB = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    x = tg.linalg.solve_triangular(A, B, upper=upper, left=False, unitriangular=unitriangular)
    tx = torch.linalg.solve_triangular(tA, tB, upper=upper, left=False,
                                       unitriangular=unitriangular)
    np.testing.assert_allclose(x.detach().numpy(), tx.detach().numpy(), rtol=1e-10)
    w = R.normal(size=tuple(x.shape))
    g = tg.grad((x * tg.tensor(w)).sum(), [A, B])
    tg_ = torch.autograd.grad((tx * torch.tensor(w)).sum(), [tA, tB])
    for a_, b_ in zip(g, tg_):
        np.testing.assert_allclose(a_.numpy(), b_.numpy(), rtol=1e-9, atol=1e-12)

    def f(A, B):
        return tg.linalg.solve_triangular(A, B, upper=upper, left=False,
                                          unitriangular=unitriangular)
    assert gradcheck(f, (A, B)) and gradgradcheck(f, (A, B))


def test_errors_as_torch():
    A = tg.eye(3, dtype=tg.float64)
    with pytest.raises(RuntimeError, match="linalg_solve_triangular"):
        tg.linalg.solve_triangular(A, tg.ones(3, dtype=tg.float64), upper=False)  # a vector
    with pytest.raises(RuntimeError):
        torch.linalg.solve_triangular(torch.eye(3), torch.ones(3), upper=False)
    with pytest.raises(TypeError, match="upper"):
        tg.linalg.solve_triangular(A, tg.ones(3, 1, dtype=tg.float64), upper=None)
    with pytest.raises(TypeError):
        tg.linalg.solve_triangular(A, tg.ones(3, 1, dtype=tg.float64))  # upper is required
