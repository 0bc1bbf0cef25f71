"""More of PyTorch's pointwise special functions (issue 17's census, third part):
``i0`` (NumPy's; its derivative ``I1``, the registry op ``special_i1``, is summed
from its power series), ``erfinv`` (a registry op: Newton steps from Giles' approximation, a Numba kernel in
``devices/cpu_kernels/special.py``; its derivative ``sqrt(pi)/2 exp(erfinv(x)^2)``
is written with ops, so it differentiates again), ``mvlgamma`` (a composite of
``lgamma``), ``frexp`` (no gradient, as PyTorch) and ``gradient`` (central
differences along each dim, a composite of slicing: differentiable)."""
import math
from collections import namedtuple

import numpy as np

from .. import devices as _devices
from .. import dtypes as _dt
from .._util import normalize_dim, op_error
from ..dispatch import bind
from ..ops_registry.rules import diagonal as _diagonal
from ._decl import register, Sample, TensorSpec, rand
from .pointwise2 import decl, S, floating
from . import _vmap, shape as SH, special as SP

__all__ = ["erfinv", "mvlgamma", "frexp", "gradient", "i0", "igamma", "igammac"]

_SQRT_PI_2 = math.sqrt(math.pi) / 2


# ---------------------------------------------------------------- erfinv
def _erfinv_infer(x):
    dt = np.dtype(x.dtype)
    if dt.kind == "b":
        raise op_error("erfinv", f"not implemented for {dt.name} tensors", NotImplementedError)
    return TensorSpec(tuple(x.shape), dt if dt.kind == "f" else np.dtype(np.float32))


def _erfinv_kernel(x, out=None):
    if x.dtype.kind != "f":  # an integer input: the default float, as the shape rule
        x = x.astype(_dt.default_float_np())
    with np.errstate(all="ignore"):
        return _devices.special("erfinv", x, out=out)


ERFINV = register(
    name="erfinv", kernel=_erfinv_kernel, infer=_erfinv_infer, args=("x",), saves=("out",),
    vjp=lambda ctx, g: (g * _SQRT_PI_2 * ctx.m.exp(ctx.out * ctx.out),), jvp=_diagonal,
    vmap=_vmap.leading, promote="float",
    samples=lambda dtype=np.float64: [
        Sample((rand((3, 4), dtype, -0.95, 0.95, seed=1),), {}),
        Sample((rand((), dtype, -0.5, 0.5, seed=2),), {}),
        Sample((rand((2, 0), dtype, seed=3),), {}),
        Sample((np.array([-1.0, 1.0, 1.5, 0.0, 0.9999], dtype),), {}, False)],
    error_samples=lambda: [(("not a tensor",), {}, TypeError)],
    torch=lambda torch, x: torch.erfinv(x))


def erfinv(input):
    """The inverse of ``erf`` on (-1, 1) (+-inf at +-1, NaN outside)."""
    return bind(ERFINV, input)


# ---------------------------------------------------------------- mvlgamma
def mvlgamma(input, p):
    """The multivariate log-gamma of dimension ``p``:
    ``p (p - 1) / 4 log(pi) + sum_{i < p} lgamma(input - i / 2)``."""
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise op_error("mvlgamma", f"p has to be greater than or equal to 1, got {p!r}",
                       RuntimeError)
    if input.dtype.name == "bool":
        raise op_error("mvlgamma", "The input tensor may not be a boolean tensor.",
                       RuntimeError)
    # (no domain check, as PyTorch 2: below (p - 1) / 2 it is lgamma's continuation)
    x = floating(input)
    out = SP.lgamma(x)
    for i in range(1, p):
        out = out + SP.lgamma(x - i / 2)
    return out + p * (p - 1) / 4 * math.log(math.pi)


decl(mvlgamma, lambda dtype=np.float64: [S(rand((3, 4), dtype, 1.6, 4.0, seed=1), 2),
                                         S(rand((5,), dtype, 0.2, 3.0, seed=2), 1),
                                         S(rand((2, 3), dtype, 2.1, 5.0, seed=3), 4)],
     infer=lambda x, p: TensorSpec(tuple(x.shape), np.dtype(x.dtype) if np.dtype(
         x.dtype).kind == "f" else _dt.default_float_np()),
     errors=lambda: [((np.array([True]), 2), {}, RuntimeError),
                     ((rand((3,)), 0), {}, RuntimeError)],
     torch=lambda torch, x, p: torch.mvlgamma(x, p))


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


