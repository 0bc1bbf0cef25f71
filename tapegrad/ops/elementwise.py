"""Elementwise ops: arithmetic, math functions, comparisons, logical ops.

Each op is one ``register(...)`` block. vjps use ``m`` (ctx.m, tapegrad itself) and
operators only, so they run on raw arrays when nothing records and differentiate
again when something does.

Layering: elementwise sits above indexing (one-argument ``where`` is ``nonzero``),
so indexing, shape and creation import nothing from here.
"""
import math

import numpy as np

from .. import devices as _devices, dtypes as _dt
from .._util import ArgumentError, DtypeError, NoKernelError, broadcast_shapes as _broadcast_shapes
from ..devices import cpu as _cpu
from ..devices.cpu_kernels import halfwidth as _halfwidth
from ..dispatch import bind
from ..dtypes import is_float as _isf
from ..fusion import op as _fusion_op
from ..ops_registry.rules import diagonal as _diagonal
from ..tape import name_call
from . import indexing as _indexing
from ._decl import (
    Sample,
    TensorSpec,
    alias as _alias,
    away_from,
    bad_broadcast,
    binary_samples,
    composite as _composite,
    elementwise_infer,
    op_error,
    rand,
    register,
    unary_samples,
)
from .onnx_forms import (
    _bitwise as _onnx_bitwise,
    _common as _onnx_common,
    _compare as _onnx_compare,
    _float_simple as _onnx_float_simple,
    _int_identity as _onnx_int_identity,
    _logical as _onnx_logical,
    _simple as _onnx_simple,
)

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_2_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _same_torch(name):
    """The PyTorch function of the same name, as the test oracle."""
    def oracle(torch, *args, **attrs):
        return getattr(torch, name)(*args, **attrs)
    return oracle


def _binary(name, kernel, vjp, saves=(), promote="same", expr=None, torch=None,
            samples=None, differentiable=True, out_dtype=None, jvp=None, errors=None,
            onnx=None, autocast=None, grad_fn_name=None):
    torch = torch or _same_torch(name)
    return register(name=name, kernel=kernel, args=("x", "other"), vjp=vjp, saves=saves,
                    grad_fn_name=grad_fn_name,
                    infer=elementwise_infer(name, promote, out_dtype), broadcasting=True,
                    promote=promote, expr=expr, torch=torch, jvp=jvp,
                    differentiable=differentiable, onnx=onnx, autocast=autocast,
                    samples=samples or binary_samples(), error_samples=errors or bad_broadcast())


def _unary(name, kernel, vjp, saves=("x",), promote="float", expr=None, torch=None,
           samples=None, differentiable=True, out_dtype=None, jvp=None, onnx=None,
           autocast=None, grad_fn_name=None, halfwidth=False):
    torch = torch or _same_torch(name)
    return register(name=name, kernel=kernel, args=("x",), vjp=vjp, saves=saves,
                    grad_fn_name=grad_fn_name, halfwidth=halfwidth,
                    infer=elementwise_infer(name, promote, out_dtype), promote=promote,
                    expr=expr, torch=torch, jvp=jvp, differentiable=differentiable,
                    onnx=onnx, autocast=autocast, samples=samples or unary_samples(),
                    error_samples=lambda: [(("not a tensor",), {}, TypeError)])


# PyTorch's CUDA autocast lists: these run in float32 there (on CPU, as given)
_CUDA_FP32 = {"cuda": "fp32"}
_CUDA_PROMOTE = {"cuda": "promote"}


# ---------------------------------------------------------------- arithmetic
# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_floor_divide(b, st):
    (x, y), dt = _onnx_common(b, st, dtype=b.out_dtype(st))
    if dt.kind == "f":
        b.node("Floor", [b.node("Div", [x, y])], [b.output(st)])
    else:  # Python's floor: (x - x mod y) / y, exact
        b.node("Div", [b.node("Sub", [x, b.node("Mod", [x, y], fmod=0)]), y], [b.output(st)])


def _onnx_remainder(b, st):
    (x, y), dt = _onnx_common(b, st, dtype=b.out_dtype(st))
    if dt.kind == "f":  # x - y floor(x / y)
        q = b.node("Floor", [b.node("Div", [x, y])])
        b.node("Sub", [x, b.node("Mul", [y, q])], [b.output(st)])
    else:
        b.node("Mod", [x, y], [b.output(st)], fmod=0)


def _onnx_fmod(b, st):
    (x, y), _ = _onnx_common(b, st, dtype=b.out_dtype(st))
    b.node("Mod", [x, y], [b.output(st)], fmod=1)


def _onnx_trunc(b, st):
    x = b.input(st, 0)
    if b.dtype(st, 0).kind != "f":
        b.node("Identity", [x], [b.output(st)])
        return
    neg = b.node("Less", [x, b.const(np.zeros((), b.dtype(st, 0)))])
    b.node("Where", [neg, b.node("Ceil", [x]), b.node("Floor", [x])], [b.output(st)])


def _onnx_isnan(b, st):
    x = b.input(st, 0)
    if b.dtype(st, 0).kind == "f":
        b.node("IsNaN", [x], [b.output(st)])
    else:
        b.node("Not", [b.node("Equal", [x, x])], [b.output(st)])


def _onnx_isinf(b, st):
    x = b.input(st, 0)
    if b.dtype(st, 0).kind == "f":
        b.node("IsInf", [x], [b.output(st)])
    else:
        b.node("Not", [b.node("Equal", [x, x])], [b.output(st)])


def _onnx_isfinite(b, st):
    x = b.input(st, 0)
    if b.dtype(st, 0).kind == "f":
        bad = b.node("Or", [b.node("IsNaN", [x]), b.node("IsInf", [x])])
        b.node("Not", [bad], [b.output(st)])
    else:
        b.node("Equal", [x, x], [b.output(st)])


def _onnx_atan2(b, st):
    """atan(y / x), moved by pi where x < 0 (x = 0: atan(+-inf) = +-pi/2)."""
    (y, x), dt = _onnx_common(b, st, dtype=b.out_dtype(st))
    zero = b.const(np.zeros((), dt))
    r = b.node("Atan", [b.node("Div", [y, x])])
    pi = b.node("Where", [b.node("GreaterOrEqual", [y, zero]), b.const(np.asarray(np.pi, dt)),
                          b.const(np.asarray(-np.pi, dt))])
    r = b.node("Add", [r, b.node("Where", [b.node("Less", [x, zero]), pi, zero])])
    both = b.node("And", [b.node("Equal", [x, zero]), b.node("Equal", [y, zero])])
    b.node("Where", [both, zero, r], [b.output(st)])


def _onnx_relu_backward(b, st):
    g, y = b.input(st, 0), b.input(st, 1)
    pos = b.node("Greater", [y, b.const(np.zeros((), b.dtype(st, 1)))])
    b.node("Where", [pos, g, b.const(np.zeros((), b.dtype(st, 0)))], [b.output(st)])


def _onnx_where(b, st):
    c = b.input(st, 0, np.bool_)
    (x, y), _ = _onnx_common(b, st, [1, 2], dtype=b.out_dtype(st))
    b.node("Where", [c, x, y], [b.output(st)])


def _onnx_clamp(b, st):
    dt = b.out_dtype(st)
    y = b.input(st, 0, dt)
    lo, hi = st.attrs.get("min"), st.attrs.get("max")
    if lo is not None:
        y = b.node("Max", [y, b.const(np.asarray(lo, dt))])
    if hi is not None:
        y = b.node("Min", [y, b.const(np.asarray(hi, dt))])
    b.node("Identity", [y], [b.output(st)])


def _onnx_clamp_tensor(b, st):
    dt = b.out_dtype(st)
    y = b.input(st, 0, dt)
    if b.literal(st, 1) is not None or b.is_tensor(st, 1):
        y = b.node("Max", [y, b.input(st, 1, dt)])
    if b.literal(st, 2) is not None or b.is_tensor(st, 2):
        y = b.node("Min", [y, b.input(st, 2, dt)])
    b.node("Identity", [y], [b.output(st)])


ADD = _binary("add", np.add, lambda ctx, g: (g, g), expr="x + other",
              jvp=lambda ctx, xt, ot: _tsum(xt, ot), onnx=_onnx_simple("Add"))
SUB = _binary("sub", np.subtract, lambda ctx, g: (g, -g), expr="x - other",
              jvp=lambda ctx, xt, ot: _tsum(xt, None if ot is None else -ot),
              onnx=_onnx_simple("Sub"),
              # ``2 - x`` is PyTorch's rsub
              grad_fn_name=lambda attrs, shapes: "RsubBackward1" if shapes[0] is None
              else "SubBackward0")
