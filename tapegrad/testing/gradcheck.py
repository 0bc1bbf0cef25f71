"""Gradient checks against finite differences.

``gradcheck`` compares the reverse-mode Jacobian of a function with central
differences; ``gradgradcheck`` does the same one order up, for the map from
(inputs, cotangents) to the first-order gradient, and fails when that gradient
is not connected to its inputs (an adjoint computed on detached arrays) while
finite differences say it depends on them.
"""
import numpy as np

from ..autodiff import enable_grad, grad, no_grad
from ..ops.creation import tensor
from ..tensor import Tensor, buffer

__all__ = ["gradcheck", "gradgradcheck"]


def _tensors(inputs):
    if isinstance(inputs, Tensor):
        return (inputs,)
    return tuple(inputs)


def _flat_out(out):
    if isinstance(out, Tensor):
        return [out]
    return [o for o in out if isinstance(o, Tensor)]


def _host(t):
    """A NumPy array with ``t``'s values (a copy when ``t`` lives on a GPU)."""
    return t.detach().cpu().numpy()


def _wants_grad(t):
    return isinstance(t, Tensor) and t.requires_grad


def _numerical_jacobian(fn, inputs, eps):
    """Central differences: per input that requires grad, a (total output elements,
    input elements) float64 matrix; ``None`` for the other inputs."""
    jac = []
    for t in inputs:
        if not _wants_grad(t):
            jac.append(None)
            continue
        data = buffer(t)  # perturbed in place, whatever its strides
        cols = []
        for idx in np.ndindex(*data.shape):
            orig = data[idx].item()
            data[idx] = orig + eps
            with no_grad():
                plus = [_host(o).astype(np.float64) for o in _flat_out(fn(*inputs))]
            data[idx] = orig - eps
            with no_grad():
                minus = [_host(o).astype(np.float64) for o in _flat_out(fn(*inputs))]
            data[idx] = orig
            cols.append(np.concatenate([((p - m) / (2 * eps)).reshape(-1)
                                        for p, m in zip(plus, minus)] or [np.zeros(0)]))
        jac.append(np.stack(cols, axis=1) if cols else None)
    return jac


def _analytical_jacobian(outs, t):
    """Reverse mode, one output element at a time: a (total output elements, t's
    elements) matrix; rows of outputs that do not require grad stay zero."""
    total = sum(o.numel() for o in outs)
    jac = np.zeros((total, t.numel()))
    row = 0
    for o in outs:
        if o.requires_grad:
            for k in range(o.numel()):
                seed = np.zeros(tuple(o.shape), dtype=buffer(o).dtype)
                seed.reshape(-1)[k] = 1
                g, = grad([o], [t], grad_outputs=[tensor(seed, device=o.device)],
                          retain_graph=True, allow_unused=True)
                if g is not None:
                    jac[row + k] = _host(g).reshape(-1)
        row += o.numel()
    return jac


def _first_mismatch(fn, inputs, eps, atol, rtol):
    """None when every Jacobian block matches, else ``(kind, input index, output
    index, output element, input element, analytical, numerical)`` of the worst
    entry; ``kind`` is "detached" when the output does not require grad."""
    num = _numerical_jacobian(fn, inputs, eps)
    outs = _flat_out(fn(*inputs))
    starts = np.cumsum([0] + [o.numel() for o in outs])
    for i, t in enumerate(inputs):
        if num[i] is None:
            continue
        ana = _analytical_jacobian(outs, t)
        if np.allclose(ana, num[i], atol=atol, rtol=rtol, equal_nan=True):
            continue
        with np.errstate(invalid="ignore"):
            err = np.nan_to_num(np.abs(ana - num[i]), nan=np.inf)
        r, c = np.unravel_index(np.argmax(err), err.shape)
        j = int(np.searchsorted(starts, r, side="right") - 1)
        kind = "mismatch" if outs[j].requires_grad else "detached"
        return kind, i, j, int(r - starts[j]), int(c), ana[r, c], num[i][r, c]
    return None


