"""Dispatch's edge cases: operators and public functions give the same results and
records (both reach ``dispatch._lane``; a case the lane does not take goes to the
general path), seeds and hook results of another spec are fitted by the walker, and
``state.mode`` follows grad mode, Tapes, anomaly mode and observers, per thread."""
import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import tape as _tape


def _leaf(values, dtype=np.float32):
    return tg.tensor(np.asarray(values, dtype), requires_grad=True)


def _grads(fn, *leaves, seed=None):
    for t in leaves:
        t.grad = None
    y = fn(*leaves)
    y.backward(seed)
    return y, [t.grad for t in leaves]


def _same(a, b):
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


@pytest.mark.parametrize("case", ["same_shape", "broadcast", "scalar", "int_scalar"])
def test_operators_match_bind(case):
    x = _leaf([[0.5, -1.5, 2.0]])
    other = {"same_shape": _leaf([[1.5, 0.25, -3.0]]), "broadcast": _leaf([[2.0], [0.5]]),
             "scalar": 0.75, "int_scalar": 3}[case]
    leaves = (x, other) if isinstance(other, tg.Tensor) else (x,)

    def ops(*ts):
        a, b = ts[0], ts[1] if len(ts) > 1 else other
        return -((a * b + a) / b - (b - a))

    def funcs(*ts):
        a, b = ts[0], ts[1] if len(ts) > 1 else other
        return tg.neg(tg.sub(tg.div(tg.add(tg.mul(a, b), a), b), tg.sub(b, a)))

    seed = np.ones((2, 3) if case == "broadcast" else (1, 3), np.float32)
    y1, g1 = _grads(ops, *leaves, seed=tg.tensor(seed))
    y2, g2 = _grads(funcs, *leaves, seed=tg.tensor(seed))
    _same(y1, y2)
    for a, b in zip(g1, g2):
        _same(a, b)
    assert type(y1) is tg.Tensor and y1.grad_fn.op.name == "neg"


def test_other_dtypes_and_arguments_take_bind():
    x = tg.tensor(np.arange(1, 4, dtype=np.int64))
    _same(x * x, tg.mul(x, x))
    _same(x / x, tg.div(x, x))                     # int / int: the default float
    f64 = tg.tensor(np.ones(3), requires_grad=True)
    f32 = _leaf([1.0, 2.0, 3.0])
    assert (f64 * f32).dtype == tg.float64          # promotion
    assert (f32 * np.float64(2.0)).dtype == tg.float32  # a NumPy scalar is weak
    assert (f32 * True).dtype == tg.float32
    assert (f32 * np.ones(3, np.float32)).requires_grad
    with pytest.raises(TypeError, match="mul"):
        f32 * "a"


def test_bad_broadcast_error_names_op_and_shapes():
    a, b = _leaf(np.ones((3, 4))), _leaf(np.ones(5))
    with pytest.raises(ValueError) as fast:
        a * b
    with pytest.raises(ValueError) as slow:
        tg.mul(a, b)
    assert str(fast.value) == str(slow.value)
    assert "mul" in str(fast.value) and "(3, 4)" in str(fast.value) and "(5,)" in str(fast.value)


def test_seed_of_another_dtype_is_cast_as_by_the_general_walker():
    x, c = _leaf([0.1, 0.2, 0.3]), tg.tensor(np.full(3, 1.0 / 3.0, np.float32))
    seed = tg.tensor(np.array([1e-9, 1.0 + 1e-9, 3.0], np.float64))
    _, (g1,) = _grads(lambda t: (t * c + t) * c, x, seed=seed)
    _, (g2,) = _grads(lambda t: tg.mul(tg.add(tg.mul(t, c), t), c), x, seed=seed)
    _same(g1, g2)
    assert g1.dtype == tg.float32


@pytest.mark.parametrize("hook_result", ["float64", "broadcast"])
def test_hook_result_of_another_spec_is_refused_on_both_paths(hook_result):
    """A hook may not change its gradient's dtype or size (PyTorch raises); the lane's
    nodes and the general path's refuse it alike."""
    def hook(g):
        if hook_result == "float64":
            return g.double() * 3
        return g.unsqueeze(0).expand(2, 3)

    def run(use_ops):
        x = _leaf([0.5, 1.0, 2.0])
        mid = x * x if use_ops else tg.mul(x, x)
        mid.register_hook(hook)
        y = (mid + x) if use_ops else tg.add(mid, x)
        with pytest.raises(RuntimeError, match="has changed the (type|size) of value"):
            y.sum().backward()
    run(True)
    run(False)


def test_higher_order_and_in_place_checks_still_hold():
    x = _leaf([0.5, 1.5])
    y = x * x * x
    (g,) = tg.grad(y.sum(), x, create_graph=True)
    (gg,) = tg.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), 6 * x.detach().numpy())
    a = _leaf([1.0, 2.0])
    b = a * 2.0
    c = b * b
    b.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


