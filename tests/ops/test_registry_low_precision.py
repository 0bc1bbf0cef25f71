"""Every registry op with floating samples, run in bfloat16 and in float16 against
PyTorch CPU in the same dtype: the output dtypes agree and the values agree within
that dtype's tolerance. ``DIFFERS`` lists the ops known to differ, with the reason;
the list may only shrink (a listed op that now agrees fails the test until it is
taken off).

Gradients likewise: every differentiable op's first-order gradients in bfloat16 and
float16 (a random cotangent in the output's dtype), against PyTorch's autograd in
the same dtype, within torch.testing's default tolerance for that dtype; where the
two differ by more, ours must be no further from the exact gradient (PyTorch's, of
the same half-width inputs, in float64) than PyTorch's own is, give or take that
tolerance and one rounding step of the gradient's largest element (an element far
below the gradient's scale, where two orders of half-width steps differ by an ulp of
the larger terms): we compute in float32 and round once, PyTorch's half-width
kernels round more often, and being more accurate is no fault. ``GRAD_DIFFERS`` lists the (op,
dtype) pairs known to differ, with the reason, and only shrinks. A representative
subset runs in the main suite; the whole sweep is marked slow."""
import warnings

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.dispatch import bind
from tapegrad.ops_registry import get, list_ops

TOL = {"bfloat16": 3e-2, "float16": 3e-3}
# ops whose outputs are not comparable: uninitialised memory
UNCOMPARABLE = {"empty_like"}
DIFFERS = {
    "bincount": "float weights give their own dtype; PyTorch's bincount gives float64",
    "matrix_exp": "computed in float32 and rounded; PyTorch's half-width series differs "
                  "beyond the dtype's tolerance on the samples",
}

# ops whose outputs are counts of elements per bin: PyTorch computes an element's bin in
# the input's dtype, rounding after each step, so an element within one rounding step of
# a bin edge may count in the neighbouring bin (ours bins the exact value); compared
# as: the same total, and cumulative counts within two elements of each other
COUNTS_AT_EDGES = {"histc"}


def _ops():
    out = []
    for n in list_ops():
        op = get(n) if isinstance(n, str) else n
        if op.torch is not None and op.samples is not None and op.name not in UNCOMPARABLE:
            out.append(op)
    return sorted(out, key=lambda o: o.name)


