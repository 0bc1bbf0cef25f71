"""Linear algebra: matmul, dot, outer, tensordot, einsum, trace, inv, det, slogdet,
solve, cholesky, the norms (``tg.linalg``); and composites of them: ``mm``, ``bmm``,
``mv``, ``addmm`` and its kin, ``inner``, ``vdot``, ``chain_matmul``, ``matrix_power``,
``matrix_exp``, ``logdet``, ``cross``, ``cov``, ``corrcoef``, ``cdist``, ``renorm``.

Layering: linalg sits above elementwise, reduce, shape and creation (the composites,
matrix_norm, solve, use them); the nn ops import it."""
import builtins
import collections
import math
import string

import numpy as np

from .. import devices as _devices, dtypes, dtypes as _dt
from .._util import DtypeError, normalize_dim, normalize_dims, op_error
from ..devices.cpu_kernels.tiled_gemm import matmul as _gemm
from ..dispatch import bind, foreign_constant
from ..dtypes import is_float as _isf
from ..tape import name_call
from ..tensor import Tensor
from . import (
    _jvp,
    _vmap,
    creation as C,
    elementwise as _E,
    indexing as I,
    reduce as _R,
    shape as _S,
)
from ._decl import (
    S,
    Sample,
    TensorSpec,
    alias,
    away_from,
    composite,
    decl,
    one_dtype,
    rand,
    register,
)
from .creation import cast
from .joining import _same_dtype, _tensors
from .onnx_forms import _common as _onnx_common, _norm as _onnx_norm
from .reduce import _no_bool

__all__ = ["matmul", "dot", "outer", "ger", "tensordot", "einsum", "trace", "det", "inverse",
           "slogdet", "addmm", "addmv", "addr", "addbmm", "baddbmm", "bmm", "mv", "inner", "vdot",
           "chain_matmul", "matrix_power", "matrix_exp", "logdet", "cdist", "corrcoef", "cov",
           "cross", "renorm", "mm"]


def _matmul_infer(x, other):
    xs, ys = tuple(x.shape), tuple(other.shape)
    if not xs or not ys:
        raise op_error("matmul", f"both arguments need at least 1 dim, got shapes {xs} and {ys}",
                       RuntimeError)
    k1 = xs[-1]
    k2 = ys[-2] if len(ys) > 1 else ys[0]
    if k1 != k2:
        raise op_error("matmul", f"shapes {xs} and {ys} cannot be multiplied "
                                 f"({k1} != {k2})", RuntimeError)
    bx = xs[:-2] if len(xs) > 1 else ()
    by = ys[:-2] if len(ys) > 1 else ()
    try:
        batch = np.broadcast_shapes(bx, by)
    except ValueError:
        raise op_error("matmul", f"batch dims of {xs} and {ys} cannot be broadcast",
                       RuntimeError) from None
    out = tuple(batch) + ((xs[-2],) if len(xs) > 1 else ()) + ((ys[-1],) if len(ys) > 1 else ())
    return TensorSpec(out, one_dtype("matmul", (x, other), ("input", "other")))


def _matmul_kernel(x, other, out=None):
    if x.ndim == 0 or other.ndim == 0:
        raise ValueError("matmul: 0-d")
    if out is not None and type(out) is not np.ndarray:  # (another array library's buffer)
        out[...] = _matmul_kernel(x, other)
        return out
    if x.ndim > 2 and other.ndim == 2:
        # a stack of matrices times one matrix is one GEMM (NumPy would loop over the
        # stack: 10x slower for the thin matrices vmap makes)
        k = x.shape[-1]
        rows = int(np.prod(x.shape[:-1]))
        if out is not None and out.flags.c_contiguous:
            _gemm(x.reshape(rows, k), other, out=out.reshape(rows, other.shape[-1]))
            return out
        res = _gemm(x.reshape(rows, k), other).reshape(x.shape[:-1] + other.shape[-1:])
        if out is None:
            return res
        out[...] = res
        return out
    if x.ndim >= 2 and other.ndim >= 2 and x.shape[-1] == 1 and x.ndim == other.ndim:
        # outer products (inner dim 1): a broadcast multiply
        return x * other if out is None else np.multiply(x, other, out=out)
    if x.ndim > 2 and x.ndim == other.ndim and x.shape[:-2] == other.shape[:-2] and \
            type(x) is np.ndarray and type(other) is np.ndarray and \
            x.dtype == other.dtype and x.dtype in _STACK_DTYPES:
        m, k, n = x.shape[-2], x.shape[-1], other.shape[-1]
        small = m * k * n
        if small <= _STACK_SMALL and small * math.prod(x.shape[:-2]) >= _STACK_WORK and \
                _devices.cpu.threads() > 1:
            return _stacked_matmul(x, other, out)
    if x.ndim == 2 and other.ndim == 2:
        return _gemm(x, other, out)
    return np.matmul(x, other) if out is None else np.matmul(x, other, out=out)


# A stack of small matrix products (attention's per-head QK^T and PV) is a loop of
# GEMMs that OpenBLAS runs on one thread each (it threads one GEMM only above
# m * k * n = 4 * 65536): split along the leading dim over tapegrad's threads instead,
# each chunk one np.matmul (BLAS without the GIL); the same GEMM per matrix, so the
# same bits. (64, 4, 64, 32) @ (64, 4, 32, 64) float32: 1.08 -> 0.62 ms on 2 cores.
_STACK_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_STACK_SMALL = 4 * 65536
_STACK_WORK = 1 << 20


def _stacked_matmul_chunk(n, x, other, out):
    np.matmul(x, other, out=out)


def _stacked_matmul(x, other, out):
    if out is None:
        out = np.empty(x.shape[:-1] + other.shape[-1:], x.dtype)
    _devices.cpu.run_chunked(_stacked_matmul_chunk, x.shape[0], x, other, out, min_chunk=1)
    return out


def _matmul_vjp(ctx, g):
    # each input's gradient reads only the other input (the one not saved is None)
    x, y = ctx.inputs
    xs, ys = ctx.shapes
    m = ctx.m
    n = ctx.needs_input_grad
    if len(xs) == 2 and len(ys) == 1:  # matrix @ vector: g @ x is a gemv, no transpose
        return (m.outer(g, y) if n[0] else None, m.matmul(g, x) if n[1] else None)
    if len(xs) == 1 and len(ys) == 2:  # vector @ matrix
        return (m.matmul(y, g) if n[0] else None, m.outer(x, g) if n[1] else None)
    gshape = tuple(g.shape)
    if len(xs) == 1:
        gshape = gshape[:len(gshape) - (0 if len(ys) == 1 else 1)] + (1,) + \
                 (gshape[-1:] if len(ys) > 1 else ())
    if len(ys) == 1:
        gshape = gshape + (1,)
    g2 = m.reshape(g, gshape) if gshape != tuple(g.shape) else g
    gx = gy = None
    if n[0]:
        y2 = y if len(ys) > 1 else m.reshape(y, (ys[0], 1))
        gx = m.matmul(g2, m.mT(y2))
        gx = m.sum_to(gx, xs if len(xs) > 1 else (1, xs[0]))
        if len(xs) == 1:
            gx = m.reshape(gx, xs)
    if n[1]:
        x2 = x if len(xs) > 1 else m.reshape(x, (1, xs[0]))
        gy = m.matmul(m.mT(x2), g2)
        gy = m.sum_to(gy, ys if len(ys) > 1 else (ys[0], 1))
        if len(ys) == 1:
            gy = m.reshape(gy, ys)
    return gx, gy


def _matmul_samples(dtype=np.float64):
    pairs = [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((4,), (4, 3)), ((3, 4), (4,)),
             ((4,), (4,)), ((2, 1, 3, 4), (3, 4, 2))]
    return [Sample((rand(a, dtype, seed=k), rand(b, dtype, seed=k + 7)), {})
            for k, (a, b) in enumerate(pairs)]


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_einsum(b, st):
    eq = st.attrs["equation"].replace(" ", "")
    ins, _ = _onnx_common(b, st, dtype=b.out_dtype(st))
    if "->" not in eq:  # the implicit output: the letters seen once, sorted
        lhs = eq.replace(",", "").replace(".", "")
        eq = eq + "->" + ("..." if "..." in eq else "") + "".join(
            sorted(c for c in set(lhs) if lhs.count(c) == 1))
    b.node("Einsum", ins, [b.output(st)], equation=eq)


def _onnx_matmul(b, st):
    (x, y), _ = _onnx_common(b, st, dtype=b.out_dtype(st))
    b.node("MatMul", [x, y], [b.output(st)])


def _onnx_tensordot(b, st):
    na, nb = len(b.shape(st, 0)), len(b.shape(st, 1))
    dims = st.attrs["dims"]
    if isinstance(dims, (int, np.integer)):
        da, db = list(range(na - dims, na)), list(range(dims))
    else:
        da, db = [[int(x) for x in (d if isinstance(d, (tuple, list)) else [d])] for d in dims]
        da, db = [x % na for x in da], [x % nb for x in db]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    la = [next(letters) for _ in range(na)]
    lb = [next(letters) for _ in range(nb)]
    for i, j in zip(da, db):
        lb[j] = la[i]
    out = [c for k, c in enumerate(la) if k not in da] + [c for k, c in enumerate(lb)
                                                          if k not in db]
    eq = "".join(la) + "," + "".join(lb) + "->" + "".join(out)
    ins, _ = _onnx_common(b, st, dtype=b.out_dtype(st))
    b.node("Einsum", ins, [b.output(st)], equation=eq)


def _onnx_outer(b, st):
    (x, y), _ = _onnx_common(b, st, dtype=b.out_dtype(st))
    b.node("Mul", [b.unsqueeze(x, [1]), b.unsqueeze(y, [0])], [b.output(st)])


def _onnx_trace(b, st):
    n, m = b.shape(st, 0)
    k = min(n, m)
    idx = np.arange(k) * m + np.arange(k)
    d = b.gather_static(b.input(st, 0, b.out_dtype(st)), (n, m), idx)
    b.reduce("ReduceSum", d, [0], False, [b.output(st)])


def _onnx_det(b, st):
    b.node("Det", [b.input(st, 0)], [b.output(st)])


def _onnx_slogdet(b, st):
    d = b.node("Det", [b.input(st, 0)])
    b.node("Sign", [d], [b.output(st, 0)])
    b.node("Log", [b.node("Abs", [d])], [b.output(st, 1)])


def _matmul_vmap(ctx, x, y):
    if ctx.ndim(0) == 0 or ctx.ndim(1) == 0:
        return _vmap.loop(ctx, x, y)
    m = ctx.m
    if not ctx.batched[0] and ctx.ndim(0) == 2 and ctx.batched[1]:
        # one matrix times a batch: one GEMM, the batch folded into the other side
        if ctx.ndim(1) == 1:                                  # (B, K) @ x.T -> (B, M)
            return bind(ctx.op, y, m.mT(x))
        if ctx.ndim(1) == 2:                                  # x @ (K, B*N) -> (B, M, N)
            s = tuple(y.shape)
            wide = m.reshape(m.movedim(y, 0, 1), (s[1], s[0] * s[2]))
            out = bind(ctx.op, x, wide)
            return m.movedim(m.reshape(out, (tuple(x.shape)[0], s[0], s[2])), 1, 0)
    return _vmap.matmul_values(ctx.m, ctx.op, x, y, ctx.batched[0], ctx.batched[1],
                               ctx.ndim(0), ctx.ndim(1))


def _matmul_grad_fn_name(attrs, shapes):
    """The last node torch.matmul records for these ranks: the 1-D and 2-D kernels
    (dot, mv, mm; a vector times a matrix is mm on the unsqueezed vector, then squeeze);
    a matrix times a batch is computed transposed and copied back (clone); other
    batched products fold the batch into bmm/mm and unfold it (_unsafe_view)."""
    a, b = len(shapes[0]), len(shapes[1])
    if a <= 2 and b <= 2:
        return {(1, 1): "DotBackward0", (1, 2): "SqueezeBackward4", (2, 1): "MvBackward0",
                (2, 2): "MmBackward0"}[a, b]
    return "CloneBackward0" if a == 2 else "UnsafeViewBackward0"


