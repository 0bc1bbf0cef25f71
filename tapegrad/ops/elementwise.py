"""Elementwise ops: arithmetic, math functions, comparisons, logical ops.

Each op is one ``register(...)`` block. vjps use ``m`` (ctx.m, tapegrad itself) and
operators only, so they run on raw arrays when nothing records and differentiate
again when something does.
"""
import math

import numpy as np

from ..tensor import bind
from .. import devices as _devices
from ._decl import (register, Sample, elementwise_infer, unary_samples, binary_samples,
                    bad_broadcast, rand, away_from)

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_2_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _binary(name, kernel, vjp, saves=(), promote="same", expr=None, torch=None,
            samples=None, differentiable=True, out_dtype=None, jvp=None):
    return register(name=name, kernel=kernel, args=("x", "other"), vjp=vjp, saves=saves,
                    infer=elementwise_infer(name, promote, out_dtype), broadcasting=True,
                    promote=promote, expr=expr, torch=torch, jvp=jvp,
                    differentiable=differentiable,
                    samples=samples or binary_samples(), error_samples=bad_broadcast())


def _unary(name, kernel, vjp, saves=("x",), promote="float", expr=None, torch=None,
           samples=None, differentiable=True, out_dtype=None, jvp=None):
    return register(name=name, kernel=kernel, args=("x",), vjp=vjp, saves=saves,
                    infer=elementwise_infer(name, promote, out_dtype), promote=promote,
                    expr=expr, torch=torch, jvp=jvp, differentiable=differentiable,
                    samples=samples or unary_samples(),
                    error_samples=lambda: [(("not a tensor",), {}, TypeError)])


# ---------------------------------------------------------------- arithmetic
ADD = _binary("add", np.add, lambda ctx, g: (g, g), expr="x + other",
              jvp=lambda ctx, xt, ot: _tsum(xt, ot))
SUB = _binary("sub", np.subtract, lambda ctx, g: (g, -g), expr="x - other",
              jvp=lambda ctx, xt, ot: _tsum(xt, None if ot is None else -ot))


def _mul_vjp(ctx, g):
    x, other = ctx.inputs
    n = ctx.needs_input_grad
    return (g * other if n[0] else None, g * x if n[1] else None)


MUL = _binary("mul", np.multiply, _mul_vjp, saves=("x", "other"), expr="x * other",
              jvp=lambda ctx, xt, ot: _tsum(None if xt is None else xt * ctx.inputs[1],
                                            None if ot is None else ot * ctx.inputs[0]))


def _div_vjp(ctx, g):
    x, other = ctx.inputs
    gx = g / other
    return (gx if ctx.needs_input_grad[0] else None,
            -gx * x / other if ctx.needs_input_grad[1] else None)


DIV = _binary("div", np.true_divide, _div_vjp, saves=("x", "other"), promote="float",
              expr="x / other", samples=binary_samples(low2=0.5, high2=2.0),
              jvp=lambda ctx, xt, ot: _tsum(None if xt is None else xt / ctx.inputs[1],
                                            None if ot is None else
                                            -ot * ctx.inputs[0] / (ctx.inputs[1] * ctx.inputs[1])))


def _floor_divide(x, other):
    return np.floor_divide(x, other)


FLOOR_DIVIDE = _binary("floor_divide", _floor_divide, None, differentiable=False,
                       samples=binary_samples(low2=0.5, high2=2.0))


def _remainder_vjp(ctx, g):
    x, other = ctx.inputs
    return (g, -g * m_floor(ctx, x / other) if ctx.needs_input_grad[1] else None)


def m_floor(ctx, v):
    return ctx.m.floor(v)


REMAINDER = _binary("remainder", np.remainder, _remainder_vjp, saves=("x", "other"),
                    samples=binary_samples(low=0.1, high=3.0, low2=0.7, high2=0.9))


