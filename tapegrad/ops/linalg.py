"""Linear algebra: matmul, dot, outer, tensordot, einsum, trace, and ``tg.linalg``."""
import numpy as np

from ..tensor import bind
from .._util import op_error
from ._decl import register, Sample, TensorSpec, rand


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
    from .. import dtypes
    return TensorSpec(out, dtypes.result_type(np.dtype(x.dtype), np.dtype(other.dtype)))


def _matmul_kernel(x, other):
    if x.ndim == 0 or other.ndim == 0:
        raise ValueError("matmul: 0-d")
    return np.matmul(x, other)


def _matmul_vjp(ctx, g):
    x, y = ctx.inputs
    xs, ys = ctx.shapes
    m = ctx.m
    n = ctx.needs_input_grad
    x2 = x if len(xs) > 1 else m.reshape(x, (1, xs[0]))
    y2 = y if len(ys) > 1 else m.reshape(y, (ys[0], 1))
    gshape = tuple(g.shape)
    if len(xs) == 1:
        gshape = gshape[:len(gshape) - (0 if len(ys) == 1 else 1)] + (1,) + \
                 (gshape[-1:] if len(ys) > 1 else ())
    if len(ys) == 1:
        gshape = gshape + (1,)
    g2 = m.reshape(g, gshape) if gshape != tuple(g.shape) else g
    gx = gy = None
    if n[0]:
        gx = m.matmul(g2, m.mT(y2))
        gx = m.sum_to(gx, tuple(x2.shape))
        if len(xs) == 1:
            gx = m.reshape(gx, xs)
    if n[1]:
        gy = m.matmul(m.mT(x2), g2)
        gy = m.sum_to(gy, tuple(y2.shape))
        if len(ys) == 1:
            gy = m.reshape(gy, ys)
    return gx, gy


def _matmul_samples(dtype=np.float64):
    pairs = [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((4,), (4, 3)), ((3, 4), (4,)),
             ((4,), (4,)), ((2, 1, 3, 4), (3, 4, 2))]
    return [Sample((rand(a, dtype, seed=k), rand(b, dtype, seed=k + 7)), {})
            for k, (a, b) in enumerate(pairs)]


MATMUL = register(name="matmul", kernel=_matmul_kernel, args=("x", "other"), infer=_matmul_infer,
                  vjp=_matmul_vjp, saves=("x", "other"), promote="same",
                  samples=_matmul_samples,
                  error_samples=lambda: [((rand((3, 4)), rand((5, 2))), {}, RuntimeError)],
                  torch=lambda torch, x, other: torch.matmul(x, other))


def matmul(input, other):
    """Matrix product with NumPy/PyTorch semantics (1-D cases, batch broadcasting)."""
    return bind(MATMUL, input, other)
