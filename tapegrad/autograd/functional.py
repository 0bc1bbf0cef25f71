"""``tg.autograd.functional``: derivatives evaluated at a point, as
``torch.autograd.functional``.

``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``vhp`` and ``hvp`` take ``func`` and its
``inputs`` (a Tensor or a tuple of Tensors) and return values, not functions (those
are ``tg.func``'s transforms). Each runs ``func`` once on fresh variables and takes
reverse-mode gradients of what it recorded:

- ``create_graph=True`` records the derivative computation, so the results can be
  differentiated again (with respect to the caller's inputs that require grad);
  otherwise the outputs and results are detached.
- ``strict=True`` raises where an output does not depend on an input (or the
  Jacobian/Hessian does not depend on the inputs); otherwise that block is zeros.
- ``vectorize=True`` computes a Jacobian's rows in one batched gradient
  (``is_grads_batched``) instead of one gradient per output element; the values are
  the same.
- ``jvp`` and ``hvp`` use the double-backward trick, as PyTorch's: the gradient with
  respect to a stand-in cotangent, differentiated again.
"""
from .. import forward_ad as _fwad
from ..autodiff import grad as _grad
from ..grad_mode import enable_grad, is_grad_enabled, set_grad_enabled
from ..ops import eye, stack, zeros, zeros_like
from ..tensor import Tensor

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]


def _as_tuple(x, what, fn):
    """``(was_tuple, tuple_of_tensors)``; refuses anything but a Tensor or a tuple of
    Tensors, as PyTorch."""
    is_tuple = isinstance(x, tuple)
    xs = x if is_tuple else (x,)
    for i, el in enumerate(xs):
        if not isinstance(el, Tensor):
            where = f"the value at index {i}" if is_tuple else f"the given {what}"
            raise TypeError(f"The {what} given to {fn} must be either a Tensor or a tuple of "
            f"Tensors but {where} has type {type(el)}.")
    return is_tuple, xs


def _unpack(res, is_tuple):
    return res if is_tuple else res[0]


def _unpack2(res, is_out_tuple, is_in_tuple):
    """A nested result ``res[out][in]`` with the levels that were not tuples removed."""
    if not is_in_tuple:
        res = type(res)(r[0] for r in res)
    return res if is_out_tuple else res[0]


def _variables(inputs, create_graph):
    """Fresh variables for ``inputs``: recorded on an input that requires grad when
    the caller wants the results differentiable (``create_graph``), else new leaves
    sharing its memory. Always new objects, so ``func`` closing over an input is told
    apart from the argument it is given."""
    out = []
    for x in inputs:
        if create_graph and x.requires_grad:
            out.append(x.view_as(x))
        else:
            out.append(x.detach().requires_grad_(True))
    return tuple(out)


def _vectors(v, create_graph):
    return tuple(t if create_graph and t.requires_grad else t.detach() for t in v)


def _finish(ts, create_graph):
    return ts if create_graph else tuple(t.detach() for t in ts)


def _check_v(v, ref, ref_is_tuple):
    if len(v) != len(ref):
        if ref_is_tuple:
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(ref)} but got "
                               f"{len(v)}.")
        raise RuntimeError("The given v should contain a single Tensor.")
    for i, (a, b) in enumerate(zip(v, ref)):
        if tuple(a.shape) != tuple(b.shape):
            pre = f"Entry {i} in " if ref_is_tuple else ""
            raise RuntimeError(f"{pre}v has invalid size: should be {tuple(b.shape)} but got "
                               f"{tuple(a.shape)}.")


def _strict_outputs(outputs, strict):
    if strict:
        for i, o in enumerate(outputs):
            if not o.requires_grad:
                raise RuntimeError(f"Output {i} of the user-provided function does not require "
                                   f"gradients. The outputs must be computed in a "
                                   f"differentiable manner from the input when running in "
                                   f"strict mode.")


def _grads(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None,
           is_grads_batched=False):
    """``tg.grad`` over the outputs that require grad (None for every input when none
    does), unused inputs giving None."""
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o is not None and o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    return _grad([o for o, _ in pairs], list(inputs), [g for _, g in pairs],
                 retain_graph=retain_graph, create_graph=create_graph, allow_unused=True,
                 is_grads_batched=is_grads_batched)