def _mismatches(op, name):
    """What differs from PyTorch for ``op`` in dtype ``name`` (empty: nothing)."""
    T, P, tol = getattr(tg, name), getattr(torch, name), TOL[name]
    found = []
    for s in list(op.samples(np.float32))[:2]:
        args = list(s.args)
        fl = {i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"}
        if not fl:
            continue
        try:
            want = op.torch(torch, *[torch.tensor(a).to(P) if i in fl else
                                     (torch.from_numpy(a) if isinstance(a, np.ndarray) else a)
                                     for i, a in enumerate(args)], **s.attrs)
        except (RuntimeError, TypeError, ValueError, NotImplementedError, AssertionError):
            continue  # PyTorch has no kernel for this dtype (or the oracle's own check
            # of its formula against PyTorch's function fails at this precision)
        tg.manual_seed(0)
        got = bind(op, *[tg.tensor(a).to(T) if i in fl else
                         (tg.tensor(a) if isinstance(a, np.ndarray) else a)
                         for i, a in enumerate(args)], **s.attrs)
        for g, w in zip(got if isinstance(got, (tuple, list)) else (got,),
                        want if isinstance(want, (tuple, list)) else (want,)):
            if not isinstance(w, torch.Tensor):
                continue
            if str(g.dtype).split(".")[1] != str(w.dtype).split(".")[1]:
                found.append(f"dtype {g.dtype} vs {w.dtype}")
            elif w.is_floating_point():
                gv, wv = g.detach().float().numpy(), w.detach().float().numpy()
                if op.name in COUNTS_AT_EDGES and gv.shape == wv.shape:
                    if gv.sum() != wv.sum() or np.abs(np.cumsum(gv) - np.cumsum(wv)).max() > 2:
                        found.append("counts")
                elif gv.shape != wv.shape or not np.allclose(gv, wv, rtol=tol, atol=tol,
                                                             equal_nan=True):
                    found.append("values")
    return found


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", _ops(), ids=lambda o: o.name)
def test_low_precision_matches_pytorch(op, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = _mismatches(op, name)
    if op.name in DIFFERS:
        assert found, f"{op.name} now agrees with PyTorch in {name}: take it off DIFFERS"
    else:
        assert not found, (op.name, name, found)


# torch.testing's default (rtol, atol) per dtype
GRAD_TOL = {"bfloat16": (1.6e-2, 1e-5), "float16": (1e-3, 1e-5)}
ULP = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}  # relative rounding step
# (op, dtype) -> why its gradients differ from PyTorch's (empty: none differ)
GRAD_DIFFERS = {}
# the main suite's share of the gradient sweep: one op or two of each family
GRAD_QUICK = {"add", "mul", "div", "exp", "tanh", "gelu", "sum", "mean", "cumsum", "matmul",
              "linear", "conv2d", "softmax", "log_softmax", "layer_norm", "cross_entropy",
              "mse_loss", "max_pool2d", "embedding", "scaled_dot_product_attention",
              "where", "index_select"}


def _grad_ops():
    return [op for op in _ops() if op.differentiable]


def _split(res):
    return list(res) if isinstance(res, (tuple, list)) else [res]


def _torch_grads(op, args, fl, attrs, dtype, vs):
    """PyTorch's gradients of the floating inputs (positions ``fl``) in ``dtype`` for
    cotangents ``vs`` (float32 arrays), or None when PyTorch has no kernel or the
    oracle does not differentiate."""
    targs = [torch.from_numpy(a.astype(np.float64)).to(dtype).requires_grad_(True) if i in fl
             else (torch.from_numpy(a) if isinstance(a, np.ndarray) else a)
             for i, a in enumerate(args)]
    try:
        torch.default_generator.manual_seed(0)
        outs = [o for o in _split(op.torch(torch, *targs, **attrs))
                if isinstance(o, torch.Tensor) and o.requires_grad]
        if len(outs) != len(vs):
            return None
        gs = torch.autograd.grad(outs, [targs[i] for i in fl],
                                 grad_outputs=[torch.from_numpy(v).to(o.dtype)
                                               for v, o in zip(vs, outs)],
                                 allow_unused=True)
    except (RuntimeError, TypeError, ValueError, NotImplementedError, AssertionError):
        return None
    return [None if g is None else g.detach().double().numpy() for g in gs]


def _grad_mismatches(op, name):
    """What differs from PyTorch in ``op``'s gradients in dtype ``name``."""
    T, P = getattr(tg, name), getattr(torch, name)
    rtol, atol = GRAD_TOL[name]
    found = []
    samples = [s for s in op.samples(np.float32)
               if s.grad and any(isinstance(a, np.ndarray) and a.dtype.kind == "f"
                                 for a in s.args)]
    for s in samples[:2]:
        # the sample's values rounded to the half-width dtype: both sides start there
        args = [a.astype(T.np).astype(np.float32) if isinstance(a, np.ndarray)
                and a.dtype.kind == "f" else a for a in s.args]
        fl = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
        ts = [tg.tensor(a).to(T).requires_grad_(True) if i in fl else
              (tg.tensor(a) if isinstance(a, np.ndarray) else a) for i, a in enumerate(args)]
        # the cotangents: random, in PyTorch's output dtypes (ours are checked equal by
        # the value test)
        try:
            torch.default_generator.manual_seed(0)
            touts = [o for o in _split(op.torch(torch, *[
                torch.from_numpy(a).to(P).requires_grad_(True) if i in fl else
                (torch.from_numpy(a) if isinstance(a, np.ndarray) else a)
                for i, a in enumerate(args)], **s.attrs))
                if isinstance(o, torch.Tensor) and o.requires_grad]
        except (RuntimeError, TypeError, ValueError, NotImplementedError, AssertionError):
            continue  # PyTorch has no kernel for this dtype
        rng = np.random.default_rng(0)
        vs = [rng.standard_normal(tuple(o.shape)).astype(np.float32) for o in touts]
        vs = [torch.from_numpy(v).to(o.dtype).float().numpy() for v, o in zip(vs, touts)]
        want = _torch_grads(op, args, fl, s.attrs, P, vs)
        if not touts or want is None:
            continue  # PyTorch has no gradient for this dtype
        exact = _torch_grads(op, args, fl, s.attrs, torch.float64, vs)
        tg.manual_seed(0)
        outs = [o for o in _split(bind(op, *ts, **s.attrs)) if o.requires_grad]
        if len(outs) != len(vs):
            found.append(f"{len(outs)} differentiable outputs, PyTorch's {len(vs)}")
            continue
        got = tg.grad(outs, [ts[i] for i in fl], grad_outputs=[tg.tensor(v).to(o.dtype)
                                                               for v, o in zip(vs, outs)],
                      allow_unused=True)
        for k, (g, w) in enumerate(zip(got, want)):
            if g is None or w is None:
                if (g is None) != (w is None) and not np.all(
                        (w if g is None else g.float().numpy()) == 0):
                    found.append(f"input {k}: gradient None on one side")
                continue
            if g.dtype != T:
                found.append(f"input {k}: a {g.dtype} gradient")
                continue
            gv = g.float().numpy().astype(np.float64)
            if gv.shape != w.shape:
                found.append(f"input {k}: shape {gv.shape} vs {w.shape}")
                continue
            err = np.abs(gv - w)
            ok = err <= atol + rtol * np.abs(w)
            if exact is not None and exact[k] is not None and not ok.all():
                r = exact[k]  # (PyTorch's NaN where the exact gradient is finite: any
                # finite value of ours is nearer)
                theirs = np.where(np.isnan(w) & ~np.isnan(r), np.inf, np.abs(w - r))
                finite = np.abs(r[np.isfinite(r)])
                step = ULP[name] * (finite.max() if finite.size else 0.0)
                ok |= np.abs(gv - r) <= theirs + atol + rtol * np.abs(r) + step
            ok |= np.isnan(gv) & np.isnan(w)
            if not ok.all():
                found.append(f"input {k}: {int((~ok).sum())} of {ok.size} values, "
                             f"worst {float(np.nanmax(np.where(ok, 0, err))):.3g}")
    return found


def _check_grads(op, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = _grad_mismatches(op, name)
    if (op.name, name) in GRAD_DIFFERS:
        assert found, (f"{op.name}'s {name} gradients now agree with PyTorch: take "
                       f"({op.name!r}, {name!r}) off GRAD_DIFFERS")
    else:
        assert not found, (op.name, name, found)


_GRAD_OPS = _grad_ops()


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", [o for o in _GRAD_OPS if o.name in GRAD_QUICK],
                         ids=lambda o: o.name)
def test_low_precision_gradients_match_pytorch(op, name):
    _check_grads(op, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", [o for o in _GRAD_OPS if o.name not in GRAD_QUICK],
                         ids=lambda o: o.name)
def test_low_precision_gradients_match_pytorch_all(op, name):
    _check_grads(op, name)
