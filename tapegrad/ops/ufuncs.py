"""Pointwise functions beyond the core elementwise ops: composites of them (``acosh``,
``lerp``, ``xlogy``, ``hypot``...), so each records, differentiates at every order,
batches and forward-differentiates through the ops it is made of; and comparisons and
integer functions with no gradient (``signbit``, ``gcd``, ``isin``, ``frexp``...)
declared as plain NumPy kernels."""
import math
from collections import namedtuple

import numpy as np

from .. import devices as _devices, dtypes as _dt
from ..dispatch import bind
from ..tensor import Tensor
from . import _vmap, creation as C, elementwise as E
from ._decl import (
    S,
    Sample,
    TensorSpec,
    away_from,
    bad_broadcast,
    decl,
    elementwise_infer,
    floating,
    op_error,
    rand,
    register,
)

__all__ = ["acosh", "arccosh", "asinh", "arcsinh", "atanh", "arctanh", "addcdiv", "addcmul",
           "copysign", "deg2rad", "rad2deg", "erfc", "float_power", "frac", "hypot", "lerp",
           "logaddexp2", "logit", "nan_to_num", "positive", "sgn", "xlogy", "sinc", "heaviside",
           "ldexp", "signbit", "nextafter", "gcd", "lcm", "bitwise_left_shift",
           "bitwise_right_shift", "isin", "isposinf", "isneginf", "isreal", "isclose", "fmax",
           "fmin", "frexp"]


def _unary(fn, low=-2.0, high=2.0, avoid=(), name=None, torch=None, widen=False):
    def samples(dtype=np.float64):
        out = []
        for k, s in enumerate(((3, 4), (), (2, 0, 3))):
            a = rand(s, dtype, low, high, seed=k)
            if avoid:
                a = away_from(a, avoid).astype(dtype)
            out.append(S(a))
        return out
    return decl(fn, samples, name=name, infer=elementwise_infer(name or fn.__name__, "float"),
                torch=torch, widen=widen)


def _binary(fn, low=-2.0, high=2.0, low2=None, high2=None, name=None, promote="float",
            torch=None, args=("input", "other"), differentiable=True, widen=False):
    low2 = low if low2 is None else low2
    high2 = high if high2 is None else high2

    def samples(dtype=np.float64):
        pairs = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,))]
        return [S(rand(a, dtype, low, high, seed=k), rand(b, dtype, low2, high2, seed=k + 9))
                for k, (a, b) in enumerate(pairs)]
    return decl(fn, samples, name=name, args=args, torch=torch,
                infer=elementwise_infer(name or fn.__name__, promote),
                errors=bad_broadcast(), differentiable=differentiable, widen=widen)


# ------------------------------------------------------------------ inverse hyperbolics
def acosh(input):
    """``log(x + sqrt(x*x - 1))``, for x >= 1 (NaN below)."""
    x = floating(input)
    return E.log(x + E.sqrt(x * x - 1))


def asinh(input):
    """``sign(x) log(|x| + sqrt(x*x + 1))`` (exact for negative x too)."""
    x = floating(input)
    a = E.abs(x)
    return E.sign(x) * E.log(a + E.sqrt(a * a + 1))


def atanh(input):
    """``(log1p(x) - log1p(-x)) / 2``, for |x| < 1."""
    x = floating(input)
    return 0.5 * (E.log1p(x) - E.log1p(-x))


def arccosh(input):
    """Alias of ``acosh``."""
    return acosh(input)


def arcsinh(input):
    """Alias of ``asinh``."""
    return asinh(input)


def arctanh(input):
    """Alias of ``atanh``."""
    return atanh(input)


_unary(acosh, 1.2, 4.0)


_unary(asinh, -3.0, 3.0, avoid=(0.0,))


_unary(atanh, -0.9, 0.9)


_unary(arccosh, 1.2, 4.0)


_unary(arcsinh, -3.0, 3.0, avoid=(0.0,))


_unary(arctanh, -0.9, 0.9)