class GradcheckError(AssertionError, RuntimeError):
    """A gradient check that failed: RuntimeError, as ``torch.autograd.gradcheck``'s
    ``GradcheckError``, and AssertionError, as a test's failure."""


def _fail(msg, raise_exception):
    if raise_exception:
        raise GradcheckError(msg)
    return False


def _needs_one(name, inputs):
    if not any(_wants_grad(t) for t in inputs):
        raise ValueError(f"{name} expects at least one input tensor to require gradient, "
                         f"but none of them have requires_grad=True.")


def _not_supported(name, **flags):
    for k, v in flags.items():
        if v:
            raise NotImplementedError(f"{name}: {k}=True is not supported (tapegrad's "
                                      f"batching rules are checked by its registry tests)")


def _forward_mismatch(fn, inputs, eps, atol, rtol):
    """Forward mode against central differences: per input element, the tangent of the
    outputs (``tg.func.jvp``) is the numerical Jacobian's column. The first mismatch
    as (input, element, analytic, numerical), or None."""
    from ..functional import jvp
    num = _numerical_jacobian(fn, inputs, eps)
    for i, t in enumerate(inputs):
        if num[i] is None:
            continue
        data = buffer(t)
        for c in range(data.size):
            tangents = []
            for k, u in enumerate(inputs):
                z = np.zeros(tuple(u.shape), buffer(u).dtype)
                if k == i:
                    z.reshape(-1)[c] = 1
                tangents.append(tensor(z, device=u.device))
            _, touts = jvp(lambda *a: fn(*a), tuple(inputs), tuple(tangents))
            col = np.concatenate([_host(o).astype(np.float64).reshape(-1)
                                  for o in _flat_out(touts)] or [np.zeros(0)])
            want = num[i][:, c]
            if col.shape != want.shape or not np.allclose(col, want, atol=atol, rtol=rtol):
                r = int(np.argmax(np.abs(col - want))) if col.shape == want.shape else 0
                return i, c, (col[r] if col.size else np.nan), (want[r] if want.size
                                                                  else np.nan)
    return None


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
              check_batched_grad=False, check_batched_forward_grad=False,
              check_forward_ad=False, check_backward_ad=True, fast_mode=False, masked=None):
    """Compare reverse-mode gradients of ``fn`` with central differences (use float64).

    Checks every output element against every input that requires grad; an output
    that does not require grad must have a zero numerical gradient. Returns True, or
    raises ``GradcheckError`` naming the input and the worst entry (returns False
    with ``raise_exception=False``), as ``torch.autograd.gradcheck``.
    ``check_forward_ad``: forward mode checked too (``check_backward_ad=False``: only
    it); ``check_grad_dtypes``: each gradient has its input's dtype; ``fast_mode``
    checks the whole Jacobian all the same.
    """
    inputs = _tensors(inputs)
    _needs_one("gradcheck", inputs)
    _not_supported("gradcheck", check_batched_grad=check_batched_grad,
                   check_batched_forward_grad=check_batched_forward_grad, masked=masked)
    if check_forward_ad:
        bad = _forward_mismatch(fn, inputs, eps, atol, rtol)
        if bad is not None:
            i, c, ana, num = bad
            return _fail(f"gradcheck: forward-mode Jacobian mismatch for input {i} (shape "
                         f"{tuple(inputs[i].shape)}), input element {c}: analytic "
                         f"{ana:.8g} vs numerical {num:.8g}", raise_exception)
    if check_grad_dtypes:
        outs = [o for o in _flat_out(fn(*inputs)) if o.requires_grad]
        wrt = [t for t in inputs if _wants_grad(t)]
        if outs:
            gs = grad([o.sum() for o in outs], wrt, allow_unused=True)
            for t, g in zip(wrt, gs):
                if g is not None and g.dtype != t.dtype:
                    return _fail(f"gradcheck: a gradient of dtype {g.dtype} for an input "
                                 f"of dtype {t.dtype}", raise_exception)
    if not check_backward_ad:
        return True
    bad = _first_mismatch(fn, inputs, eps, atol, rtol)
    if bad is None:
        return True
    kind, i, j, r, c, ana, num = bad
    shape = tuple(inputs[i].shape)
    if kind == "detached":
        return _fail(f"gradcheck: output {j} does not require grad, but its numerical "
                     f"gradient for input {i} (shape {shape}) is not zero: output element "
                     f"{r}, input element {c}: {num:.8g}", raise_exception)
    return _fail(f"gradcheck: Jacobian mismatch for input {i} (shape {shape}): output {j} "
                 f"element {r}, input element {c}: analytic {ana:.8g} vs numerical {num:.8g}",
                 raise_exception)