MATMUL = register(name="matmul", autocast="lower", onnx=_onnx_matmul, vmap=_matmul_vmap,
                  jvp=_jvp.multilinear, kernel=_matmul_kernel, args=("x", "other"),
                  infer=_matmul_infer,
                  vjp=_matmul_vjp, saves={"x": ("other",), "other": ("x",)}, promote="none",
                  samples=_matmul_samples, grad_fn_name=_matmul_grad_fn_name,
                  error_samples=lambda: [((rand((3, 4)), rand((5, 2))), {}, RuntimeError)],
                  torch=lambda torch, x, other: torch.matmul(x, other))


def matmul(input, other, *, out=None):
    """Matrix product with NumPy/PyTorch semantics (1-D cases, batch broadcasting);
    ``out=``: written into that tensor."""
    if out is not None:
        from .compat import write_out
        return write_out("matmul", bind(MATMUL, input, other), out)
    return bind(MATMUL, input, other)


# ================================================================ helpers
def _raw(v):
    """The array behind a Tensor (or the array itself): for dtype/device of constants."""
    return v._data if isinstance(v, Tensor) else v


def _const(ref, make):
    """A constant array built by ``make(xp, dtype)`` on ref's device with ref's dtype."""
    r = _raw(ref)
    if not isinstance(r, np.ndarray):
        c = foreign_constant(r, make)  # an adjoint run on another framework's arrays
        if c is not None:
            return c
    return make(_devices.xp_of(r), r.dtype)


def _float_check(name, *specs):
    for s in specs:
        if not _isf(np.dtype(s.dtype)):
            raise op_error(name, f"expected a floating point tensor as input, got "
                                 f"{np.dtype(s.dtype)}", DtypeError)


def _result_dtype(*specs):
    return dtypes.result_type(*[np.dtype(s.dtype) for s in specs])


# ================================================================ einsum
_LETTERS = string.ascii_uppercase + string.ascii_lowercase


def _canon_equation(equation, ndims, name="einsum"):
    """An einsum equation to its explicit form over letters only.

    Ellipses become fresh letters (right-aligned across operands, as NumPy/PyTorch
    broadcast them), the implicit output becomes explicit (ellipsis dims first, then
    the letters used once, sorted). Raises RuntimeError naming the problem.
    """
    if not isinstance(equation, str):
        raise op_error(name, f"equation must be a string, got {type(equation).__name__}",
                       TypeError)
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->", 1)
        if "->" in out or "-" in out or ">" in out:
            raise op_error(name, f"invalid equation {equation!r}", RuntimeError)
    else:
        lhs, out = eq, None
    subs = lhs.split(",")
    if len(subs) != len(ndims):
        raise op_error(name, f"the equation {equation!r} names {len(subs)} operands "
                                 f"but {len(ndims)} were given", RuntimeError)
    used = set()
    for s in subs + ([out] if out is not None else []):
        body = s.replace("...", "")
        for c in body:
            if c not in _LETTERS:
                raise op_error(name, f"invalid subscript {c!r} in equation {equation!r}: "
                                         f"subscripts are letters [a-zA-Z] and '...'",
                               RuntimeError)
        if s.count("...") > 1:
            raise op_error(name, f"more than one ellipsis in {s!r}", RuntimeError)
        used |= set(body)
    fresh = [c for c in _LETTERS if c not in used]
    ell_n = []
    for k, (s, nd) in enumerate(zip(subs, ndims)):
        n_letters = len(s.replace("...", ""))
        if "..." in s:
            if n_letters > nd:
                raise op_error(name, f"operand {k} has {nd} dims but subscripts {s!r} "
                                         f"name {n_letters}", RuntimeError)
            ell_n.append(nd - n_letters)
        else:
            if n_letters != nd:
                raise op_error(name, f"the number of subscripts in {s!r} ({n_letters}) "
                                         f"does not match the number of dimensions ({nd}) of "
                                         f"operand {k} and no ellipsis was given", RuntimeError)
            ell_n.append(0)
    n_ell = max(ell_n, default=0)
    if n_ell > len(fresh):
        raise op_error(name, "too many dimensions for 52 subscript letters", RuntimeError)
    ell = "".join(fresh[:n_ell])
    subs = [s.replace("...", ell[n_ell - e:]) for s, e in zip(subs, ell_n)]
    if out is None:
        counts = {}
        for s in subs:
            for c in s:
                if c not in ell:
                    counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1))
    else:
        out = out.replace("...", ell)
        seen = set()
        for c in out:
            if c in seen:
                raise op_error(name, f"output subscript {c} appears more than once in the "
                                         f"output", RuntimeError)
            seen.add(c)
            if not any(c in s for s in subs):
                raise op_error(name, f"output subscript {c} does not appear in the "
                                         f"equation for any input operand", RuntimeError)
    return ",".join(subs) + "->" + out


def _split_equation(eq):
    lhs, out = eq.split("->")
    return lhs.split(","), out


def _letter_sizes(subs, shapes, name="einsum"):
    """Size of each letter, broadcasting size-1 dims across operands; checks."""
    sizes = {}
    for k, (s, shape) in enumerate(zip(subs, shapes)):
        mine = {}
        for c, d in zip(s, shape):
            if c in mine and mine[c] != d:
                raise op_error(name, f"subscript {c} is repeated for operand {k} but the "
                                         f"sizes don't match, {mine[c]} != {d}", RuntimeError)
            mine[c] = d
        for c, d in mine.items():
            prev = sizes.get(c)
            if prev is None or prev == 1:
                sizes[c] = d
            elif d != 1 and d != prev:
                raise op_error(name, f"subscript {c} has size {d} for operand {k} which "
                                         f"does not broadcast with previously seen size {prev}"
                                         f" (shapes {[tuple(x) for x in shapes]})", RuntimeError)
    return sizes


def _einsum_name(n):
    return "einsum" if n == 2 else f"einsum{n}"


def _einsum_infer(*specs, equation):
    shapes = [tuple(s.shape) for s in specs]
    name = _einsum_name(len(specs))
    subs, out = _split_equation(_canon_equation(equation, [len(s) for s in shapes], name))
    sizes = _letter_sizes(subs, shapes, name)
    return TensorSpec(tuple(sizes[c] for c in out),
                      one_dtype("einsum", specs, [f"operand {i}" for i in range(len(specs))]))


def _einsum_kernel(*operands, equation):
    # (three or more operands take no out=: the optimized path's contractions make
    # intermediates the output's size)
    return np.asarray(np.einsum(equation, *operands, optimize=len(operands) > 1))


def _einsum2_kernel(a, b, equation, out=None):
    if out is None:
        return _einsum_kernel(a, b, equation=equation)
    if not _einsum2_into(a, b, equation, out):
        out[...] = _einsum_kernel(a, b, equation=equation)  # (computed, then copied)
    return out


def _einsum2_into(a, b, equation, out):
    """Two operands into a C-contiguous ``out``, where that needs no temporary: no
    contracted letter, NumPy's einsum loop (no BLAS to gain); else the contraction
    as a (batched, broadcast) matrix product, when the output's letters are the batch
    letters, then one operand's free letters, then the other's. False otherwise (a
    diagonal, a letter summed in one operand only, a size-1 contracted letter: the
    caller computes, then copies)."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or type(out) is not np.ndarray \
            or not out.flags.c_contiguous:
        return False
    (sa, sb), so = _split_equation(equation)
    if len(set(sa)) != len(sa) or len(set(sb)) != len(sb) or set(sa + sb) - set(so) - (
            set(sa) & set(sb)):
        return False
    if np.may_share_memory(out, a):
        a = a.copy()
    if np.may_share_memory(out, b):
        b = b.copy()
    contr = [c for c in sa if c in sb and c not in so]
    if not contr:
        np.einsum(equation, a, b, out=out)
        return True
    za, zb = dict(zip(sa, a.shape)), dict(zip(sb, b.shape))
    if any(za[c] != zb[c] for c in contr):
        return False
    group = [0 if c in sa and c in sb else 1 if c in sa else 2 for c in so]
    if group != sorted(group):  # the free letters of b first: swap the operands
        a, b, sa, sb, za, zb = b, a, sb, sa, zb, za
        group = [0 if g == 0 else 3 - g for g in group]
        if group != sorted(group):
            return False
    batch = [c for c, g in zip(so, group) if g == 0]
    fa = [c for c, g in zip(so, group) if g == 1]
    fb = [c for c, g in zip(so, group) if g == 2]
    m = math.prod(za[c] for c in fa)
    n = math.prod(zb[c] for c in fb)
    k = math.prod(za[c] for c in contr)
    a2 = a.transpose([sa.index(c) for c in batch + fa + contr]).reshape(
        tuple(za[c] for c in batch) + (m, k))
    b2 = b.transpose([sb.index(c) for c in batch + contr + fb]).reshape(
        tuple(zb[c] for c in batch) + (k, n))
    sizes = {**za, **zb}
    sizes.update({c: max(za[c], zb[c]) for c in batch})
    np.matmul(a2, b2, out=out.reshape(tuple(sizes[c] for c in batch) + (m, n)))
    return True


def _einsum1_kernel(x, equation, out=None):
    """One operand: NumPy's einsum loop writes straight into out= (with several, the
    optimized path's contractions make out-sized intermediates: those take no out=)."""
    if out is None:
        r = np.asarray(np.einsum(equation, x))
        # NumPy gives a view of x for a permutation or a diagonal: einsum is not a view
        # op here (the result has its own version counter), so it gets its own memory
        return r.copy() if np.may_share_memory(r, x) else r
    if np.may_share_memory(out, x):
        out[...] = np.einsum(equation, x)
    else:
        np.einsum(equation, x, out=out)
    return out


def _einsum_grad(m, subs, out, operands, g, k, shape_k):
    """Cotangent of operand k of ``einsum(subs -> out)``: an einsum of g and the others.

    Letters of operand k that occur nowhere else are broadcast back with a ones
    vector; a letter repeated within operand k (a diagonal) is embedded back with an
    identity, so the adjoint is again an einsum and differentiates again.
    """
    sk = subs[k]
    terms = [(out, g)] + [(s, o) for j, (s, o) in enumerate(zip(subs, operands)) if j != k]
    have = set(out).union(*[set(s) for j, s in enumerate(subs) if j != k])
    used = set("".join(subs) + out)
    fresh = iter(c for c in _LETTERS if c not in used)
    target, seen = [], set()
    for c, d in zip(sk, shape_k):
        if c in seen:
            f = next(fresh, None)
            if f is None:
                raise op_error("einsum", "too many subscripts to form the gradient", RuntimeError)
            terms.append((c + f, _const(g, lambda xp, dt, d=d: xp.eye(d, dtype=dt))))
            target.append(f)
            continue
        seen.add(c)
        if c not in have:
            terms.append((c, _const(g, lambda xp, dt, d=d: xp.ones(d, dtype=dt))))
            have.add(c)
        target.append(c)
    eq = ",".join(s for s, _ in terms) + "->" + "".join(target)
    r = bind(_einsum_op(len(terms)), *[t for _, t in terms], equation=eq)
    shape_k = tuple(shape_k)
    if tuple(r.shape) != shape_k:
        # size-1 dims broadcast in the forward: sum where operand k had size 1, expand
        # where only the others had size 1
        red = tuple(1 if t == 1 else s for s, t in zip(r.shape, shape_k))
        if red != tuple(r.shape):
            r = m.sum_to(r, red)
        if red != shape_k:
            r = m.broadcast_to(r, shape_k)
    return r


def _einsum_vjp(ctx, g):
    subs, out = _split_equation(_canon_equation(ctx.attrs["equation"],
                                                [len(s) for s in ctx.shapes]))
    ops = ctx.inputs
    return tuple(_einsum_grad(ctx.m, subs, out, ops, g, k, ctx.shapes[k])
                 if ctx.needs_input_grad[k] else None for k in range(len(subs)))