# ------------------------------------------------------------------ arithmetic
def addcdiv(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 / tensor2``."""
    if not (input.dtype.is_floating_point or getattr(tensor1, "dtype",
                                                     _dt.float32).is_floating_point):
        raise op_error("addcdiv", "integer division with addcdiv is no longer supported",
                       RuntimeError)
    return input + value * (tensor1 / tensor2)


def addcmul(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2``."""
    return input + value * (tensor1 * tensor2)


def _addc_samples(low3):
    def samples(dtype=np.float64):
        return [S(rand((3, 4), dtype, seed=1), rand((3, 4), dtype, seed=2),
                  rand((3, 4), dtype, low3, 2.0, seed=3), value=0.5),
                S(rand((3, 1), dtype, seed=4), rand((1, 4), dtype, seed=5),
                  rand((4,), dtype, low3, 2.0, seed=6))]
    return samples


for _f in (addcdiv, addcmul):
    decl(_f, _addc_samples(0.5 if _f is addcdiv else -2.0),
         args=("input", "tensor1", "tensor2"), autocast={"cuda": "promote"},
         infer=elementwise_infer(_f.__name__, "same"),
         errors=lambda: [((rand((3, 4)), rand((5,)), rand((3, 4))), {}, ValueError)])


def copysign(input, other):
    """``|input|`` with the sign of ``other`` (negative where ``other < 0``)."""
    x = floating(input)
    a = E.abs(x)
    if not hasattr(other, "shape"):
        return -a if math.copysign(1.0, other) < 0 else a
    return E.where(other < 0, -a, a)


_binary(copysign, low2=-2.0, high2=2.0, low=0.3, widen=True)


def deg2rad(input):
    """Degrees to radians."""
    return floating(input) * (math.pi / 180.0)


def rad2deg(input):
    """Radians to degrees."""
    return floating(input) * (180.0 / math.pi)


_unary(deg2rad, -200.0, 200.0)


_unary(rad2deg)


def erfc(input):
    """``1 - erf(x)``."""
    return 1.0 - E.erf(floating(input))


_unary(erfc)


def float_power(input, exponent):
    """``input ** exponent`` in float64 (PyTorch's rule for this function)."""
    if isinstance(exponent, np.ndarray):
        exponent = C.tensor(exponent)
    e = exponent.double() if hasattr(exponent, "shape") else exponent
    if not hasattr(input, "shape"):
        return E.pow(float(input), e)
    return E.pow(input.double(), e)


decl(float_power, lambda dtype=np.float64: [
        S(rand((3, 4), dtype, 0.5, 2.0, seed=1), rand((3, 4), dtype, seed=2)),
        S(rand((2, 3), dtype, 0.5, 2.0, seed=3), 2.5)],
     args=("input", "exponent"), torch=lambda T, x, e: T.float_power(x, e),
     infer=lambda x, e: TensorSpec(np.broadcast_shapes(tuple(x.shape),
                                                       tuple(getattr(e, "shape", ()))),
                                   np.dtype(np.float64)),
     errors=lambda: [((rand((3, 4)), rand((5,))), {}, ValueError)])


def frac(input):
    """``x - trunc(x)`` (floating point only, as PyTorch)."""
    if not input.dtype.is_floating_point:
        raise op_error("frac", f"not implemented for {input.dtype} (a floating point input is "
                               f"expected)", NotImplementedError)
    return input - E.trunc(input)


_unary(frac, -3.0, 3.0, avoid=(-2.0, -1.0, 0.0, 1.0, 2.0))


def hypot(input, other):
    """``sqrt(input**2 + other**2)``."""
    return E.sqrt(input * input + other * other)


_binary(hypot, 0.3, 2.0, promote="same")


def lerp(input, end, weight):
    """``input + weight * (end - input)``."""
    for what, v in (("end", end), ("weight", weight)):
        if hasattr(v, "dtype") and v.dtype != input.dtype:
            raise op_error("lerp", f"expected dtype {input.dtype} for `{what}` but got dtype "
                                   f"{v.dtype}", RuntimeError)
    return input + weight * (end - input)


decl(lerp, lambda dtype=np.float64: [
        S(rand((3, 4), dtype, seed=1), rand((3, 4), dtype, seed=2), 0.3),
        S(rand((3, 4), dtype, seed=3), rand((4,), dtype, seed=4),
          rand((3, 1), dtype, 0, 1, seed=5))],
     args=("input", "end", "weight"), infer=elementwise_infer("lerp", "same"), widen=True,
     errors=lambda: [((rand((3, 4)), rand((5,)), 0.5), {}, ValueError)])


_LN2 = math.log(2.0)


def logaddexp2(input, other):
    """``log2(2**input + 2**other)``."""
    return E.logaddexp(floating(input) * _LN2, floating(other) * _LN2) * (1.0 / _LN2)


_binary(logaddexp2, promote="same")


def logit(input, eps=None):
    """``log(p / (1 - p))``, with ``p`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given."""
    p = floating(input)
    if eps is not None:
        p = E.clamp(p, eps, 1.0 - eps)
    return E.log(p / (1.0 - p))


decl(logit, lambda dtype=np.float64: [S(rand((3, 4), dtype, 0.1, 0.9, seed=1)),
                                      S(rand((2, 3), dtype, 0.1, 0.9, seed=2), eps=0.05),
                                      S(rand((0, 2), dtype, 0.1, 0.9, seed=3))],
     infer=elementwise_infer("logit", "float"))


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """NaN to ``nan``, +inf to ``posinf`` (the dtype's largest by default), -inf to
    ``neginf`` (its lowest)."""
    if not input.dtype.is_floating_point:
        return input.clone()
    info = np.finfo(str(input.dtype).rsplit(".", 1)[-1])
    hi = float(info.max) if posinf is None else posinf
    lo = float(info.min) if neginf is None else neginf
    out = E.where(E.isnan(input), nan, input)
    out = E.where(input == math.inf, hi, out)
    return E.where(input == -math.inf, lo, out)


def _nan_samples(dtype=np.float64):
    a = rand((3, 4), dtype, seed=1)
    a[0, 0], a[1, 1], a[2, 2] = np.nan, np.inf, -np.inf
    return [Sample((a,), {}, False), S(rand((2, 3), dtype, seed=2)),
            Sample((a,), {"nan": 1.5, "posinf": 9.0, "neginf": -9.0}, False)]


decl(nan_to_num, _nan_samples, infer=elementwise_infer("nan_to_num", "same"))


def positive(input):
    """``input`` itself (PyTorch refuses bool)."""
    if input.dtype == _dt.bool:
        raise op_error("positive", "The `+` operator, on a bool tensor is not supported.",
                       RuntimeError)
    return input


decl(positive, lambda dtype=np.float64: [S(rand((3, 4), dtype))],
     infer=elementwise_infer("positive", "same"))


def sgn(input):
    """The sign (``sign`` for real tensors)."""
    return E.sign(input)


_unary(sgn, avoid=(0.0,), torch=lambda T, x: T.sign(x))  # torch.sgn's gradient: a ZeroTensor


def xlogy(input, other):
    """``input * log(other)``, 0 where ``input`` is 0 (NaN ``other`` gives NaN)."""
    x = floating(input)
    y = floating(other)
    if not hasattr(y, "shape"):
        y = x * 0 + y
    if not hasattr(x, "shape"):
        x = y * 0 + x
    zero = (x == 0) & ~E.isnan(y)
    safe = E.where(zero, 1.0, y)
    return E.where(zero, 0.0, x * E.log(safe))


_binary(xlogy, -2.0, 2.0, 0.2, 2.0)


def sinc(input):
    """``sin(pi x) / (pi x)``, 1 at 0."""
    x = floating(input)
    zero = x == 0
    safe = E.where(zero, 1.0, x) * math.pi
    return E.where(zero, 1.0, E.sin(safe) / safe)


_unary(sinc, avoid=(0.0,), widen=True)


def heaviside(input, values):
    """0 where ``input < 0``, ``values`` where it is 0, 1 where it is positive."""
    if hasattr(values, "dtype") and values.dtype != input.dtype:
        raise op_error("heaviside", f"heaviside is not yet implemented for tensors with "
                                    f"different dtypes ({input.dtype}, {values.dtype})",
                       RuntimeError)
    input = input.detach()
    values = values.detach() if hasattr(values, "detach") else values
    pos = (input > 0).to(input.dtype)
    return E.where(input == 0, values, pos)


_binary(heaviside, differentiable=False, args=("input", "values"), promote="same",
        torch=lambda T, x, v: T.heaviside(x, v))


def ldexp(input, other):
    """``input * 2**other``."""
    x = floating(input)
    if hasattr(other, "shape") and other.dtype != x.dtype:
        other = other.to(x.dtype)
    return x * E.exp2(other)


decl(ldexp,
     lambda dtype=np.float64: [S(rand((3, 4), dtype, seed=1), np.arange(12).reshape(3, 4) % 5),
                                      S(rand((3, 4), dtype, seed=2), rand((4,), dtype, seed=3))],
     args=("input", "other"), infer=elementwise_infer("ldexp", "float"),
     errors=bad_broadcast())


# ------------------------------------------------------------------ no gradient: NumPy kernels
def _plain_op(name, kernel, samples, out_dtype=None, promote="same", args=("x", "other"),
              torch=None, errors=None, onnx=None):
    """A registered op without a gradient (comparisons, integer functions)."""
    return register(name=name, kernel=kernel, args=args, differentiable=False,
                    infer=elementwise_infer(name, promote, out_dtype),
                    broadcasting=len(args) > 1, promote=promote, samples=samples, onnx=onnx,
                    torch=torch or (lambda T, *a, **k: getattr(T, name)(*a, **k)),
                    error_samples=errors or (bad_broadcast() if len(args) > 1 else
                                             (lambda: [(("not a tensor",), {}, TypeError)])))


def _ints(shape, lo=-20, hi=20, seed=0):
    return np.random.default_rng(seed).integers(lo, hi, shape)


def _onnx_signbit(b, st):
    """x < 0, or x = -0.0 (1 / x = -inf)."""
    x, dt = b.input(st, 0), b.dtype(st, 0)
    zero = b.const(np.zeros((), dt))
    neg = b.node("Less", [x, zero])
    if dt.kind != "f":
        b.node("Identity", [neg], [b.output(st)])
        return
    negzero = b.node("And", [b.node("Equal", [x, zero]),
                             b.node("Less", [b.node("Reciprocal", [x]), zero])])
    b.node("Or", [neg, negzero], [b.output(st)])


SIGNBIT = _plain_op("signbit", np.signbit, lambda dtype=np.float64: [
    S(np.array([-1.5, -0.0, 0.0, 2.0, -np.inf], dtype=dtype)), S(rand((3, 4), dtype))],
    out_dtype=np.bool_, promote="none", args=("x",), onnx=_onnx_signbit)


NEXTAFTER = _plain_op("nextafter", np.nextafter, lambda dtype=np.float64: [
    S(rand((3, 4), dtype, seed=1), rand((3, 4), dtype, seed=2)),
    S(rand((3, 1), dtype, seed=3), rand((1, 4), dtype, seed=4))])


GCD = _plain_op("gcd", np.gcd,
                lambda dtype=np.float64: [S(_ints((3, 4), seed=1), _ints((3, 4), seed=2)),
                                                         S(_ints((3, 1), seed=3),
                                                           _ints((4,), seed=4))])


LCM = _plain_op("lcm", np.lcm,
                lambda dtype=np.float64: [S(_ints((3, 4), 1, 30, seed=1),
                                            _ints((3, 4), 1, 30, seed=2))])


def _lshift(x, other, out=None):
    if out is not None:
        return np.left_shift(x, other, out=out)
    return np.left_shift(x, other).astype(np.result_type(x, other), copy=False)


def _rshift(x, other, out=None):
    if out is not None:
        return np.right_shift(x, other, out=out)
    return np.right_shift(x, other).astype(np.result_type(x, other), copy=False)


LSHIFT = _plain_op("bitwise_left_shift", _lshift, lambda dtype=np.float64: [
    S(_ints((3, 4), seed=1), _ints((3, 4), 0, 6, seed=2))])


RSHIFT = _plain_op("bitwise_right_shift", _rshift, lambda dtype=np.float64: [
    S(_ints((3, 4), -100, 100, seed=1), _ints((3, 4), 0, 6, seed=2))])


def _check_ints(name, *xs):
    for v in xs:
        if isinstance(v, Tensor) and v.dtype.np.kind not in "biu":
            raise op_error(name, f"not implemented for {v.dtype} (an integer tensor is "
                                 f"expected)", RuntimeError)


def signbit(input):
    """True where the sign bit is set (negative numbers, -0.0)."""
    return bind(SIGNBIT, input)


def nextafter(input, other):
    """The next float after ``input`` towards ``other``."""
    return bind(NEXTAFTER, input, other)


def gcd(input, other):
    """Greatest common divisor of integer tensors."""
    _check_ints("gcd", input, other)
    return bind(GCD, input, other)


def lcm(input, other):
    """Least common multiple of integer tensors."""
    _check_ints("lcm", input, other)
    return bind(LCM, input, other)


def bitwise_left_shift(input, other):
    """``input << other`` (integer tensors)."""
    _check_ints("bitwise_left_shift", input, other)
    return bind(LSHIFT, input, other)


def bitwise_right_shift(input, other):
    """``input >> other`` (integer tensors, arithmetic shift)."""
    _check_ints("bitwise_right_shift", input, other)
    return bind(RSHIFT, input, other)


def _isin_kernel(elements, test_elements, assume_unique=False, invert=False):
    return np.isin(elements, test_elements, invert=invert)


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_isin(b, st):
    dt = np.result_type(b.dtype(st, 0), b.dtype(st, 1))
    x, t = b.input(st, 0, dt), b.input(st, 1, dt)
    eq = b.node("Equal", [b.unsqueeze(x, [-1]), b.reshape(t, [-1])])
    hit = b.reduce("ReduceMax", b.cast(eq, np.int32), [-1], 0)
    hit = b.cast(hit, np.bool_)
    if st.attrs.get("invert"):
        hit = b.node("Not", [hit])
    b.node("Identity", [hit], [b.output(st)])


ISIN = register(name="isin", onnx=_onnx_isin, kernel=_isin_kernel,
                args=("elements", "test_elements"),
                differentiable=False, promote="same",
                infer=lambda e, t, **k: TensorSpec(tuple(e.shape), np.dtype(np.bool_)),
                samples=lambda dtype=np.float64: [S(_ints((3, 4), 0, 6, seed=1),
                                                    np.array([1, 2, 5])),
                                                  S(_ints((5,), 0, 6, seed=2), np.array([0, 3]),
                                                    invert=True)],
                torch=lambda T, e, t, **k: T.isin(e, t, **k),
                error_samples=lambda: [(("not a tensor", np.array([1])), {}, TypeError)])


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """True where an element of ``elements`` is in ``test_elements``."""
    if isinstance(test_elements, (int, float, bool)):
        test_elements = C.tensor(test_elements)
    if isinstance(elements, (int, float, bool)):
        elements = C.tensor(elements)
    return bind(ISIN, elements, test_elements, invert=bool(invert))


def isposinf(input):
    """True where ``input`` is +inf."""
    return input == math.inf


def isneginf(input):
    """True where ``input`` is -inf."""
    return input == -math.inf


def isreal(input):
    """True everywhere (tapegrad's tensors are real)."""
    return (input == input) | (input != input)


def _inf_samples(dtype=np.float64):
    return [S(np.array([1.0, np.inf, -np.inf, np.nan, 0.0], dtype=dtype)), S(rand((3, 4), dtype))]


for _f in (isposinf, isneginf, isreal):
    decl(_f, _inf_samples, differentiable=False,
         infer=elementwise_infer(_f.__name__, "same", np.bool_))


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``|input - other| <= atol + rtol * |other|`` elementwise (equal infinities
    close; NaN close to NaN only with ``equal_nan``)."""
    if hasattr(other, "dtype") and hasattr(input, "dtype") and other.dtype != input.dtype:
        raise op_error("isclose", f"{input.dtype} did not match {other.dtype}", RuntimeError)
    with np.errstate(invalid="ignore"):  # inf - inf
        finite = E.isfinite(input) & E.isfinite(other)
        close = (input == other) | (finite & (E.abs(input - other) <= atol + rtol * E.abs(other)))
        if equal_nan:
            close = close | (E.isnan(input) & E.isnan(other))
    return close


decl(isclose, lambda dtype=np.float64: [
        S(rand((3, 4), dtype, seed=1), rand((3, 4), dtype, seed=1) + 1e-7),
        S(np.array([1.0, np.nan, np.inf], dtype=dtype),
          np.array([1.1, np.nan, np.inf], dtype=dtype),
          rtol=0.2, equal_nan=True)],
     args=("input", "other"), differentiable=False,
     infer=elementwise_infer("isclose", "same", np.bool_), errors=bad_broadcast())


def fmax(input, other):
    """``maximum``, ignoring a NaN operand (NaN only where both are)."""
    return E.where(E.isnan(input), other, E.where(E.isnan(other), input, E.maximum(input, other)))


def fmin(input, other):
    """``minimum``, ignoring a NaN operand (NaN only where both are)."""
    return E.where(E.isnan(input), other, E.where(E.isnan(other), input, E.minimum(input, other)))


def _fm_samples(dtype=np.float64):
    a, b = rand((3, 4), dtype, seed=1), rand((3, 4), dtype, seed=2)
    a, b = np.broadcast_arrays(a, b)
    a = a.copy()
    close = np.abs(a - b) < 0.1
    a[close] = b[close] + 0.3
    n = a.copy()
    n[0, 0] = np.nan
    return [S(a, b), Sample((n, b), {}, False)]


for _f in (fmax, fmin):
    decl(_f, _fm_samples, args=("input", "other"), infer=elementwise_infer(_f.__name__, "same"),
         errors=bad_broadcast())


# ---------------------------------------------------------------- frexp
_frexp = namedtuple("frexp", ("mantissa", "exponent"))


def _frexp_infer(x):
    dt = np.dtype(x.dtype)
    if dt.kind != "f":
        raise op_error("frexp", f"torch.frexp() only supports floating-point dtypes, got "
                                f"{dt.name}", RuntimeError)
    return TensorSpec(tuple(x.shape), dt), TensorSpec(tuple(x.shape), np.dtype(np.int32))


def _frexp_kernel(x, out=None):
    xp = _devices.xp_of(x)
    if out is not None:  # (mantissa, exponent): NumPy's frexp writes both there
        xp.frexp(x, out=tuple(out))
        return tuple(out)
    m, e = xp.frexp(x)
    return m.astype(x.dtype), e.astype(np.int32)


FREXP = register(
    name="frexp", kernel=_frexp_kernel, infer=_frexp_infer, args=("x",), nout=2,
    differentiable=False, vmap=_vmap.leading,
    samples=lambda dtype=np.float64: [
        Sample((rand((3, 4), dtype, -100.0, 100.0, seed=1),), {}),
        Sample((np.array([0.0, -0.0, 1.0, 0.5, 3e-5, np.inf, -np.inf, np.nan], dtype),), {})],
    error_samples=lambda: [((np.arange(3),), {}, RuntimeError)],
    torch=lambda torch, x: torch.frexp(x))


def frexp(input):
    """``(mantissa, exponent)`` with ``input = mantissa * 2**exponent``, the mantissa in
    [0.5, 1) in magnitude (int32 exponent); no gradient."""
    return _frexp(*bind(FREXP, input))



del _f
