"""The affine layers: linear (``input @ weight.T + bias``, a registered op) and
bilinear (an einsum composite)."""
import numpy as np

from ..._util import op_error
from ...devices import cpu as _cpu
from ...devices.cpu_kernels.tiled_gemm import matmul as _gemm
from ...dispatch import bind
from ...dtypes import is_float as _isf
from .. import _vmap
from .._decl import Sample, TensorSpec, composite, one_dtype, rand, rand as _rand, register
from ..linalg import MATMUL, einsum, matmul
from ..shape import reshape
from ._common import torch_functional as _torch


# One op, not the composite matmul(x, mT(w)): the weight gradient is then a fresh
# contiguous (out, in) array the tape hands to the leaf as is (through mT it arrived
# as a transposed view, which the tape must copy), and a 3-D input is one GEMM.
def _add_rows(out, b):
    for r in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[r, j] += b[j]


_ADD_ROWS = _cpu.njit(_add_rows, error_model="numpy")


def _add_bias(out, bias, given):
    """``out += bias`` (NumPy's broadcasting add buffers ~32 KB per call: into a
    caller's buffer a plain loop adds the bias row by row, allocating nothing)."""
    n = out.shape[-1] if out.ndim else 0
    if (given and type(bias) is np.ndarray and bias.shape == (n,) and n and out.size
            and bias.dtype == out.dtype and _isf(out.dtype)):
        _ADD_ROWS(out.reshape(-1, n), bias)
    else:
        out += bias


def _swapped(x, n_out):
    """Whether 3-D NumPy ``x`` is a view of a C-contiguous array with its first two
    axes swapped (a ``batch_first`` RNN's output: ``out.transpose(0, 1)``; an ndarray
    subclass too: tg.compile's capture sees the adjoint's arrays as one), and the
    linear's result no wider than ``x``: the product then runs on that array, as one
    GEMM, and the (narrower) result is what gets swapped back, instead of a copy of
    ``x`` in (batch, time) order before the GEMM."""
    return (isinstance(x, np.ndarray) and x.ndim == 3 and not x.flags.c_contiguous
            and n_out <= x.shape[2] and x.transpose(1, 0, 2).flags.c_contiguous)


def _linear_kernel(input, weight, bias=None, out=None):
    n_in = weight.shape[-1]
    if _swapped(input, weight.shape[0]):
        res = _linear_kernel(input.transpose(1, 0, 2), weight, bias).transpose(1, 0, 2)
        if out is None:
            return res
        out[...] = res
        return out
    if out is not None and (type(out) is not np.ndarray or not out.flags.c_contiguous
                            or (bias is not None and np.may_share_memory(out, bias))):
        # (a strided or foreign buffer, or the bias's memory: it is added after the product)
        out[...] = _linear_kernel(input, weight, bias)
        return out
    given = out is not None
    if input.ndim == 2:
        out = _gemm(input, weight.T, out)
    else:
        rows = int(np.prod(input.shape[:-1]))  # not -1: NumPy can't infer it when n_in == 0
        if out is None:
            out = _gemm(input.reshape(rows, n_in), weight.T).reshape(input.shape[:-1] +
                                                                     weight.shape[:1])
        else:
            _gemm(input.reshape(rows, n_in), weight.T, out.reshape(rows, weight.shape[0]))
    if bias is not None:
        _add_bias(out, bias, given)
    return out


def _linear_vjp(ctx, g):
    x, w, _ = ctx.inputs
    xs, ws, bs = ctx.shapes
    m, n = ctx.m, ctx.needs_input_grad
    n_out, n_in = ws
    rows = 1
    for d in xs[:-1]:
        rows *= d
    # (a batched tensor under vmap has no one array to look at)
    swapped = _swapped(getattr(x, "_data", x) if getattr(x, "_vlevel", None) is None
                       else None, n_out)
    if type(g) is np.ndarray and (type(w) is np.ndarray or type(x) is np.ndarray):
        # plain NumPy arrays (nothing records): the same formulas without a bind per
        # transpose and reduction, ~10-20 us each, on every step of every layer
        if swapped:  # (in the forward's order: x's own array, and g reordered)
            gt = g.transpose(1, 0, 2)
            g2 = gt.reshape(rows, n_out)
            gx = _gemm(g2, w).reshape(gt.shape[:2] + (n_in,)).transpose(1, 0, 2) \
                if n[0] else None
            gw = _gemm(g2.T, x.transpose(1, 0, 2).reshape(rows, n_in)) if n[1] else None
            gb = None
            if len(n) > 2 and n[2]:
                gb = g2.sum(0) if tuple(bs) == (n_out,) else g2.sum().reshape(bs)
            return gx, gw, gb
        g2 = g.reshape(rows, n_out)
        gx = _gemm(g2, w).reshape(xs) if n[0] else None
        gw = _gemm(g2.T, x.reshape(rows, n_in)) if n[1] else None
        gb = None
        if len(n) > 2 and n[2]:
            gb = g2.sum(0) if tuple(bs) == (n_out,) else g2.sum().reshape(bs)
        return gx, gw, gb
    if swapped:
        g = m.permute(g, (1, 0, 2))
        x = m.permute(x, (1, 0, 2))
    g2 = g if len(xs) == 2 else m.reshape(g, (rows, n_out))
    gx = gw = gb = None
    if n[0]:
        gx = m.matmul(g2, w)
        if swapped:
            gx = m.permute(m.reshape(gx, (xs[1], xs[0], n_in)), (1, 0, 2))
        elif len(xs) != 2:
            gx = m.reshape(gx, xs)
    if n[1]:
        x2 = x if len(xs) == 2 else m.reshape(x, (rows, n_in))
        gw = m.matmul(m.mT(g2), x2)   # (out, in), a fresh C-contiguous array
    if len(n) > 2 and n[2]:
        gb = m.sum(g2, dim=0)
        if tuple(bs) != (n_out,):
            gb = m.sum_to(gb, tuple(bs))
    return gx, gw, gb