def _expected_mode():
    st = _tape.state
    if st.tapes or st.anomaly:
        return _tape.GENERAL
    return _tape.FAST_RECORD if st.grad_enabled else _tape.FAST_NO_GRAD


def test_mode_follows_grad_mode_tapes_and_anomaly():
    st = _tape.state
    assert st.mode == _tape.FAST_RECORD
    with tg.no_grad():
        assert st.mode == _tape.FAST_NO_GRAD
        with tg.enable_grad():
            assert st.mode == _tape.FAST_RECORD
        with tg.Tape():
            assert st.mode == _tape.GENERAL
        assert st.mode == _tape.FAST_NO_GRAD
    with tg.detect_anomaly():
        assert st.mode == _tape.GENERAL
    tape = tg.Tape()
    with tape:
        with tape.stop_recording():
            assert st.mode == _tape.FAST_RECORD
        assert st.mode == _tape.GENERAL
    st.tapes.append(tape)
    assert st.mode == _tape.GENERAL
    del st.tapes[:]
    assert st.mode == _tape.FAST_RECORD
    prev = tg.set_grad_enabled(False)
    assert st.mode == _tape.FAST_NO_GRAD
    prev.__exit__(None, None, None)
    assert st.mode == _expected_mode() == _tape.FAST_RECORD


def test_mode_is_per_thread():
    seen = {}
    ready, done = threading.Event(), threading.Event()

    def other():
        with tg.no_grad():
            ready.set()
            done.wait(5)
            seen["other"] = _tape.state.mode
    th = threading.Thread(target=other)
    th.start()
    ready.wait(5)
    x = _leaf([1.0])
    seen["main_records"] = (x * x).requires_grad
    done.set()
    th.join()
    assert seen == {"other": _tape.FAST_NO_GRAD, "main_records": True}


def _ufunc_ops():
    from tapegrad.ops import methods
    return [op.name for op in methods._PLAIN_OPS]


@pytest.mark.parametrize("name", _ufunc_ops())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ufunc_methods_match_bind(name, dtype):
    rng = np.random.default_rng(1)
    public = getattr(tg, name)
    binary = name in ("mul", "remainder", "fmod", "maximum", "minimum", "arctan2", "logaddexp")
    low = 0.2 if name.startswith(("log", "sqrt")) else -0.9
    cases = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 3), 0.5)] if binary else [((2, 3),), ((),)]
    for shapes in cases:
        def make():
            return [_leaf(rng.uniform(low, 0.9, s), dtype) if isinstance(s, tuple) else s
                    for s in shapes]
        args = make()
        copies = [tg.tensor(a.detach().numpy(), requires_grad=True) if isinstance(a, tg.Tensor)
                  else a for a in args]
        leaves = [a for a in args if isinstance(a, tg.Tensor)]
        leaves2 = [a for a in copies if isinstance(a, tg.Tensor)]
        y1 = getattr(args[0], name)(*args[1:])
        y2 = public(*copies)
        _same(y1, y2)
        assert y1.grad_fn.op.name == name
        (y1 * y1).sum().backward(tg.tensor(np.array(1.5, dtype)))
        (y2 * y2).sum().backward(tg.tensor(np.array(1.5, dtype)))
        for a, b in zip(leaves, leaves2):
            _same(a.grad, b.grad)


def _node_fields(node):
    return (node.op, dict(node.attrs), tuple(node.edges), tuple(node.shapes),
            tuple(node.dtypes), tuple(node.needs_input_grad),
            None if node.saved is None else tuple(node.saved),
            None if node.versions is None else tuple(node.versions),
            node.out is not None, node.out_version is not None and node.out_version[1],
            None if node.inputs is None else tuple(
                id(a) if hasattr(a, "shape") else a for a in node.inputs))


@pytest.mark.parametrize("name,second", [
    ("mul", "tensor"), ("mul", "tensor_nograd"), ("mul", "float"), ("add", "int"),
    ("div", "tensor"), ("exp", None), ("tanh", None), ("sqrt", None), ("relu", None),
    ("sum", None), ("squeeze", None), ("maximum", "tensor")])
def test_lane_and_general_path_build_the_same_node(name, second):
    """A lane unrolls _node_general's rules for one or two inputs: both paths must
    record the same edges, specs, needs, saved values and versions. An observer
    sends the same call down the general path."""
    from tapegrad import dispatch
    from tapegrad.ops_registry import get
    op = get(name)
    x = _leaf([[0.5, 1.5, 2.0]])
    y = tg.exp(x)  # a non-leaf input: its edge is (node, index)
    args = {"tensor": (y, _leaf([[1.5, 0.25, 3.0]])), "float": (y, 0.75), "int": (y, 3),
            "tensor_nograd": (y, tg.tensor(np.ones((1, 3), np.float32))), None: (y,)}[second]
    lane_out = dispatch.bind(op, *args)
    with dispatch.observe(lambda op, kernel, *a, **kw: kernel(*a, **kw)):
        general_out = dispatch.bind(op, *args)
    assert lane_out.grad_fn is not general_out.grad_fn
    assert _node_fields(lane_out.grad_fn) == _node_fields(general_out.grad_fn)
    _same(lane_out, general_out)