def _zeros_for_none(grads, refs, strict, create_graph, independent):
    """Zeros where a gradient is None (``strict``: the error ``independent(i)``)."""
    res = []
    for i, (g, ref) in enumerate(zip(grads, refs)):
        if g is None:
            if strict:
                raise RuntimeError(independent(i))
            g = zeros_like(ref)
        elif strict and create_graph and not g.requires_grad:
            raise RuntimeError(f"The jacobian of the user-provided function is independent of "
                               f"input {i}. This is not allowed in strict mode when "
                               f"create_graph=True.")
        res.append(g)
    return tuple(res)


def _pulled_back(outs, out_tuple, targets, wrt, v, refs, pack, create_graph, strict,
                 independent):
    """``(outs, v^T d targets / d wrt)``, both unpacked as the caller's input and output
    structures; a missing gradient is zeros shaped as ``refs`` (an error in strict mode,
    worded by ``independent(i)``)."""
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        gs = _grads(targets, wrt, v, create_graph=create_graph)
        res = _zeros_for_none(gs, refs, strict, create_graph, independent)
    return (_unpack(_finish(outs, create_graph), out_tuple),
            _unpack(_finish(res, create_graph), pack))


def _prepare(func, inputs, v, create_graph, strict, fn, v_matches_inputs):
    """Shared by vjp/jvp/vhp/hvp: the variables, ``func``'s outputs, and ``v``."""
    with enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", fn)
        xs = _variables(inputs, create_graph)
        if v is not None:
            _, v = _as_tuple(v, "v", fn)
            v = _vectors(v, create_graph)
            if v_matches_inputs:
                _check_v(v, xs, in_tuple)
        elif v_matches_inputs and (len(xs) != 1 or xs[0].numel() != 1):
            raise RuntimeError("The vector v can only be None if the input to the "
                               "user-provided function is a single Tensor with a single "
                               "element.")
        out_tuple, outs = _as_tuple(func(*xs), "outputs of the user-provided function", fn)
        _strict_outputs(outs, strict)
    return in_tuple, xs, v, out_tuple, outs


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T J)``: the vector-Jacobian product, shaped as ``inputs``;
    ``v`` is shaped as the outputs (optional for a single-element output)."""
    in_tuple, xs, v, out_tuple, outs = _prepare(func, inputs, v, create_graph, strict,
                                                "vjp", False)
    if v is not None:
        _check_v(v, outs, out_tuple)
    elif len(outs) != 1 or outs[0].numel() != 1:
        raise RuntimeError("The vector v can only be None if the user-provided function "
                           "returns a single Tensor with a single element.")
    return _pulled_back(outs, out_tuple, outs, xs, v, xs, in_tuple, create_graph, strict,
                        lambda i: (
            f"The output of the user-provided function is independent of input {i}. This "
            f"is not allowed in strict mode."))


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), J v)``: the Jacobian-vector product, shaped as the outputs;
    ``v`` is shaped as ``inputs`` (optional for a single-element input)."""
    in_tuple, xs, v, out_tuple, outs = _prepare(func, inputs, v, create_graph, strict,
                                                "jvp", True)
    with enable_grad():
        # the adjoint is linear in its cotangent: any finite stand-in works
        us = tuple(zeros_like(o).requires_grad_(True) for o in outs)
        g_in = _grads(outs, xs, us, create_graph=True)
        if strict:
            for i, g in enumerate(g_in):
                if g is None:
                    raise RuntimeError(f"The output of the user-provided function is "
                                       f"independent of input {i}. This is not allowed in "
                                       f"strict mode.")
                if not g.requires_grad:
                    raise RuntimeError(f"The gradient with respect to input {i} is independent "
                                       f"of the inputs of the user-provided function. This is "
                                       f"not allowed in strict mode.")
    return _pulled_back(outs, out_tuple, g_in, us, v, outs, out_tuple, create_graph, strict,
                        lambda i: (
            f"The gradient with respect to the input is independent of entry {i} in the "
            f"grad_outputs when using the double backward trick to compute forward mode "
            f"gradients. This is not allowed in strict mode."))


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``: block ``[i][j]`` (output ``i``, input
    ``j``) has shape ``outputs[i].shape + inputs[j].shape``; a level that was not a
    tuple (one output, one input) is unpacked, as PyTorch."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError('jacobian: strategy must be "forward-mode" or "reverse-mode", got '
                         f'{strategy!r}')
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError(
                'tg.autograd.functional.jacobian: `create_graph=True` and '
                '`strategy="forward-mode"` are not supported together (yet). Please either '
                'set `create_graph=False` or `strategy="reverse-mode"`.')
        return _jacobian_forward(func, inputs, strict, vectorize)
    with enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        xs = _variables(inputs, create_graph)
        out_tuple, outs = _as_tuple(func(*xs), "outputs of the user-provided function",
                                    "jacobian")
        _strict_outputs(outs, strict)
        if vectorize and strict:
            raise RuntimeError("tg.autograd.functional.jacobian: `strict=True` and "
                               "`vectorized=True` are not supported together. Please either "
                               "set `strict=False` or `vectorize=False`.")
        jac = []
        for i, o in enumerate(outs):
            n = o.numel()
            if n == 0 or not o.requires_grad:
                gs = (None,) * len(xs)
            elif vectorize:
                basis = eye(n, dtype=o.dtype, device=o.device).reshape((n,) + tuple(o.shape))
                gs = _grads((o,), xs, (basis,), retain_graph=True, create_graph=create_graph,
                            is_grads_batched=True)
            else:
                flat = o.reshape(-1)
                rows = [_grads((flat[k],), xs, retain_graph=True, create_graph=create_graph)
                        for k in range(n)]
                gs = tuple(None if rows[0][j] is None else stack([r[j] for r in rows], 0)
                           for j in range(len(xs)))
            block = []
            for j, (g, x) in enumerate(zip(gs, xs)):
                shape = tuple(o.shape) + tuple(x.shape)
                if g is None:
                    if strict:
                        raise RuntimeError(f"Output {i} of the user-provided function is "
                                           f"independent of input {j}. This is not allowed "
                                           f"in strict mode.")
                    block.append(zeros(shape, dtype=x.dtype, device=x.device))
                    continue
                if strict and create_graph and not g.requires_grad:
                    raise RuntimeError(f"The jacobian of the user-provided function is "
                                       f"independent of input {i}. This is not allowed in "
                                       f"strict mode when create_graph=True.")
                block.append(g.reshape(shape))
            jac.append(_finish(tuple(block), create_graph))
    return _unpack2(tuple(jac), out_tuple, in_tuple)