def _linear_infer(input, weight, bias=None):
    xs, ws = tuple(input.shape), tuple(weight.shape)
    if len(ws) != 2 or not xs or xs[-1] != ws[1]:
        raise op_error("linear", f"input {xs} and weight {ws}: expected a 2-D weight "
                                 f"(out_features, in_features) with in_features equal to the "
                                 f"input's last dim", RuntimeError)
    if bias is not None and tuple(bias.shape) not in ((), (1,), (ws[0],)):
        raise op_error("linear", f"bias of shape {tuple(bias.shape)} does not match "
                                 f"out_features={ws[0]}", RuntimeError)
    return TensorSpec(xs[:-1] + ws[:1],
                      one_dtype("linear", (input, weight, bias), ("input", "weight", "bias")))


def _linear_samples(dtype=np.float64):
    r = lambda s, k: _rand(s, dtype, seed=k)  # noqa: E731
    return [Sample((r((3, 4), 1), r((5, 4), 2), r((5,), 3)), {}),
            Sample((r((3, 4), 4), r((2, 4), 5), None), {}),
            Sample((r((4,), 6), r((3, 4), 7), r((3,), 8)), {}),
            Sample((r((2, 3, 4), 9), r((2, 4), 10), r((2,), 11)), {}),
            Sample((r((3, 4), 12).T, r((3, 2), 13).T, r((), 14)), {}),
            Sample((r((0, 3), 15), r((2, 3), 16), r((2,), 17)), {}),
            Sample((r((2, 1, 3), 18), r((4, 3, 2), 19)[:, :, 0], None), {}),
            # a batch_first RNN's output, (batch, time) axes swapped over a (time, batch)
            # array: the product runs in the array's own order
            Sample((r((3, 4, 5), 20).transpose(1, 0, 2), r((2, 5), 21), r((2,), 22)), {}),
            Sample((r((3, 4, 5), 23).transpose(1, 0, 2), r((5, 5), 24), r((1,), 25)), {})]


def _linear_jvp(ctx, tx, tw, tb):
    # bilinear in (input, weight), plus the bias
    x, w, _ = ctx.inputs
    out = None if tx is None else bind(ctx.op, tx, w, None)
    if tw is not None:
        term = bind(ctx.op, x, tw, None)
        out = term if out is None else out + term
    if tb is not None:
        out = tb if out is None else out + tb
    return (out,)


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_linear(b, st):
    x, w = b.input(st, 0), b.input(st, 1)
    bias = b.input(st, 2) if b.is_tensor(st, 2) else ""
    xs, ws = b.shape(st, 0), b.shape(st, 1)
    if len(xs) == 2 and len(ws) == 2:
        b.node("Gemm", [x, w] + ([bias] if bias else []), [b.output(st)], transB=1)
        return
    wt = b.node("Transpose", [w], perm=[1, 0]) if len(ws) == 2 else w
    if bias:
        b.node("Add", [b.node("MatMul", [x, wt]), bias], [b.output(st)])
    else:
        b.node("MatMul", [x, wt], [b.output(st)])


def _linear_vmap(ctx, x, w, b):
    """Unbatched weights: linear maps over the input's leading dims already; batched
    ones: a batched matmul with the weight transposed, plus the bias."""
    m = ctx.m
    wb = ctx.batched[1]
    bb = b is not None and ctx.batched[2]
    if not wb and not bb:
        return bind(ctx.op, x, w, b)
    if ctx.ndim(0) == 0:
        return _vmap.loop(ctx, x, w, b)
    if not wb:
        out = bind(ctx.op, x, w, None)
    else:
        nw = ctx.ndim(1)
        wt = m.mT(w) if nw == 2 else w
        out = _vmap.matmul_values(m, MATMUL, x, wt, ctx.batched[0], wb, ctx.ndim(0), nw)
    if b is not None:
        if bb:
            s = tuple(b.shape)
            rank = len(tuple(out.shape)) - (1 if ctx.batched[0] or wb else 0)
            b = m.reshape(b, s[:1] + (1,) * (rank - len(s[1:])) + s[1:])
        out = out + b
    return out


