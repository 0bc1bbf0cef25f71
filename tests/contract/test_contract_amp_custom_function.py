"""API.md "Low precision": `tg.amp` as `torch.amp`, here its decorators for a custom
`autograd.Function` under autocast: `custom_fwd(device_type=, cast_inputs=)` and
`custom_bwd(device_type=)`. The dtypes the forward and backward see and produce, and
the gradient reaching the input, are compared with PyTorch's for the same calls."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def _function(L, cast_inputs):
    seen = {}

    class Scale(L.autograd.Function):
        @staticmethod
        @L.amp.custom_fwd(device_type="cpu", cast_inputs=cast_inputs)
        def forward(ctx, x, w):
            seen["fwd"] = (str(x.dtype), str(w.dtype), L.is_autocast_enabled("cpu"))
            ctx.save_for_backward(x, w)
            return x @ w

        @staticmethod
        @L.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            seen["bwd"] = (str(g.dtype), L.is_autocast_enabled("cpu"))
            return g @ w.t(), x.t() @ g
    return Scale, seen


def _run(L, cast_inputs, region):
    Scale, seen = _function(L, None if cast_inputs is None else getattr(L, cast_inputs))
    x = L.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 4, requires_grad=True)
    w = L.tensor(np.ones((3, 2), np.float32) / 2, requires_grad=True)
    with L.autocast("cpu", enabled=region):
        y = Scale.apply(x, w)
    y.float().sum().backward()
    name = L.__name__
    return ({k: tuple(str(e).replace(name, "lib") for e in v) for k, v in seen.items()},
            str(y.dtype).replace(name, "lib"), str(x.grad.dtype).replace(name, "lib"),
            x.grad.float().numpy())


@pytest.mark.parametrize("cast_inputs", [None, "float32", "bfloat16"])
@pytest.mark.parametrize("region", [True, False])
def test_custom_fwd_and_bwd_as_torch(cast_inputs, region):
    got, want = _run(tg, cast_inputs, region), _run(torch, cast_inputs, region)
    assert got[:3] == want[:3]
    np.testing.assert_allclose(got[3], want[3], rtol=1e-2, atol=1e-2)


def test_custom_fwd_requires_a_device_type():
    with pytest.raises(TypeError):
        tg.amp.custom_fwd(lambda ctx, x: x)
    with pytest.raises(ValueError):
        tg.amp.custom_fwd(lambda ctx, x: x, device_type=None)
