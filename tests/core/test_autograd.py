"""Reverse-mode semantics against PyTorch: backward/grad options, accumulation,
retain_graph, hooks, retain_grad, in-place versioning, higher order."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def _pair(values, requires_grad=True):
    """The same float64 leaf in tapegrad and in torch."""
    a = np.asarray(values, dtype=np.float64)
    return (tg.tensor(a, requires_grad=requires_grad),
            torch.tensor(a, requires_grad=requires_grad))


def _close(t, ref, rtol=1e-10, atol=1e-12):
    a = t.detach().numpy() if isinstance(t, tg.Tensor) else np.asarray(t)
    np.testing.assert_allclose(a, ref.detach().numpy(), rtol=rtol, atol=atol)


# ---------------------------------------------------------------- backward
def test_backward_accumulates_across_calls():
    x, xt = _pair([1.0, -2.0, 3.0])
    for _ in range(3):
        (x * x * x).sum().backward()
        (xt * xt * xt).sum().backward()
    _close(x.grad, xt.grad)
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_grad_accumulation_does_not_alias_user_tensors():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    seed = tg.tensor([1.0, 1.0])
    y.backward(seed)
    x.grad += 0  # in place on .grad
    y2 = x * 1
    y2.backward(seed)
    np.testing.assert_array_equal(seed.numpy(), [1.0, 1.0]), "the seed was modified"
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_leaf_used_twice_and_diamond():
    x, xt = _pair([0.5, 1.5])
    a = tg.sin(x)
    y = (a * tg.exp(x) + a * a).sum()
    y.backward()
    at = torch.sin(xt)
    (at * torch.exp(xt) + at * at).sum().backward()
    _close(x.grad, xt.grad)


def test_second_backward_without_retain_graph_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = (tg.exp(x) * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()


def test_retain_graph_allows_second_backward():
    x, xt = _pair([1.0, 2.0])
    y = (tg.exp(x) * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    yt = (torch.exp(xt) * xt).sum()
    yt.backward(retain_graph=True)
    yt.backward()
    _close(x.grad, xt.grad)


def test_grad_twice_without_retain_graph_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = (tg.sin(x) * x).sum()
    tg.grad(y, x)
    with pytest.raises(RuntimeError, match="retain_graph"):
        tg.grad(y, x)


_SECOND_WALKS = {
    "mul_number": lambda lib, x: (x * 2).sum(),
    "exp": lambda lib, x: x.exp().sum(),
    "add_number": lambda lib, x: (x + 1).sum(),
    "cast": lambda lib, x: x.double().sum(),
    "neg": lambda lib, x: (-x).sum(),
    "reshape": lambda lib, x: x.reshape(3, 1).sum(),
    "sin_times_x": lambda lib, x: (lib.sin(x) * x).sum(),
}


@pytest.mark.parametrize("name", sorted(_SECOND_WALKS))
def test_a_second_backward_raises_exactly_where_pytorchs_does(name):
    # a node that saved nothing has nothing to free: PyTorch lets a second backward
    # through it; one that saved a value (a tensor or a number) raises
    f = _SECOND_WALKS[name]
    outcome = {}
    for lib in (tg, torch):
        x = lib.tensor([0.5, 1.0, 2.0], requires_grad=True)
        y = f(lib, x)
        y.backward()
        try:
            y.backward()
            outcome[lib] = np.asarray(x.grad.tolist())
        except RuntimeError as e:
            assert lib is torch or "retain_graph" in str(e)
            outcome[lib] = "raises"
    if isinstance(outcome[torch], str):
        assert outcome[tg] == "raises"
    else:
        np.testing.assert_allclose(outcome[tg], outcome[torch])


def test_backward_of_non_scalar_needs_gradient():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    with pytest.raises(RuntimeError, match="scalar"):
        y.backward()
    # nothing was corrupted: the same graph still works with a gradient
    y.backward(tg.tensor([1.0, 10.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 30.0])


def test_backward_gradient_shape_mismatch():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="shape"):
        (x * 3).backward(tg.tensor([1.0, 2.0, 3.0]))


def test_backward_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        tg.tensor([1.0]).sum().backward()


def test_backward_inputs_argument():
    x, xt = _pair([1.0, 2.0])
    w, wt = _pair([3.0, -1.0])
    (x * w).sum().backward(inputs=[x])
    (xt * wt).sum().backward(inputs=[xt])
    _close(x.grad, xt.grad)
    assert w.grad is None and wt.grad is None


def test_tg_backward_multiple_roots_with_grad_tensors():
    x, xt = _pair([1.0, 2.0])
    a, b = x * x, tg.sin(x)
    tg.backward([a, b], [tg.tensor([1.0, 2.0], dtype=tg.float64), tg.ones(2, dtype=tg.float64)])
    at, bt = xt * xt, torch.sin(xt)
    torch.autograd.backward([at, bt], [torch.tensor([1.0, 2.0], dtype=torch.float64),
                                       torch.ones(2, dtype=torch.float64)])
    _close(x.grad, xt.grad)


def test_interior_nodes_get_no_grad():
    x = tg.tensor([1.0], requires_grad=True)
    y = x * 2
    (y * 3).sum().backward()
    with pytest.warns(UserWarning, match="not a leaf Tensor"):  # as PyTorch's
        assert y.grad is None
    assert not y.is_leaf and x.is_leaf


# ---------------------------------------------------------------- grad()
def test_grad_returns_tuple_and_leaves_dot_grad_alone():
    x, xt = _pair([0.3, 0.7])
    w, wt = _pair([1.0, 2.0])
    gs = tg.grad((tg.tanh(x) * w).sum(), [x, w])
    gts = torch.autograd.grad((torch.tanh(xt) * wt).sum(), [xt, wt])
    assert isinstance(gs, tuple) and len(gs) == 2
    for g, gt in zip(gs, gts):
        _close(g, gt)
    assert x.grad is None and w.grad is None
    g1 = tg.grad((x * x).sum(), x)
    assert isinstance(g1, tuple) and len(g1) == 1


def test_grad_allow_unused_and_materialize():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    z = tg.tensor([5.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="allow_unused"):
        tg.grad((x * x).sum(), [x, z], retain_graph=True)
    gx, gz = tg.grad((x * x).sum(), [x, z], allow_unused=True, retain_graph=True)
    assert gz is None
    np.testing.assert_array_equal(gx.numpy(), [2.0, 4.0])
    gx, gz = tg.grad((x * x).sum(), [x, z], materialize_grads=True)
    np.testing.assert_array_equal(gz.numpy(), [0.0])
    assert gz.shape == z.shape


def test_grad_outputs():
    x, xt = _pair([[1.0, 2.0], [3.0, 4.0]])
    v = np.array([[1.0, -1.0], [0.5, 2.0]])
    g, = tg.grad(tg.exp(x) * x, x, grad_outputs=tg.tensor(v))
    gt, = torch.autograd.grad(torch.exp(xt) * xt, xt, grad_outputs=torch.tensor(v))
    _close(g, gt)


def test_grad_with_respect_to_interior_tensor():
    x, xt = _pair([1.0, 2.0])
    h = tg.sin(x)
    y = (h * h).sum()
    ht = torch.sin(xt)
    yt = (ht * ht).sum()
    g, = tg.grad(y, h)
    gt, = torch.autograd.grad(yt, ht)
    _close(g, gt)


def test_create_graph_second_and_third_order():
    x, xt = _pair([0.4, -1.1])
    y = (tg.sin(x) * tg.exp(x)).sum()
    g1, = tg.grad(y, x, create_graph=True)
    g2, = tg.grad(g1.sum(), x, create_graph=True)
    g3, = tg.grad(g2.sum(), x)
    yt = (torch.sin(xt) * torch.exp(xt)).sum()
    t1, = torch.autograd.grad(yt, xt, create_graph=True)
    t2, = torch.autograd.grad(t1.sum(), xt, create_graph=True)
    t3, = torch.autograd.grad(t2.sum(), xt)
    for a, b in ((g1, t1), (g2, t2), (g3, t3)):
        _close(a, b)
    assert g1.requires_grad and g1.grad_fn is not None


def test_third_derivative_of_sin_exp_exact():
    xs = np.linspace(-2, 2, 9)
    x = tg.tensor(xs, requires_grad=True)
    y = (tg.sin(x) * tg.exp(x)).sum()
    d1, = tg.grad(y, x, create_graph=True)
    d2, = tg.grad(d1.sum(), x, create_graph=True)
    d3, = tg.grad(d2.sum(), x)
    # d3/dx3 sin(x) e^x = 2 e^x (cos x - sin x)
    np.testing.assert_allclose(d3.numpy(), 2 * np.exp(xs) * (np.cos(xs) - np.sin(xs)),
                               rtol=0, atol=1e-10)


def test_backward_create_graph_gives_differentiable_grad():
    x, xt = _pair([1.5])
    (x ** 3).sum().backward(create_graph=True)
    (xt ** 3).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    g2, = tg.grad(x.grad.sum(), x)
    t2, = torch.autograd.grad(xt.grad.sum(), xt)
    _close(g2, t2)


# ---------------------------------------------------------------- hooks
def test_leaf_hook_sees_and_replaces_gradient():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy().copy()))
    h = x.register_hook(lambda g: g * 10)
    (x * x).sum().backward()
    np.testing.assert_array_equal(seen[0], [2.0, 4.0])
    np.testing.assert_array_equal(x.grad.numpy(), [20.0, 40.0])
    h.remove()
    x.grad = None
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_interior_hook_and_retain_grad():
    x, xt = _pair([1.0, 2.0])
    h = x * 3
    ht = xt * 3
    h.retain_grad()
    ht.retain_grad()
    seen = []
    h.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2)
    ht.register_hook(lambda g: g * 2)
    (h * h).sum().backward()
    (ht * ht).sum().backward()
    np.testing.assert_array_equal(seen[0], (2 * 3 * np.array([1.0, 2.0])))
    _close(x.grad, xt.grad)
    _close(h.grad, ht.grad)


def test_hook_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError):
        tg.tensor([1.0]).register_hook(lambda g: g)


# ---------------------------------------------------------------- grad mode
def test_no_grad_and_friends():
    x = tg.tensor([1.0], requires_grad=True)
    with tg.no_grad():
        assert not tg.is_grad_enabled()
        y = x * 2
        with tg.enable_grad():
            z = x * 2
    assert tg.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad

    @tg.no_grad()
    def f(a):
        return a * 2

    @tg.no_grad
    def g(a):
        return a * 2
    assert not f(x).requires_grad and not g(x).requires_grad
    with tg.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert tg.is_grad_enabled()
    tg.set_grad_enabled(False)
    assert not tg.is_grad_enabled()
    tg.set_grad_enabled(True)
    assert (x * 2).requires_grad


@pytest.mark.parametrize("lib", ["tapegrad", "torch"])
def test_grad_mode_decorators_on_generator_functions(lib):
    """``@no_grad()`` / ``@enable_grad()`` on a generator function: each resumption runs
    under the mode, the caller's mode is back at each yield, ``send``, ``throw`` and
    the return value pass through, as PyTorch's."""
    m = tg if lib == "tapegrad" else torch
    x = m.ones(2, requires_grad=True)

    @m.no_grad()
    def gen(a):
        got = yield (a * 2).requires_grad, m.is_grad_enabled()
        try:
            yield got, (a * 2).requires_grad
        except KeyError:
            yield "thrown", m.is_grad_enabled()
        return "done"
    g = gen(x)
    assert next(g) == (False, False) and m.is_grad_enabled()
    assert g.send(7) == (7, False) and (x * 2).requires_grad
    assert g.throw(KeyError()) == ("thrown", False) and m.is_grad_enabled()
    with pytest.raises(StopIteration) as stop:
        next(g)
    assert stop.value.value == "done"

    @m.enable_grad()
    def gen2(a):
        yield (a * 2).requires_grad
    with m.no_grad():
        assert list(gen2(x)) == [True]
        assert not m.is_grad_enabled()


