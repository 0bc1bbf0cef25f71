"""Bad input gives a clear PyTorch-class error at the op, and corrupts nothing."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import devices


def _still_works():
    """A full recorded step after an error gives the right numbers."""
    assert tg.is_grad_enabled() and not tg.tape.state.tapes and not tg.tape.state.anomaly
    x = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_add_bad_broadcast_names_op_and_shapes():
    a, b = tg.ones(3, 4, requires_grad=True), tg.ones(5)
    with pytest.raises(ValueError) as info:
        a + b
    msg = str(info.value)
    assert "add" in msg and "(3, 4)" in msg and "(5,)" in msg
    with pytest.raises(ValueError, match=r"add.*\(3, 4\).*\(5,\)"):
        tg.add(a, b)
    _still_works()


@pytest.mark.parametrize("fn,name", [(lambda a, b: a - b, "sub"), (lambda a, b: a * b, "mul"),
                                     (lambda a, b: a / b, "div")])
def test_binary_bad_broadcast_names_op(fn, name):
    with pytest.raises(ValueError, match=name):
        fn(tg.ones(2, 3), tg.ones(4))
    _still_works()


def test_matmul_shape_mismatch():
    with pytest.raises(RuntimeError) as info:
        tg.ones(2, 3) @ tg.ones(4, 5)
    msg = str(info.value)
    assert "matmul" in msg and "(2, 3)" in msg and "(4, 5)" in msg
    _still_works()


def test_dim_out_of_range_is_index_error():
    x = tg.ones(2, 3)
    with pytest.raises(IndexError, match="sum"):
        x.sum(dim=2)
    with pytest.raises(IndexError):
        x.permute(0, 5)
    with pytest.raises(IndexError):
        x[5]
    _still_works()


def test_reshape_bad_size():
    with pytest.raises(RuntimeError, match="reshape"):
        tg.ones(2, 3).reshape(4, 2)
    _still_works()


def test_item_on_many_elements():
    with pytest.raises(RuntimeError, match="6 elements"):
        tg.ones(2, 3).item()
    _still_works()


def test_backward_non_scalar_without_gradient():
    x = tg.ones(3, requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="scalar"):
        y.backward()
    assert x.grad is None
    _still_works()


def test_in_place_on_leaf_requiring_grad():
    x = tg.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        x.mul_(2)
    assert x._version_number == 0 and x.grad_fn is None
    np.testing.assert_array_equal(x.detach().numpy(), np.ones(3))
    _still_works()


def test_failed_op_records_nothing():
    x = tg.ones(3, requires_grad=True)
    y = x * 2
    node = y.grad_fn
    with pytest.raises(ValueError):
        y + tg.ones(4)
    assert y.grad_fn is node
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_bad_argument_type():
    with pytest.raises(TypeError, match="add"):
        tg.add(tg.ones(2), "x")
    with pytest.raises(TypeError):
        tg.exp("not a tensor")
    _still_works()


def test_requires_grad_on_int_tensor():
    with pytest.raises(RuntimeError, match="float"):
        tg.ones(3, dtype=tg.int64, requires_grad=True)
    _still_works()


def test_grad_of_input_that_does_not_require_grad():
    x = tg.ones(2)
    w = tg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="require grad"):
        tg.grad((x * w).sum(), x)
    _still_works()


def test_device_mixing_error_names_both_devices():
    with pytest.raises(RuntimeError) as info:
        devices.check_same("add", [tg.device("cpu"), tg.device("cuda:0")])
    msg = str(info.value)
    assert "add" in msg and "cpu" in msg and "cuda:0" in msg


def test_cuda_unavailable_says_why():
    if tg.cuda.is_available():
        pytest.skip("a GPU is present; see tests/gpu")
    for call in (lambda: tg.ones(2).to("cuda"), lambda: tg.ones(2).cuda(),
                 lambda: tg.ones(2, device="cuda")):
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            call()
    _still_works()


def test_bad_device_string():
    with pytest.raises((ValueError, RuntimeError), match="tpu"):
        tg.device("tpu")
    with pytest.raises((ValueError, RuntimeError)):
        tg.ones(2).to("tpu")


def test_error_inside_no_grad_restores_mode():
    with pytest.raises(ValueError):
        with tg.no_grad():
            tg.ones(2) + tg.ones(3)
    _still_works()


def test_error_inside_tape_leaves_no_tape_open():
    x = tg.ones(2)
    with pytest.raises(ValueError):
        with tg.Tape() as tape:
            tape.watch(x)
            x + tg.ones(3)
    _still_works()


def test_errors_are_not_numpy_tracebacks():
    """The raised error is the op's own, not a chained NumPy error."""
    with pytest.raises(ValueError) as info:
        tg.ones(3, 4) + tg.ones(5)
    assert info.value.__cause__ is None
    assert "operands could not be broadcast" not in str(info.value)