def gradgradcheck(fn, inputs, grad_outputs=None, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0,
                  check_undefined_grad=True, check_grad_dtypes=False,
                  check_batched_grad=False, check_fwd_over_rev=False,
                  check_rev_over_rev=True, fast_mode=False, masked=False):
    """Second order: the analytical derivatives of the first-order gradient
    ``(inputs, v) -> v^T d fn / d inputs`` against its central differences (float64).

    ``grad_outputs`` (the cotangents ``v``) are drawn at random unless given. A
    first-order gradient that is not connected to the inputs and cotangents (the
    adjoint ran on detached arrays, so there is no second-order path) fails unless
    finite differences show it does not depend on them. Returns True, or raises
    ``GradcheckError`` (returns False with ``raise_exception=False``), as
    ``torch.autograd.gradgradcheck``.
    """
    inputs = _tensors(inputs)
    _needs_one("gradgradcheck", inputs)
    _not_supported("gradgradcheck", check_batched_grad=check_batched_grad,
                   check_fwd_over_rev=check_fwd_over_rev, masked=masked)
    if not check_rev_over_rev:
        return True
    diff_idx = [i for i, t in enumerate(inputs) if _wants_grad(t)]
    outs = [o for o in _flat_out(fn(*inputs)) if o.requires_grad]
    if grad_outputs is None:
        rng = np.random.default_rng(1234)
        grad_outputs = [tensor(rng.standard_normal(tuple(o.shape)).astype(buffer(o).dtype),
                               device=o.device, requires_grad=True) for o in outs]
    grad_outputs = _tensors(grad_outputs)
    if len(grad_outputs) != len(outs):
        raise ValueError(f"gradgradcheck: {len(grad_outputs)} grad_outputs for {len(outs)} "
                         f"outputs that require grad")
    n = len(inputs)

    def first_order(*args):
        ins, vs = args[:n], args[n:]
        with enable_grad():  # the numerical pass runs this under no_grad
            os_ = [o for o in _flat_out(fn(*ins)) if o.requires_grad]
            gs = grad(os_, [ins[i] for i in diff_idx], grad_outputs=list(vs),
                      create_graph=True, allow_unused=True) if os_ else [None] * len(diff_idx)
        # an unused input's gradient is zero; finite differences check that it stays so
        return tuple(g if g is not None else tensor(np.zeros(tuple(ins[i].shape),
                                                             dtype=buffer(ins[i]).dtype),
                                                    device=ins[i].device)
                     for i, g in zip(diff_idx, gs))

    args = tuple(inputs) + tuple(grad_outputs)
    bad = _first_mismatch(first_order, args, eps, atol, rtol)
    if bad is None:
        return True
    kind, i, j, r, c, ana, num = bad
    wrt = f"input {i}" if i < n else f"grad_output {i - n}"
    if kind == "detached":
        return _fail(f"gradgradcheck: the first-order gradient of input {diff_idx[j]} is not "
                     f"connected to the inputs (no second-order path: was the adjoint "
                     f"computed on detached arrays?), yet it depends on {wrt}: element {r} "
                     f"moves by {num:.8g} per unit of element {c}", raise_exception)
    return _fail(f"gradgradcheck: second-order mismatch: the first-order gradient of input "
                 f"{diff_idx[j]}, element {r}, against {wrt} element {c}: analytic "
                 f"{ana:.8g} vs numerical {num:.8g}", raise_exception)