def _elementwise_ops():
    from tapegrad.ops_registry import list_ops
    return [op for op in list_ops() if op.elementwise and op.differentiable]


@pytest.mark.parametrize("op", _elementwise_ops(), ids=lambda op: op.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_nodes_vjps_keep_the_spec(op, dtype):
    """What the walker trusts of a "same" node (an elementwise op whose tensor inputs
    have its output's shape and dtype): its vjp's gradients have that spec too, so the
    walker skips their checks. Checked end to end: a wrong spec would reach .grad."""
    from tapegrad.dispatch import bind
    checked = 0
    for sample in op.samples(dtype):
        arrays = [a for a in sample.args if isinstance(a, np.ndarray)]
        if not sample.grad or not arrays or len({a.shape for a in arrays}) != 1:
            continue
        args = [tg.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray)
                else a for a in sample.args]
        out = bind(op, *args, **sample.attrs)
        if any(a.dtype != out.dtype for a in arrays):  # where's bool condition
            assert not out.grad_fn.same, op.name
            checked += 1
            continue
        if out.grad_fn is None or not out.grad_fn.same:
            continue
        out.backward(tg.ones_like(out))
        for a in args:
            if isinstance(a, tg.Tensor) and a.grad is not None:
                assert a.grad.shape == a.shape and a.grad.dtype == a.dtype, op.name
                checked += 1
    assert checked, f"{op.name}: no sample exercised a 'same' node"


def test_shape_rule_memo_remembers_only_accepted_calls():
    """dispatch remembers the calls a shape rule accepted; a rejected call is checked
    (and rejected) every time, and another spec or attr is checked afresh."""
    x = tg.tensor(np.ones((2, 3), np.float32))
    assert tg.sum(x, dim=1).shape == (2,)
    for _ in range(2):
        with pytest.raises(IndexError, match="sum"):
            tg.sum(x, dim=5)
    with pytest.raises(IndexError, match="sum"):
        tg.sum(tg.tensor(np.ones((2,), np.float32)), dim=1)
    assert tg.sum(x, dim=1).shape == (2,)


def test_raw_arrays_are_validated_by_the_shape_rule():
    """A call on raw arrays (the adjoints' path) runs the shape rule first too, so a
    kernel that trusts it never computes garbage: avg_pool2d with a window larger
    than its input raises instead of returning an empty array."""
    from tapegrad.dispatch import raw_arrays
    with raw_arrays(), pytest.raises(RuntimeError, match="avg_pool2d: input .* is too small"):
        tg.nn.functional.avg_pool2d(np.ones((1, 1, 2, 2)), 3)


def test_raw_arrays_alone_are_a_type_error_outside_adjoints():
    """PyTorch's rule: torch.sum(ndarray) is a TypeError. Adjoints (and the @fuse tracer)
    compute on raw arrays inside dispatch.raw_arrays(); a raw array next to a Tensor
    is a constant, as before."""
    with pytest.raises(TypeError, match=r"^sum: expected Tensor arguments, got only raw"):
        tg.sum(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match=r"^exp: expected Tensor arguments"):
        tg.exp(np.array([1.0]))
    from tapegrad.dispatch import raw_arrays
    with raw_arrays():
        out = tg.sum(np.array([1.0, 2.0]))
    assert type(out) is np.ndarray and out == 3.0
    _same(tg.add(tg.tensor(np.ones(2, np.float32)), np.ones(2, np.float32)),
          tg.tensor(np.full(2, 2.0, np.float32)))


def test_a_write_in_another_thread_still_invalidates_saved_values():
    """The walker skips version checks while no in-place write happened anywhere since
    a node was recorded (tensor.last_write); a write from another thread counts."""
    x = _leaf([0.5, 1.5, 2.0])
    h = x * 1.0
    y = (h * h).sum()       # mul saves h
    th = threading.Thread(target=lambda: h.add_(1.0))
    th.start()
    th.join()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_a_seed_reaching_a_same_node_whose_first_input_is_a_scalar():
    """``0 + t`` (Python's sum over tensors) records add with a weak scalar first: the
    walker reads the node's spec from its tensor input."""
    x = _leaf([1.0, 2.0])
    y = sum([x * x, x])  # 0 + x*x + x
    y.backward(tg.tensor(np.ones(2, np.float64)))  # a seed of another dtype
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 5.0])
    assert x.grad.dtype == tg.float32