def _pow_kernel(x, other):
    if isinstance(other, int) and not isinstance(other, bool) and other < 0 \
            and hasattr(x, "dtype") and x.dtype.kind in "iu":
        raise ValueError("pow: integers to negative integer powers are not allowed")
    return np.power(x, other)


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
            gx = gx * 0
    if n[1]:
        out = ctx.out
        # d/dy x**y = x**y log x, taken as 0 where x == 0 and y >= 0 (as PyTorch)
        go = m.where((x == 0) & (other >= 0), 0.0, g * out * m.log(m.where(x == 0, 1.0, x)))
    return gx, go


POW = _binary("pow", _pow_kernel, _pow_vjp, saves=("x", "other", "out"), expr="pow(x, other)",
              samples=binary_samples(low=0.5, high=2.0, low2=-1.5, high2=2.0))


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
                  expr="maximum(x, other)", samples=binary_samples(avoid_diff=True))
MINIMUM = _binary("minimum", np.minimum, _maxmin_vjp(lambda x, o: x < o), saves=("x", "other"),
                  expr="minimum(x, other)", samples=binary_samples(avoid_diff=True))


def _atan2_vjp(ctx, g):
    x, other = ctx.inputs
    d = x * x + other * other
    return g * other / d, -g * x / d


ARCTAN2 = _binary("arctan2", np.arctan2, _atan2_vjp, saves=("x", "other"), promote="float",
                  expr="arctan2(x, other)", samples=binary_samples(low=0.5, high=2.0))


def _logaddexp_vjp(ctx, g):
    x, other = ctx.inputs
    out = ctx.out
    return g * ctx.m.exp(x - out), g * ctx.m.exp(other - out)