def test_no_grad_restored_after_exception():
    with pytest.raises(ValueError):
        with tg.no_grad():
            raise ValueError("boom")
    assert tg.is_grad_enabled()


# ---------------------------------------------------------------- in place
def test_in_place_on_leaf_requiring_grad_raises_and_leaves_it_intact():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="leaf"):
        x += 1
    with pytest.raises(RuntimeError, match="leaf"):
        x[0] = 5.0
    np.testing.assert_array_equal(x.detach().numpy(), [1.0, 2.0])
    assert x.is_leaf and x.requires_grad and x._version_number == 0
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    with tg.no_grad():
        x.add_(1)  # allowed under no_grad, as in PyTorch
    np.testing.assert_array_equal(x.detach().numpy(), [2.0, 3.0])


def test_in_place_bumps_version_and_views_share_it():
    x = tg.zeros(2, 3)
    v0 = x._version_number
    x += 1
    x.mul_(2)
    assert x._version_number == v0 + 2
    view = x[0]
    view.add_(1)
    assert x._version_number == v0 + 3
    np.testing.assert_array_equal(x.numpy(), [[3, 3, 3], [2, 2, 2]])


def test_stale_saved_value_makes_backward_raise_naming_op():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1
    y = tg.exp(h) * h  # mul saves h
    h.add_(1)
    with pytest.raises(RuntimeError, match="mul") as info:
        y.sum().backward()
    assert "inplace" in str(info.value) or "in place" in str(info.value)