_EINSUM_SAMPLES = {
    1: [("ij->ji", [(3, 4)]), ("ii->i", [(3, 3)]), ("ii->", [(3, 3)]), ("ij->", [(2, 3)]),
        ("iji->j", [(3, 2, 3)]), ("ij->i", [(3, 0)]), ("ABij->ABji", [(2, 1, 2, 3)]),
        ("ijk->kj", [(2, 3, 4)])],
    2: [("ij,jk->ik", [(3, 4), (4, 2)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
        ("i,i->", [(4,), (4,)]), ("i,j->ij", [(3,), (2,)]), ("ij,ij->ij", [(1, 3), (4, 3)]),
        ("ii,i->i", [(3, 3), (3,)]), ("ij,jk->", [(2, 3), (3, 2)]),
        ("Aij,jk->Aik", [(1, 2, 3), (3, 2)]), ("bn,anm->bam", [(2, 3), (2, 3, 2)]),
        ("ij,kl->ijkl", [(2, 2), (1, 2)]), ("iij,jk->ik", [(2, 2, 3), (1, 2)])],
    3: [("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("i,ij,j->", [(3,), (3, 4), (4,)]),
        ("bi,bj,bk->bijk", [(2, 2), (2, 3), (2, 2)])],
}


def _einsum_samples_for(n):
    def samples(dtype=np.float64):
        out = []
        for k, (eq, shapes) in enumerate(_EINSUM_SAMPLES.get(n, [])):
            out.append(Sample(tuple(rand(s, dtype, seed=10 * k + j) for j, s in enumerate(shapes)),
                              {"equation": eq}))
        if n not in _EINSUM_SAMPLES:
            shapes = [(2, 3)] * n
            eq = ",".join("ij" for _ in range(n)) + "->ij"
            out.append(Sample(tuple(rand(s, dtype, seed=j) for j, s in enumerate(shapes)),
                              {"equation": eq}))
        if n == 1:   # non-contiguous
            out.append(Sample((rand((4, 3), dtype, seed=5).T,), {"equation": "ij->j"}))
        return out
    return samples


def _einsum_errors_for(n):
    def errors():
        if n == 1:
            return [((rand((2, 3)),), {"equation": "ii->i"}, RuntimeError),
                    ((rand((2, 3)),), {"equation": "ijk->i"}, RuntimeError)]
        ops = tuple(rand((2, 3)) for _ in range(n - 1)) + (rand((4, 5)),)
        return [(ops, {"equation": ",".join("ij" for _ in range(n)) + "->ij"}, RuntimeError)]
    return errors


_EINSUM_OPS = {}


def _einsum_vmap(ctx, *values):
    eq = ctx.attrs["equation"]
    if "..." in eq or "->" not in eq:
        return _vmap.loop(ctx, *values)
    ins, out = eq.split("->")
    terms = ins.split(",")
    used = set(eq)
    z = next(c for c in "ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvutsrqponmlkjihgfedcba" if c not in used)
    terms = [z + t if b else t for t, b in zip(terms, ctx.batched)]
    return bind(ctx.op, *values, equation=",".join(terms) + "->" + z + out)


def _einsum_sums_shared(device_type, args, attrs):
    """Whether PyTorch's einsum gives the autocast dtype for this call. CUDA lists
    einsum itself. On the CPU it contracts the operands pairwise, left to right (the
    order PyTorch takes without opt_einsum; with it, three or more operands may pair
    otherwise): a pair summing a subscript both hold with a size other than 1 goes
    through bmm (on the CPU list: the autocast dtype), any other pair multiplies (the
    wider of its two dtypes), so the result has the autocast dtype when the last
    pair does."""
    if device_type != "cpu":
        return True
    subs, out = _split_equation(attrs["equation"])
    # per operand: (the subscripts it holds with a size other than 1, lowered)
    ops = [({c for c, n in zip(s, a.shape) if n != 1}, False) for s, a in zip(subs, args)]
    count = collections.Counter(c for held, _ in ops for c in held if c not in out)
    while len(ops) > 1:
        (a, low_a), (b, low_b) = ops[0], ops[1]
        summed = set()
        for c in list(count):
            if c in a and c in b:
                count[c] -= 1
                if count[c] == 1:
                    summed.add(c)
                    count[c] = 0
            elif count[c] == 1 and (c in a or c in b):
                count[c] = 0
                summed.add(c)  # summed within the one operand holding it
        ops[:2] = [((a | b) - summed, any(c in a and c in b for c in summed)
                    or (low_a and low_b))]
    return ops[0][1]


def _einsum_op(n):
    """The einsum op for n operands ("einsum" for two, "einsum<n>" otherwise), made on
    first use: the registry keeps a fixed list of tensor args per op."""
    op = _EINSUM_OPS.get(n)
    if op is None:
        args = tuple(f"operand{i}" for i in range(n))
        op = _EINSUM_OPS[n] = register(
            name=_einsum_name(n), jvp=_jvp.multilinear, vmap=_einsum_vmap,
            # CUDA autocast lists einsum; on CPU two or more operands contract by bmm
            autocast="lower" if n > 1 else {"cuda": "lower"},
            autocast_when=_einsum_sums_shared if n > 1 else None,
            kernel=(_einsum1_kernel if n == 1 else _einsum2_kernel if n == 2
                    else _einsum_kernel),
            infer=_einsum_infer, args=args, vjp=_einsum_vjp, promote="none",
            # an operand's gradient is an einsum of the cotangent and the others
            saves={a: tuple(b for b in args if b != a) for a in args},
            samples=_einsum_samples_for(n), error_samples=_einsum_errors_for(n),
            torch=lambda torch, *ts, equation: torch.einsum(equation, *ts),
            doc=f"einsum over {n} operand(s)", onnx=_onnx_einsum)
    return op


for _n in (1, 2, 3):
    _einsum_op(_n)


def einsum(equation, *operands):
    """Einstein summation as ``torch.einsum``: any subscripts, implicit or explicit
    output, ``...``, repeated subscripts (diagonals/traces), size-1 broadcasting.

    >>> tg.einsum("ij,jk->ik", a, b)          # matmul
    >>> tg.einsum("ii", a)                     # trace
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise op_error("einsum", "must provide at least one operand", RuntimeError)
    ndims = [len(getattr(o, "shape", np.shape(o))) for o in operands]
    eq = _canon_equation(equation, ndims)
    _letter_sizes(_split_equation(eq)[0], [tuple(o.shape) for o in operands])
    return bind(_einsum_op(len(operands)), *operands, equation=eq)


# ================================================================ dot / outer / trace
def _dot_infer(x, y):
    xs, ys = tuple(x.shape), tuple(y.shape)
    if len(xs) != 1 or len(ys) != 1:
        raise op_error("dot", f"1D tensors expected, but got {len(xs)}D and {len(ys)}D tensors "
                              f"(shapes {xs} and {ys})", RuntimeError)
    if xs != ys:
        raise op_error("dot", f"inconsistent tensor size, expected tensor {xs} and src {ys} to "
                              f"have the same number of elements", RuntimeError)
    return TensorSpec((), one_dtype("dot", (x, y), ("input", "other")))


def _dot_kernel(x, y, out=None):
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError("dot")
    if out is not None:
        if type(out) is np.ndarray and out.dtype == np.result_type(x, y) \
                and type(x) is np.ndarray:
            np.dot(x, y, out=out)  # (NumPy's dot takes out= of its own result type only)
        else:
            out[...] = np.dot(x, y)  # one element
        return out
    return np.asarray(np.dot(x, y))


def _dot_vjp(ctx, g):
    x, y = ctx.inputs
    n = ctx.needs_input_grad
    return (g * y if n[0] else None, g * x if n[1] else None)


def _dot_vmap(ctx, x, y):
    m = ctx.m
    return m.sum(m.mul(x, y), dim=-1)


DOT = register(name="dot", autocast={"cuda": "promote"}, onnx=_onnx_matmul, vmap=_dot_vmap,
               jvp=_jvp.multilinear, kernel=_dot_kernel, infer=_dot_infer, args=("x", "y"),
               vjp=_dot_vjp,
               saves={"x": ("y",), "y": ("x",)}, promote="none",
               samples=lambda dtype=np.float64: [
                   Sample((rand((4,), dtype, seed=1), rand((4,), dtype, seed=2)), {}),
                   Sample((rand((1,), dtype, seed=3), rand((1,), dtype, seed=4)), {}),
                   Sample((rand((0,), dtype), rand((0,), dtype)), {}),
                   Sample((rand((3, 4), dtype, seed=5)[:, 1], rand((3,), dtype, seed=6)), {})],
               error_samples=lambda: [((rand((2, 3)), rand((2, 3))), {}, RuntimeError),
                                      ((rand((3,)), rand((4,))), {}, RuntimeError)],
               torch=lambda torch, x, y: torch.dot(x, y))


def dot(input, other):
    """Inner product of two 1-D tensors (``torch.dot``)."""
    return bind(DOT, input, other)


def _outer_infer(x, y):
    xs, ys = tuple(x.shape), tuple(y.shape)
    if len(xs) != 1 or len(ys) != 1:
        raise op_error("outer", f"expected 1D tensors, got shapes {xs} and {ys}", RuntimeError)
    return TensorSpec(xs + ys, _result_dtype(x, y))


def _outer_kernel(x, y, out=None):
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError("outer")
    return np.multiply.outer(x, y, out=out)


def _outer_vjp(ctx, g):
    x, y = ctx.inputs
    m, n = ctx.m, ctx.needs_input_grad
    return (m.matmul(g, y) if n[0] else None, m.matmul(x, g) if n[1] else None)


def _outer_vmap(ctx, x, y):
    m = ctx.m
    return m.mul(m.unsqueeze(x, -1), m.unsqueeze(y, -2))


OUTER = register(name="outer", onnx=_onnx_outer, vmap=_outer_vmap, jvp=_jvp.multilinear,
                 kernel=_outer_kernel, infer=_outer_infer, args=("x", "vec2"),
                 vjp=_outer_vjp, saves={"x": ("vec2",), "vec2": ("x",)}, promote="same",
                 grad_fn_name="MulBackward0",  # (torch.outer is a broadcast mul)
                 samples=lambda dtype=np.float64: [
                     Sample((rand((3,), dtype, seed=1), rand((4,), dtype, seed=2)), {}),
                     Sample((rand((1,), dtype, seed=3), rand((2,), dtype, seed=4)), {}),
                     Sample((rand((0,), dtype), rand((2,), dtype)), {}),
                     Sample((rand((4, 3), dtype, seed=5)[:, 0], rand((2,), dtype, seed=6)), {})],
                 error_samples=lambda: [((rand((2, 3)), rand((2,))), {}, RuntimeError)],
                 torch=lambda torch, x, vec2: torch.outer(x, vec2))


def outer(input, vec2):
    """Outer product of two 1-D tensors (``torch.outer``)."""
    return bind(OUTER, input, vec2)


ger = outer


alias(outer, "ger", "outer")


def _trace_infer(x):
    if len(x.shape) != 2:
        raise op_error("trace", f"expected a matrix, but got tensor with dim {len(x.shape)} "
                                f"(shape {tuple(x.shape)})", RuntimeError)
    dt = np.dtype(x.dtype)
    if dt.kind == "b":  # PyTorch has no bool kernel
        raise op_error("trace", "not implemented for bool tensors", NotImplementedError)
    return TensorSpec((), np.dtype(np.int64) if dt.kind in "iu" else dt)


def _trace_kernel(x, out=None):
    if x.ndim != 2:
        raise ValueError("trace")
    dt = np.int64 if x.dtype.kind in "biu" else None
    if out is not None:
        np.trace(x, dtype=dt, out=out)
        return out
    return np.asarray(np.trace(x, dtype=dt))


def _trace_vjp(ctx, g):
    n, k = ctx.shapes[0]
    return (g * _const(g, lambda xp, dt: xp.eye(n, k, dtype=dt)),)


def _trace_vmap(ctx, x):
    return ctx.m.sum(ctx.m.diagonal(x, 0, -2, -1), dim=-1)


TRACE = register(name="trace", autocast={"cpu": "fp32"}, onnx=_onnx_trace, vmap=_trace_vmap,
                 jvp=_jvp.linear, kernel=_trace_kernel, infer=_trace_infer, vjp=_trace_vjp,
                 samples=lambda dtype=np.float64: [
                     Sample((rand((3, 3), dtype, seed=1),), {}),
                     Sample((rand((2, 4), dtype, seed=2),), {}),
                     Sample((rand((4, 3), dtype, seed=3).T,), {}),
                     Sample((rand((0, 2), dtype),), {})],
                 error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
                 torch=lambda torch, x: torch.trace(x))


def trace(input):
    """Sum of the main diagonal of a 2-D tensor."""
    return bind(TRACE, input)


# ================================================================ tensordot
def _td_dims(a_nd, b_nd, dims):
    """``dims`` (int or pair of sequences) to a pair of tuples of non-negative dims."""
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, (int, np.integer)):
        dims = int(dims)
        if dims < 0:
            raise op_error("tensordot", f"expects dims >= 0, but got dims={dims}", RuntimeError)
        if dims > min(a_nd, b_nd):
            raise op_error("tensordot", f"expects dims <= the number of dims of both inputs "
                                        f"({a_nd} and {b_nd}), got {dims}", RuntimeError)
        return tuple(range(a_nd - dims, a_nd)), tuple(range(dims))
    try:
        da, db = dims
    except (TypeError, ValueError):
        raise op_error("tensordot", f"dims must be an int or a pair of lists of dims, got "
                                    f"{dims!r}", RuntimeError) from None
    da = [da] if isinstance(da, (int, np.integer)) else list(da)
    db = [db] if isinstance(db, (int, np.integer)) else list(db)
    if len(da) != len(db):
        raise op_error("tensordot", f"both dimension lists should have same length, got "
                                    f"{da} and {db}", RuntimeError)
    da = tuple(normalize_dim("tensordot", d, a_nd) for d in da)
    db = tuple(normalize_dim("tensordot", d, b_nd) for d in db)
    if len(set(da)) != len(da) or len(set(db)) != len(db):
        raise op_error("tensordot", f"repeated dims in {da} / {db}", RuntimeError)
    return da, db


def _td_equation(a_nd, b_nd, dims):
    da, db = dims
    la = _LETTERS[:a_nd]
    lb = list(_LETTERS[a_nd:a_nd + b_nd])
    for i, j in zip(da, db):
        lb[j] = la[i]
    lb = "".join(lb)
    out = "".join(c for i, c in enumerate(la) if i not in da) + \
          "".join(c for j, c in enumerate(lb) if j not in db)
    return la, lb, out


def _td_infer(a, b, dims):
    as_, bs = tuple(a.shape), tuple(b.shape)
    da, db = _td_dims(len(as_), len(bs), dims)
    for i, j in zip(da, db):
        if as_[i] != bs[j]:
            raise op_error("tensordot", f"contracted dimensions need to match, but first has "
                                        f"size {as_[i]} in dim {i} and second has size "
                                        f"{bs[j]} in dim {j} (shapes {as_} and {bs})",
                           RuntimeError)
    out = tuple(s for i, s in enumerate(as_) if i not in da) + \
        tuple(s for j, s in enumerate(bs) if j not in db)
    return TensorSpec(out, one_dtype("tensordot", (a, b), ("a", "b")))


def _td_kernel(a, b, dims, out=None):
    da, db = dims
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise ValueError("tensordot")
    if out is None or type(a) is not np.ndarray or type(out) is not np.ndarray \
            or not out.flags.c_contiguous:
        r = np.asarray(np.tensordot(a, b, axes=(list(da), list(db))))
        if out is None:
            return r
        out[...] = r
        return out
    # np.tensordot's own steps (free dims first, contracted dims last, as a matrix
    # product), the product written by matmul into ``out`` seen as that matrix
    # (matmul copies an input that ``out`` overlaps)
    fa = [i for i in range(a.ndim) if i not in da]
    fb = [j for j in range(b.ndim) if j not in db]
    k = math.prod(a.shape[i] for i in da)
    m, n = math.prod(a.shape[i] for i in fa), math.prod(b.shape[j] for j in fb)
    a2 = a.transpose(fa + list(da)).reshape(m, k)
    b2 = b.transpose(list(db) + fb).reshape(k, n)
    np.matmul(a2, b2, out=out.reshape(m, n))
    return out


def _td_vjp(ctx, g):
    a, b = ctx.inputs
    sa, sb = ctx.shapes
    la, lb, out = _td_equation(len(sa), len(sb), ctx.attrs["dims"])
    n = ctx.needs_input_grad
    return (_einsum_grad(ctx.m, [la, lb], out, [a, b], g, 0, sa) if n[0] else None,
            _einsum_grad(ctx.m, [la, lb], out, [a, b], g, 1, sb) if n[1] else None)


def _not_a_dot(device_type, args, attrs):
    """Whether PyTorch's CPU tensordot reaches mm (on the CPU autocast list): unless
    the free dims of both operands hold one element each (it then takes a dot)."""
    if device_type != "cpu":
        return True
    free = [math.prod(n for i, n in enumerate(x.shape) if i not in set(d) | {i - x.ndim})
            for x, d in zip(args, attrs["dims"])]
    return free != [1, 1]


TENSORDOT = register(
    name="tensordot", autocast={"cpu": "lower", "cuda": "promote"}, autocast_when=_not_a_dot,
    onnx=_onnx_tensordot, jvp=_jvp.multilinear,
    kernel=_td_kernel, infer=_td_infer, args=("a", "b"), vjp=_td_vjp,
    saves={"a": ("b",), "b": ("a",)}, promote="none",
    samples=lambda dtype=np.float64: [
        Sample((rand((2, 3, 4), dtype, seed=1), rand((3, 4, 2), dtype, seed=2)),
               {"dims": ((1, 2), (0, 1))}),
        Sample((rand((3, 4), dtype, seed=3), rand((4, 2), dtype, seed=4)), {"dims": ((1,), (0,))}),
        Sample((rand((2, 3), dtype, seed=5), rand((2, 2), dtype, seed=6)), {"dims": ((), ())}),
        Sample((rand((3, 2), dtype, seed=7), rand((2, 3), dtype, seed=8)),
               {"dims": ((0, 1), (1, 0))}),
        Sample((rand((4, 3), dtype, seed=9).T, rand((4, 2), dtype, seed=10)),
               {"dims": ((1,), (0,))})],
    error_samples=lambda: [((rand((2, 3)), rand((4, 2))), {"dims": ((1,), (0,))}, RuntimeError)],
    torch=lambda torch, a, b, dims: torch.tensordot(a, b, dims=[list(dims[0]), list(dims[1])]))


def tensordot(a, b, dims=2, out=None):
    """Contract ``dims`` of ``a`` with ``dims`` of ``b`` (``torch.tensordot``)."""
    if out is not None:
        raise op_error("tensordot", "out= is not supported", TypeError)
    d = _td_dims(len(a.shape), len(b.shape), dims)
    return bind(TENSORDOT, a, b, dims=d)


# ================================================================ tg.linalg
class LinAlgError(RuntimeError):
    """A linear algebra failure on valid shapes (singular or non positive-definite
    input), as ``torch.linalg.LinAlgError``."""


def _linalg_call(op, *args, **attrs):
    """bind, re-raising a kernel's LinAlgError as itself (bind reports kernel failures
    through the shape rule, which has nothing to add for a singular matrix)."""
    try:
        return bind(op, *args, **attrs)
    except RuntimeError as e:
        if isinstance(e.__context__, LinAlgError) and not isinstance(e, LinAlgError):
            raise e.__context__ from None
        raise


def _square_check(name, x):
    s = tuple(x.shape)
    if len(s) < 2:
        raise op_error(name, f"the input tensor A must have at least 2 dimensions, got "
                             f"shape {s}", RuntimeError)
    if s[-1] != s[-2]:
        raise op_error(name, f"A must be batches of square matrices, but they are "
                             f"{s[-2]} by {s[-1]} matrices (shape {s})", RuntimeError)
    _float_check(name, x)
    return s


def _spd_samples(shapes, dtype, seed=0):
    """Symmetric positive-definite, well-conditioned: R R^T + n I."""
    out = []
    for k, s in enumerate(shapes):
        r = rand(s, np.float64, -1.0, 1.0, seed=seed + k)
        n = s[-1]
        a = r @ np.swapaxes(r, -1, -2) + n * np.eye(n)
        out.append(a.astype(dtype))
    return out


def _wellcond(shape, dtype, seed=0):
    """A general (non-symmetric) matrix batch away from singular: R + n I."""
    n = shape[-1]
    return (rand(shape, np.float64, -1.0, 1.0, seed=seed) + n * np.eye(n)).astype(dtype)


def _unsq2(m, x):
    """(...,) -> (..., 1, 1)."""
    return m.reshape(x, tuple(x.shape) + (1, 1))


# ---------------------------------------------------------------- inv
def _inv_infer(x):
    return TensorSpec(_square_check("linalg_inv", x), x.dtype)


def _need_float(*arrays, square=True):
    """NumPy's linalg takes ints silently, PyTorch refuses them; and a non-square
    input must not pass for a singular one. The infer then explains."""
    for a in arrays:
        if not _isf(a.dtype):
            raise TypeError("not a floating point array")
    if square and (arrays[0].ndim < 2 or arrays[0].shape[-1] != arrays[0].shape[-2]):
        raise ValueError("not square")


try:  # the LAPACK gufuncs np.linalg calls: as any ufunc they take out=
    from numpy.linalg import _umath_linalg as _ulg
except ImportError:  # (private to NumPy: where it is gone, out= computes then copies)
    _ulg = None


def _into(out, *arrays):
    """Whether np.linalg's gufunc can write straight into ``out``: float64 in and out
    (np.linalg computes float32 in float64: a float32 out would take a float64 copy of
    the result, so those compute and copy), NumPy arrays."""
    return _ulg is not None and all(type(a) is np.ndarray and a.dtype == np.float64
                                    for a in (out,) + arrays)


def _lapack(name, args, sig, out, singular=None):
    """``_umath_linalg.<name>(*args)`` into ``out`` (a tuple for several outputs);
    ``singular``: the LinAlgError message for a singular input (np.linalg's way: the
    gufunc raises the invalid flag)."""
    def fail(err, flag):
        raise LinAlgError(singular)
    with np.errstate(call=fail, invalid="call" if singular else "ignore", over="ignore",
                     divide="ignore", under="ignore"):
        getattr(_ulg, name)(*args, signature=sig, out=out)
    return out


def _copy_into(out, r):
    out[...] = r
    return out


def _inv_kernel(x, out=None):
    _need_float(x)
    msg = ("linalg_inv: the input matrix is singular, the inversion could not be completed "
           f"(shape {tuple(x.shape)})")
    if out is not None:
        if _into(out, x):
            return _lapack("inv", (x,), "d->d", out, msg)
        return _copy_into(out, _inv_kernel(x))
    try:
        return np.linalg.inv(x)
    except np.linalg.LinAlgError:
        raise LinAlgError(msg) from None


def _inv_jvp(ctx, t):
    # d(A^-1) = -A^-1 dA A^-1
    m = ctx.m
    return (-m.matmul(ctx.out, m.matmul(t, ctx.out)),)


INV = register(
    name="linalg_inv", grad_fn_name="LinalgInvExBackward0",
    autocast={"cpu": "fp32"}, vmap=_vmap.leading, jvp=_inv_jvp,
    kernel=_inv_kernel, infer=_inv_infer, saves=("out",),
    vjp=lambda ctx, g: (-ctx.m.matmul(ctx.m.mT(ctx.out), ctx.m.matmul(g, ctx.m.mT(ctx.out))),),
    samples=lambda dtype=np.float64: [
        Sample((_wellcond((3, 3), dtype, 1),), {}), Sample((_wellcond((2, 2, 2), dtype, 2),), {}),
        Sample((_spd_samples([(3, 3)], dtype, 3)[0],), {}),
        Sample((_wellcond((1, 1), dtype, 4),), {}), Sample((rand((2, 0, 0), dtype),), {})],
    error_samples=lambda: [((rand((2, 3)),), {}, RuntimeError),
                           ((np.ones((3, 3)),), {}, RuntimeError),
                           ((np.eye(3, dtype=np.int64),), {}, TypeError)],
    torch=lambda torch, x: torch.linalg.inv(x))


def inv(A, *, out=None):
    """Inverse of square matrices (batched); LinAlgError (a RuntimeError) if singular."""
    if out is not None:
        raise op_error("linalg_inv", "out= is not supported", TypeError)
    return _linalg_call(INV, A)


def inverse(input):
    """``torch.inverse``: alias of ``tg.linalg.inv``."""
    return inv(input)


alias(inverse, "inverse", "linalg_inv")


# ---------------------------------------------------------------- det / slogdet
def _det_infer(x):
    s = _square_check("linalg_det", x)
    return TensorSpec(s[:-2], x.dtype)


def _det_vjp(ctx, g):
    # d det(A) = det(A) tr(A^-1 dA)  =>  gA = g det(A) A^-T
    m = ctx.m
    x, = ctx.inputs
    return (_unsq2(m, g) * _unsq2(m, ctx.out) * m.mT(inv(x)),)


def _det_kernel(x, out=None):
    _need_float(x)
    if out is not None:
        if _into(out, x):
            return _lapack("det", (x,), "d->d", out)
        return _copy_into(out, _det_kernel(x))
    return np.asarray(np.linalg.det(x))


def _det_jvp(ctx, t):
    # a reduction over each matrix: the tangent against det's own gradient
    nd = ctx.inputs[0].ndim
    return _jvp.reduction_over(lambda c: ((nd - 2, nd - 1), False))(ctx, t)


DET = register(
    name="linalg_det", onnx=_onnx_det, vmap=_vmap.leading, jvp=_det_jvp, kernel=_det_kernel,
    infer=_det_infer,
    vjp=_det_vjp, saves=("x", "out"),
    samples=lambda dtype=np.float64: [
        Sample((_wellcond((3, 3), dtype, 1),), {}), Sample((_wellcond((2, 2, 2), dtype, 2),), {}),
        Sample((-_wellcond((2, 2), dtype, 3),), {}), Sample((_wellcond((1, 1), dtype, 4),), {}),
        Sample((_wellcond((3, 3), dtype, 5).T,), {})],
    error_samples=lambda: [((rand((2, 3)),), {}, RuntimeError)],
    torch=lambda torch, x: torch.linalg.det(x))


def det(A, *, out=None):
    """Determinant of square matrices (batched). Its gradient uses A^-1 (A invertible)."""
    if out is not None:
        raise op_error("linalg_det", "out= is not supported", TypeError)
    return bind(DET, A)


alias(det, "det", "linalg_det")


def _slogdet_infer(x):
    s = _square_check("linalg_slogdet", x)
    return TensorSpec(s[:-2], x.dtype), TensorSpec(s[:-2], x.dtype)


def _slogdet_kernel(x, out=None):
    _need_float(x)
    if out is not None:  # (sign, logabsdet)
        so, lo = out
        if _into(so, x) and _into(lo):
            _lapack("slogdet", (x,), "d->dd", (so, lo))
            np.copyto(so, 0, where=np.isnan(lo))
            return so, lo
        r = _slogdet_kernel(x)
        so[...], lo[...] = r
        return so, lo
    sign, logabs = np.linalg.slogdet(x)
    # a matrix with NaN has no sign: 0 with a NaN logabsdet, as PyTorch (LAPACK's LU
    # of NaNs gives an arbitrary +-1)
    sign = np.where(np.isnan(logabs), 0, sign)
    return np.asarray(sign, dtype=x.dtype), np.asarray(logabs, dtype=x.dtype)


def _slogdet_vjp(ctx, g):
    # the sign is piecewise constant: only logabsdet has a gradient, g A^-T
    _, glog = g
    if glog is None:
        return (None,)
    m = ctx.m
    x, = ctx.inputs
    return (_unsq2(m, glog) * m.mT(inv(x)),)


def _slogdet_jvp(ctx, t):
    # sign is locally constant; logabsdet reduces each matrix: the tangent against its
    # gradient
    m = ctx.m
    grad_ctx = _jvp._GradCtx(ctx, (True,))
    dx = ctx.op.vjp(grad_ctx, (None, m.ones_like(ctx.out[1])))[0]
    return (None, m.sum(dx * t, dim=(-2, -1)))


SLOGDET = register(
    name="linalg_slogdet", onnx=_onnx_slogdet, vmap=_vmap.leading, jvp=_slogdet_jvp,
    kernel=_slogdet_kernel, infer=_slogdet_infer, vjp=_slogdet_vjp,
    saves=("x",), nout=2,
    samples=lambda dtype=np.float64: [
        Sample((_wellcond((3, 3), dtype, 1),), {}), Sample((_wellcond((2, 2, 2), dtype, 2),), {}),
        Sample((_wellcond((3, 3), dtype, 3)[[1, 0, 2]],), {}),
        Sample((_wellcond((1, 1), dtype, 4),), {})],
    error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
    torch=lambda torch, x: tuple(torch.linalg.slogdet(x)))


SlogdetResult = collections.namedtuple("slogdet", ["sign", "logabsdet"])


def slogdet(A, *, out=None):
    """``(sign, logabsdet)`` of square matrices, a named tuple as PyTorch's."""
    if out is not None:
        raise op_error("linalg_slogdet", "out= is not supported", TypeError)
    return SlogdetResult(*bind(SLOGDET, A))


alias(slogdet, "slogdet", "linalg_slogdet")


# ---------------------------------------------------------------- solve
def _solve_infer(a, b):
    sa, sb = tuple(a.shape), tuple(b.shape)
    _square_check("linalg_solve", a)
    _float_check("linalg_solve", b)
    if len(sb) < 2 or sb[-2] != sa[-1]:
        raise op_error("linalg_solve", f"incompatible shapes of A and B for the equation "
                                       f"AX = B ({sa[-2]}x{sa[-1]} and "
                                       f"{'x'.join(map(str, sb[-2:]))}; shapes {sa} and {sb})",
                       RuntimeError)
    try:
        batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    except ValueError:
        raise op_error("linalg_solve", f"batch dims of A {sa} and B {sb} cannot be broadcast",
                       RuntimeError) from None
    return TensorSpec(tuple(batch) + sb[-2:], _result_dtype(a, b))


def _solve_kernel(a, b, out=None):
    if b.ndim < 2 or a.ndim < 2:
        raise ValueError("linalg_solve")
    _need_float(a, b)
    msg = ("linalg_solve: the solver failed because the input matrix A is singular (shape "
           f"{tuple(a.shape)})")
    if out is not None:
        if _into(out, a, b):  # (the gufunc copies an input that out overlaps)
            return _lapack("solve", (a, b), "dd->d", out, msg)
        return _copy_into(out, _solve_kernel(a, b))
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        raise LinAlgError(msg) from None


def _solve_vjp(ctx, g):
    # X = A^-1 B:  gB = A^-T g,  gA = -gB X^T
    m = ctx.m
    a, _ = ctx.inputs
    sa, sb = ctx.shapes
    gb = solve(m.mT(a), g)
    ga = -m.matmul(gb, m.mT(ctx.out)) if ctx.needs_input_grad[0] else None
    if ga is not None and tuple(ga.shape) != sa:
        ga = m.sum_to(ga, sa)
    if tuple(gb.shape) != sb:
        gb = m.sum_to(gb, sb)
    return ga, (gb if ctx.needs_input_grad[1] else None)


def _solve_jvp(ctx, ta, tb):
    # X = A^-1 B:  dX = A^-1 (dB - dA X)
    m = ctx.m
    a, _ = ctx.inputs
    rhs = tb if ta is None else (-m.matmul(ta, ctx.out) if tb is None else
                                 tb - m.matmul(ta, ctx.out))
    return (bind(ctx.op, a, rhs),)


def _solve_vmap(ctx, a, b):
    # both are stacks of matrices: line their batch dims up
    rank = max(ctx.ndim(0), ctx.ndim(1))
    a, b = _vmap.pad_rank(ctx, [a, b], rank)
    return bind(ctx.op, a, b, **ctx.attrs)


SOLVE = register(
    name="linalg_solve", grad_fn_name="LinalgSolveExBackward0",
    autocast={"cpu": "fp32"}, vmap=_solve_vmap, jvp=_solve_jvp,
    kernel=_solve_kernel, infer=_solve_infer, args=("A", "B"),
    vjp=_solve_vjp, saves={"A": ("A", "out"), "B": ("A",)}, promote="same",
    samples=lambda dtype=np.float64: [
        Sample((_wellcond((3, 3), dtype, 1), rand((3, 2), dtype, seed=2)), {}),
        Sample((_wellcond((2, 3, 3), dtype, 3), rand((3, 1), dtype, seed=4)), {}),
        Sample((_wellcond((3, 3), dtype, 5), rand((2, 3, 2), dtype, seed=6)), {}),
        Sample((_wellcond((2, 1, 2, 2), dtype, 7), rand((3, 2, 2), dtype, seed=8)), {}),
        Sample((_wellcond((3, 3), dtype, 9).T, rand((3, 0), dtype)), {})],
    error_samples=lambda: [((_wellcond((3, 3), np.float64), rand((4, 2))), {}, RuntimeError),
                           ((np.ones((2, 2)), rand((2, 1))), {}, RuntimeError)],
    torch=lambda torch, A, B: torch.linalg.solve(A, B))


def solve(A, B, *, left=True, out=None):
    """Solve ``A X = B`` (or ``X A = B`` with ``left=False``), batched and broadcast as
    ``torch.linalg.solve``: B is a (batch of) vector(s) when it is 1-D or has shape
    ``A.shape[:-1]``."""
    if out is not None:
        raise op_error("linalg_solve", "out= is not supported", TypeError)
    sa, sb = tuple(A.shape), tuple(B.shape)
    if len(sa) < 2:
        _square_check("linalg_solve", TensorSpec(sa, _raw(A).dtype))
    if not left:
        if len(sb) < 2:
            raise op_error("linalg_solve", f"with left=False B must be a matrix, got shape "
                                           f"{sb}", RuntimeError)
        return _S.mT(solve(_S.mT(A), _S.mT(B)))
    vector = len(sb) == 1 or (len(sb) == len(sa) - 1 and sb == sa[:-1])
    if vector:
        x = _linalg_call(SOLVE, A, _S.reshape(B, sb + (1,)))
        return _S.reshape(x, tuple(x.shape[:-1]))
    return _linalg_call(SOLVE, A, B)


# ---------------------------------------------------------------- solve_triangular
def _tri_infer(a, b, upper, unitriangular=False):
    sa, sb = tuple(a.shape), tuple(b.shape)
    _square_check("linalg_solve_triangular", a)
    _float_check("linalg_solve_triangular", b)
    if len(sb) < 2 or sb[-2] != sa[-1]:
        raise op_error("linalg_solve_triangular",
                       f"incompatible shapes of A and B for the equation AX = B "
                       f"({sa[-2]}x{sa[-1]} and {'x'.join(map(str, sb[-2:]))}; shapes {sa} "
                       f"and {sb}; B must be a matrix or a batch of them)", RuntimeError)
    try:
        batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    except ValueError:
        raise op_error("linalg_solve_triangular", f"batch dims of A {sa} and B {sb} cannot "
                                                  f"be broadcast", RuntimeError) from None
    return TensorSpec(tuple(batch) + sb[-2:], _result_dtype(a, b))


def _triangle(xp, a, upper, unitriangular):
    """The triangle of ``a`` the solve reads (its diagonal 1 when ``unitriangular``)."""
    keep = xp.triu if upper else xp.tril
    if not unitriangular:
        return keep(a)
    n = a.shape[-1]
    return keep(a, 1 if upper else -1) + xp.eye(n, dtype=a.dtype)


def _tri_kernel(a, b, upper, unitriangular=False, out=None):
    if b.ndim < 2 or a.ndim < 2:
        raise ValueError("linalg_solve_triangular")
    _need_float(a, b)
    xp = _devices.xp_of(a)
    if not unitriangular and not xp.all(xp.diagonal(a, 0, -2, -1)):
        raise LinAlgError("linalg_solve_triangular: the triangular matrix A is singular "
                          f"(a zero on its diagonal; shape {tuple(a.shape)})")
    if xp is np:  # substitution, many right-hand sides per matrix (a Numba loop)
        from ..devices.cpu_kernels import linalg as _cpu_linalg
        dt = np.result_type(a.dtype, b.dtype)
        into = out if out is not None and type(out) is np.ndarray and out.dtype == dt \
            and out.flags.c_contiguous else None
        r = _cpu_linalg.solve_triangular(a.astype(dt, copy=False), b.astype(dt, copy=False),
                                         upper, unitriangular, out=into)
    else:  # CuPy: LU on the triangle
        r = xp.linalg.solve(_triangle(xp, a, upper, unitriangular), b)
    if out is None or r is out:
        return r
    out[...] = r
    return out


def _tri_part(m, x, upper, unitriangular):
    """The gradient's part on the triangle the solve reads."""
    k = (1 if upper else -1) if unitriangular else 0
    return m.triu(x, k) if upper else m.tril(x, k)


def _tri_vjp(ctx, g):
    # X = T^-1 B:  gB = T^-T g (the other triangle of A^T),  gA = tri(-gB X^T)
    m = ctx.m
    a, _ = ctx.inputs
    sa, sb = ctx.shapes
    upper, unit = ctx.attrs["upper"], ctx.attrs.get("unitriangular", False)
    gb = bind(TRI_SOLVE, m.mT(a), g, upper=not upper, unitriangular=unit)
    ga = None
    if ctx.needs_input_grad[0]:
        ga = _tri_part(m, -m.matmul(gb, m.mT(ctx.out)), upper, unit)
        if tuple(ga.shape) != sa:
            ga = m.sum_to(ga, sa)
    if tuple(gb.shape) != sb:
        gb = m.sum_to(gb, sb)
    return ga, (gb if ctx.needs_input_grad[1] else None)


def _tri_jvp(ctx, ta, tb):
    # X = T^-1 B:  dX = T^-1 (dB - tri(dA) X)
    m = ctx.m
    a, _ = ctx.inputs
    upper, unit = ctx.attrs["upper"], ctx.attrs.get("unitriangular", False)
    rhs = tb
    if ta is not None:
        da_x = m.matmul(_tri_part(m, ta, upper, unit), ctx.out)
        rhs = -da_x if tb is None else tb - da_x
    return (bind(TRI_SOLVE, a, rhs, upper=upper, unitriangular=unit),)


def _tri_samples(dtype=np.float64):
    return [
        Sample((_wellcond((3, 3), dtype, 11), rand((3, 2), dtype, seed=12)), {"upper": False}),
        Sample((_wellcond((3, 3), dtype, 13), rand((3, 2), dtype, seed=14)), {"upper": True}),
        Sample((_wellcond((2, 3, 3), dtype, 15), rand((3, 1), dtype, seed=16)),
               {"upper": False, "unitriangular": True}),
        Sample((_wellcond((3, 3), dtype, 17), rand((2, 3, 2), dtype, seed=18)),
               {"upper": True, "unitriangular": True}),
        Sample((_wellcond((2, 1, 2, 2), dtype, 19), rand((3, 2, 2), dtype, seed=20)),
               {"upper": False}),
        Sample((_wellcond((3, 3), dtype, 21).T, rand((3, 0), dtype)), {"upper": False})]


TRI_SOLVE = register(
    name="linalg_solve_triangular", vmap=_solve_vmap, jvp=_tri_jvp, kernel=_tri_kernel,
    infer=_tri_infer, args=("A", "B"), vjp=_tri_vjp, saves={"A": ("A", "out"), "B": ("A",)},
    promote="same",
    samples=_tri_samples,
    error_samples=lambda: [((_wellcond((3, 3), np.float64), rand((4, 2))), {"upper": False},
                            RuntimeError),
                           ((_wellcond((3, 3), np.float64), rand((3,))), {"upper": True},
                            RuntimeError),
                           ((np.zeros((2, 2)), rand((2, 1))), {"upper": False}, RuntimeError)],
    torch=lambda torch, A, B, upper, unitriangular=False: torch.linalg.solve_triangular(
        A, B, upper=upper, unitriangular=unitriangular))


def solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):
    """Solve ``A X = B`` (``X A = B`` with ``left=False``) for triangular ``A``, as
    ``torch.linalg.solve_triangular``: only the ``upper`` (or lower) triangle of ``A``
    is read (and differentiated), its diagonal taken as 1 with ``unitriangular``; ``B``
    is a matrix or a batch of them, batch dims broadcast."""
    if out is not None:
        raise op_error("linalg_solve_triangular", "out= is not supported", TypeError)
    if not isinstance(upper, bool):
        raise op_error("linalg_solve_triangular", f"upper must be a bool, got {upper!r}",
                       TypeError)
    if not left:
        return _S.mT(solve_triangular(_S.mT(A), _S.mT(B), upper=not upper,
                                      unitriangular=unitriangular))
    return _linalg_call(TRI_SOLVE, A, B, upper=upper, unitriangular=bool(unitriangular))


# ---------------------------------------------------------------- cholesky
def _chol_infer(x):
    return TensorSpec(_square_check("linalg_cholesky", x), x.dtype)


def _chol_kernel(x):
    # A is taken as symmetric, (A + A^T)/2 (as JAX does): exact for the symmetric input
    # the factorization is defined for, and it makes the (symmetric) gradient PyTorch
    # gives the true gradient of this kernel.
    _need_float(x)
    sym = (x + np.swapaxes(x, -1, -2)) / 2
    try:
        return np.linalg.cholesky(sym)
    except np.linalg.LinAlgError:
        raise LinAlgError("linalg_cholesky: the factorization could not be completed because "
                          f"the input is not positive-definite (shape {tuple(x.shape)})") from None


def _chol_vjp(ctx, g):
    # Murray (2016), as PyTorch writes it: gA = L^-T Phi L^-1 with
    # Phi = sym(tril(L^T gL)) (strict lower part mirrored, halved)
    m = ctx.m
    L = ctx.out
    n = ctx.shapes[0][-1]
    low = _const(g, lambda xp, dt: xp.tril(xp.ones((n, n), dtype=dt)))
    strict = _const(g, lambda xp, dt: xp.tril(xp.ones((n, n), dtype=dt), -1))
    t = m.matmul(m.mT(L), g) * low
    phi = (t + m.mT(t * strict)) * 0.5
    linv = inv(L)
    return (m.matmul(m.mT(linv), m.matmul(phi, linv)),)


def _chol_jvp(ctx, t):
    # the kernel factors sym(A); dL = L Phi(L^-1 sym(dA) L^-T), Phi: the lower triangle
    # with its diagonal halved (PyTorch's linalg_cholesky_jvp)
    m = ctx.m
    L = ctx.out
    n = L.shape[-1]
    sym = (t + m.mT(t)) * 0.5
    linv = inv(L)
    inner = m.matmul(linv, m.matmul(sym, m.mT(linv)))
    eye = m.eye(n, dtype=L.dtype)
    phi = m.tril(inner) - inner * eye * 0.5
    return (m.matmul(L, phi),)


CHOLESKY = register(
    name="linalg_cholesky", grad_fn_name="LinalgCholeskyExBackward0",
    autocast={"cpu": "fp32"}, vmap=_vmap.leading, jvp=_chol_jvp,
    kernel=_chol_kernel, infer=_chol_infer, vjp=_chol_vjp,
    saves=("out",),
    samples=lambda dtype=np.float64: [
        Sample((a,), {}) for a in _spd_samples([(3, 3), (2, 2, 2), (1, 1), (4, 4)], dtype)]
    + [Sample((rand((2, 0, 0), dtype),), {})],
    error_samples=lambda: [((-np.eye(3),), {}, RuntimeError), ((rand((2, 3)),), {}, RuntimeError)],
    torch=lambda torch, x: torch.linalg.cholesky(x))


def cholesky(A, *, upper=False, out=None):
    """Cholesky factor of symmetric positive-definite matrices: lower ``L`` with
    ``A = L L^T`` (``upper=True``: ``L^T``). A non positive-definite input raises
    LinAlgError (a RuntimeError)."""
    if out is not None:
        raise op_error("linalg_cholesky", "out= is not supported", TypeError)
    L = _linalg_call(CHOLESKY, A)
    if upper:
        return _S.mT(L)
    return L


# ---------------------------------------------------------------- norms
def _vn_dims(dim, ndim):
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return None
    dims = normalize_dims("linalg_vector_norm", dim, ndim)
    return dims if ndim else None  # a 0-d input: dim 0 or -1 is all of it


def _vn_infer(x, ord=2.0, dim=None, keepdim=False):
    _float_check("linalg_vector_norm", x)
    shape = tuple(x.shape)
    dims = tuple(range(len(shape))) if dim is None else \
        normalize_dims("linalg_vector_norm", dim, len(shape))
    if ord == np.inf or ord < 0:
        for d in dims:
            if shape[d] == 0:
                raise op_error("linalg_vector_norm", f"cannot compute the {ord:g} norm on "
                                                     f"the empty dimension {d} of shape "
                                                     f"{shape}: the operation has no identity",
                               RuntimeError)
    out = tuple(1 if i in dims else s for i, s in enumerate(shape)) if keepdim else \
        tuple(s for i, s in enumerate(shape) if i not in dims)
    return TensorSpec(out, x.dtype)


def _vn_kernel(x, ord=2.0, dim=None, keepdim=False):
    _need_float(x, square=False)
    if ord < 0 and any(x.shape[d] == 0 for d in (range(x.ndim) if dim is None else dim)):
        raise ValueError("empty")
    ax = dim
    if ord == 2:
        r = np.sqrt(np.sum(x * x, axis=ax, keepdims=keepdim))
    elif ord == 1:
        r = np.sum(np.abs(x), axis=ax, keepdims=keepdim)
    elif ord == np.inf:
        r = np.max(np.abs(x), axis=ax, keepdims=keepdim)
    elif ord == -np.inf:
        r = np.min(np.abs(x), axis=ax, keepdims=keepdim)
    elif ord == 0:
        r = np.sum(x != 0, axis=ax, keepdims=keepdim)
    else:
        with np.errstate(divide="ignore"):
            r = np.sum(np.abs(x) ** ord, axis=ax, keepdims=keepdim) ** (1.0 / ord)
    return np.asarray(r, dtype=x.dtype)


def _vn_vjp(ctx, g):
    m = ctx.m
    x, = ctx.inputs
    ord_, dim, keepdim = ctx.attrs["ord"], ctx.attrs["dim"], ctx.attrs["keepdim"]
    shape = ctx.shapes[0]
    dims = tuple(range(len(shape))) if dim is None else dim
    kshape = tuple(1 if i in dims else s for i, s in enumerate(shape))
    gk = g if keepdim else m.reshape(g, kshape)
    if ord_ == 0:
        return (None,)
    if ord_ == 1:
        return (gk * m.sign(x),)
    nk = ctx.out if keepdim else m.reshape(ctx.out, kshape)
    if ord_ in (np.inf, -np.inf):
        # the subgradient PyTorch takes: split evenly among the entries that attain it
        hit = m.eq(m.abs(x), nk)
        cnt = m.sum(m.where(hit, 1.0, 0.0), dim=dims, keepdim=True)
        return (m.where(hit, m.sign(x) * gk / cnt, 0.0),)
    safe = m.where(m.eq(nk, 0), 1.0, nk)     # a zero norm means x == 0 there: gradient 0
    if ord_ == 2:
        return (gk * x / safe,)
    return (gk * m.sign(x) * m.abs(x) ** (ord_ - 1) / safe ** (ord_ - 1),)


def _vn_samples(dtype=np.float64):
    a = away_from(rand((3, 4), dtype, seed=1), [0.0]).astype(dtype)
    b = away_from(rand((2, 3, 4), dtype, seed=2), [0.0]).astype(dtype)
    c = np.array([1.0, -3.0, 2.0, 0.5], dtype)
    out = [Sample((a,), {"ord": 2.0, "dim": None, "keepdim": False}),
           Sample((b,), {"ord": 2.0, "dim": (0, 2), "keepdim": True}),
           Sample((a,), {"ord": 1.0, "dim": (1,), "keepdim": False}),
           Sample((c,), {"ord": np.inf, "dim": None, "keepdim": False}),
           Sample((c,), {"ord": -np.inf, "dim": (0,), "keepdim": True}),
           Sample((b,), {"ord": 3.0, "dim": (2,), "keepdim": False}),
           Sample((b,), {"ord": 0.5, "dim": (1,), "keepdim": False}),
           Sample((b,), {"ord": -1.5, "dim": None, "keepdim": False}),
           Sample((a,), {"ord": 0.0, "dim": (0,), "keepdim": False}, grad=False),
           Sample((rand((4, 3), dtype, seed=3).T,), {"ord": 2.0, "dim": (1,), "keepdim": False}),
           Sample((rand((2, 0), dtype),), {"ord": 2.0, "dim": (1,), "keepdim": False})]
    return out


VECTOR_NORM = register(
    name="linalg_vector_norm", autocast={"cuda": "fp32_unless_dtype"}, onnx=_onnx_norm("ord"),
    vmap=_vmap.dim_attrs(), jvp=_jvp.reduction, kernel=_vn_kernel,
    infer=_vn_infer, vjp=_vn_vjp,
    saves=("x", "out"), samples=_vn_samples,
    error_samples=lambda: [((rand((2, 3)),), {"ord": 2.0, "dim": (2,), "keepdim": False},
                            IndexError),
                           ((np.ones((2, 3), np.int64),), {"ord": 2.0, "dim": None,
                                                          "keepdim": False}, TypeError)],
    torch=lambda torch, x, ord, dim, keepdim: torch.linalg.vector_norm(x, ord, dim, keepdim))


def _ord_value(name, ord):
    if isinstance(ord, str) or isinstance(ord, bool) or not isinstance(ord, (int, float,
                                                                           np.number)):
        raise op_error(name, f"ord must be a number (or inf), got {ord!r}", TypeError)
    return float(ord)


def _cast_dtype(x, dtype):
    if dtype is None:
        return x
    return cast(x, dtype)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """Vector ``ord``-norm over ``dim`` (all dims if None): ord 2, 1, inf, -inf, 0
    (count of non-zeros), or any other p, as ``torch.linalg.vector_norm``."""
    if out is not None:
        raise op_error("linalg_vector_norm", "out= is not supported", TypeError)
    x = _cast_dtype(x, dtype)
    return bind(VECTOR_NORM, x, ord=_ord_value("linalg_vector_norm", ord),
                dim=_vn_dims(dim, len(x.shape)), keepdim=bool(keepdim))


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    """Matrix norm over the two ``dim``: ord 'fro', 1, -1, inf, -inf (column/row sum
    norms), 2 and -2 (largest and smallest singular value) and 'nuc' (their sum)."""
    name = "linalg_matrix_norm"
    if out is not None:
        raise op_error(name, "out= is not supported", TypeError)
    A = _cast_dtype(A, dtype)
    nd = len(A.shape)
    if nd < 2:
        raise op_error(name, f"the input tensor A must have at least 2 dimensions, got shape "
                             f"{tuple(A.shape)}", RuntimeError)
    if not isinstance(dim, (tuple, list)) or len(dim) != 2:
        raise op_error(name, f"dim must be a 2-tuple, got {dim!r}", RuntimeError)
    d0, d1 = (normalize_dim(name, d, nd) for d in dim)
    if d0 == d1:
        raise op_error(name, f"dims must be different, got {tuple(dim)}", RuntimeError)
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if isinstance(ord, str) and ord != "nuc" or not isinstance(ord, str) \
            and ord not in (1, -1, 2, -2, np.inf, -np.inf):
        raise op_error(name, f"order {ord!r} not supported; use 'fro', 'nuc', 1, -1, 2, -2, "
                             f"inf or -inf", RuntimeError)
    _float_check(name, TensorSpec(tuple(A.shape), _raw(A).dtype))
    if ord in ("nuc", 2, -2):
        return _singular_value_norm(A, ord, d0, d1, keepdim)
    # 1/-1: max/min over columns of the column sums; inf/-inf: over rows of row sums
    sum_dim, pick_dim = (d0, d1) if abs(ord) == 1 else (d1, d0)
    s = _R.sum(_E.abs(A), dim=sum_dim, keepdim=True)
    r = (_R.amax if ord > 0 else _R.amin)(s, dim=pick_dim, keepdim=True)
    if not keepdim:
        r = _S.reshape(r, tuple(n for i, n in enumerate(A.shape) if i not in (d0, d1)))
    return r


def _singular_value_norm(A, ord, d0, d1, keepdim):
    from .linalg_decomp import svdvals  # the decompositions build on this module
    s = svdvals(_S.movedim(A, (d0, d1), (-2, -1)))
    r = _R.sum(s, dim=-1) if ord == "nuc" else (_R.amax if ord == 2 else _R.amin)(s, dim=-1)
    if keepdim:
        r = _S.reshape(r, tuple(1 if i in (d0, d1) else n for i, n in enumerate(A.shape)))
    return r


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """``torch.linalg.norm``: a vector norm when ``dim`` is an int (or A is 1-D, or
    ord is None and dim is None: the 2-norm of all entries), a matrix norm when
    ``dim`` is a 2-tuple (or A is 2-D and ord is given)."""
    name = "linalg_norm"
    if out is not None:
        raise op_error(name, "out= is not supported", TypeError)
    nd = len(A.shape)
    if isinstance(dim, (int, np.integer)):
        dim = (int(dim),)
    if dim is not None:
        dim = tuple(dim)
        if len(dim) == 2:
            return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
        if len(dim) != 1:
            raise op_error(name, f"dim must be an int or a 1- or 2-tuple, got {dim}",
                           RuntimeError)
        if isinstance(ord, str):
            raise op_error(name, f"ord={ord!r} is a matrix norm, but dim names one dim",
                           RuntimeError)
        return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype)
    if nd == 1:
        if isinstance(ord, str):
            raise op_error(name, f"ord={ord!r} is a matrix norm, got a 1-D input",
                           RuntimeError)
        return vector_norm(A, ord, None, keepdim, dtype=dtype)
    if nd == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    raise op_error(name, f"input must be 1-D or 2-D when ord is given and dim is None, got "
                         f"shape {tuple(A.shape)}", RuntimeError)