LOGADDEXP = _binary("logaddexp", np.logaddexp, _logaddexp_vjp, saves=("x", "other", "out"),
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


NEG = _u("neg", np.negative, lambda ctx, g: (-g,), saves=(), promote="same", expr="-x")
ABS = _u("abs", np.abs, lambda ctx, g: (g * ctx.m.sign(ctx.inputs[0]),), promote="same",
         expr="abs(x)", samples=unary_samples(avoid=(0.0,)))
SIGN = _u("sign", np.sign, lambda ctx, g: (g * 0,), saves=(), promote="same",
          samples=unary_samples(avoid=(0.0,)))
EXP = _u("exp", np.exp, lambda ctx, g: (g * ctx.out,), saves=("out",), expr="exp(x)")
EXP2 = _u("exp2", np.exp2, lambda ctx, g: (g * ctx.out * math.log(2.0),), saves=("out",),
          expr="exp2(x)")
EXPM1 = _u("expm1", np.expm1, lambda ctx, g: (g * (ctx.out + 1),), saves=("out",),
           expr="expm1(x)")
_pos = unary_samples(low=0.2, high=3.0)
LOG = _u("log", np.log, lambda ctx, g: (g / ctx.inputs[0],), expr="log(x)", samples=_pos)
LOG2 = _u("log2", np.log2, lambda ctx, g: (g / (ctx.inputs[0] * math.log(2.0)),),
          expr="log2(x)", samples=_pos)
LOG10 = _u("log10", np.log10, lambda ctx, g: (g / (ctx.inputs[0] * math.log(10.0)),),
           expr="log10(x)", samples=_pos)
LOG1P = _u("log1p", np.log1p, lambda ctx, g: (g / (ctx.inputs[0] + 1),), expr="log1p(x)",
           samples=unary_samples(low=-0.8, high=3.0))
SQRT = _u("sqrt", np.sqrt, lambda ctx, g: (g / (2 * ctx.out),), saves=("out",), expr="sqrt(x)",
          samples=_pos)


def _rsqrt(x):
    return 1 / np.sqrt(x)


RSQRT = _u("rsqrt", _rsqrt, lambda ctx, g: (-0.5 * g * ctx.out * ctx.out * ctx.out,),
           saves=("out",), expr="rsqrt(x)", samples=_pos)
SQUARE = _u("square", np.square, lambda ctx, g: (2 * g * ctx.inputs[0],), promote="same",
            expr="x * x")


def _reciprocal(x):
    return 1 / x


RECIPROCAL = _u("reciprocal", _reciprocal, lambda ctx, g: (-g * ctx.out * ctx.out,),
                saves=("out",), expr="1 / x", samples=_pos)
SIN = _u("sin", np.sin, lambda ctx, g: (g * ctx.m.cos(ctx.inputs[0]),), expr="sin(x)")
COS = _u("cos", np.cos, lambda ctx, g: (-g * ctx.m.sin(ctx.inputs[0]),), expr="cos(x)")
TAN = _u("tan", np.tan, lambda ctx, g: (g * (1 + ctx.out * ctx.out),), saves=("out",),
         expr="tan(x)", samples=unary_samples(low=-1.2, high=1.2))
_unit = unary_samples(low=-0.9, high=0.9)
ARCSIN = _u("arcsin", np.arcsin, lambda ctx, g: (g * ctx.m.rsqrt(1 - ctx.inputs[0] ** 2),),
            expr="arcsin(x)", samples=_unit)
ARCCOS = _u("arccos", np.arccos, lambda ctx, g: (-g * ctx.m.rsqrt(1 - ctx.inputs[0] ** 2),),
            expr="arccos(x)", samples=_unit)
ARCTAN = _u("arctan", np.arctan, lambda ctx, g: (g / (1 + ctx.inputs[0] ** 2),),
            expr="arctan(x)")
SINH = _u("sinh", np.sinh, lambda ctx, g: (g * ctx.m.cosh(ctx.inputs[0]),), expr="sinh(x)")
COSH = _u("cosh", np.cosh, lambda ctx, g: (g * ctx.m.sinh(ctx.inputs[0]),), expr="cosh(x)")
TANH = _u("tanh", np.tanh, lambda ctx, g: (g * (1 - ctx.out * ctx.out),), saves=("out",),
          expr="tanh(x)")


def _sigmoid(x):
    # stable for large |x|: 0.5 * (1 + tanh(x / 2))
    return 0.5 + 0.5 * np.tanh(0.5 * x)


SIGMOID = _u("sigmoid", _sigmoid, lambda ctx, g: (g * ctx.out * (1 - ctx.out),),
             saves=("out",), expr="sigmoid(x)")


def _relu(x):
    return np.maximum(x, 0) if x.dtype.kind != "b" else x.copy()


# NOTE: the gradient uses out > 0, so at x == 0 it is 0 (as PyTorch), not 1/2
RELU = _u("relu", _relu, lambda ctx, g: (ctx.m.where(ctx.out > 0, g, 0.0),), saves=("out",),
          promote="same", expr="maximum(x, 0)", samples=unary_samples(avoid=(0.0,)))


def _erf(x):
    return _devices.special("erf", x)


ERF = _u("erf", _erf, lambda ctx, g: (g * _2_OVER_SQRT_PI * ctx.m.exp(-ctx.inputs[0] ** 2),),
         expr="erf(x)")
_kink = unary_samples(low=-2.7, high=2.7, avoid=(-2.0, -1.0, 0.0, 1.0, 2.0))
FLOOR = _u("floor", np.floor, lambda ctx, g: (g * 0,), saves=(), promote="same", samples=_kink)
CEIL = _u("ceil", np.ceil, lambda ctx, g: (g * 0,), saves=(), promote="same", samples=_kink)


def _round(x, decimals=0):
    return np.round(x, decimals)


ROUND = _u("round", _round, lambda ctx, g: (g * 0,), saves=(), promote="same",
           samples=unary_samples(low=-2.7, high=2.7, avoid=(-2.5, -1.5, -0.5, 0.5, 1.5, 2.5)))

_cmp = {"differentiable": False, "out_dtype": np.bool_}
ISNAN = _u("isnan", np.isnan, None, saves=(), promote="none", **_cmp)
ISINF = _u("isinf", np.isinf, None, saves=(), promote="none", **_cmp)
ISFINITE = _u("isfinite", np.isfinite, None, saves=(), promote="none", **_cmp)
LOGICAL_NOT = _u("logical_not", np.logical_not, None, saves=(), promote="none", **_cmp)


def _bitwise_not(x):
    if x.dtype.kind == "f":
        raise TypeError("bitwise_not: only integer and bool tensors are supported, "
                        f"got {x.dtype}")
    return np.invert(x)


BITWISE_NOT = _u("bitwise_not", _bitwise_not, None, saves=(), promote="none",
                 differentiable=False,
                 samples=lambda dtype=None: [Sample((np.array([True, False]),), {}, False),
                                             Sample((np.arange(-3, 3),), {}, False)])

# ---------------------------------------------------------------- comparisons
_bcmp = {"differentiable": False, "out_dtype": np.bool_}
EQ = _binary("eq", np.equal, None, **_bcmp)
NE = _binary("ne", np.not_equal, None, **_bcmp)
LT = _binary("lt", np.less, None, **_bcmp)
LE = _binary("le", np.less_equal, None, **_bcmp)
GT = _binary("gt", np.greater, None, **_bcmp)
GE = _binary("ge", np.greater_equal, None, **_bcmp)
LOGICAL_AND = _binary("logical_and", np.logical_and, None, **_bcmp)
LOGICAL_OR = _binary("logical_or", np.logical_or, None, **_bcmp)
LOGICAL_XOR = _binary("logical_xor", np.logical_xor, None, **_bcmp)


def _bitwise(fn, name):
    def kernel(x, other):
        for v in (x, other):
            if getattr(v, "dtype", np.dtype(int)).kind == "f" or isinstance(v, float):
                raise TypeError(f"{name}: only integer and bool tensors are supported")
        return fn(x, other)
    return kernel


_int_samples = lambda dtype=None: [Sample((np.array([True, False, True]), np.array([True, True, False])), {}, False),
                                   Sample((np.arange(6).reshape(2, 3), np.arange(3)), {}, False)]
BITWISE_AND = _binary("bitwise_and", _bitwise(np.bitwise_and, "bitwise_and"), None,
                      differentiable=False, samples=_int_samples)
BITWISE_OR = _binary("bitwise_or", _bitwise(np.bitwise_or, "bitwise_or"), None,
                     differentiable=False, samples=_int_samples)
BITWISE_XOR = _binary("bitwise_xor", _bitwise(np.bitwise_xor, "bitwise_xor"), None,
                      differentiable=False, samples=_int_samples)


# ---------------------------------------------------------------- where
def _where_infer(cond, x, other):
    from .._util import broadcast_shapes
    shapes = [s.shape for s in (cond, x, other) if hasattr(s, "shape")]
    shape = broadcast_shapes("where", *shapes)
    inner = elementwise_infer("where")(x, other)
    if hasattr(cond, "dtype") and np.dtype(cond.dtype) != np.bool_:
        raise TypeError(f"where: condition must be a bool tensor, got {np.dtype(cond.dtype)}")
    return type(inner)(shape, inner.dtype)


def _where_kernel(cond, x, other):
    if hasattr(cond, "dtype") and cond.dtype != np.bool_:
        raise TypeError("where: condition must be bool")
    return np.where(cond, x, other)


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


WHERE = register(name="where", kernel=_where_kernel, args=("condition", "x", "other"),
                 vjp=_where_vjp, saves=("condition",), infer=_where_infer, broadcasting=True,
                 promote="none", expr="where(condition, x, other)", samples=_where_samples,
                 error_samples=lambda: [((rand((3,)) > 0, rand((3, 4)), rand((3, 4))), {},
                                         ValueError)])


# ---------------------------------------------------------------- public functions
def add(input, other, *, alpha=1):
    """``input + alpha * other`` with broadcasting."""
    if alpha != 1:
        other = mul(other, alpha)
    return bind(ADD, input, other)


def sub(input, other, *, alpha=1):
    """``input - alpha * other`` with broadcasting."""
    if alpha != 1:
        other = mul(other, alpha)
    return bind(SUB, input, other)


subtract = sub


def mul(input, other):
    """Elementwise product with broadcasting."""
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


def floor_divide(input, other):
    return bind(FLOOR_DIVIDE, input, other)


def remainder(input, other):
    return bind(REMAINDER, input, other)


fmod_like_remainder = remainder


def pow(input, exponent):
    """``input ** exponent``; tensor or scalar exponents."""
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool):
        if exponent == 2 and hasattr(input, "_data"):
            return bind(MUL, input, input)
    return bind(POW, input, exponent)


