"""``tg.nn.utils.parametrize`` / ``parametrizations`` / ``parameters_to_vector``
against PyTorch: parameter and buffer names, values, gradients."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.nn.utils import parametrizations as P, parametrize

RNG = np.random.default_rng(0)


def twin(tg_mod, torch_mod):
    """Copy tg_mod's parameters (float64) into torch_mod."""
    tg_mod.double()
    torch_mod.double()
    with torch.no_grad():
        for (n, p), (m, q) in zip(tg_mod.named_parameters(), torch_mod.named_parameters()):
            assert n == m
            q.copy_(torch.tensor(p.detach().numpy()))
    return tg_mod, torch_mod


def close(a, b, tol=1e-10):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def names(m):
    return [n for n, _ in m.named_parameters()], [n for n, _ in m.named_buffers()], \
        list(m.state_dict())


def test_weight_norm_names_values_and_gradients():
    ours, theirs = twin(tg.nn.Linear(4, 3), torch.nn.Linear(4, 3))
    for dim in (0, 1, None):
        a, b = twin(tg.nn.Linear(4, 3), torch.nn.Linear(4, 3))
        P.weight_norm(a, dim=dim)
        torch.nn.utils.parametrizations.weight_norm(b, dim=dim)
        assert names(a) == names(b)
        close(a.parametrizations.weight.original0, b.parametrizations.weight.original0)
        close(a.weight, b.weight)
        x = RNG.standard_normal((5, 4))
        (a(tg.tensor(x)) ** 2).sum().backward()
        (b(torch.tensor(x)) ** 2).sum().backward()
        for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
            close(p.grad, q.grad)
    assert type(ours).__name__ == "Linear"


def test_spectral_norm_names_and_value():
    a, b = twin(tg.nn.Linear(5, 6), torch.nn.Linear(5, 6))
    P.spectral_norm(a)
    torch.nn.utils.parametrizations.spectral_norm(b)
    assert names(a) == names(b)
    # with PyTorch's power-iteration vectors, the same weight (eval: no iteration)
    with tg.no_grad():
        a.parametrizations.weight[0]._u.copy_(tg.tensor(b.parametrizations.weight[0]._u.numpy()))
        a.parametrizations.weight[0]._v.copy_(tg.tensor(b.parametrizations.weight[0]._v.numpy()))
    a.eval()
    b.eval()
    close(a.weight, b.weight)
    # training: the power iteration converges to the largest singular value
    a.train()
    for _ in range(30):
        w = a.weight
    np.testing.assert_allclose(np.linalg.svd(w.detach().numpy(), compute_uv=False)[0], 1.0,
                               rtol=1e-6)
    x = tg.tensor(RNG.standard_normal((2, 5)))
    a(x).sum().backward()
    assert a.parametrizations.weight.original.grad is not None


def test_spectral_norm_of_a_transposed_conv_uses_dim_1():
    m = P.spectral_norm(tg.nn.ConvTranspose2d(3, 4, 2))
    assert m.parametrizations.weight[0].dim == 1
    assert tuple(m.parametrizations.weight[0]._u.shape) == (4,)


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6)])
@pytest.mark.parametrize("orthogonal_map", [None, "matrix_exp", "cayley", "householder"])
def test_orthogonal_against_torch(shape, orthogonal_map):
    a, b = twin(tg.nn.Linear(shape[1], shape[0]), torch.nn.Linear(shape[1], shape[0]))
    # (a non-square weight is completed to a square base with random columns, as
    # PyTorch's; the columns the weight reads depend on the weight alone)
    P.orthogonal(a, orthogonal_map=orthogonal_map)
    torch.nn.utils.parametrizations.orthogonal(b, orthogonal_map=orthogonal_map)
    assert names(a) == names(b)
    close(a.weight, b.weight, 1e-8)
    W = a.weight.detach().numpy()
    small = min(shape)
    G = W.T @ W if shape[0] >= shape[1] else W @ W.T
    np.testing.assert_allclose(G, np.eye(small), atol=1e-10)
    (a(tg.tensor(RNG.standard_normal((2, shape[1])))) ** 2).sum().backward()
    assert a.parametrizations.weight.original.grad is not None