def test_stale_saved_output_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = tg.exp(x)  # exp saves its output
    y.mul_(2)
    with pytest.raises(RuntimeError, match="exp"):
        y.sum().backward()


def test_recorded_in_place_gives_torch_gradients():
    x, xt = _pair([0.5, 1.0, 1.5])
    h = x * 2
    h.mul_(x)       # h = 2 x^2
    h += 1
    h.tanh_()
    y = h.sum()
    ht = xt * 2
    ht.mul_(xt)
    ht += 1
    ht.tanh_()
    y.backward()
    ht.sum().backward()
    _close(y, ht.sum())
    _close(x.grad, xt.grad)


def test_setitem_is_recorded():
    x, xt = _pair([1.0, 2.0, 3.0])
    w, wt = _pair([10.0])
    h = x * 1
    h[1] = w[0] * 2
    ht = xt * 1
    ht[1] = wt[0] * 2
    (h * h).sum().backward()
    (ht * ht).sum().backward()
    _close(x.grad, xt.grad)
    _close(w.grad, wt.grad)


def test_checkpoint_runs_once_forward_once_backward_with_the_forwards_random_numbers():
    """tg.checkpoint: one forward run (no intermediates kept), one recomputation in the
    backward, which sees the forward's dropout mask (preserve_rng_state=True), so the
    gradient is the un-checkpointed one; with preserve_rng_state=False it is not."""
    import tapegrad.nn.functional as F
    x0 = np.linspace(-1.0, 1.0, 64).reshape(8, 8)
    calls = []

    def block(x, w):
        calls.append(1)
        return F.dropout(tg.tanh(x @ w), p=0.5, training=True)

    def grads(checkpointed, preserve=True):
        tg.manual_seed(3)
        x = tg.tensor(x0, requires_grad=True)
        w = tg.tensor(np.eye(8) * 0.5, requires_grad=True)
        out = tg.checkpoint(block, x, w, preserve_rng_state=preserve) if checkpointed \
            else block(x, w)
        tg.rand(3)  # draws after the forward move the generator on
        before = tg.get_rng_state()
        (out * out).sum().backward()
        if preserve:  # the recomputation restored the state it replaced
            assert tg.equal(tg.get_rng_state(), before)
        return out.detach().numpy(), x.grad.numpy(), w.grad.numpy()

    plain = grads(False)
    calls.clear()
    ckpt = grads(True)
    assert len(calls) == 2  # one forward, one recomputation
    for a, b in zip(plain, ckpt):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    loose = grads(True, preserve=False)
    assert not np.allclose(loose[1], plain[1])  # another mask in the recomputation