def maximum(input, other):
    return bind(MAXIMUM, input, other)


def minimum(input, other):
    return bind(MINIMUM, input, other)


def arctan2(input, other):
    return bind(ARCTAN2, input, other)


atan2 = arctan2


def logaddexp(input, other):
    return bind(LOGADDEXP, input, other)


def neg(input):
    return bind(NEG, input)


negative = neg


def abs(input):  # noqa: A001
    return bind(ABS, input)


absolute = abs


def sign(input):
    return bind(SIGN, input)


def exp(input):
    return bind(EXP, input)


def exp2(input):
    return bind(EXP2, input)


def expm1(input):
    return bind(EXPM1, input)


def log(input):
    return bind(LOG, input)


def log2(input):
    return bind(LOG2, input)


def log10(input):
    return bind(LOG10, input)


def log1p(input):
    return bind(LOG1P, input)


def sqrt(input):
    return bind(SQRT, input)


def rsqrt(input):
    return bind(RSQRT, input)


def square(input):
    return bind(SQUARE, input)


def reciprocal(input):
    return bind(RECIPROCAL, input)


def sin(input):
    return bind(SIN, input)


def cos(input):
    return bind(COS, input)


def tan(input):
    return bind(TAN, input)


def arcsin(input):
    return bind(ARCSIN, input)