_sub_infer = SUB.infer


def _sub_infer_no_bool(x, other):
    # PyTorch refuses a bool operand (mixed with another dtype too, where promotion
    # would hide it: dispatch runs an elementwise op's rule on mixed dtypes first)
    if any(getattr(s, "dtype", None) is not None and np.dtype(s.dtype) == np.bool_
           for s in (x, other)):
        raise op_error("sub", "subtraction, the `-` operator, with a bool tensor is not "
                              "supported; to invert a mask use `~` or logical_not()",
                       RuntimeError)
    return _sub_infer(x, other)


SUB.infer = _sub_infer_no_bool


def _mul_vjp(ctx, g):
    x, other = ctx.inputs
    n = ctx.needs_input_grad
    return (g * other if n[0] else None, g * x if n[1] else None)


MUL = _binary("mul", np.multiply, _mul_vjp, saves={"x": ("other",), "other": ("x",)},
              expr="x * other",
              jvp=lambda ctx, xt, ot: _tsum(None if xt is None else xt * ctx.inputs[1],
                                            None if ot is None else ot * ctx.inputs[0]),
              onnx=_onnx_simple("Mul"))


def _div_vjp(ctx, g):
    x, other = ctx.inputs
    gx = g / other
    return (gx if ctx.needs_input_grad[0] else None,
            -gx * x / other if ctx.needs_input_grad[1] else None)


DIV = _binary("div", np.true_divide, _div_vjp,
              saves={"x": ("other",), "other": ("x", "other")}, promote="float",
              expr="x / other", samples=binary_samples(low2=0.5, high2=2.0),
              jvp=lambda ctx, xt, ot: _tsum(None if xt is None else xt / ctx.inputs[1],
                                            None if ot is None else
                                            -ot * ctx.inputs[0] / (ctx.inputs[1] * ctx.inputs[1])),
              onnx=_onnx_float_simple("Div"))


def _overlaps(out, *inputs):
    """Whether ``out`` may share memory with an input (a kernel that reads its inputs
    after writing part of ``out`` then computes into a fresh array instead)."""
    return any(hasattr(a, "shape") and np.may_share_memory(out, a) for a in inputs
               if isinstance(a, np.ndarray) and isinstance(out, np.ndarray))


def _into(out, result):
    """``result`` written into ``out`` (the aliasing fallback), returning ``out``."""
    out[...] = result
    return out


def _integer_division(fn, name, fast=None):
    """``fn``, refusing an integer division by zero (PyTorch's RuntimeError; NumPy
    gives 0 and a warning); ``fast``: the name of a compiled CPU loop
    (``devices/cpu_kernels/arith.py``) for same-shape contiguous float operands."""
    def kernel(x, other, out=None):
        if _integral(x) and _integral(other) and not _devices.xp_of(x).all(other):
            raise RuntimeError(f"{name}: ZeroDivisionError (an integer division by zero)")
        if fast is not None and isinstance(x, np.ndarray) and x.size >= _ARITH_MIN:
            from ..devices.cpu_kernels import arith
            if arith.fits(x, other, out):
                return getattr(arith, fast)(x, other, out)
        return fn(x, other) if out is None else fn(x, other, out=out)
    kernel.__name__ = name
    return kernel


# below this many elements NumPy's ufunc costs less than the call into the loop
_ARITH_MIN = 256


def _integral(v):
    kind = getattr(v, "dtype", None)
    return type(v) is int or type(v) is bool if kind is None else kind.kind in "iub"


_floor_divide = _integer_division(np.floor_divide, "floor_divide", "floor_divide")


FLOOR_DIVIDE = _binary("floor_divide", _floor_divide, None, differentiable=False,
                       samples=binary_samples(low2=0.5, high2=2.0), onnx=_onnx_floor_divide)


def _remainder_vjp(ctx, g):
    x, other = ctx.inputs
    return (g, -g * _m_floor(ctx, x / other) if ctx.needs_input_grad[1] else None)


def _m_floor(ctx, v):
    return ctx.m.floor(v)


def _by_other_kind(name):
    """PyTorch's node names of a binary op: ``...Backward0`` with a Python number as
    ``other``, ``...Backward1`` with a Tensor."""
    return lambda attrs, shapes: f"{name}Backward{0 if shapes[1] is None else 1}"


REMAINDER = _binary("remainder", _integer_division(np.remainder, "remainder", "remainder"),
                    _remainder_vjp,
                    saves={"other": ("x", "other")},
                    samples=binary_samples(low=0.1, high=3.0, low2=0.7, high2=0.9),
                    torch=lambda torch, x, other: torch.remainder(x, other), jvp=_diagonal,
                    onnx=_onnx_remainder, grad_fn_name=_by_other_kind("Remainder"))


def _fmod_vjp(ctx, g):
    # fmod(x, y) = x - trunc(x / y) * y (sign of x, as C's fmod)
    x, other = ctx.inputs
    return (g, -g * ctx.m.trunc(x / other) if ctx.needs_input_grad[1] else None)


FMOD = _binary("fmod", _integer_division(np.fmod, "fmod", "fmod"), _fmod_vjp,
               saves={"other": ("x", "other")},
               samples=binary_samples(low=-3.0, high=3.0, low2=0.7, high2=0.9),
               torch=lambda torch, x, other: torch.fmod(x, other), jvp=_diagonal, onnx=_onnx_fmod,
               grad_fn_name=_by_other_kind("Fmod"))


def _int_kind(x):
    """An integer array or a Python int (not bool)."""
    if hasattr(x, "dtype"):
        return x.dtype.kind in "iu"
    return isinstance(x, int) and not isinstance(x, bool)


def _int_pow_negative(x, other, out):
    """``x ** other`` for integer arrays where some exponents are negative, as PyTorch:
    1 for a base of 1, +-1 for -1 (by the exponent's parity), 0 for any other base."""
    neg = other < 0
    r = np.power(x, np.where(neg, 0, other))
    odd = (other % 2) != 0
    r = np.where(neg, np.where(x == 1, 1, np.where(x == -1, np.where(odd, -1, 1), 0)),
                 r).astype(r.dtype, copy=False)
    return r if out is None else _into(out, r)


def _pow_kernel(x, other, out=None):
    if isinstance(other, int) and not isinstance(other, bool) and other < 0 \
            and hasattr(x, "dtype") and x.dtype.kind in "iu":
        raise ArgumentError("pow: Integers to negative integer powers are not allowed.")
    if getattr(other, "dtype", None) is not None and other.dtype.kind == "i" \
            and _int_kind(x) and bool((other < 0).any()):
        return _int_pow_negative(x, other, out)
    if type(other) in (int, float) and getattr(x, "dtype", None) is not None \
            and _isf(x.dtype) and other in _POW_FAST:
        if out is not None and _overlaps(out, x):
            return _into(out, _POW_FAST[other](x, None))
        return _POW_FAST[other](x, out)  # NumPy's float power is slow (~20x a multiply)
    return np.power(x, other) if out is None else np.power(x, other, out=out)


def _copy(x, out):
    if out is None:
        return x.copy()
    np.copyto(out, x, casting="same_kind")
    return out


def _cube(x, out):
    out = np.multiply(x, x, out=out)
    out *= x
    return out


def _recip_in_place(r, out):
    # (without out=, a 0-d input gives a NumPy scalar, which cannot be written into)
    return np.reciprocal(r) if out is None and np.ndim(r) == 0 else np.reciprocal(r, out=r)


def _inv_square(x, out):
    return _recip_in_place(np.multiply(x, x, out=out), out)


def _sqrt_recip(x, out):
    return _recip_in_place(np.sqrt(x, out=out), out)


# scalar exponents computed with multiplications and roots, as PyTorch's pow kernel does
_POW_FAST = {1: _copy, 2: lambda x, out: np.square(x, out=out), 3: _cube,
             -1: lambda x, out: np.reciprocal(x, out=out), -2: _inv_square,
             0.5: lambda x, out: np.sqrt(x, out=out), -0.5: _sqrt_recip}


def _pow_vjp(ctx, g):
    x, other = ctx.inputs
    m = ctx.m
    n = ctx.needs_input_grad
    gx = go = None
    if n[0]:
        # d/dx x**y = y * x**(y-1); at y == 0 the gradient is 0, even at x == 0
        gx = g * other * m.pow(x, other - 1)
        if not isinstance(other, (int, float)):
            gx = m.where(other == 0, 0.0, gx)
        elif other == 0:
            gx = g * 0
    if n[1]:
        out = ctx.out
        # d/dy x**y = x**y log x, taken as 0 where x == 0 and y >= 0 (as PyTorch)
        go = m.where((x == 0) & (other >= 0), 0.0, g * out * m.log(m.where(x == 0, 1.0, x)))
    return gx, go