class Symmetric(tg.nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).mT


class TSymmetric(torch.nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).mT


class Scale(tg.nn.Module):
    def forward(self, X):
        return 2 * X

    def right_inverse(self, X):
        return X / 2


class TScale(torch.nn.Module):
    def forward(self, X):
        return 2 * X

    def right_inverse(self, X):
        return X / 2


def test_register_chain_assign_and_remove():
    a, b = twin(tg.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    w_before = a.weight
    for m, sym, scale, pz in ((a, Symmetric, Scale, parametrize),
                              (b, TSymmetric, TScale, torch.nn.utils.parametrize)):
        pz.register_parametrization(m, "weight", sym())
        pz.register_parametrization(m, "weight", scale())
    assert names(a) == names(b)
    assert type(a).__name__ == type(b).__name__ == "ParametrizedLinear"
    assert parametrize.type_before_parametrizations(a) is tg.nn.Linear
    assert a.parametrizations.weight.original is w_before   # the same Parameter object
    close(a.weight, b.weight)
    # assignment goes through the right inverses (Symmetric has none: refused)
    with pytest.raises(RuntimeError, match="does not implement right_inverse"):
        a.weight = tg.ones(3, 3, dtype=tg.float64)
    # the other instances of the class are untouched
    assert not hasattr(type(tg.nn.Linear(2, 2)), "parametrizations")
    parametrize.remove_parametrizations(a, "weight")
    torch.nn.utils.parametrize.remove_parametrizations(b, "weight")
    assert names(a) == names(b) and type(a) is tg.nn.Linear
    assert a.weight is w_before
    close(a.weight, b.weight)


def test_right_inverse_on_assignment_and_leave_parametrized_false():
    m = tg.nn.Linear(2, 2).double()
    parametrize.register_parametrization(m, "weight", Scale())
    m.weight = tg.tensor([[2.0, 4.0], [6.0, 8.0]], dtype=tg.float64)
    assert m.parametrizations.weight.original.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert m.weight.tolist() == [[2.0, 4.0], [6.0, 8.0]]
    parametrize.remove_parametrizations(m, "weight", leave_parametrized=False)
    assert m.weight.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert isinstance(m.weight, tg.nn.Parameter)


def test_cached_computes_once():
    calls = []

    class Count(tg.nn.Module):
        def forward(self, X):
            calls.append(1)
            return X * 1
    m = parametrize.register_parametrization(tg.nn.Linear(2, 2), "weight", Count())
    calls.clear()
    with parametrize.cached():
        w1, w2 = m.weight, m.weight
    assert w1 is w2 and len(calls) == 1
    m.weight
    assert len(calls) == 2


def test_errors():
    m = tg.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="does not have a parameter, a buffer"):
        parametrize.register_parametrization(m, "nope", Symmetric())
    with pytest.raises(ValueError, match="does not have a parametrization on weight"):
        parametrize.remove_parametrizations(m, "weight")

    class Shrink(tg.nn.Module):
        def forward(self, X):
            return X[:1]
    with pytest.raises(ValueError, match="may not change the shape"):
        parametrize.register_parametrization(m, "weight", Shrink())
    with pytest.raises(ValueError, match="Expected a matrix"):
        P.orthogonal(m, "bias")


def test_parameters_to_vector_and_back():
    a, b = twin(tg.nn.Linear(3, 2), torch.nn.Linear(3, 2))
    v = tg.nn.utils.parameters_to_vector(a.parameters())
    vt = torch.nn.utils.parameters_to_vector(b.parameters())
    close(v, vt)
    (v * tg.arange(8, dtype=tg.float64)).sum().backward()
    (vt * torch.arange(8, dtype=torch.float64)).sum().backward()
    close(a.weight.grad, b.weight.grad)
    new = RNG.standard_normal(8)
    tg.nn.utils.vector_to_parameters(tg.tensor(new), a.parameters())
    torch.nn.utils.vector_to_parameters(torch.tensor(new), b.parameters())
    close(a.weight, b.weight)
    close(a.bias, b.bias)
    with pytest.raises(TypeError):
        tg.nn.utils.vector_to_parameters(new, a.parameters())