def arccos(input):
    return bind(ARCCOS, input)


def arctan(input):
    return bind(ARCTAN, input)


asin, acos, atan = arcsin, arccos, arctan


def sinh(input):
    return bind(SINH, input)


def cosh(input):
    return bind(COSH, input)


def tanh(input):
    return bind(TANH, input)


def sigmoid(input):
    return bind(SIGMOID, input)


def relu(input, inplace=False):
    return bind(RELU, input)


def erf(input):
    return bind(ERF, input)


def floor(input):
    return bind(FLOOR, input)


def ceil(input):
    return bind(CEIL, input)


def round(input, *, decimals=0):  # noqa: A001
    return bind(ROUND, input, decimals=decimals) if decimals else bind(ROUND, input)


def isnan(input):
    return bind(ISNAN, input)


def isinf(input):
    return bind(ISINF, input)


def isfinite(input):
    return bind(ISFINITE, input)


def logical_not(input):
    return bind(LOGICAL_NOT, input)


def logical_and(input, other):
    return bind(LOGICAL_AND, input, other)


def logical_or(input, other):
    return bind(LOGICAL_OR, input, other)


def logical_xor(input, other):
    return bind(LOGICAL_XOR, input, other)


def bitwise_not(input):
    return bind(BITWISE_NOT, input)


def bitwise_and(input, other):
    return bind(BITWISE_AND, input, other)


def bitwise_or(input, other):
    return bind(BITWISE_OR, input, other)


def bitwise_xor(input, other):
    return bind(BITWISE_XOR, input, other)


def eq(input, other):
    return bind(EQ, input, other)


def ne(input, other):
    return bind(NE, input, other)


def lt(input, other):
    return bind(LT, input, other)


def le(input, other):
    return bind(LE, input, other)


def gt(input, other):
    return bind(GT, input, other)


def ge(input, other):
    return bind(GE, input, other)


less, less_equal, greater, greater_equal, equal_elementwise, not_equal = lt, le, gt, ge, eq, ne


def where(condition, input=None, other=None):
    """``input`` where ``condition`` else ``other``; one-argument form is nonzero."""
    if input is None and other is None:
        from . import indexing
        return indexing.nonzero(condition, as_tuple=True)
    return bind(WHERE, condition, input, other)
