"""Gradient checks against finite differences, and ``assert_close``."""
import numpy as np

import tapegrad as tg

__all__ = ["gradcheck", "gradgradcheck", "assert_close"]


def _tensors(inputs):
    if isinstance(inputs, tg.Tensor):
        return (inputs,)
    return tuple(inputs)


def _flat_out(out):
    if isinstance(out, tg.Tensor):
        return [out]
    return [o for o in out if isinstance(o, tg.Tensor)]


def _numerical_jvp_rows(fn, inputs, eps):
    """Central-difference Jacobian, one column block per input element."""
    with tg.no_grad():
        base = _flat_out(fn(*inputs))
    jac = []
    for t in inputs:
        if not (isinstance(t, tg.Tensor) and t.requires_grad):
            jac.append(None)
            continue
        data = t._data
        cols = []
        flat = data.reshape(-1)
        for k in range(flat.size):
            orig = flat[k].item()
            flat[k] = orig + eps
            with tg.no_grad():
                plus = [o._data.astype(np.float64).copy() for o in _flat_out(fn(*inputs))]
            flat[k] = orig - eps
            with tg.no_grad():
                minus = [o._data.astype(np.float64).copy() for o in _flat_out(fn(*inputs))]
            flat[k] = orig
            cols.append(np.concatenate([((p - m) / (2 * eps)).reshape(-1)
                                        for p, m in zip(plus, minus)]) if plus else np.zeros(0))
        jac.append(np.stack(cols, axis=1) if cols else np.zeros((sum(o.numel() for o in base), 0)))
    return base, jac


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              nondet_tol=0.0, check_undefined_grad=True):
    """Compare reverse-mode gradients of ``fn`` with central differences (use float64).

    Checks every output element against every input that requires grad.
    Returns True, or raises ``AssertionError`` naming the input and the worst entry.
    """
    inputs = _tensors(inputs)
    base, num = _numerical_jvp_rows(fn, inputs, eps)
    outs = _flat_out(fn(*inputs))
    diff_outs = [o for o in outs if o.requires_grad]
    total = sum(o.numel() for o in outs)
    for idx, t in enumerate(inputs):
        if num[idx] is None:
            continue
        analytic = np.zeros((total, t.numel()))
        row = 0
        for o in outs:
            for k in range(o.numel()):
                if o.requires_grad:
                    seed = np.zeros(o.shape, dtype=o._data.dtype)
                    seed.reshape(-1)[k] = 1
                    g, = tg.grad([o], [t], grad_outputs=[tg.tensor(seed)], retain_graph=True,
                                 allow_unused=True)
                    if g is not None:
                        analytic[row + k] = g._data.reshape(-1)
            row += o.numel()
        n = num[idx]
        if not np.allclose(analytic, n, atol=atol, rtol=rtol, equal_nan=True):
            err = np.abs(analytic - n)
            w = np.unravel_index(np.argmax(err), err.shape)
            msg = (f"gradcheck: Jacobian mismatch for input {idx} (shape {tuple(t.shape)}): "
                   f"output element {w[0]}, input element {w[1]}: analytic {analytic[w]:.8g} "
                   f"vs numerical {n[w]:.8g}")
            if raise_exception:
                raise AssertionError(msg)
            return False
    del diff_outs
    return True


def gradgradcheck(fn, inputs, grad_outputs=None, eps=1e-6, atol=1e-5, rtol=1e-3,
                  raise_exception=True):
    """Gradcheck of the function ``inputs, v -> vjp(fn)(v)`` (second order)."""
    inputs = _tensors(inputs)
    outs = _flat_out(fn(*inputs))
    rng = np.random.default_rng(1234)
    if grad_outputs is None:
        grad_outputs = [tg.tensor(rng.standard_normal(o.shape).astype(o._data.dtype),
                                  requires_grad=True) for o in outs if o.requires_grad]
    diff_idx = [i for i, t in enumerate(inputs) if isinstance(t, tg.Tensor) and t.requires_grad]

    def vjp_fn(*args):
        # gradcheck evaluates this under no_grad for finite differences; the inner
        # gradient still needs a recording of fn
        with tg.enable_grad():
            ins = args[:len(inputs)]
            vs = args[len(inputs):]
            os = [o for o in _flat_out(fn(*ins)) if o.requires_grad]
            gs = tg.grad(os, [ins[i] for i in diff_idx], grad_outputs=list(vs),
                         create_graph=True, allow_unused=True)
            res = [g for g in gs if g is not None and g.requires_grad]
        if not res:
            return tg.zeros(1, dtype=tg.float64)
        return tuple(res)
    return gradcheck(vjp_fn, tuple(inputs) + tuple(grad_outputs), eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)


def assert_close(actual, expected, *, rtol=None, atol=None, equal_nan=False, check_dtype=True,
                 msg=None):
    """Raise AssertionError unless ``actual`` and ``expected`` are close (PyTorch's
    default tolerances per dtype)."""
    a = _np(actual)
    e = _np(expected)
    if a.shape != e.shape:
        raise AssertionError(msg or f"assert_close: shapes differ: {a.shape} vs {e.shape}")
    if check_dtype and isinstance(actual, tg.Tensor) and isinstance(expected, tg.Tensor) \
            and actual.dtype != expected.dtype:
        raise AssertionError(msg or f"assert_close: dtypes differ: {actual.dtype} vs "
                                    f"{expected.dtype}")
    if rtol is None or atol is None:
        dt = np.result_type(a.dtype, e.dtype)
        rtol, atol = {np.dtype(np.float16): (1e-3, 1e-5), np.dtype(np.float32): (1.3e-6, 1e-5),
                      np.dtype(np.float64): (1e-7, 1e-7)}.get(np.dtype(dt), (0.0, 0.0))
    if a.dtype.kind in "biu" and e.dtype.kind in "biu":
        ok = np.array_equal(a, e)
    else:
        ok = np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if not ok:
        with np.errstate(invalid="ignore"):
            err = np.abs(a.astype(np.float64) - e.astype(np.float64))
        worst = np.nanmax(err) if err.size else 0
        raise AssertionError(msg or f"assert_close: tensors are not close: greatest absolute "
                                    f"difference {worst} (rtol={rtol}, atol={atol})")


def _np(x):
    if isinstance(x, tg.Tensor):
        return np.asarray(x._host())
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor
        return x.detach().cpu().numpy()
    return np.asarray(x)
