"""Explicit ``tg.Tape`` semantics (TensorFlow's GradientTape) and nesting."""
import numpy as np
import pytest

import tapegrad as tg


def f64(v, requires_grad=False):
    return tg.tensor(np.asarray(v, dtype=np.float64), requires_grad=requires_grad)


def test_watch_records_plain_tensors():
    x = f64(3.0)
    with tg.Tape() as tape:
        tape.watch(x)
        y = x * x
    g = tape.gradient(y, x)
    assert g.item() == 6.0


def test_unwatched_constant_gives_none():
    x = f64(3.0)
    c = f64(2.0)
    with tg.Tape() as tape:
        tape.watch(x)
        y = x * c
    gx, gc = tape.gradient(y, [x, c])
    assert gx.item() == 2.0 and gc is None


def test_requires_grad_tensors_are_watched_automatically():
    x = f64([1.0, 2.0], requires_grad=True)
    with tg.Tape() as tape:
        y = (x * x).sum()
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [2.0, 4.0])
    assert x.grad is None, "Tape.gradient must not touch .grad"


def test_watch_is_local_to_its_tape():
    x = f64(2.0)
    with tg.Tape() as t1:
        t1.watch(x)
        y1 = x * x
    with tg.Tape() as t2:
        y2 = x * x  # not watched on t2, and x does not require grad
    assert t1.gradient(y1, x).item() == 4.0
    assert t2.gradient(y2, x) is None


def test_nothing_recorded_after_the_block():
    x = f64(2.0)
    with tg.Tape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
    z = y * x  # after the block: not on the tape
    assert tape.gradient(y, x).item() == 4.0
    assert tape.gradient(z, x) is None


def test_structure_of_sources_is_kept():
    x, y = f64(1.0), f64(2.0)
    with tg.Tape() as tape:
        tape.watch([x, y])
        z = x * y + y
    g = tape.gradient(z, {"a": x, "b": [y]})
    assert isinstance(g, dict) and isinstance(g["b"], list)
    assert g["a"].item() == 2.0 and g["b"][0].item() == 2.0
    with tg.Tape() as tape:
        tape.watch((x, y))
        z = x * y
    g = tape.gradient(z, (x, y))
    assert isinstance(g, tuple) and [v.item() for v in g] == [2.0, 1.0]


def test_non_scalar_target_is_summed():
    x = f64([1.0, 2.0, 3.0])
    with tg.Tape() as tape:
        tape.watch(x)
        y = x * x
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [2.0, 4.0, 6.0])


def test_output_gradients():
    x = f64([1.0, 2.0])
    with tg.Tape() as tape:
        tape.watch(x)
        y = x * x
    g = tape.gradient(y, x, output_gradients=f64([1.0, -1.0]))
    np.testing.assert_array_equal(g.numpy(), [2.0, -4.0])


def test_non_persistent_tape_gradient_once():
    x = f64(3.0)
    with tg.Tape() as tape:
        tape.watch(x)
        y = x * x
        z = y * x
    tape.gradient(y, x)
    with pytest.raises(RuntimeError, match="persistent"):
        tape.gradient(z, x)


def test_persistent_tape_many_gradients():
    x = f64(3.0)
    with tg.Tape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
        z = y * x
    assert tape.gradient(y, x).item() == 6.0
    assert tape.gradient(z, x).item() == 27.0
    assert tape.gradient(z, x).item() == 27.0


def test_stop_recording():
    x = f64(3.0)
    with tg.Tape() as tape:
        tape.watch(x)
        y = x * x
        with tape.stop_recording():
            z = y * 100  # not recorded on tape
        w = y + z
    assert tape.gradient(w, x).item() == 6.0


def test_stop_recording_target_is_unconnected():
    x = f64(3.0)
    with tg.Tape(persistent=True) as tape:
        tape.watch(x)
        with tape.stop_recording():
            z = x * x
    assert tape.gradient(z, x) is None


def test_nested_tapes_second_derivative():
    x = f64(1.3)
    with tg.Tape() as outer:
        outer.watch(x)
        with tg.Tape() as inner:
            inner.watch(x)
            y = tg.sin(x) * x
        dy = inner.gradient(y, x)
    d2y = outer.gradient(dy, x)
    xv = 1.3
    np.testing.assert_allclose(dy.item(), np.cos(xv) * xv + np.sin(xv), rtol=1e-12)
    np.testing.assert_allclose(d2y.item(), 2 * np.cos(xv) - xv * np.sin(xv), rtol=1e-12)


def test_nested_tapes_third_derivative():
    x = f64(0.7)
    with tg.Tape() as t3:
        t3.watch(x)
        with tg.Tape() as t2:
            t2.watch(x)
            with tg.Tape() as t1:
                t1.watch(x)
                y = x ** 4
            d1 = t1.gradient(y, x)
        d2 = t2.gradient(d1, x)
    d3 = t3.gradient(d2, x)
    np.testing.assert_allclose(d3.item(), 24 * 0.7, rtol=1e-12)


def test_perturbation_confusion():
    # d/dx [x * d/dy (x + y)] at any x, y is 1 (not 2)
    x, y = f64(2.0), f64(5.0)
    with tg.Tape() as tx:
        tx.watch(x)
        with tg.Tape() as ty:
            ty.watch(y)
            s = x + y
        inner = ty.gradient(s, y)
        z = x * inner
    assert tx.gradient(z, x).item() == 1.0


def test_perturbation_confusion_with_grad():
    x = f64(2.0, requires_grad=True)
    y = f64(5.0, requires_grad=True)
    s = x + y
    inner, = tg.grad(s, y, create_graph=True)
    z = x * inner
    gx, = tg.grad(z, x)
    assert gx.item() == 1.0


def test_inner_tape_gradient_is_not_recorded_without_outer():
    x = f64(2.0)
    with tg.Tape() as tape:
        tape.watch(x)
        y = x * x
    g = tape.gradient(y, x)
    assert g.grad_fn is None and not g.requires_grad


def test_tape_closes_on_exception():
    x = f64(1.0)
    with pytest.raises(ValueError):
        with tg.Tape() as tape:
            tape.watch(x)
            raise ValueError("boom")
    assert not tg.tape.state.tapes
    y = x * 2  # no tape active: plain computation
    assert y.grad_fn is None


def test_tape_in_no_grad_records_nothing():
    x = f64(1.0)
    with tg.Tape() as tape:
        tape.watch(x)
        with tg.no_grad():
            y = x * 3
    assert tape.gradient(y, x) is None
