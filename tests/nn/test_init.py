"""tg.nn.init's initialisers against torch.nn.init's: the same signature, and draws
with the same defining property."""
import inspect

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.init as init

torch = pytest.importorskip("torch")


def test_orthogonal_signature_is_pytorchs():
    ours = list(inspect.signature(init.orthogonal_).parameters)
    theirs = list(inspect.signature(torch.nn.init.orthogonal_).parameters)
    assert ours == theirs


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (4, 2, 3, 3), (8, 2, 1)])
def test_orthogonal_rows_or_columns_are_orthonormal_times_gain(shape):
    w = tg.empty(shape)
    assert init.orthogonal_(w, gain=2.0) is w
    m = w.numpy().reshape(shape[0], -1).astype(np.float64)
    t = torch.nn.init.orthogonal_(torch.empty(shape), gain=2.0).reshape(shape[0], -1)
    for a in (m, t.double().numpy()):  # PyTorch's has the same property
        gram = a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a
        np.testing.assert_allclose(gram, 4.0 * np.eye(len(gram)), atol=1e-5)


def test_orthogonal_is_seeded_and_takes_a_generator():
    a, b = tg.empty(4, 6), tg.empty(4, 6)
    tg.manual_seed(3)
    init.orthogonal_(a)
    tg.manual_seed(3)
    init.orthogonal_(b)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    g1, g2 = tg.Generator().manual_seed(7), tg.Generator().manual_seed(7)
    init.orthogonal_(a, generator=g1)
    init.orthogonal_(b, generator=g2)
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_orthogonal_refuses_fewer_than_two_dimensions_as_pytorch():
    with pytest.raises(ValueError, match="2 or more dimensions"):
        init.orthogonal_(tg.empty(3))
    with pytest.raises(ValueError, match="2 or more dimensions"):
        torch.nn.init.orthogonal_(torch.empty(3))
    assert init.orthogonal_(tg.empty(0, 3)).shape == (0, 3)