# ---------------------------------------------------------------- gradient
def _spacings(name, spacing, dims):
    if isinstance(spacing, (int, float)) and not isinstance(spacing, bool):
        return [float(spacing)] * len(dims)
    if isinstance(spacing, (list, tuple)) and all(
            isinstance(s, (int, float)) and not isinstance(s, bool) for s in spacing):
        if len(spacing) != len(dims):
            raise op_error(name, f"torch.gradient expected spacing to be unspecified, a "
                                 f"scalar or a list of length {len(dims)} (the number of "
                                 f"dims), got a list of length {len(spacing)}", RuntimeError)
        return [float(s) for s in spacing]
    raise op_error(name, "spacing must be a number or a list of numbers (coordinate "
                         "tensors are not supported)", NotImplementedError)


def _along(x, d, start, stop):
    idx = [slice(None)] * x.ndim
    idx[d] = slice(start, stop)
    return x[tuple(idx)]


def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """The derivative of ``input`` sampled on a uniform grid, along each of ``dim``
    (every dim by default): central differences inside, one-sided differences of
    order ``edge_order`` (1 or 2) at the edges; a tuple, one tensor per dim."""
    name = "gradient"
    if edge_order not in (1, 2):
        raise op_error(name, f"torch.gradient only supports edge_order=1 and edge_order=2, "
                             f"got {edge_order}", RuntimeError)
    if input.ndim == 0:
        raise op_error(name, "torch.gradient expected each tensor to be at least 1-D",
                       RuntimeError)
    if dim is None:
        dims = list(range(input.ndim))
    elif isinstance(dim, (int, np.integer)):
        dims = [normalize_dim(name, dim, input.ndim)]
    else:
        dims = [normalize_dim(name, d, input.ndim) for d in dim]
    if input.dtype.name == "bool":
        raise op_error(name, "torch.gradient does not support bool tensors", RuntimeError)
    hs = _spacings(name, spacing, dims)
    x = floating(input)
    out = []
    for d, h in zip(dims, hs):
        n = x.shape[d]
        if n < edge_order + 1:
            raise op_error(name, f"torch.gradient expected each dimension size to be at "
                                 f"least edge_order+1, got size {n} at dim {d}",
                           RuntimeError)
        mid = (_along(x, d, 2, None) - _along(x, d, 0, n - 2)) / (2 * h)
        if edge_order == 1:
            first = (_along(x, d, 1, 2) - _along(x, d, 0, 1)) / h
            last = (_along(x, d, n - 1, n) - _along(x, d, n - 2, n - 1)) / h
        else:
            first = (-1.5 * _along(x, d, 0, 1) + 2 * _along(x, d, 1, 2)
                     - 0.5 * _along(x, d, 2, 3)) / h
            last = (0.5 * _along(x, d, n - 3, n - 2) - 2 * _along(x, d, n - 2, n - 1)
                    + 1.5 * _along(x, d, n - 1, n)) / h
        out.append(SH.cat([first, mid, last], d))
    return tuple(out)


decl(gradient, lambda dtype=np.float64: [
         S(rand((5,), dtype, seed=1)),
         S(rand((3, 4), dtype, seed=2), spacing=0.5),
         S(rand((4, 5), dtype, seed=3), spacing=[2.0], dim=1, edge_order=2),
         S(rand((3, 4, 3), dtype, seed=4), dim=(0, 2), spacing=[1.0, 0.25])],
     nout=2, errors=lambda: [((rand((3, 4)),), {"edge_order": 3}, RuntimeError),
                             ((rand((1, 4)),), {"dim": 0}, RuntimeError)])


# ---------------------------------------------------------------- i0 (and i1, its derivative)
def _float_kernel_input(x):
    return x if x.dtype.kind == "f" else x.astype(_dt.default_float_np())


def _i0_kernel(x):
    # (no out=: NumPy's i0 and the I1 series below are passes over arrays, with
    # temporaries; as compiled per-element loops writing into out they ran 1.5-3.5x
    # slower)
    x = _float_kernel_input(x)
    xp = _devices.xp_of(x)
    with np.errstate(over="ignore"):  # inf beyond about 713, as PyTorch
        return xp.i0(x).astype(x.dtype)


def _i1_series(x):
    """I1 by its power series ``sum (x/2)^(2k+1) / (k! (k+1)!)``: positive terms, summed
    in float64 to rounding (as many terms as |x| needs, about |x| + 40)."""
    xp = _devices.xp_of(x)
    a = xp.abs(x.astype(np.float64))
    h = a / 2
    y = h * h
    term = h.copy()
    s = h.copy()
    k = 0
    with np.errstate(over="ignore", invalid="ignore"):
        while True:
            k += 1
            term = term * y / (k * (k + 1))
            s = s + term
            live = term > 1e-17 * s
            if not bool(live.any()) or k > 3000:
                break
    return (xp.sign(x) * s).astype(x.dtype)


def _i1_kernel(x):
    return _i1_series(_float_kernel_input(x))