METHODS = "dot outer ger trace det inverse slogdet"


def _ndim(name, what, t, n):
    if t.ndim != n:
        raise op_error(name, f"{what} must be a {n}-D tensor, got {t.ndim}-D (shape "
                             f"{tuple(t.shape)})", RuntimeError)


def _same(name, *ts):
    ds = [t.dtype for t in ts]
    if any(d != ds[0] for d in ds):
        raise op_error(name, f"expected the operands to have the same dtype, got "
                             f"{', '.join(str(d) for d in ds)}", RuntimeError)


def _scaled(beta, input, alpha, prod):
    out = prod if alpha == 1 else alpha * prod
    if beta == 0:  # input ignored (a NaN in it does not propagate), as PyTorch
        return out
    return out + (input if beta == 1 else beta * input)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)``."""
    _ndim("addmm", "mat1", mat1, 2)
    _ndim("addmm", "mat2", mat2, 2)
    _same("addmm", input, mat1, mat2)
    return _scaled(beta, input, alpha, matmul(mat1, mat2))


def addmv(input, mat, vec, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat @ vec)``."""
    _ndim("addmv", "mat", mat, 2)
    _ndim("addmv", "vec", vec, 1)
    _same("addmv", input, mat, vec)
    return _scaled(beta, input, alpha, matmul(mat, vec))