def test_set_grad_enabled_as_a_decorator_leaves_grad_mode_alone():
    """@tg.set_grad_enabled(False) applies inside the function only, as PyTorch's."""
    torch = pytest.importorskip("torch")
    for lib in (tg, torch):
        @lib.set_grad_enabled(False)
        def f(x):
            return x * 2
        assert lib.is_grad_enabled()
        x = lib.ones(2, requires_grad=True)
        assert not f(x).requires_grad
        assert lib.is_grad_enabled()
    tg.set_grad_enabled(False)  # a plain call sets the mode, as PyTorch's
    assert not tg.is_grad_enabled()
    tg.set_grad_enabled(True)


@pytest.mark.parametrize("a,b", [
    (np.array([1, 2], np.int32), np.array(5.0, np.float64)),
    (np.array([1, 2], np.int32), np.array(5, np.int64)),
    (np.array([1.0, 2.0], np.float32), np.array(5.0, np.float64)),
    (np.array(5, np.int16), np.array(5.0, np.float64)),
    (np.array(True), np.array([1, 2], np.uint8)),
    (np.array([True]), np.array(3, np.int64)),
    (np.array([1.0], np.float16), np.array(2.0, np.float32))])
def test_zero_dim_tensors_promote_as_torch(a, b):
    """A 0-d tensor changes the result dtype only when of a higher kind (PyTorch)."""
    torch = pytest.importorskip("torch")
    ours = tg.tensor(a) + tg.tensor(b)
    theirs = torch.tensor(a) + torch.tensor(b)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert tg.ops_registry.get("add").infer(
        tg.ops_registry.TensorSpec(a.shape, a.dtype),
        tg.ops_registry.TensorSpec(b.shape, b.dtype)).dtype == ours.numpy().dtype