POW = _binary("pow", _pow_kernel, _pow_vjp,
              saves={"x": ("x", "other"), "other": ("x", "other", "out")}, expr="pow(x, other)",
              samples=binary_samples(low=0.5, high=2.0, low2=-1.5, high2=2.0),
              onnx=_onnx_float_simple("Pow"), autocast=_CUDA_FP32,
              # PyTorch's pow overloads: Tensor ** number, Tensor ** Tensor, number ** Tensor
              grad_fn_name=lambda attrs, shapes: "PowBackward" + (
                  "0" if shapes[1] is None else "2" if shapes[0] is None else "1"))


def _maxmin_vjp(pick_x):
    def vjp(ctx, g):
        x, other = ctx.inputs
        m = ctx.m
        # ties split the gradient evenly (as PyTorch)
        ge = pick_x(x, other)
        eq = x == other
        half = g * 0.5
        gx = m.where(eq, half, m.where(ge, g, 0.0))
        go = m.where(eq, half, m.where(ge, 0.0, g))
        return gx, go
    return vjp


MAXIMUM = _binary("maximum", np.maximum, _maxmin_vjp(lambda x, o: x > o), saves=("x", "other"),
                  expr="maximum(x, other)", samples=binary_samples(avoid_diff=True),
                  onnx=_onnx_simple("Max"))
MINIMUM = _binary("minimum", np.minimum, _maxmin_vjp(lambda x, o: x < o), saves=("x", "other"),
                  expr="minimum(x, other)", samples=binary_samples(avoid_diff=True),
                  onnx=_onnx_simple("Min"))


def _atan2_vjp(ctx, g):
    x, other = ctx.inputs
    m = ctx.m
    d = x * x + other * other
    # at x == other == 0 the gradient is 0, as PyTorch's, not 0/0
    r = m.where(d == 0, 0.0, 1.0 / m.where(d == 0, 1.0, d))
    return g * other * r, -g * x * r


ARCTAN2 = _binary("arctan2", np.arctan2, _atan2_vjp, saves=("x", "other"), promote="float",
                  expr="arctan2(x, other)", samples=binary_samples(low=0.5, high=2.0),
                  onnx=_onnx_atan2, autocast=_CUDA_PROMOTE, grad_fn_name="Atan2Backward0")


def _logaddexp_vjp(ctx, g):
    # d/dx log(e^x + e^y) = sigmoid(x - y): exact where exp(x - out) loses digits to
    # the rounding of out (|out| ~ 1e4 in float32), and never overflows
    x, other = ctx.inputs
    m = ctx.m
    n = ctx.needs_input_grad
    return (g * m.sigmoid(x - other) if n[0] else None,
            g * m.sigmoid(other - x) if n[1] else None)


LOGADDEXP = _binary("logaddexp", np.logaddexp, _logaddexp_vjp, saves=("x", "other"),
                    promote="float", expr="logaddexp(x, other)")