def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """``beta * input + alpha * outer(vec1, vec2)``."""
    _ndim("addr", "vec1", vec1, 1)
    _ndim("addr", "vec2", vec2, 1)
    return _scaled(beta, input, alpha, outer(vec1, vec2))


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * sum_b(batch1[b] @ batch2[b])``."""
    _ndim("addbmm", "batch1", batch1, 3)
    _ndim("addbmm", "batch2", batch2, 3)
    _same("addbmm", input, batch1, batch2)
    return _scaled(beta, input, alpha, _R.sum(matmul(batch1, batch2), 0))


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * (batch1 @ batch2)`` (batched)."""
    _ndim("baddbmm", "batch1", batch1, 3)
    _ndim("baddbmm", "batch2", batch2, 3)
    _same("baddbmm", input, batch1, batch2)
    return _scaled(beta, input, alpha, matmul(batch1, batch2))


def _add_samples(shapes):
    def samples(dtype=np.float64):
        a = [rand(s, dtype, seed=k) for k, s in enumerate(shapes)]
        return [S(*a), S(*a, beta=0.5, alpha=2.0)]
    return samples


for _f, _shapes, _args, _autocast in (
        (addmm, ((3, 5), (3, 4), (4, 5)), ("input", "mat1", "mat2"), "lower"),
        (addmv, ((3,), (3, 4), (4,)), ("input", "mat", "vec"), {"cuda": "lower"}),
        (addr, ((3, 4), (3,), (4,)), ("input", "vec1", "vec2"), {"cuda": "lower"}),
        (addbmm, ((3, 5), (2, 3, 4), (2, 4, 5)), ("input", "batch1", "batch2"), "lower"),
        (baddbmm, ((2, 3, 5), (2, 3, 4), (2, 4, 5)), ("input", "batch1", "batch2"), "lower")):
    decl(_f, _add_samples(_shapes), args=_args, autocast=_autocast,
         errors=(lambda sh: lambda: [((rand(sh[0]), rand((2, 2, 2, 2)), rand(sh[2])), {},
                                      RuntimeError)])(_shapes), fill="eye")