def _jacobian_forward(func, inputs, strict, vectorize):
    if strict:
        raise RuntimeError('tg.autograd.functional.jacobian: `strict=True` and '
                           '`strategy="forward-mode"` are not supported together (yet). '
                           'Please either set `strict=False` or `strategy="reverse-mode"`.')
    if not vectorize:
        raise NotImplementedError("Computing Jacobian using forward-AD or forward-over-reverse "
                                  "Hessian is only implemented for `vectorize=True`.")
    in_tuple, xs = _as_tuple(inputs, "inputs", "jacobian")
    xs = tuple(x.detach() for x in xs)
    # one forward pass per input element: column k of the Jacobian is J e_k
    numels = [x.numel() for x in xs]
    cols, out_tuple, outs = [], None, None
    for j, x in enumerate(xs):
        for k in range(numels[j]):
            with _fwad.dual_level():
                duals = []
                for jj, xx in enumerate(xs):
                    t = zeros_like(xx)
                    if jj == j:
                        t = t.reshape(-1)
                        t[k] = 1
                        t = t.reshape(tuple(xx.shape))
                    duals.append(_fwad.make_dual(xx, t))
                out_tuple, os_ = _as_tuple(func(*duals), "outputs of the user-provided "
                                           "function", "jacobian")
                pairs = [_fwad.unpack_dual(o) for o in os_]
            outs = [p.detach() for p, _ in pairs]
            cols.append([zeros_like(p) if t is None else t.detach() for p, t in pairs])
    if outs is None:  # no input elements: run func once for the output shapes
        out_tuple, outs = _as_tuple(func(*xs), "outputs of the user-provided function",
                                    "jacobian")
    jac = []
    for i, o in enumerate(outs):
        block, c = [], 0
        for x, n in zip(xs, numels):
            shape = tuple(o.shape) + tuple(x.shape)
            if n == 0 or o.numel() == 0:
                block.append(zeros(shape, dtype=o.dtype, device=o.device))
            else:
                st = stack([cols[c + k][i].reshape(-1) for k in range(n)], -1)
                block.append(st.reshape(shape))
            c += n
        jac.append(block)
    # lists, as PyTorch's forward-mode Jacobian gives
    return _unpack2(jac, out_tuple, in_tuple)


