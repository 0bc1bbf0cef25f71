"""No op but a view op hands back memory of its inputs. A kernel whose result is a
view of an input (NumPy's einsum for a permutation, np.diagonal) without the op
being declared a view gets its own version counter: an in-place write through the
result then changes the input behind autograd's back, and a saved input is read
modified with no error (a silently wrong gradient). An op may return an input
itself (``sum_to`` to the same shape, ``to`` the same device): the funnel then hands
back the same Tensor, as PyTorch does."""
import os

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops_registry import get

_LIBRARY = os.path.dirname(tg.__file__)


def _builtin_ops():
    """The library's own kernels (not the ops other test modules register, e.g.
    tests/fusion's chains: declared outside the package)."""
    return sorted(o.name for o in tg.ops_registry.list_ops()
                  if o.kind != "view" and o.composite is None
                  and (o.declared_at is None or o.declared_at[0].startswith(_LIBRARY)))


OPS = _builtin_ops()


def test_no_kernel_returns_a_view_of_its_inputs():
    bad = []
    for name in OPS:
        op = get(name)
        for s in op.samples(np.float64):
            arrays = [a for a in s.args if isinstance(a, np.ndarray)]
            try:
                res = op.compute(*s.args, **s.attrs)
            except Exception:  # (a sample for another path: its own tests run it)
                continue
            for r in res if isinstance(res, (tuple, list)) else (res,):
                if isinstance(r, np.ndarray) and any(
                        np.may_share_memory(r, a) and r is not a for a in arrays):
                    bad.append(name)
    assert not sorted(set(bad)), f"kernels returning a view of an input: {sorted(set(bad))}"


@pytest.mark.parametrize("make", [lambda h: tg.einsum("ij->ji", h),
                                  lambda h: tg.einsum("ii->i", h[:, :2]),
                                  lambda h: tg.diag(h)], ids=["einsum_T", "einsum_diag", "diag"])
def test_writing_into_the_result_leaves_the_input_alone(make):
    w = tg.tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True)
    h = w * 1.0
    z = (h * h).sum()
    make(h).mul_(0)
    z.backward()
    np.testing.assert_array_equal(h.detach().numpy(), np.arange(1.0, 7.0).reshape(2, 3))
    np.testing.assert_array_equal(w.grad.numpy(), 2 * np.arange(1.0, 7.0).reshape(2, 3))