def bmm(input, mat2):
    """Batched matrix product of two 3-D tensors."""
    _ndim("bmm", "batch1", input, 3)
    _ndim("bmm", "batch2", mat2, 3)
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        raise op_error("bmm", f"Expected size for first two dimensions of batch2 tensor to "
                              f"be: [{input.shape[0]}, {input.shape[2]}] but got: "
                              f"[{mat2.shape[0]}, {mat2.shape[1]}].", RuntimeError)
    return name_call(matmul(input, mat2), input, "BmmBackward0")


decl(bmm, lambda dtype=np.float64: [S(rand((2, 3, 4), dtype), rand((2, 4, 5), dtype, seed=1))],
     autocast="lower", args=("input", "mat2"),
     errors=lambda: [((rand((2, 3, 4)), rand((3, 4, 5))), {}, RuntimeError)], fill="eye")


def mv(input, vec):
    """Matrix-vector product."""
    _ndim("mv", "input", input, 2)
    _ndim("mv", "vec", vec, 1)
    if input.shape[1] != vec.shape[0]:
        raise op_error("mv", f"size mismatch, got input ({input.shape[0]}x{input.shape[1]}), "
                             f"vec ({vec.shape[0]})", RuntimeError)
    return matmul(input, vec)


decl(mv, lambda dtype=np.float64: [S(rand((3, 4), dtype), rand((4,), dtype, seed=1))],
     autocast={"cuda": "lower"}, args=("input", "vec"),
     errors=lambda: [((rand((3, 4)), rand((5,))), {}, RuntimeError)], fill="eye")