def _tsum(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


# ---------------------------------------------------------------- unary math
def _u(name, kernel, vjp, saves=("x",), **kw):
    return _unary(name, kernel, vjp, saves=saves, **kw)


NEG = _u("neg", np.negative, lambda ctx, g: (-g,), saves=(), promote="same", expr="-x",
         onnx=_onnx_simple("Neg"))


def _not_implemented(name, dtype):
    """PyTorch's error for a dtype an op has no kernel for (``"abs_cpu" not implemented
    for 'Bool'``): elementwise kernels refuse such dtypes themselves, as they check
    broadcasting themselves (dispatch runs no shape rule before them)."""
    return op_error(name, f"not implemented for {np.dtype(dtype).name} tensors",
                    NotImplementedError)


def _abs(x, out=None):
    if x.dtype.kind == "b":
        raise _not_implemented("abs", x.dtype)
    return np.abs(x, out=out)


ABS = _u("abs", _abs, lambda ctx, g: (g * ctx.m.sign(ctx.inputs[0]),), promote="same",
         expr="abs(x)", samples=unary_samples(avoid=(0.0,)), onnx=_onnx_simple("Abs"))
def _sign(x, out=None):
    return _copy(x, out) if x.dtype == np.bool_ else np.sign(x, out=out)


SIGN = _u("sign", _sign, lambda ctx, g: (g * 0,), saves=(), promote="same",
          samples=unary_samples(avoid=(0.0,)), jvp=_diagonal, onnx=_onnx_simple("Sign"))
EXP = _u("exp", np.exp, lambda ctx, g: (g * ctx.out,), saves=("out",), expr="exp(x)",
         onnx=_onnx_float_simple("Exp"), autocast=_CUDA_FP32)
def _in_float64(fn):
    """``fn`` (a NumPy ufunc) computing float32 arrays in float64, rounded once: NumPy's
    float32 loops are not always correctly rounded (its AVX-512 exp2(127.0), log2 and
    log10 of exact powers were 1 ulp off: log10(100.0) gave 2.0000002 where PyTorch
    gives 2.0); powers of two and ten then stay exact, as the fused kernels keep them."""
    def kernel(x, out=None):
        if type(x) is np.ndarray and x.dtype == np.float32:
            r = fn(x, dtype=np.float64)
            if out is None:
                return r.astype(np.float32)
            np.copyto(out, r, casting="same_kind")
            return out
        return fn(x, out=out)
    kernel.__name__ = fn.__name__
    return kernel


EXP2 = _u("exp2", _in_float64(np.exp2), lambda ctx, g: (g * ctx.out * math.log(2.0),),
          saves=("out",), expr="exp2(x)")
EXPM1 = _u("expm1", np.expm1, lambda ctx, g: (g * (ctx.out + 1),), saves=("out",),
           expr="expm1(x)", autocast=_CUDA_FP32)
_pos = unary_samples(low=0.2, high=3.0)
LOG = _u("log", np.log, lambda ctx, g: (g / ctx.inputs[0],), expr="log(x)", samples=_pos,
         onnx=_onnx_float_simple("Log"), autocast=_CUDA_FP32)
LOG2 = _u("log2", _in_float64(np.log2), lambda ctx, g: (g / (ctx.inputs[0] * math.log(2.0)),),
          expr="log2(x)", samples=_pos, autocast=_CUDA_FP32)
LOG10 = _u("log10", _in_float64(np.log10), lambda ctx, g: (g / (ctx.inputs[0] * math.log(10.0)),),
           expr="log10(x)", samples=_pos, autocast=_CUDA_FP32)
LOG1P = _u("log1p", np.log1p, lambda ctx, g: (g / (ctx.inputs[0] + 1),), expr="log1p(x)",
           samples=unary_samples(low=-0.8, high=3.0), autocast=_CUDA_FP32)
SQRT = _u("sqrt", np.sqrt, lambda ctx, g: (g / (2 * ctx.out),), saves=("out",), expr="sqrt(x)",
          samples=_pos, onnx=_onnx_float_simple("Sqrt"))


def _rsqrt(x, out=None):
    # 1 / sqrt(x), the reciprocal taken in place (elementwise: safe when out is x)
    return _sqrt_recip(x, out)


RSQRT = _u("rsqrt", _rsqrt, lambda ctx, g: (-0.5 * g * ctx.out * ctx.out * ctx.out,),
           saves=("out",), expr="rsqrt(x)", samples=_pos, autocast=_CUDA_FP32)
def _square(x, out=None):
    if x.dtype == np.bool_:  # PyTorch: an int64 result
        return np.multiply(x, x, out=out, dtype=np.int64)
    return np.square(x, out=out)


SQUARE = _u("square", _square, lambda ctx, g: (2 * g * ctx.inputs[0],), promote="same",
            expr="x * x", grad_fn_name="PowBackward0")  # (PyTorch's square is pow(x, 2))


def _reciprocal(x, out=None):
    return 1 / x if out is None else np.divide(1, x, out=out)


RECIPROCAL = _u("reciprocal", _reciprocal, lambda ctx, g: (-g * ctx.out * ctx.out,),
                saves=("out",), expr="1 / x", samples=_pos, onnx=_onnx_float_simple("Reciprocal"),
                autocast=_CUDA_FP32)
SIN = _u("sin", np.sin, lambda ctx, g: (g * ctx.m.cos(ctx.inputs[0]),), expr="sin(x)",
         onnx=_onnx_float_simple("Sin"))
COS = _u("cos", np.cos, lambda ctx, g: (-g * ctx.m.sin(ctx.inputs[0]),), expr="cos(x)",
         onnx=_onnx_float_simple("Cos"))
TAN = _u("tan", np.tan, lambda ctx, g: (g * (1 + ctx.out * ctx.out),), saves=("out",),
         expr="tan(x)", samples=unary_samples(low=-1.2, high=1.2), onnx=_onnx_float_simple("Tan"),
         autocast=_CUDA_FP32)
_unit = unary_samples(low=-0.9, high=0.9)
ARCSIN = _u("arcsin", np.arcsin, lambda ctx, g: (g * ctx.m.rsqrt(1 - ctx.inputs[0] ** 2),),
            expr="arcsin(x)", samples=_unit, onnx=_onnx_float_simple("Asin"), autocast=_CUDA_FP32,
            grad_fn_name="AsinBackward0")
ARCCOS = _u("arccos", np.arccos, lambda ctx, g: (-g * ctx.m.rsqrt(1 - ctx.inputs[0] ** 2),),
            expr="arccos(x)", samples=_unit, onnx=_onnx_float_simple("Acos"), autocast=_CUDA_FP32,
            grad_fn_name="AcosBackward0")
ARCTAN = _u("arctan", np.arctan, lambda ctx, g: (g / (1 + ctx.inputs[0] ** 2),),
            expr="arctan(x)", onnx=_onnx_float_simple("Atan"), grad_fn_name="AtanBackward0")
SINH = _u("sinh", np.sinh, lambda ctx, g: (g * ctx.m.cosh(ctx.inputs[0]),), expr="sinh(x)",
          onnx=_onnx_float_simple("Sinh"), autocast=_CUDA_FP32)
COSH = _u("cosh", np.cosh, lambda ctx, g: (g * ctx.m.sinh(ctx.inputs[0]),), expr="cosh(x)",
          onnx=_onnx_float_simple("Cosh"), autocast=_CUDA_FP32)


def _tanh_backward_kernel(g, y, out=None):
    if out is None or _overlaps(out, g, y):
        r = g * (1 - y * y)
        return r if out is None else _into(out, r)
    np.multiply(y, y, out=out)  # in the caller's memory, no temporary
    np.subtract(1, out, out=out)
    return np.multiply(g, out, out=out)


def _tanh_backward_vjp(ctx, gg):
    g, y = ctx.inputs
    n = ctx.needs_input_grad
    return (bind(TANH_BACKWARD, gg, y) if n[0] else None,
            gg * g * y * -2.0 if n[1] else None)


def _act_backward_samples(dtype=np.float64):
    return [Sample((rand((3, 4), dtype, seed=1), rand((3, 4), dtype, -0.9, 0.9, seed=2)), {}),
            Sample((rand((3, 4), dtype, seed=3), rand((4,), dtype, 0.1, 0.9, seed=4)), {}),
            Sample((rand((), dtype, seed=5), rand((), dtype, 0.1, 0.9, seed=6)), {})]


# tanh's gradient as one op, PyTorch's tanh_backward (g * (1 - y^2), y = tanh(x)): a
# double backward records one node for it, not three
TANH_BACKWARD = register(
    name="tanh_backward", jvp=_diagonal, kernel=_tanh_backward_kernel, args=("g", "y"),
    saves={"g": ("y",), "y": ("g", "y")}, expr="g * (1 - y * y)", promote="same",
    infer=elementwise_infer("tanh_backward", "same"), broadcasting=True,
    vjp=_tanh_backward_vjp, samples=_act_backward_samples, error_samples=bad_broadcast(),
    torch=lambda torch, g, y: torch.ops.aten.tanh_backward(g, y))

TANH = _u("tanh", np.tanh, lambda ctx, g: (bind(TANH_BACKWARD, g, ctx.out),), saves=("out",),
          expr="tanh(x)", onnx=_onnx_float_simple("Tanh"))


def _sigmoid(x, out=None):
    if out is None and type(x) is np.ndarray:  # (the result in the input's layout, as
        perm = _fusion_op.layout_perm(x)      # PyTorch's: a transposed one transposed)
        if perm is not None:
            return _sigmoid(x.transpose(perm)).transpose(np.argsort(perm))
    # float32: one compiled loop over the vectorisable approximation (fusion/approx.py,
    # within about 2 ulp, as PyTorch's); 5-10x faster than the NumPy passes below
    r = _fusion_op.run_unary("sigmoid(x)", x, out=out)
    if r is not None:
        return r
    if not _isf(x.dtype):
        x = x.astype(np.float64)
    # 1 / (1 + exp(-x)), in place in the result: full relative precision in the tail
    # x << 0 too (where 0.5 + 0.5 * tanh(x / 2) rounds to 0), except below about -709,
    # where exp(-x) overflows: there exp(x) itself (to the subnormal end), from a copy
    # of those few inputs taken before ``out`` (which may be ``x``) is written
    tail = None
    if x.size and np.fmin.reduce(x, axis=None) < -700:  # (fmin: NaN does not hide it)
        tail = x < -700
        xt = x[tail]
    if out is None:
        out = np.empty(x.shape, x.dtype)
    with np.errstate(over="ignore"):
        np.negative(x, out=out)
        np.exp(out, out=out)
    np.add(out, 1, out=out)
    np.reciprocal(out, out=out)
    if tail is not None:
        out[tail] = np.exp(xt)
    return out


def _sigmoid_backward_kernel(g, y, out=None):
    if out is None or _overlaps(out, g, y):
        r = g * (1 - y) * y
        return r if out is None else _into(out, r)
    np.subtract(1, y, out=out)  # in the caller's memory, no temporary
    np.multiply(out, y, out=out)
    return np.multiply(g, out, out=out)


def _sigmoid_backward_vjp(ctx, gg):
    g, y = ctx.inputs
    n = ctx.needs_input_grad
    return (bind(SIGMOID_BACKWARD, gg, y) if n[0] else None,
            gg * g * (1.0 - 2.0 * y) if n[1] else None)


# sigmoid's gradient as one op, PyTorch's sigmoid_backward (g * y * (1 - y))
SIGMOID_BACKWARD = register(
    name="sigmoid_backward", jvp=_diagonal, kernel=_sigmoid_backward_kernel, args=("g", "y"),
    saves={"g": ("y",), "y": ("g", "y")}, expr="g * y * (1 - y)", promote="same",
    infer=elementwise_infer("sigmoid_backward", "same"), broadcasting=True,
    vjp=_sigmoid_backward_vjp, samples=_act_backward_samples, error_samples=bad_broadcast(),
    torch=lambda torch, g, y: torch.ops.aten.sigmoid_backward(g, y))

SIGMOID = _u("sigmoid", _sigmoid, lambda ctx, g: (bind(SIGMOID_BACKWARD, g, ctx.out),),
             saves=("out",), expr="sigmoid(x)", onnx=_onnx_float_simple("Sigmoid"))


_PAR_MIN = 1 << 16  # elements from which relu and its gradient run the compiled loop
# the smallest chunk a thread is handed: one core runs the loop over 346k float32
# elements in ~40 us, about what waking a second thread costs in CPU time, so below
# ~1M elements the calling thread runs it alone
_THREAD_CHUNK = 1 << 19


def _relu_loop(n, x, out):
    for i in range(n):
        v = x[i]
        out[i] = v if not v <= 0 else 0  # NaN passes, as np.maximum


def _relu_backward_loop(n, g, y, out):
    for i in range(n):
        out[i] = g[i] * (0 if y[i] <= 0 else 1)


_RELU_K = _cpu.njit(_relu_loop, error_model="numpy")  # compiled on first call
_RELU_BACKWARD_K = _cpu.njit(_relu_backward_loop, error_model="numpy")


# bfloat16 and float16 on their 16 bits: relu and its gradient only pass a value or
# write zero, so they are exact without widening to float32 and rounding back (one
# pass over the elements, where widening costs three). ``inf`` is the dtype's
# infinity with the sign bit clear: above it (in the low 15 bits) is a NaN; a value
# is <= 0 where it is not a NaN and its sign bit is set or it is a zero
def _relu_bits_loop(n, x, out, inf):
    for i in range(n):
        u = x[i]
        a = u & np.uint16(0x7FFF)
        out[i] = u if a > inf or (u < np.uint16(0x8000) and a != np.uint16(0)) else 0


def _relu_backward_bits_loop(n, g, y, out, inf):
    for i in range(n):
        u = y[i]
        a = u & np.uint16(0x7FFF)
        out[i] = g[i] if a > inf or (u < np.uint16(0x8000) and a != np.uint16(0)) else 0


_RELU_BITS_K = _cpu.njit(_relu_bits_loop, error_model="numpy")
_RELU_BACKWARD_BITS_K = _cpu.njit(_relu_backward_bits_loop, error_model="numpy")
_HALF_INF = {_dt.F16: np.uint16(0x7C00)}  # and bfloat16's, once ml_dtypes is imported
_dt.on_bfloat16(lambda bf16: _HALF_INF.__setitem__(bf16, np.uint16(0x7F80)))


def _halfwidth_relu(k, loop, *arrays, out=None):
    """relu (``loop`` the serial float32 one) or its gradient on bfloat16/float16
    NumPy arrays: the bits loop ``k`` over same-shape C-contiguous arrays of one
    half-width dtype, in chunks on the CPU threads from ~1M elements; anything else
    (broadcasting, strides, another buffer type) through float32 and one rounding."""
    a0 = arrays[0]
    inf = _HALF_INF[a0.dtype]
    both = arrays + ((out,) if out is not None else ())
    if all(type(a) is np.ndarray and a.shape == a0.shape and a.dtype == a0.dtype and
           a.flags.c_contiguous for a in both):
        if out is None:
            out = np.empty_like(a0)
        _cpu.run_chunked(k, a0.size, *[a.reshape(-1).view(np.uint16) for a in arrays],
                         out.reshape(-1).view(np.uint16), inf, min_chunk=_THREAD_CHUNK)
        return out
    wide = [_halfwidth.to_float32(a) if type(a) is np.ndarray else a.astype(np.float32)
            for a in arrays]
    res = loop(*wide)
    res = _halfwidth.from_float32(res, a0.dtype) if type(res) is np.ndarray \
        else res.astype(a0.dtype)
    if out is None:
        return res
    out[...] = res
    return out


def _threaded(k, *arrays, out=None):
    """``k`` (a compiled flat elementwise loop) over same-shape C-contiguous float
    arrays (in chunks on the CPU threads from ~1M elements), or None where that does
    not apply (NumPy then runs). With ``out`` (a caller's buffer of the same spec) it writes there,
    whatever the size: the loop allocates nothing."""
    a0 = arrays[0]
    if type(a0) is not np.ndarray or (out is None and a0.size < _PAR_MIN) or \
            not _isf(a0.dtype) or any(
            type(a) is not np.ndarray or a.shape != a0.shape or a.dtype != a0.dtype or
            not a.flags.c_contiguous for a in arrays + ((out,) if out is not None else ())):
        return None
    if out is None:
        out = np.empty_like(a0)
    _cpu.run_chunked(k, a0.size, *[a.reshape(-1) for a in arrays], out.reshape(-1),
                     min_chunk=_THREAD_CHUNK)
    return out


def _relu(x, out=None):
    if x.dtype.kind == "b":  # PyTorch's RuntimeError
        raise op_error("relu", "boolean inputs are not supported", RuntimeError)
    if x.dtype in _HALF_INF:
        return _halfwidth_relu(_RELU_BITS_K, _relu, x, out=out)
    res = _threaded(_RELU_K, x, out=out)
    if res is None:
        return np.maximum(x, 0) if out is None else np.maximum(x, 0, out=out)
    return res


def _relu_backward_kernel(g, y, out=None):
    # g * not(y <= 0) with y = relu(x) (a NaN input passes g, as PyTorch): 9x faster
    # than np.where here; NaN/inf in g where y == 0 give NaN rather than 0 (PyTorch
    # gives 0), which anomaly detection reports; in bfloat16/float16 such a g gives 0
    if g.dtype in _HALF_INF and y.dtype == g.dtype:
        return _halfwidth_relu(_RELU_BACKWARD_BITS_K, _relu_backward_kernel, g, y, out=out)
    res = _threaded(_RELU_BACKWARD_K, g, y, out=out)
    if res is None:
        return np.multiply(g, ~(y <= 0)) if out is None else np.multiply(g, ~(y <= 0), out=out)
    return res


def _relu_backward_samples(dtype=np.float64):
    return [Sample((rand((3, 4), dtype, seed=1), away_from(rand((3, 4), dtype, seed=2), (0.0,))),
                   {})]


RELU_BACKWARD = register(
    name="relu_backward", jvp=_diagonal, kernel=_relu_backward_kernel, args=("g", "y"),
    saves={"g": ("y",)},
    infer=elementwise_infer("relu_backward"), broadcasting=True, halfwidth=True,
    vjp=lambda ctx, gg: (bind(RELU_BACKWARD, gg, ctx.inputs[1])
                         if ctx.needs_input_grad[0] else None, None),
    samples=_relu_backward_samples, error_samples=bad_broadcast(),
    torch=lambda torch, g, y: torch.ops.aten.threshold_backward(g, y, 0), onnx=_onnx_relu_backward)

# NOTE: the gradient uses out > 0, so at x == 0 it is 0 (as PyTorch), not 1/2
RELU = _u("relu", _relu, lambda ctx, g: (bind(RELU_BACKWARD, g, ctx.out),), saves=("out",),
          promote="same", expr="maximum(x, 0)", halfwidth=True, samples=unary_samples(avoid=(0.0,)),
          onnx=_onnx_simple("Relu"))


def _erf(x, out=None):
    # float32: the vectorisable approximation (fusion/approx.py, within about 2 ulp),
    # ~10x faster than the scalar erf loop the devices layer runs otherwise
    r = _fusion_op.run_unary("erf(x)", x, out=out)
    return r if r is not None else _devices.special("erf", x, out=out)


ERF = _u("erf", _erf, lambda ctx, g: (g * _2_OVER_SQRT_PI * ctx.m.exp(-ctx.inputs[0] ** 2),),
         expr="erf(x)", onnx=_onnx_float_simple("Erf"))
_kink = unary_samples(low=-2.7, high=2.7, avoid=(-2.0, -1.0, 0.0, 1.0, 2.0))


def _rounding(fn):
    # integers are already whole: PyTorch returns them unchanged (NumPy would give
    # floats); bools it refuses
    name = fn.__name__

    def kernel(x, out=None):
        if x.dtype.kind == "b":
            raise _not_implemented(name, x.dtype)
        return _copy(x, out) if x.dtype.kind in "iu" else fn(x, out=out)
    return kernel


_zero_grad = {"saves": (), "promote": "same", "samples": _kink}
FLOOR = _u("floor", _rounding(np.floor), lambda ctx, g: (g * 0,), **_zero_grad, jvp=_diagonal,
           onnx=_onnx_int_identity("Floor"))
CEIL = _u("ceil", _rounding(np.ceil), lambda ctx, g: (g * 0,), **_zero_grad, jvp=_diagonal,
          onnx=_onnx_int_identity("Ceil"))
TRUNC = _u("trunc", _rounding(np.trunc), lambda ctx, g: (g * 0,), **_zero_grad, jvp=_diagonal,
           onnx=_onnx_trunc)


def _round(x, decimals=0, out=None):
    if x.dtype.kind in "biu":
        if x.dtype.kind == "b" or decimals:  # PyTorch: no integer kernel with decimals
            raise _not_implemented("round", x.dtype)
        return _copy(x, out)
    return np.round(x, decimals, out=out)


ROUND = _u("round", _round, lambda ctx, g: (g * 0,), saves=(), promote="same",
           samples=unary_samples(low=-2.7, high=2.7, avoid=(-2.5, -1.5, -0.5, 0.5, 1.5, 2.5)),
           jvp=_diagonal, onnx=_onnx_int_identity("Round"))

_cmp = {"differentiable": False, "out_dtype": np.bool_}
ISNAN = _u("isnan", np.isnan, None, saves=(), promote="none", **_cmp, onnx=_onnx_isnan)
ISINF = _u("isinf", np.isinf, None, saves=(), promote="none", **_cmp, onnx=_onnx_isinf)
ISFINITE = _u("isfinite", np.isfinite, None, saves=(), promote="none", **_cmp, onnx=_onnx_isfinite)
LOGICAL_NOT = _u("logical_not", np.logical_not, None, saves=(), promote="none", **_cmp,
                 onnx=_onnx_logical("Not"))


def _bitwise_not(x, out=None):
    if _isf(x.dtype):
        raise TypeError("bitwise_not: only integer and bool tensors are supported, "
                        f"got {x.dtype}")
    return np.invert(x, out=out)


BITWISE_NOT = _u("bitwise_not", _bitwise_not, None, saves=(), promote="none",
                 differentiable=False,
                 samples=lambda dtype=None: [Sample((np.array([True, False]),), {}, False),
                                             Sample((np.arange(-3, 3),), {}, False)],
                 onnx=_onnx_bitwise("BitwiseNot", "Not"))

# ---------------------------------------------------------------- comparisons
_bcmp = {"differentiable": False, "out_dtype": np.bool_}
EQ = _binary("eq", np.equal, None, **_bcmp, onnx=_onnx_compare("Equal"))
NE = _binary("ne", np.not_equal, None, **_bcmp, onnx=_onnx_compare("Equal", negate=True))
LT = _binary("lt", np.less, None, **_bcmp, onnx=_onnx_compare("Less"))
LE = _binary("le", np.less_equal, None, **_bcmp, onnx=_onnx_compare("LessOrEqual"))
GT = _binary("gt", np.greater, None, **_bcmp, onnx=_onnx_compare("Greater"))
GE = _binary("ge", np.greater_equal, None, **_bcmp, onnx=_onnx_compare("GreaterOrEqual"))
LOGICAL_AND = _binary("logical_and", np.logical_and, None, **_bcmp, onnx=_onnx_logical("And"))
LOGICAL_OR = _binary("logical_or", np.logical_or, None, **_bcmp, onnx=_onnx_logical("Or"))
LOGICAL_XOR = _binary("logical_xor", np.logical_xor, None, **_bcmp, onnx=_onnx_logical("Xor"))


def _bitwise(fn, name):
    def kernel(x, other, out=None):
        for v in (x, other):
            if getattr(v, "dtype", np.dtype(int)).kind == "f" or isinstance(v, float):
                dt = getattr(v, "dtype", "a Python float")
                raise NoKernelError(f"{name}: only integer and bool tensors are supported, "
                                    f"got {dt}")
        return fn(x, other) if out is None else fn(x, other, out=out)
    return kernel


def _int_samples(dtype=None):
    return [Sample((np.array([True, False, True]), np.array([True, True, False])), {}, False),
            Sample((np.arange(6).reshape(2, 3), np.arange(3)), {}, False)]


def _int_errors():
    return [((np.arange(12).reshape(3, 4), np.arange(5)), {}, ValueError),
            ((rand((3,)), np.arange(3)), {}, TypeError)]


BITWISE_AND = _binary("bitwise_and", _bitwise(np.bitwise_and, "bitwise_and"), None,
                      differentiable=False, samples=_int_samples, errors=_int_errors,
                      onnx=_onnx_bitwise("BitwiseAnd", "And"))
BITWISE_OR = _binary("bitwise_or", _bitwise(np.bitwise_or, "bitwise_or"), None,
                     differentiable=False, samples=_int_samples, errors=_int_errors,
                     onnx=_onnx_bitwise("BitwiseOr", "Or"))
BITWISE_XOR = _binary("bitwise_xor", _bitwise(np.bitwise_xor, "bitwise_xor"), None,
                      differentiable=False, samples=_int_samples, errors=_int_errors,
                      onnx=_onnx_bitwise("BitwiseXor", "Xor"))


# ---------------------------------------------------------------- where
def _where_infer(cond, x, other):
    shapes = [s.shape for s in (cond, x, other) if hasattr(s, "shape")]
    shape = _broadcast_shapes("where", *shapes)
    inner = elementwise_infer("where")(x, other)
    if hasattr(cond, "dtype") and np.dtype(cond.dtype) != np.bool_:
        raise DtypeError(f"where: condition must be a bool tensor, got {np.dtype(cond.dtype)}")
    return type(inner)(shape, inner.dtype)


def _where_kernel(cond, x, other, out=None):
    if hasattr(cond, "dtype") and cond.dtype != np.bool_:
        raise TypeError("where: condition must be bool")
    if out is None or type(out) is not np.ndarray or _overlaps(out, cond, x):
        # (out written with other first: x and cond must not be out's memory)
        res = np.where(cond, x, other)
        if out is None:  # (PyTorch's promotion of x and other, not NumPy's)
            dt = _where_infer(cond, x, other).dtype
            return res if res.dtype == dt else res.astype(dt)
        out[...] = res
        return out
    np.copyto(out, other, casting="unsafe")
    np.copyto(out, x, casting="unsafe", where=cond)
    return out


def _where_vjp(ctx, g):
    cond = ctx.inputs[0]
    m = ctx.m
    n = ctx.needs_input_grad
    return (None, m.where(cond, g, 0.0) if n[1] else None,
            m.where(cond, 0.0, g) if n[2] else None)


def _where_samples(dtype=np.float64):
    c = rand((3, 4), seed=3) > 0
    return [Sample((c, rand((3, 4), dtype, seed=1), rand((3, 4), dtype, seed=2)), {}),
            Sample((c[:, :1], rand((1, 4), dtype, seed=4), rand((3, 4), dtype, seed=5)), {})]


WHERE = register(name="where", onnx=_onnx_where, kernel=_where_kernel,
                 args=("condition", "x", "other"),
                 vjp=_where_vjp, saves=("condition",), infer=_where_infer, broadcasting=True,
                 promote="none", expr="where(condition, x, other)", samples=_where_samples,
                 error_samples=lambda: [((rand((3,)) > 0, rand((3, 4)), rand((3, 4))), {},
                                         ValueError)],
                 torch=lambda torch, condition, x, other: torch.where(condition, x, other))


# ---------------------------------------------------------------- clamp
# Two ops, as PyTorch's two overloads: number bounds (attrs) and tensor bounds (inputs).
def _clamp_dtype(dt, lo, hi):
    return _dt.promote_with_scalars(np.dtype(dt), [v for v in (lo, hi) if v is not None])


def _clamp_kernel(x, min=None, max=None, out=None):
    # max(x, min) first, then min(., max): with min > max everything is max (as PyTorch)
    _clamp_infer(x, min, max)
    dt = _clamp_dtype(x.dtype, min, max)
    if out is not None:  # each step elementwise, in place: out may be x
        src = x
        if min is not None:
            src = np.maximum(src, min, out=out)
        if max is not None:
            np.minimum(src, max, out=out)
        return out
    out = x.astype(dt) if x.dtype != dt else x
    # np.clip is minimum(maximum(x, min), max) in one pass (NaN passes), 2-5x faster
    # than the two ufuncs; np.clip(x, None, None) is refused, as is clamp's
    out = np.clip(out, min, max)
    return out.astype(dt, copy=False) if out is not x else x.copy()


def _clamp_infer(x, min=None, max=None):
    if min is None and max is None:
        raise op_error("clamp", "at least one of 'min' or 'max' must not be None",
                       RuntimeError)
    for v in (min, max):
        if v is not None and not isinstance(v, (int, float)):
            raise op_error("clamp", f"bounds must be numbers, got {type(v).__name__}", TypeError)
    return TensorSpec(tuple(x.shape), _clamp_dtype(x.dtype, min, max))


def _clamp_vjp(ctx, g):
    # subgradient 1 at the bounds (as PyTorch): g where min <= x <= max
    x = ctx.inputs[0]
    lo, hi = ctx.attrs.get("min"), ctx.attrs.get("max")
    inside = None
    if lo is not None:
        inside = x >= lo
    if hi is not None:
        inside = (x <= hi) if inside is None else inside & (x <= hi)
    return (ctx.m.where(inside, g, 0.0),)


def _clamp_samples(dtype=np.float64):
    x = away_from(rand((3, 4), dtype, seed=1), (-0.5, 0.5)).astype(dtype)
    return [Sample((x,), {"min": -0.5, "max": 0.5}),
            Sample((x,), {"min": -0.5}),
            Sample((x.T,), {"max": 0.5}),
            Sample((rand((), dtype, seed=4),), {"min": 0.0, "max": 1.5}),
            Sample((rand((2, 0), dtype),), {"min": 0.0}),
            Sample((x,), {"min": 0.7, "max": 0.2}),  # min > max: all max
            Sample((np.arange(-3, 4),), {"min": -1, "max": 2}, False),
            Sample((np.arange(-3, 4),), {"min": -1.5}, False)]  # int with float: float


CLAMP = register(name="clamp", onnx=_onnx_clamp, jvp=_diagonal, kernel=_clamp_kernel,
                 infer=_clamp_infer, vjp=_clamp_vjp,
                 saves=("x",), samples=_clamp_samples, grad_fn_name="ClampBackward1",
                 torch=lambda torch, x, min=None, max=None: torch.clamp(x, min, max),
                 error_samples=lambda: [((rand((3, 4)),), {}, RuntimeError),
                                        ((rand((3, 4)),), {"min": "a"}, TypeError)])


def _clamp_t_kernel(x, min, max, out=None):
    if min is None and max is None:
        raise op_error("clamp_tensor", "at least one of 'min' or 'max' must not be None",
                       RuntimeError)
    if out is not None:
        if min is not None and max is not None and _overlaps(out, max):
            return _into(out, _clamp_t_kernel(x, min, max))  # max is read after out is written
        src = x
        if min is not None:
            src = np.maximum(src, min, out=out)
        if max is not None:
            np.minimum(src, max, out=out)
        return out
    out = x
    if min is not None:
        out = np.maximum(out, min)
    if max is not None:
        out = np.minimum(out, max)
    return out if out is not x else x.copy()


def _clamp_t_infer(x, min, max):
    if min is None and max is None:
        raise op_error("clamp_tensor", "at least one of 'min' or 'max' must not be None",
                       RuntimeError)
    return elementwise_infer("clamp_tensor")(*[v for v in (x, min, max) if v is not None])


def _clamp_t_vjp(ctx, g):
    # PyTorch's clamp_backward_min_max: x gets g where min <= x <= max (inclusive); a
    # bound gets g where it is the value taken (max also wherever max < min)
    x, lo, hi = ctx.inputs
    m = ctx.m
    n = ctx.needs_input_grad
    inside = None
    if lo is not None:
        inside = x >= lo
    if hi is not None:
        inside = (x <= hi) if inside is None else inside & (x <= hi)
    gx = m.where(inside, g, 0.0) if n[0] else None
    glo = ghi = None
    if n[1]:
        pick = x < lo
        if hi is not None:
            pick = pick & (lo < hi)
        glo = m.where(pick, g, 0.0)
    if n[2]:
        pick = x > hi
        if lo is not None:
            pick = pick | (hi < lo)
        ghi = m.where(pick, g, 0.0)
    return gx, glo, ghi


def _clamp_t_samples(dtype=np.float64):
    x = rand((3, 4), dtype, seed=1)
    lo = rand((3, 1), dtype, -1.0, 0.0, seed=2)
    hi = rand((4,), dtype, 0.0, 1.0, seed=3)
    for b in (np.broadcast_to(lo, (3, 4)), np.broadcast_to(hi, (3, 4))):
        close = np.abs(x - b) < 0.1  # keep x off the bounds: honest finite differences
        x[close] = b[close] + 0.2
    return [Sample((x, lo, hi), {}),
            Sample((x.T, lo.T, None), {}),
            Sample((x, None, hi), {}),
            Sample((x, lo, 0.5), {}),
            # min > max: everything is max, the gradient goes to max only
            Sample((x, np.full((1,), 0.7, dtype), np.full((1,), 0.2, dtype)), {})]


CLAMP_TENSOR = register(name="clamp_tensor", onnx=_onnx_clamp_tensor, jvp=_diagonal,
                        kernel=_clamp_t_kernel, args=("x", "min", "max"),
                        optional=("min", "max"),
                        vjp=_clamp_t_vjp, saves=("x", "min", "max"), infer=_clamp_t_infer,
                        grad_fn_name="ClampBackward0",
                        broadcasting=True, promote="same", samples=_clamp_t_samples,
                        torch=lambda torch, x, min, max: torch.clamp(
                            x, *(torch.tensor(v, dtype=x.dtype) if isinstance(v, (int, float))
                                 else v for v in (min, max))),
                        error_samples=lambda: [((rand((3, 4)), rand((5,)), None), {},
                                                ValueError),
                                               ((rand((3, 4)), None, None), {}, RuntimeError)])


# ---------------------------------------------------------------- public functions
def add(input, other, *, alpha=1):
    """``input + alpha * other`` with broadcasting."""
    if alpha != 1:
        other = mul(other, alpha)
    return bind(ADD, input, other)


def sub(input, other, *, alpha=1):
    """``input - alpha * other`` with broadcasting; a bool operand is refused, as
    PyTorch does (``~`` / ``logical_not`` invert a mask)."""
    for v in (input, other):
        if type(v) is bool or getattr(v, "dtype", None) in _BOOLS:
            raise op_error("sub", "subtraction, the `-` operator, with a bool tensor is not "
                                  "supported; to invert a mask use `~` or logical_not()",
                           RuntimeError)
    if alpha != 1:
        other = mul(other, alpha)
    return bind(SUB, input, other)


subtract = sub
_BOOLS = (_dt.bool, np.dtype(bool))


def mul(input, other, *, out=None):
    """Elementwise product with broadcasting (``out=``: written into that tensor)."""
    if out is not None:
        from .compat import write_out
        return write_out("mul", bind(MUL, input, other), out)
    return bind(MUL, input, other)


multiply = mul


def div(input, other, *, rounding_mode=None):
    """True division (ints give the default float); ``rounding_mode`` 'floor'/'trunc'."""
    if rounding_mode is None:
        return bind(DIV, input, other)
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode == "trunc":
        q = bind(DIV, input, other)
        r = bind(SIGN, q) * bind(FLOOR, bind(ABS, q))
        it = getattr(input, "dtype", None)
        return r.to(it) if it is not None and not it.is_floating_point else r
    raise ValueError(f"div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


divide = true_divide = div


def fmod(input, other):
    """C-style remainder: the result has the sign of ``input`` (``remainder``: of ``other``)."""
    return bind(FMOD, input, other)


def floor_divide(input, other):
    """``input / other`` rounded down, with broadcasting, as ``torch.floor_divide``."""
    return bind(FLOOR_DIVIDE, input, other)


def remainder(input, other):
    """Python's modulus: the remainder of ``input / other`` with the sign of ``other``, with
    broadcasting, as ``torch.remainder``."""
    return bind(REMAINDER, input, other)



def pow(input, exponent):
    """``input ** exponent``; tensor or scalar exponents."""
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool):
        if exponent == 2 and hasattr(input, "_data") and _isf(input._data.dtype):
            return bind(SQUARE, input)  # (bool ** 2 is int64, as PyTorch: not bool * bool)
    return bind(POW, input, exponent)


def maximum(input, other):
    """The larger of ``input`` and ``other``, elementwise with broadcasting (NaN
    propagates), as ``torch.maximum``."""
    return bind(MAXIMUM, input, other)


def minimum(input, other):
    """The smaller of ``input`` and ``other``, elementwise with broadcasting (NaN
    propagates), as ``torch.minimum``."""
    return bind(MINIMUM, input, other)


def arctan2(input, other):
    """The angle of the point ``(other, input)``: the inverse tangent of ``input / other``
    in the right quadrant, elementwise with broadcasting, as ``torch.arctan2``."""
    return bind(ARCTAN2, input, other)


atan2 = arctan2


def logaddexp(input, other):
    """``log(exp(input) + exp(other))`` without overflow, with broadcasting, as
    ``torch.logaddexp``."""
    return bind(LOGADDEXP, input, other)


def neg(input):
    """The negation, elementwise, as ``torch.neg``."""
    return bind(NEG, input)


negative = neg


def abs(input):  # noqa: A001
    """The absolute value, elementwise, as ``torch.abs``."""
    return bind(ABS, input)


absolute = abs


def sign(input):
    """The sign (-1, 0 or 1) of each element, as ``torch.sign``."""
    return bind(SIGN, input)


def exp(input):
    """The exponential, elementwise, as ``torch.exp``."""
    return bind(EXP, input)


def exp2(input):
    """2 to the power of each element, as ``torch.exp2``."""
    return bind(EXP2, input)


def expm1(input):
    """``exp(x) - 1``, accurate near 0, as ``torch.expm1``."""
    return bind(EXPM1, input)


def log(input):
    """The natural logarithm, elementwise, as ``torch.log``."""
    return bind(LOG, input)


def log2(input):
    """The base-2 logarithm, elementwise, as ``torch.log2``."""
    return bind(LOG2, input)


def log10(input):
    """The base-10 logarithm, elementwise, as ``torch.log10``."""
    return bind(LOG10, input)


def log1p(input):
    """``log(1 + x)``, accurate near 0, as ``torch.log1p``."""
    return bind(LOG1P, input)


def sqrt(input):
    """The square root, elementwise, as ``torch.sqrt``."""
    return bind(SQRT, input)


def rsqrt(input):
    """``1 / sqrt(x)``, elementwise, as ``torch.rsqrt``."""
    return bind(RSQRT, input)


def square(input):
    """``x * x``, elementwise, as ``torch.square``."""
    return bind(SQUARE, input)


def reciprocal(input):
    """``1 / x``, elementwise, as ``torch.reciprocal``."""
    return bind(RECIPROCAL, input)


def sin(input):
    """The sine, elementwise, as ``torch.sin``."""
    return bind(SIN, input)


def cos(input):
    """The cosine, elementwise, as ``torch.cos``."""
    return bind(COS, input)


def tan(input):
    """The tangent, elementwise, as ``torch.tan``."""
    return bind(TAN, input)


def arcsin(input):
    """The inverse sine, elementwise, as ``torch.arcsin``."""
    return bind(ARCSIN, input)


def arccos(input):
    """The inverse cosine, elementwise, as ``torch.acos``."""
    return bind(ARCCOS, input)


def arctan(input):
    """The inverse tangent, elementwise, as ``torch.arctan``."""
    return bind(ARCTAN, input)


asin, acos, atan = arcsin, arccos, arctan


def sinh(input):
    """The hyperbolic sine, elementwise, as ``torch.sinh``."""
    return bind(SINH, input)


def cosh(input):
    """The hyperbolic cosine, elementwise, as ``torch.cosh``."""
    return bind(COSH, input)


def tanh(input):
    """The hyperbolic tangent, elementwise, as ``torch.tanh``."""
    return bind(TANH, input)


def sigmoid(input):
    """The logistic function ``1 / (1 + exp(-x))``, elementwise, as ``torch.sigmoid``."""
    return bind(SIGMOID, input)


def relu(input):
    """``max(x, 0)``, elementwise, as ``torch.relu``."""
    return bind(RELU, input)


def erf(input):
    """The error function, elementwise, as ``torch.erf``."""
    return bind(ERF, input)


def floor(input):
    """The largest integer not greater than each element (same dtype), as
    ``torch.floor``."""
    return bind(FLOOR, input)


def ceil(input):
    """The smallest integer not less than each element (same dtype), as ``torch.ceil``."""
    return bind(CEIL, input)


def trunc(input):
    """Rounds toward zero, elementwise (``trunc``), as ``torch.fix``."""
    return bind(TRUNC, input)


fix = trunc


def clamp(input, min=None, max=None):
    """Clamp into ``[min, max]``; each bound a number, a Tensor (broadcast) or None.

    As PyTorch: the gradient reaches ``input`` where ``min <= input <= max`` and a
    tensor bound where it is the value taken; with ``min > max`` the result is ``max``.
    """
    if min is None and max is None:
        raise op_error("clamp", "at least one of 'min' or 'max' must not be None",
                       RuntimeError)
    min, max = (v.item() if isinstance(v, np.generic) else v for v in (min, max))
    if _is_number(min) and _is_number(max):
        attrs = {k: v for k, v in (("min", min), ("max", max)) if v is not None}
        return bind(CLAMP, input, **attrs)
    return bind(CLAMP_TENSOR, input, min, max)


def _is_number(v):
    return v is None or isinstance(v, (int, float))


clip = clamp


def clamp_min(input, min):
    """Each element limited to at least ``min``, as ``torch.clamp_min``."""
    return name_call(clamp(input, min, None), input, "ClampMinBackward0")


def clamp_max(input, max):
    """Each element limited to at most ``max``, as ``torch.clamp_max``."""
    return name_call(clamp(input, None, max), input, "ClampMaxBackward0")


def round(input, *, decimals=0):  # noqa: A001
    """Rounds to the nearest integer, half to even (``decimals``: that many decimal places),
    as ``torch.round``."""
    if isinstance(decimals, bool) or not isinstance(decimals, (int, np.integer)):
        raise op_error("round", f"decimals must be an int, got {decimals!r}", TypeError)
    return bind(ROUND, input, decimals=decimals) if decimals else bind(ROUND, input)


def isnan(input):
    """Whether each element is NaN (a bool tensor), as ``torch.isnan``."""
    return bind(ISNAN, input)


def isinf(input):
    """Whether each element is infinite (a bool tensor), as ``torch.isinf``."""
    return bind(ISINF, input)


def isfinite(input):
    """Whether each element is finite (a bool tensor), as ``torch.isfinite``."""
    return bind(ISFINITE, input)


def logical_not(input):
    """Logical NOT (nonzero is true), a bool tensor, as ``torch.logical_not``."""
    return bind(LOGICAL_NOT, input)


def logical_and(input, other):
    """Logical AND (nonzero is true) with broadcasting, a bool tensor, as
    ``torch.logical_and``."""
    return bind(LOGICAL_AND, input, other)


def logical_or(input, other):
    """Logical OR (nonzero is true) with broadcasting, a bool tensor, as
    ``torch.logical_or``."""
    return bind(LOGICAL_OR, input, other)


def logical_xor(input, other):
    """Logical XOR (nonzero is true) with broadcasting, a bool tensor, as
    ``torch.logical_xor``."""
    return bind(LOGICAL_XOR, input, other)


def bitwise_not(input):
    """Bitwise NOT of an integer or bool tensor, elementwise, as ``torch.bitwise_not``."""
    return bind(BITWISE_NOT, input)


def bitwise_and(input, other):
    """Bitwise AND of integer or bool tensors, with broadcasting, as
    ``torch.bitwise_and``."""
    return bind(BITWISE_AND, input, other)


def bitwise_or(input, other):
    """Bitwise OR of integer or bool tensors, with broadcasting, as ``torch.bitwise_or``."""
    return bind(BITWISE_OR, input, other)


def bitwise_xor(input, other):
    """Bitwise XOR of integer or bool tensors, with broadcasting, as
    ``torch.bitwise_xor``."""
    return bind(BITWISE_XOR, input, other)


def eq(input, other):
    """``input == other`` elementwise with broadcasting (a bool tensor), as ``torch.eq``."""
    return bind(EQ, input, other)


def ne(input, other):
    """``input != other`` elementwise with broadcasting (a bool tensor), as ``torch.ne``."""
    return bind(NE, input, other)


def lt(input, other):
    """``input < other`` elementwise with broadcasting (a bool tensor), as ``torch.lt``."""
    return bind(LT, input, other)


def le(input, other):
    """``input <= other`` elementwise with broadcasting (a bool tensor), as ``torch.le``."""
    return bind(LE, input, other)


def gt(input, other):
    """``input > other`` elementwise with broadcasting (a bool tensor), as ``torch.gt``."""
    return bind(GT, input, other)


def ge(input, other):
    """``input >= other`` elementwise with broadcasting (a bool tensor), as ``torch.ge``."""
    return bind(GE, input, other)


less, less_equal, greater, greater_equal, not_equal = lt, le, gt, ge, ne


def where(condition, input=None, other=None):
    """``input`` where ``condition`` else ``other``; one-argument form is nonzero."""
    if input is None and other is None:
        return _indexing.nonzero(condition, as_tuple=True)
    return bind(WHERE, condition, input, other)


# Tensor methods beyond the core table in methods.py
METHODS = "clamp clip clamp_min clamp_max fmod trunc fix"


# ---------------------------------------------------------------- other names, in the registry
# each an alias of a registry op (its shape rule and samples), checked against
# PyTorch's function of the same name
for _name, _fn, _of in (("subtract", sub, "sub"), ("multiply", mul, "mul"),
                        ("divide", div, "div"), ("true_divide", div, "div"),
                        ("atan2", arctan2, "arctan2"), ("negative", neg, "neg"),
                        ("absolute", abs, "abs"), ("asin", arcsin, "arcsin"),
                        ("acos", arccos, "arccos"), ("atan", arctan, "arctan"),
                        ("fix", trunc, "trunc"), ("clip", clamp, "clamp"),
                        ("less", lt, "lt"), ("less_equal", le, "le"), ("greater", gt, "gt"),
                        ("greater_equal", ge, "ge"), ("not_equal", ne, "ne")):
    _alias(_fn, _name, _of)


def _clamp_one_infer(bound):
    def infer(x, value):
        return CLAMP.infer(x, **{bound: value}) if not hasattr(value, "shape") else \
            CLAMP_TENSOR.infer(x, *((value, None) if bound == "min" else (None, value)))
    return infer


def _clamp_one_samples(bound):
    def samples(dtype=np.float64):
        x = away_from(rand((3, 4), dtype, seed=1), (-0.5, 0.5)).astype(dtype)
        b = away_from(rand((4,), dtype, seed=2), (0.0,)).astype(dtype) * 0.3
        return [Sample((x, 0.5 if bound == "max" else -0.5), {}),
                Sample((x, b), {}),  # a tensor bound, broadcast
                Sample((np.arange(-3, 4), 1), {}, False)]
    return samples


for _bound, _fn in (("min", clamp_min), ("max", clamp_max)):
    _composite(_fn, infer=_clamp_one_infer(_bound), samples=_clamp_one_samples(_bound),
               args=("input", _bound),
               error_samples=(lambda: [((rand((3, 4)), rand((5,))), {}, ValueError),
                                       ((rand((3, 4)), "a"), {}, TypeError)]),
               torch=(lambda t: lambda torch, x, v: getattr(torch, t)(x, v))(_fn.__name__))
del _name, _fn, _of, _bound
