"""The differential fuzzer's programs (``tapegrad.testing.fuzz``: registry ops, views,
in-place writes through them) as functions of their inputs, run through ``tg.compile``
and eagerly: every compiled call's values and gradients must be eager's. (The fuzzer
compares eager tapegrad with PyTorch; this compares replays with eager, where
aliasing and layouts decide what an in-place write reaches.) 50 programs, in both
tiers (each costs a capture and replays); longer runs offline with a larger
``max_examples``."""
import pytest

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

import tapegrad as tg  # noqa: E402
from tapegrad.testing import fuzz  # noqa: E402


@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(fuzz.programs())
def test_compiled_programs_agree_with_eager(program):
    what = fuzz.compare_compiled(program, tg.compile)
    assert not what, "\n".join(what + ["program:", program.source()])


def test_a_write_through_a_diagonal_view_agrees():
    """The first program this found (a replay's write through ``diagonal`` reached a
    copy)."""
    src = ("x0 = tg.tensor([[0.875]], dtype=tg.float64, requires_grad=True)\n"
           "v1 = x0.clone()\nv2 = v1.diagonal()\nv2[0] = -2.0\nv3 = v1.matmul(v2)\n"
           "v3.sub_(v2)\noutputs = [v1, v2, v3]\n")
    assert fuzz.compare_compiled(src, tg.compile) == []


def test_a_value_written_in_place_is_not_recomputed_from_before_the_write():
    """The second: remat recomputed ``v1`` (``x * 1.0``) inside the kernel of a later
    reader, after ``v1.add_(1.0)`` had written it (a kernel computing a value again
    must not cross an in-place write into what it reads or makes)."""
    src = ("x0 = tg.tensor([1.359375], dtype=tg.float64, requires_grad=True)\n"
           "v1 = x0 * 1.0\nv1.add_(x0, alpha=0.5)\nv2 = tg.neg(x0)\n"
           "v3 = tg.maximum(v1, v2)\noutputs = [v1, v2, v3]\n")
    assert fuzz.compare_compiled(src, tg.compile) == []


def test_a_zero_dim_gradient_into_a_planned_buffer():
    """The third: a replayed adjoint handed a NumPy scalar (a 0-d cotangent) to
    ``index_put``'s zeroing kernel, whose memory check asked it for a CuPy pointer."""
    src = ("x0 = tg.tensor([1.359375], dtype=tg.float64, requires_grad=True)\n"
           "v1 = tg.sum(x0)\nv2 = x0[..., :]\nv3 = tg.maximum(v1, tg.neg(x0))\n"
           "v4 = tg.amax(x0, dim=0, keepdim=True)\nv5 = v1.clone()\nv5.copy_(v1)\n"
           "outputs = [v1, v2, v3, v4, v5]\n")
    assert fuzz.compare_compiled(src, tg.compile) == []


def test_an_in_place_op_on_a_clone_reads_this_calls_values():
    """Found once each call got new input values: ``v.mul_(x0)`` recorded with grad
    reads a copy of ``v``'s old values that the in-place path made with NumPy; the
    capture took the copy (kept alive by the graph) for an external array, and every
    replay multiplied the first call's ``x1`` (a cast made it survive: float32 times
    float64). The copy is now a step of the program."""
    src = ("x0 = tg.tensor([1.359375], dtype=tg.float64, requires_grad=True)\n"
           "x1 = tg.tensor([1.359375], dtype=tg.float32, requires_grad=True)\n"
           "v1 = x1.clone()\nv1.mul_(x0)\noutputs = [v1]\n")
    assert fuzz.compare_compiled(src, tg.compile) == []


def test_an_in_place_op_on_a_clone_replays():
    """The same program in one dtype ran eagerly on every call (the copy died with
    the call); it replays now, with the values and gradients of each call."""
    def f(x0, x1):
        v = x1.clone()
        v.mul_(x0)
        return v
    c = tg.compile(f)
    for k in range(4):
        a = tg.tensor([1.0 + k], requires_grad=True)
        b = tg.tensor([2.0 + k], requires_grad=True)
        c(a, b).sum().backward()
        assert a.grad.tolist() == [2.0 + k] and b.grad.tolist() == [1.0 + k]
    assert c.stats()["replays"] == 2 and c.stats()["eager_calls"] == 0


def test_an_adjoints_branch_on_its_values_is_taken_afresh():
    """Found by the fuzzer once later calls got new values: prod's adjoint branches on
    whether its input holds a zero (``out / x`` without, the product of the others
    with); the capture took the first call's branch, and a replay with a zero (relu of
    a negative) gave NaN. A Python value read from a traced array now makes the
    adjoint replay whole, its branch taken on each replay's values."""
    src = ("x0 = tg.tensor([[-0.5, -1.40625, 1.1875, -0.6875]], dtype=tg.float64, "
           "requires_grad=True)\nv1 = x0.mT\nv2 = F.relu(v1)\n"
           "v3 = tg.prod(v2, dim=0, keepdim=False)\noutputs = [v1, v2, v3]\n")
    assert fuzz.compare_compiled(src, tg.compile) == []