def inner(input, other):
    """The inner product over the last dims (a scalar factor for 0-D)."""
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise op_error("inner", f"inner() the last dimension must match on both input "
                                f"tensors but got shapes {list(input.shape)} and "
                                f"{list(other.shape)}", RuntimeError)
    k = input.shape[-1]
    b = _S.reshape(other, (-1, k))
    out = matmul(input, _S.mT(b))
    return _S.reshape(out, tuple(input.shape[:-1]) + tuple(other.shape[:-1]))


def _inner_not_a_dot(device_type, args, attrs):
    """PyTorch's inner: a product for a 0-D input, else tensordot over the last dims
    (on the CPU autocast list unless a dot product; CUDA's promotes)."""
    a, b = args
    if a.ndim == 0 or b.ndim == 0:
        return False
    return _not_a_dot(device_type, args, {"dims": ((a.ndim - 1,), (b.ndim - 1,))})


decl(inner, lambda dtype=np.float64: [S(rand((3, 4), dtype), rand((2, 4), dtype, seed=1)),
                                      S(rand((4,), dtype), rand((4,), dtype, seed=2))],
     autocast={"cpu": "lower", "cuda": "promote"}, autocast_when=_inner_not_a_dot,
     args=("input", "other"), errors=lambda: [((rand((3, 4)), rand((3,))), {}, RuntimeError)],
     fill="eye")


def vdot(input, other):
    """The dot product of two 1-D tensors (the first conjugated: real here)."""
    return dot(input, other)


decl(vdot, lambda dtype=np.float64: [S(rand((4,), dtype), rand((4,), dtype, seed=1))],
     autocast={"cuda": "promote"}, args=("input", "other"),
     errors=lambda: [((rand((4,)), rand((3,))), {}, RuntimeError)], fill="eye")


def chain_matmul(*matrices):
    """The product of the 2-D ``matrices`` (deprecated in PyTorch for ``linalg.multi_dot``)."""
    if not matrices:
        raise op_error("chain_matmul", "chain_matmul(): Expected one or more matrices",
                       RuntimeError)
    for k, m in enumerate(matrices):
        _ndim("chain_matmul", f"matrices[{k}]", m, 2)
    out = matrices[0]
    for m in matrices[1:]:
        out = matmul(out, m)
    return out if len(matrices) > 1 else out * 1


