"""First and second derivatives at kinks and exact zeros, against PyTorch (finite
differences are blind there). Every elementwise op with a PyTorch oracle, on inputs
that put each tensor argument at 0, at +-0, at the other argument (ties of maximum,
minimum, where) and at ordinary points."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops_registry import list_ops

torch = pytest.importorskip("torch")

POINTS = np.array([-1.5, -1e-3, 0.0, 0.0, 1e-3, 0.75, 2.0])


def _ops():
    return [op for op in list_ops() if op.elementwise and op.differentiable and op.torch]


def _cases(op):
    sample = op.samples(np.float64)[0]
    n = len(op.args)
    # every array argument at the points' shape, holding its sample's first value
    args = [np.full(POINTS.shape, np.asarray(a).reshape(-1)[0] if a.size else 0.5, a.dtype)
            if isinstance(a, np.ndarray) else a for a in sample.args]
    cases = []
    for i in range(n):
        if isinstance(args[i], np.ndarray) and args[i].dtype.kind == "f":
            moved = list(args)
            moved[i] = POINTS.copy()
            cases.append(moved)
            if n == 2 and isinstance(args[1 - i], np.ndarray):  # ties x == other
                tie = list(moved)
                tie[1 - i] = POINTS.copy()
                cases.append(tie)
    return sample, cases


def _derivatives(lib, op, args, attrs):
    if lib is tg:
        ts = [tg.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray)
              else a for a in args]
        out = tg.dispatch.bind(op, *ts, **attrs)
        grad = tg.grad
    else:
        ts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray)
              else a for a in args]
        out = op.torch(torch, *ts, **attrs)
        grad = torch.autograd.grad
    leaves = [t for t in ts if getattr(t, "requires_grad", False)]
    g = grad(out.sum(), leaves, create_graph=True, allow_unused=True)
    firsts = [np.zeros(POINTS.shape) if gi is None else gi.detach().numpy(force=True) for gi in g]
    live = [gi for gi in g if gi is not None and gi.requires_grad]
    seconds = []
    if live:
        h = grad(sum(gi.sum() for gi in live), leaves, allow_unused=True)
        seconds = [np.zeros(POINTS.shape) if hi is None else hi.detach().numpy(force=True)
                   for hi in h]
    else:
        seconds = [np.zeros(POINTS.shape) for _ in leaves]
    return firsts, seconds


@pytest.mark.parametrize("op", _ops(), ids=lambda op: op.name)
def test_first_and_second_derivatives_at_kinks_match_torch(op):
    import tapegrad.dispatch  # noqa: F401  (tg.dispatch.bind)
    sample, cases = _cases(op)
    assert cases, f"{op.name}: no floating input to move"
    for args in cases:
        ours = _derivatives(tg, op, args, sample.attrs)
        theirs = _derivatives(torch, op, args, sample.attrs)
        for order, a_list, b_list in zip(("first", "second"), ours, theirs):
            for a, b in zip(a_list, b_list):
                where = f"{op.name} {order} derivative at {[np.asarray(x).tolist() for x in args]}"
                # where PyTorch's is inf (a pole: div by 0, log 0) ours must not be finite;
                # where it is nan (undefined: pow's second derivative at 0) anything goes
                assert not np.isfinite(a[np.isinf(b)]).any(), where
                pole = ~np.isfinite(b)
                np.testing.assert_allclose(a[~pole], b[~pole], rtol=1e-9, atol=1e-12,
                                           err_msg=where)
