"""tg.compile's torch.compile keywords (fullgraph, backend, mode, options, dynamic,
disable), tg.compiler.reset / is_compiling, and a compiled module's guards naming its
forward's arguments."""
import numpy as np
import pytest
import torch

import tapegrad as tg


def _net():
    class Net(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = tg.nn.Linear(4, 3)

        def forward(self, inp, scale=1.0):
            return self.lin(inp).relu() * scale
    return Net()


@pytest.mark.parametrize("kw", [dict(mode="fast"), dict(mode="default", options={}),
                                dict(backend="no-such-backend")])
def test_bad_keywords_raise_runtime_error_as_torch(kw):
    with pytest.raises(RuntimeError):
        torch.compile(lambda x: x, **kw)(torch.ones(2))
    with pytest.raises(RuntimeError):
        tg.compile(lambda x: x, **kw)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune"])
def test_modes_and_dynamic_are_accepted_and_replay(mode):
    f = tg.compile(lambda x: (x * 2 + 1).tanh(), mode=mode, dynamic=True)
    x = tg.randn(6)
    for _ in range(3):
        np.testing.assert_allclose(f(x).numpy(), ((x * 2 + 1).tanh()).numpy(), rtol=1e-6)
    assert f.stats()["replays"] == 2
    assert f(tg.randn(7)).shape == (7,)  # a new shape: captured again, still right
    assert f.stats()["captures"] == 2


def test_backend_eager_replays_unfused():
    x = tg.randn(50)
    fused, plain = (tg.compile(lambda x: (x * 2 + 1).sin() * x, backend=b)
                    for b in ("inductor", "eager"))
    for _ in range(2):
        a, b = fused(x), plain(x)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    assert plain.stats()["replays"] == 1 and plain.stats()["fused_groups"] == 0
    assert fused.stats()["fused_groups"] >= 1


def test_disable_returns_the_function_itself():
    def f(x):
        return x + 1
    assert tg.compile(f, disable=True) is f
    assert tg.compile(disable=True)(f) is f


def test_fullgraph_raises_where_a_capture_would_run_eagerly():
    g = tg.compile(lambda x: x * float(x.sum()), fullgraph=True, max_captures=2)
    x = tg.randn(3)
    g(x)
    g(x + 1)
    with pytest.raises(RuntimeError, match="fullgraph=True.*cannot be captured"):
        g(x + 2)  # a third value of a number read from a tensor
    def outside(x):  # NumPy on a buffer: no program can replay it
        return tg.from_numpy(x.numpy() * 2) + x
    with pytest.raises(RuntimeError, match="fullgraph=True.*outside tapegrad's ops"):
        tg.compile(outside, fullgraph=True)(tg.randn(8))
    # without fullgraph the same program runs eagerly with a warning
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        tg.compile(outside)(tg.randn(8))


def test_reset_captures_again():
    f = tg.compile(lambda x: x.exp() + 1)
    x = tg.randn(4)
    f(x)
    f(x)
    assert (f.stats()["captures"], f.stats()["replays"]) == (1, 1)
    tg.compiler.reset()
    f(x)
    assert (f.stats()["captures"], f.stats()["replays"]) == (1, 0)
    f(x)
    assert f.stats()["replays"] == 1


def test_is_compiling_only_during_a_capture():
    def f(x):  # (the captured program computes what the capture saw: x * 2)
        return x * 2 if tg.compiler.is_compiling() else x * 3
    cf = tg.compile(f)
    assert cf(tg.ones(2)).tolist() == cf(tg.ones(2)).tolist() == [2.0, 2.0]
    assert cf.stats()["replays"] == 1 and f(tg.ones(2)).tolist() == [3.0, 3.0]
    assert tg.compiler.is_compiling() is False
    assert torch.compiler.is_compiling() is False


def test_module_guards_name_the_forward_arguments():
    net = tg.compile(_net())
    x = tg.randn(5, 4)
    for _ in range(2):
        net(x).sum().backward()
    guards = net.stats()["guards"]
    assert "inp: float32[5, 4]" in guards, guards
    assert not any(g.startswith("args[") for g in guards)
    net.eval()
    with tg.no_grad():
        net(x)
        net(x)
    assert "inp: float32[5, 4]" in net.stats()["guards"]


def test_compiled_module_fullgraph_keyword():
    net = tg.compile(_net(), fullgraph=True)
    x = tg.randn(5, 4)
    ref = _net()
    ref.load_state_dict(net.state_dict())
    for _ in range(3):
        np.testing.assert_allclose(net(x).detach().numpy(), ref(x).detach().numpy(),
                                   rtol=1e-6)


def test_no_guards_on_the_globals_of_kernel_modules_generated_during_a_capture():
    from tapegrad.devices import cpu
    src = f"# {id(object())}\nK = 3\nJ = K + 1\n"  # a module new to this process

    def f(x):
        cpu.load_source(src)  # (as a kernel generated on the first call is loaded)
        return x * 2
    cf = tg.compile(f)
    x = tg.ones(3)
    cf(x)
    cf(x)
    assert cf.stats()["replays"] == 1
    assert not any("<module>" in g or "K ==" in g for g in cf.stats()["guards"]), \
        cf.stats()["guards"]