decl(chain_matmul, lambda dtype=np.float64: [S(rand((3, 4), dtype), rand((4, 2), dtype, seed=1),
                                               rand((2, 5), dtype, seed=2))],
     autocast="lower", args=("matrices",),
     # CPU: through mm, which one matrix (returned as a copy) does not reach
     autocast_when=lambda device_type, args, attrs: device_type != "cpu" or len(args) > 1,
     errors=lambda: [((rand((3,)),), {}, RuntimeError)], fill="eye")


def _square(name, x):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise op_error(name, f"expected a batch of square matrices, got shape "
                             f"{tuple(x.shape)}", RuntimeError)


def _wc(shape, dtype, seed=0):
    n = shape[-1]
    return (rand(shape, np.float64, -1.0, 1.0, seed=seed) + n * np.eye(n)).astype(dtype) / n


def matrix_power(input, n):
    """``input`` to the integer power ``n`` (by squaring; ``n < 0``: of the inverse)."""
    _square("matrix_power", input)
    if n < 0:
        input, n = inv(input), -n
    if n == 0:
        eye = C.eye(input.shape[-1], dtype=input.dtype)
        return input * 0 + eye
    result, base = None, input
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result * 1 if result is input else result


decl(matrix_power, lambda dtype=np.float64: [S(_wc((3, 3), dtype), 3), S(_wc((2, 3, 3), dtype), -2),
                                             S(_wc((3, 3), dtype), 1)],
     errors=lambda: [((rand((3, 4)), 2), {}, RuntimeError)], fill="eye")


def matrix_exp(input):
    """The matrix exponential: scaling and squaring of a degree-18 Taylor series."""
    _square("matrix_exp", input)
    if not input.dtype.is_floating_point:
        raise op_error("matrix_exp", f"not implemented for {input.dtype}", RuntimeError)
    n = input.shape[-1]
    if getattr(input, "_vlevel", None) is not None:  # inside vmap: no example's data
        s = 10
    else:  # the squarings the largest column-sum norm needs
        a_np = np.asarray(input.detach().numpy())
        nrm = float(np.abs(a_np).sum(-2).max()) if a_np.size else 0.0
        s = max(0, int(math.ceil(math.log2(nrm))) + 1) if nrm > 0.5 else 0
    a = input * (1.0 / 2 ** s) if s else input
    eye = C.eye(n, dtype=input.dtype)
    term = a * 0 + eye
    out = term
    for k in builtins.range(1, 19):
        term = matmul(term, a) * (1.0 / k)
        out = out + term
    for _ in builtins.range(s):
        out = matmul(out, out)
    return out


decl(matrix_exp,
     lambda dtype=np.float64: [S(rand((3, 3), dtype) * 0.5), S(rand((2, 2, 2), dtype, seed=1) * 2)],
     errors=lambda: [((rand((3, 4)),), {}, RuntimeError)], fill="eye",
     autocast={"cpu": "keep"})  # (PyTorch's CPU kernel: no bfloat16 matmuls inside)


def _spd_sample(shape, dtype, seed=0):
    r = rand(shape, np.float64, -1.0, 1.0, seed=seed)
    n = shape[-1]
    return (r @ np.swapaxes(r, -1, -2) + n * np.eye(n)).astype(dtype)


def logdet(input):
    """``log(det(input))`` (NaN for a negative determinant, -inf for a singular one)."""
    sign, logabs = slogdet(input)
    out = _E.where(sign < 0, math.nan, _E.where(sign == 0, -math.inf, logabs))
    return _E.where(_E.isnan(logabs) | _E.isnan(sign), math.nan, out)


decl(logdet,
     lambda dtype=np.float64: [S(_spd_sample((3, 3), dtype)), S(_spd_sample((2, 3, 3), dtype, 1))],
     errors=lambda: [((rand((3, 4)),), {}, RuntimeError)], fill="eye")


def _torch_cdist(T, a, b, p=2.0):
    """PyTorch's values by formula (torch.cdist has no forward-mode derivative)."""
    d = (a.unsqueeze(-2) - b.unsqueeze(-3)).abs()
    return (d ** p).sum(-1) ** (1.0 / p)


def cdist(x1, x2, p=2.0, compute_mode=None):
    """Pairwise ``p``-norm distances between the rows of ``x1`` and of ``x2``."""
    for t in (x1, x2):
        if not t.dtype.is_floating_point:
            raise op_error("cdist", f"cdist only supports floating-point dtypes, X1 got: "
                                    f"{x1.dtype}", RuntimeError)
    _same_dtype("cdist", x1, x2)
    if x1.ndim < 2 or x2.ndim < 2:
        raise op_error("cdist", f"cdist only supports at least 2D tensors, X1 got: "
                                f"{x1.ndim}D", RuntimeError)
    if x1.shape[-1] != x2.shape[-1]:
        raise op_error("cdist", f"X1 and X2 must have the same number of columns. X1: "
                                f"{x1.shape[-1]} X2: {x2.shape[-1]}", RuntimeError)
    d = _S.unsqueeze(x1, -2) - _S.unsqueeze(x2, -3)
    if p == 2:
        return _E.sqrt(_R.sum(d * d, -1))
    if p == 1:
        return _R.sum(_E.abs(d), -1)
    return _R.norm(d, p, -1)


decl(cdist, widen=True, autocast={"cuda": "fp32"}, torch=_torch_cdist,
     samples=lambda dtype=np.float64: [S(rand((3, 4), dtype), rand((5, 4), dtype, seed=1)),
                                      S(rand((2, 3, 2), dtype), rand((2, 4, 2), dtype, seed=2),
                                        1.0)],
     args=("x1", "x2"), errors=lambda: [((rand((3, 4)), rand((5, 3))), {}, RuntimeError)])


def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance of the rows (variables) over the columns (observations)."""
    if input.ndim > 2:
        raise op_error("cov", f"cov(): expected input to have two or fewer dimensions but "
                              f"got an input with {input.ndim} dimensions", ValueError)
    _no_bool("cov", input)
    x = _S.reshape(input, (1, -1)) if input.ndim < 2 else input
    if not x.dtype.is_floating_point:
        x = x.to(_dt.get_default_dtype())
    n = x.shape[1]
    w = None
    if fweights is not None:
        w = fweights.to(x.dtype)
    if aweights is not None:
        w = aweights.to(x.dtype) if w is None else w * aweights.to(x.dtype)
    if w is None:
        mean = _R.mean(x, 1, True)
        xc = x - mean
        denom = n - correction
        c = matmul(xc, _S.mT(xc)) / max(denom, 0)
    else:
        wsum = _R.sum(w)
        mean = _R.sum(x * w, 1, True) / wsum
        xc = x - mean
        if aweights is None or correction == 0:
            denom = wsum - correction
        else:
            denom = wsum - correction * _R.sum(w * aweights.to(x.dtype)) / wsum
        c = matmul(xc * w, _S.mT(xc)) / _E.maximum(denom, 0.0)
    return _S.reshape(c, ()) if input.ndim < 2 else c


decl(cov, lambda dtype=np.float64: [S(rand((3, 5), dtype)), S(rand((6,), dtype, seed=1)),
                                    S(rand((2, 4), dtype, seed=2), correction=0)])


def corrcoef(input):
    """Pearson correlation coefficients of the rows, clipped to [-1, 1]."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = _S.diagonal(c)
    s = _E.sqrt(d)
    out = c / _S.unsqueeze(s, 1) / _S.unsqueeze(s, 0)
    return _E.clamp(out, -1.0, 1.0)


decl(corrcoef, lambda dtype=np.float64: [S(rand((3, 5), dtype)), S(rand((2, 6), dtype, seed=1))],
     widen=True)


def cross(input, other, dim=None):
    """The cross product of 3-vectors along ``dim`` (the first dim of size 3 if None)."""
    if str(input.dtype).endswith(".bool"):
        raise op_error("cross", "not implemented for 'Bool'", NotImplementedError)
    _same_dtype("cross", input, other)
    if input.ndim == 0 or other.ndim == 0 or input.ndim != other.ndim:
        raise op_error("cross", f"linalg.cross: inputs must have the same number of "
                                f"dimensions (got {input.ndim} and {other.ndim})", RuntimeError)
    shape = np.broadcast_shapes(tuple(input.shape), tuple(other.shape))
    if dim is None:
        cands = [k for k, s in enumerate(shape) if s == 3]
        if not cands:
            raise op_error("cross", "no dimension of size 3 in input", RuntimeError)
        dim = cands[0]
    d = normalize_dim("cross", dim, len(shape))
    if shape[d] != 3:
        raise op_error("cross", f"linalg.cross: inputs dimension {d} must have length 3. Got "
                                f"{input.shape[d] if d < input.ndim else '?'} and "
                                f"{other.shape[d] if d < other.ndim else '?'}", RuntimeError)
    a = _S.broadcast_to(input, shape)
    b = _S.broadcast_to(other, shape)

    def c(t, k):
        return I.getitem(t, (slice(None),) * d + (k,))
    a0, a1, a2 = c(a, 0), c(a, 1), c(a, 2)
    b0, b1, b2 = c(b, 0), c(b, 1), c(b, 2)
    return _S.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)


decl(cross, lambda dtype=np.float64: [S(rand((4, 3), dtype), rand((4, 3), dtype, seed=1), 1),
                                      S(rand((3, 2), dtype), rand((3, 1), dtype, seed=2), 0)],
     autocast={"cuda": "promote"}, args=("input", "other"),
     errors=lambda: [((rand((3, 4)), rand((3, 4)), 1), {}, RuntimeError)])


def renorm(input, p, dim, maxnorm):
    """Each slice along ``dim`` rescaled to ``p``-norm at most ``maxnorm``."""
    d = normalize_dim("renorm", dim, input.ndim)
    if p <= 0:
        raise op_error("renorm", "non-positive-norm not supported", RuntimeError)
    if maxnorm < 0:
        raise op_error("renorm", f"renorm: expected maxnorm to be >= 0 but got {maxnorm}",
                       RuntimeError)
    others = tuple(k for k in range(input.ndim) if k != d)
    nrm = _R.norm(input, p, others, True)
    scale = _E.where(nrm > maxnorm, maxnorm / (nrm + 1e-7), 1.0)
    return input * scale


decl(renorm, lambda dtype=np.float64: [S(rand((3, 4), dtype), 2, 0, 1.0),
                                       S(rand((3, 4), dtype, seed=1), 1, 1, 1.5)],
     autocast={"cuda": "fp32"}, widen=True)


# ------------------------------------------------------------------ mm
def _mm_infer(a, b):
    _mm_check(a, b)
    dt = np.result_type(getattr(a.dtype, "np", a.dtype), getattr(b.dtype, "np", b.dtype))
    return TensorSpec((a.shape[0], b.shape[1]), dt)


def mm(input, mat2):
    """Matrix product of two 2-D tensors (no broadcasting: see ``matmul``)."""
    _mm_check(input, mat2)
    return matmul(input, mat2)


composite(mm, autocast="lower", infer=_mm_infer, args=("input", "mat2"),
          samples=lambda dtype=np.float64: [Sample((rand((3, 4), dtype), rand((4, 5), dtype))),
                                            Sample((rand((1, 2), dtype), rand((2, 1), dtype)))],
          error_samples=lambda: [((rand((3, 4)), rand((5, 2))), {}, RuntimeError),
                                 ((rand((3, 4, 2)), rand((2, 2))), {}, RuntimeError),
                                 ((rand((4,)), rand((4, 2))), {}, RuntimeError)],
          torch=lambda torch, a, b: torch.mm(a, b))


def _mm_check(a, b):
    _tensors("mm", input=a, mat2=b)
    for name, x in (("self", a), ("mat2", b)):
        if len(x.shape) != 2:
            raise op_error("mm", f"{name} must be a matrix, got a {len(x.shape)}-D tensor of "
                                 f"shape {tuple(x.shape)}", RuntimeError)
    if a.shape[1] != b.shape[0]:
        raise op_error("mm", f"mat1 and mat2 shapes cannot be multiplied "
                             f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})",
                       RuntimeError)


del _n, _f, _shapes, _args
