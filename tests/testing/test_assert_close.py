"""tg.testing.assert_close against torch.testing.assert_close: the same verdicts, the
same exception classes and the same failure messages (tapegrad's dtype and shape
names in place of PyTorch's)."""
import numpy as np
import pytest
import torch

import tapegrad as tg

T = tg.tensor


def _outcome(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    return None, None


CASES = [
    ([1., 2., 3.], [1., 2.5, 3.], {}),
    ([[0., 0.], [0., 0.]], [[0., 0.], [0., 1.]], {}),
    (1.0, 2.0, {}),                        # 0-d: "Scalars are not close!"
    ([1, 2], [1, 3], {}),                  # integers: exact
    ([True], [False], {}),
    ([float("nan")], [float("nan")], {}),
    ([float("nan")], [float("nan")], {"equal_nan": True}),
    ([1.0, 2.0], [1.0, 2.0 + 1e-7], {}),
    ([1.0], [1.001], {"rtol": 1e-2, "atol": 0.0}),
    ([1.0], [2.0], {"msg": "custom"}),
]


@pytest.mark.parametrize("a, e, kw", CASES)
def test_tensors_as_torch(a, e, kw):
    got = _outcome(tg.testing.assert_close, T(a), T(e), **kw)
    want = _outcome(torch.testing.assert_close, torch.tensor(a), torch.tensor(e), **kw)
    assert got == want


@pytest.mark.parametrize("dtype, tdtype", [(tg.bfloat16, torch.bfloat16),
                                           (tg.float16, torch.float16)])
def test_half_width_tolerances(dtype, tdtype):
    for a, e in (([1.0], [1.0078125]), ([1.0], [1.03125]), ([1.0, 2.0], [1.0, 2.001])):
        got = _outcome(tg.testing.assert_close, T(a, dtype=dtype), T(e, dtype=dtype))
        want = _outcome(torch.testing.assert_close, torch.tensor(a, dtype=tdtype),
                        torch.tensor(e, dtype=tdtype))
        assert got[0] is want[0]
    # without the dtype check, the looser dtype's tolerances
    tg.testing.assert_close(T([1.0], dtype=tg.float16), T([1.0009765625]), check_dtype=False)


@pytest.mark.parametrize("a, e", [
    ({"a": [1.0]}, {"a": [2.0]}),
    ((1.0,), (1.0, 1.0)),
    ({"a": 1.0}, {"b": 1.0}),
    ([1, 2], [1, 3]),
    (1.0, 1.5),
    (([1.0], [1.0, 2.0]), ([1.0], [1.0, 2.0])),
    (1, 1.0),  # (Python numbers of two types: a dtype mismatch)
    ((1, 2.0), (1.0, 2.0)),
    ((1, 2), (1, 2)),
])
def test_containers_as_torch(a, e):
    def conv(x, mk):
        if isinstance(x, dict):
            return {k: conv(v, mk) for k, v in x.items()}
        if isinstance(x, tuple):
            return tuple(conv(v, mk) for v in x)
        return mk(x) if isinstance(x, list) else x
    got = _outcome(tg.testing.assert_close, conv(a, T), conv(e, T))
    want = _outcome(torch.testing.assert_close, conv(a, torch.tensor), conv(e, torch.tensor))
    assert got == want


def test_errors_as_torch():
    with pytest.raises(ValueError, match="Both 'rtol' and 'atol'"):
        tg.testing.assert_close(T([1.0]), T([1.0]), rtol=1e-3)
    with pytest.raises(AssertionError, match="attribute 'shape' do not match"):
        tg.testing.assert_close(T([1.0, 2.0]), T([1.0, 2.0, 3.0]))
    with pytest.raises(AssertionError, match="attribute 'dtype' do not match"):
        tg.testing.assert_close(T([1.0]), T([1.0], dtype=tg.float64))
    with pytest.raises(AssertionError, match="^XTensor-likes"):
        tg.testing.assert_close(T([1.0]), T([2.0]), msg=lambda m: "X" + m)
    with pytest.raises(TypeError, match="No comparison pair"):
        tg.testing.assert_close(object(), object())
    # tensor-likes of other libraries compare by value
    tg.testing.assert_close(T([1.0], dtype=tg.bfloat16),
                            torch.tensor([1.0], dtype=torch.bfloat16))
    tg.testing.assert_close(T([1.0]), np.array([1.0], np.float32))


def test_check_stride_as_torch():
    """``check_stride=True`` compares the strides (in elements), with PyTorch's message;
    off by default."""
    pairs = []
    for L in (tg, torch):
        a, b = L.ones(2, 3), L.ones(3, 2).t()
        L.testing.assert_close(a, b)
        L.testing.assert_close(a, L.ones(2, 3), check_stride=True)
        with pytest.raises(AssertionError) as info:
            L.testing.assert_close(a, b, check_stride=True)
        pairs.append(str(info.value))
    assert pairs[0] == pairs[1]
    with pytest.raises(AssertionError, match="stride"):
        tg.testing.assert_close(np.ones((2, 3)), np.ones((3, 2)).T, check_stride=True)
