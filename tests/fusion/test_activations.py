"""Activations: PyTorch values and gradients, stability at large |x|, and the
NumPy reference path when Numba is not used."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import fusion
from tapegrad.fusion import expr as E
from tapegrad.fusion.op import ExprOp

torch = pytest.importorskip("torch")
F = torch.nn.functional

CASES = [("gelu", {}, lambda t: F.gelu(t)),
         ("gelu", {"approximate": "tanh"}, lambda t: F.gelu(t, approximate="tanh")),
         ("silu", {}, F.silu), ("softplus", {}, F.softplus),
         ("softplus", {"beta": 2.0, "threshold": 3.0},
          lambda t: F.softplus(t, beta=2.0, threshold=3.0)),
         ("logsigmoid", {}, F.logsigmoid), ("elu", {"alpha": 0.5}, lambda t: F.elu(t, 0.5)),
         ("leaky_relu", {"negative_slope": 0.2}, lambda t: F.leaky_relu(t, 0.2)),
         ("mish", {}, F.mish)]
DEFAULTS = {"softplus": {"beta": 1.0, "threshold": 20.0}, "elu": {"alpha": 1.0},
            "leaky_relu": {"negative_slope": 0.01}}
X = np.concatenate([np.linspace(-30, 30, 37), [-1000.0, -100.0, 100.0, 1000.0]])


@pytest.mark.parametrize("name,kw,tf", CASES, ids=[f"{c[0]}{c[1]}" for c in CASES])
def test_matches_torch_and_is_stable(name, kw, tf):
    """NumPy reference path (what runs when Numba is unavailable)."""
    fusion.config.use_numba = False
    try:
        x = tg.tensor(X, requires_grad=True)
        y = getattr(tg, name)(x, **kw)
        y.sum().backward()
    finally:
        fusion.config.use_numba = True
    t = torch.tensor(X, requires_grad=True)
    yt = tf(t)
    yt.sum().backward()
    assert np.all(np.isfinite(y.detach().numpy())) and np.all(np.isfinite(x.grad.numpy()))
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def all_in_one():
    """Every activation's forward and derived backward in one kernel (one compile
    per dtype), so the generated code of each is checked without ten compiles."""
    xv, gv = E.var("X"), E.var("G")
    outs = []
    for name, kw, _ in CASES:
        opname = "gelu_tanh" if kw.get("approximate") == "tanh" else name
        op = tg.ops_registry.get(opname).fusion
        attrs = dict(DEFAULTS.get(name, {}))
        attrs.update({k: float(v) for k, v in kw.items() if k != "approximate"})
        (i,), fwd = op.graph(attrs)
        gins, bwd = op.grad_op((True,), (True,)).graph(attrs)
        outs += E.substitute(fwd, {i: xv})
        outs += E.substitute(bwd, {gins[0]: xv, gins[1]: gv})
    return ExprOp("test_all_activations", ["X", "G"], lambda attrs: ([xv, gv], outs),
                  nout=len(outs))


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 3e-6)])
def test_compiled_equals_reference(all_in_one, compiled, dtype, tol):
    r = np.random.default_rng(0)
    x = np.concatenate([r.uniform(-8, 8, 3000), [-1000, -90, 0, 90, 1000]]).astype(dtype)
    g = r.standard_normal(x.shape).astype(dtype)
    got = all_in_one.kernel(x, g)
    want = all_in_one.reference(x.astype(np.float64), g.astype(np.float64))
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"output {k}")


def test_gelu_rejects_bad_approximate():
    with pytest.raises(ValueError, match="gelu"):
        tg.gelu(tg.ones(2), approximate="fast")