def _single_output(outs, out_tuple, fn):
    if out_tuple or not isinstance(outs[0], Tensor):
        raise RuntimeError(f"The function given to {fn} should return a single Tensor")
    if outs[0].numel() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {fn} should contain "
                           f"a single element")


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of scalar ``func`` at ``inputs``: a Tensor for one input,
    ``H[i][j]`` of shape ``inputs[i].shape + inputs[j].shape`` for a tuple."""
    in_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError('hessian: outer_jacobian_strategy must be "forward-mode" or '
                         f'"reverse-mode", got {outer_jacobian_strategy!r}')

    def scalar_func(*xs):
        out = func(*xs)
        out_tuple, outs = _as_tuple(out, "outputs of the user-provided function", "hessian")
        _strict_outputs(outs, strict)
        _single_output(outs, out_tuple, "hessian")
        return out.reshape(())

    def jac_func(*xs):
        if outer_jacobian_strategy == "forward-mode":
            return _gradient_for_forward(scalar_func, xs)
        jac = jacobian(scalar_func, xs, create_graph=True)
        if strict:
            _jacobian_depends_on_inputs(jac)
        return jac

    res = jacobian(jac_func, inputs, create_graph=create_graph, strict=strict,
                   vectorize=vectorize, strategy=outer_jacobian_strategy)
    return res if in_tuple else res[0][0]


def _gradient_for_forward(func, xs):
    """The gradient of scalar ``func`` at dual ``xs``, taken inside the forward pass
    (forward over reverse: the tangents flow through the recorded backward)."""
    with enable_grad():
        vs = tuple(x if x.requires_grad else x.requires_grad_(True) for x in xs)
        out = func(*vs)
        gs = _grad(out, list(vs), create_graph=True, allow_unused=True,
                   materialize_grads=True)
    return tuple(gs)


def _jacobian_depends_on_inputs(jac):
    """Strict mode's check on a Jacobian taken with create_graph: each entry exists and
    depends on the inputs (PyTorch's messages)."""
    for i, g in enumerate(jac):
        if g is None:
            raise RuntimeError(f"The output of the user-provided function is independent of "
                               f"input {i}. This is not allowed in strict mode.")
        if not g.requires_grad:
            raise RuntimeError(
                f"While computing the hessian, found that the jacobian of the "
                f"user-provided function with respect to input {i} is independent of "
                f"the input. This is not allowed in strict mode. You should ensure "
                f"that your function is twice differentiable and that the jacobian "
                f"depends on the inputs (this would be violated by a linear function "
                f"for example).")


def _second_order(func, inputs, v, create_graph, strict, fn):
    in_tuple, xs, v, out_tuple, outs = _prepare(func, inputs, v, create_graph, strict, fn,
                                                True)
    _single_output(outs, out_tuple, fn)
    with enable_grad():
        jac = _grads(outs, xs, create_graph=True)
        if strict:
            _jacobian_depends_on_inputs(jac)
    return in_tuple, xs, v, out_tuple, outs, jac


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T H)`` for scalar ``func``; ``v`` shaped as ``inputs``."""
    in_tuple, xs, v, out_tuple, outs, jac = _second_order(func, inputs, v, create_graph,
                                                          strict, "vhp")
    return _pulled_back(outs, out_tuple, jac, xs, v, xs, in_tuple, create_graph, strict,
                        lambda i: (
            f"The jacobian of the user-provided function is independent of input {i}. This "
            f"is not allowed in strict mode."))


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), H v)`` for scalar ``func``; ``v`` shaped as ``inputs``. By the
    double-backward trick, as PyTorch's (for a twice continuously differentiable
    ``func`` the Hessian is symmetric and ``vhp`` gives the same, faster)."""
    in_tuple, xs, v, out_tuple, outs, jac = _second_order(func, inputs, v, create_graph,
                                                          strict, "hvp")
    with enable_grad():
        us = tuple(zeros_like(x).requires_grad_(True) for x in xs)
        back = _grads(jac, xs, us, create_graph=True)
        if strict:
            for i, g in enumerate(jac):
                if not g.requires_grad:
                    raise RuntimeError(
                        f"The hessian of the user-provided function with respect to input {i} "
                        f"is independent of the input. This is not allowed in strict mode. "
                        f"You should ensure that your function is thrice differentiable and "
                        f"that the hessian depends on the inputs.")
    return _pulled_back(outs, out_tuple, back, us, v, xs, in_tuple, create_graph, strict,
                        lambda i: (
            f"The hessian of the user-provided function is independent of entry {i} in the "
            f"grad_jacobian. This is not allowed in strict mode as it prevents from using the "
            f"double backward trick to replace forward mode AD."))