def test_grad_is_grads_batched_matches_torch():
    """tg.grad(..., is_grads_batched=True): the first dim of grad_outputs is a batch of
    cotangents (a Jacobian in one call), as torch.autograd.grad; with create_graph the
    rows differentiate again."""
    torch = pytest.importorskip("torch")
    a = np.array([0.5, -1.0, 2.0])
    x, xt = tg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, yt = tg.sin(x) * x, torch.sin(xt) * xt
    jac, = tg.grad(y, x, tg.tensor(np.eye(3)), is_grads_batched=True, create_graph=True)
    jact, = torch.autograd.grad(yt, xt, torch.eye(3, dtype=torch.float64),
                                is_grads_batched=True, create_graph=True)
    np.testing.assert_allclose(jac.detach().numpy(), jact.detach().numpy(), rtol=1e-12)
    h, = tg.grad(jac.sum(), x)
    ht, = torch.autograd.grad(jact.sum(), xt)
    np.testing.assert_allclose(h.numpy(), ht.numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="is_grads_batched=True needs grad_outputs"):
        tg.grad(tg.sin(x).sum(), x, is_grads_batched=True)


def test_every_augmented_assignment_writes_in_place_as_torch():
    torch = pytest.importorskip("torch")
    got = {}
    for lib in (torch, tg):
        t = lib.tensor([3.0, 4.0])
        v = t[:1]
        t **= 2
        t //= 2
        t %= 3
        i = lib.tensor([6, 5])
        j = i[:1]
        i &= 3
        i |= 8
        i ^= 1
        got[lib] = (v.tolist(), t.tolist(), j.tolist(), i.tolist())
    assert got[tg] == got[torch]
    w = tg.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w **= 2


def test_a_flipped_view_crosses_dlpack_as_a_copy():
    torch = pytest.importorskip("torch")
    x = tg.arange(4.0)[::-1]
    assert torch.from_dlpack(x).tolist() == [3.0, 2.0, 1.0, 0.0]
    assert np.from_dlpack(x).tolist() == [3.0, 2.0, 1.0, 0.0]
    with pytest.raises(BufferError, match="negative stride"):
        x.__dlpack__(copy=False)