def _i_infer(name):
    def infer(x):
        dt = np.dtype(x.dtype)
        if dt.kind == "b":
            raise op_error(name, f"not implemented for {dt.name} tensors", NotImplementedError)
        return TensorSpec(tuple(x.shape), dt if dt.kind == "f" else _dt.default_float_np())
    return infer


def _i1_vjp(ctx, g):
    # I1'(x) = I0(x) - I1(x) / x, 1/2 at 0
    m = ctx.m
    x = ctx.inputs[0]
    zero = m.eq(x, 0)
    safe = m.where(zero, 1.0, x)
    return (g * m.where(zero, 0.5, i0(x) - _i1(x) / safe),)


def _i_samples(dtype=np.float64):
    return [Sample((rand((3, 4), dtype, -5.0, 5.0, seed=1),), {}),
            Sample((rand((), dtype, seed=2),), {}),
            Sample((np.array([0.0, 1e-3, 30.0, -80.0, 700.0], dtype),), {}, False)]


I0 = register(
    name="i0", kernel=_i0_kernel, infer=_i_infer("i0"), args=("x",), saves=("x",),
    vjp=lambda ctx, g: (g * _i1(ctx.inputs[0]),), jvp=_diagonal, vmap=_vmap.leading,
    promote="float", samples=_i_samples,
    error_samples=lambda: [(("not a tensor",), {}, TypeError)],
    torch=lambda torch, x: torch.i0(x))

I1 = register(
    name="special_i1", kernel=_i1_kernel, infer=_i_infer("special_i1"), args=("x",),
    saves=("x",), vjp=_i1_vjp, jvp=_diagonal, vmap=_vmap.leading, promote="float",
    samples=_i_samples, error_samples=lambda: [(("not a tensor",), {}, TypeError)],
    torch=lambda torch, x: torch.special.i1(x))


def i0(input):
    """The modified Bessel function of the first kind of order 0; its derivative is
    ``I1`` (``special_i1``, differentiable in turn)."""
    return bind(I0, input)


def _i1(input):
    return bind(I1, input)


# ---------------------------------------------------------------- igamma / igammac
def _igamma_op(name, upper):
    def kernel(a, x, out=None):
        a, x = _float_kernel_input(a), _float_kernel_input(x)
        return _devices.igamma(a, x, upper, out=out)

    def vjp(ctx, g):
        if ctx.needs_input_grad[0]:
            raise NotImplementedError(f"{name}: the derivative with respect to input (the "
                                      f"shape a) is not implemented, as in PyTorch; other "
                                      f"(x) differentiates")
        m = ctx.m
        a, x = ctx.inputs
        # d/dx P(a, x) = x^(a-1) e^-x / Gamma(a) (Q: its negative); 0 at x = 0 for a > 1
        safe = m.where(m.eq(x, 0), 1.0, x)
        dens = m.exp((a - 1) * m.log(safe) - x - SP.lgamma(a))
        dens = m.where(m.eq(x, 0), 0.0, dens)
        return None, (-g if upper else g) * dens

    def samples(dtype=np.float64):
        # forward-only here (no derivative in a); x's derivatives against PyTorch's in
        # tests/ops/test_special2.py
        return [Sample((rand((3, 4), dtype, 0.2, 6.0, seed=1),
                        rand((3, 4), dtype, 0.0, 8.0, seed=2)), {}, False),
                Sample((rand((3, 1), dtype, 0.5, 3.0, seed=3), rand((4,), dtype, 0.1, 5.0, seed=4)),
                       {}, False),
                Sample((np.array([0.0, 1.0, 2.0, 0.5], dtype), np.array([1.0, 0.0, np.inf, 0.0],
                                                                       dtype)), {}, False)]
    return register(
        name=name, kernel=kernel, infer=_elementwise_float(name), args=("input", "other"),
        saves=("input", "other"), vjp=vjp, jvp=_diagonal,
        broadcasting=True, promote="float", samples=samples,
        error_samples=lambda: [((rand((3, 4)), rand((5,))), {}, ValueError)],
        torch=lambda torch, a, x: getattr(torch, name)(a, x))


def _elementwise_float(name):
    from ._decl import elementwise_infer
    base = elementwise_infer(name, "float")

    def infer(a, x):
        for s in (a, x):
            if hasattr(s, "dtype") and np.dtype(s.dtype).kind == "b":
                raise op_error(name, "not implemented for bool tensors", NotImplementedError)
        return base(a, x)
    return infer


IGAMMA, IGAMMAC = _igamma_op("igamma", False), _igamma_op("igammac", True)


def igamma(input, other):
    """The regularized lower incomplete gamma function ``P(input, other)``;
    differentiable in ``other`` (as PyTorch, not in ``input``)."""
    return bind(IGAMMA, input, other)


def igammac(input, other):
    """The regularized upper incomplete gamma function ``Q = 1 - P``."""
    return bind(IGAMMAC, input, other)