def _linear_grad_fn_name(attrs, shapes):
    """The last node F.linear records in PyTorch: addmm (2-D input with a bias) or mm;
    a 1-D input is a matrix-vector product squeezed back, a batched one is folded to
    2-D and unfolded (view after addmm, _unsafe_view after matmul)."""
    nd, bias = len(shapes[0]), shapes[2] is not None
    if nd == 2:
        return "AddmmBackward0" if bias else "MmBackward0"
    if bias:
        return "ViewBackward0"
    return "SqueezeBackward4" if nd == 1 else "UnsafeViewBackward0"


LINEAR = register(name="linear", autocast="lower", vmap=_linear_vmap, jvp=_linear_jvp,
                  kernel=_linear_kernel, args=("input", "weight", "bias"),
                  optional=("bias",),
                  infer=_linear_infer, vjp=_linear_vjp,
                  saves={"input": ("weight",), "weight": ("input",)},
                  promote="none", samples=_linear_samples, grad_fn_name=_linear_grad_fn_name,
                  error_samples=lambda: [
                      ((_rand((3, 4)), _rand((5, 3)), None), {}, RuntimeError),
                      ((_rand((3, 4)), _rand((5, 4)), _rand((4,))), {}, RuntimeError),
                      ((_rand((3, 4)), _rand((2, 5, 4)), None), {}, RuntimeError)],
                  torch=lambda torch, x, w, b=None: torch.nn.functional.linear(x, w, b),
                  onnx=_onnx_linear)


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` (weight is (out_features, in_features)); a 1-D
    weight gives ``input @ weight + bias`` as PyTorch.

    >>> tg.linear(tg.ones(2, 3), tg.ones(4, 3), tg.zeros(4)).shape
    (2, 4)
    """
    if len(weight.shape) == 1:
        if input.shape[-1:] != weight.shape:
            raise op_error("linear", f"input {tuple(input.shape)} and weight "
                                     f"{tuple(weight.shape)}: in_features must match the "
                                     f"input's last dim", RuntimeError)
        out = matmul(input, weight)
        return out if bias is None else out + bias
    return bind(LINEAR, input, weight, bias)


def bilinear(input1, input2, weight, bias=None):
    """``y[..., o] = x1[..., i] W[o, i, j] x2[..., j] + b[o]``."""
    if bias is not None and hasattr(bias, "is_floating_point") and not bias.is_floating_point():
        raise op_error("bilinear", f"expected a floating point bias, got {bias.dtype}",
                       RuntimeError)
    if weight.ndim != 3:
        raise op_error("bilinear", f"expected a 3-D weight (out, in1, in2), got shape "
                                   f"{tuple(weight.shape)}", RuntimeError)
    if input1.shape[-1] != weight.shape[1] or input2.shape[-1] != weight.shape[2] or \
            tuple(input1.shape[:-1]) != tuple(input2.shape[:-1]):
        raise op_error("bilinear", f"input1 {tuple(input1.shape)} and input2 "
                                   f"{tuple(input2.shape)} do not fit weight "
                                   f"{tuple(weight.shape)}", RuntimeError)
    lead = tuple(input1.shape[:-1])
    a = reshape(input1, (-1, input1.shape[-1]))
    b = reshape(input2, (-1, input2.shape[-1]))
    out = einsum("bi,oij,bj->bo", a, weight, b)
    if bias is not None:
        out = out + bias
    return reshape(out, lead + (weight.shape[0],))


# ------------------------------------------------------------------ the registry
def _bil_infer(a, b, w, bias=None):
    return TensorSpec(tuple(a.shape[:-1]) + (w.shape[0],), a.dtype)


composite(bilinear, autocast={"cuda": "promote"}, infer=_bil_infer,
          args=("input1", "input2", "weight", "bias"),
          optional=("bias",),
          samples=lambda dtype=np.float64: [
              Sample((rand((4, 3), dtype), rand((4, 5), dtype, seed=1),
                      rand((2, 3, 5), dtype, seed=2), rand((2,), dtype, seed=3))),
              Sample((rand((2, 3, 3), dtype), rand((2, 3, 2), dtype, seed=1),
                      rand((4, 3, 2), dtype, seed=2), None))],
          error_samples=lambda: [((rand((4, 3)), rand((4, 5)), rand((2, 3, 4)), None), {},
                                  RuntimeError)],
          torch=_torch("bilinear"))
