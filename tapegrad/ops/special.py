"""Special functions and the Gamma sampler the distributions need.

- ``lgamma``, ``digamma``, ``polygamma``: each differentiable at every order (the
  derivative of ``polygamma(n)`` is ``polygamma(n + 1)``); ``mvlgamma``, a composite
  of ``lgamma``;
- ``erfinv``: a registry op (Newton steps from Giles' approximation, a Numba kernel in
  ``devices/cpu_kernels/special.py``); its derivative ``sqrt(pi)/2 exp(erfinv(x)^2)``
  is written with ops, so it differentiates again;
- ``i0`` (NumPy's), with its derivative ``I1`` (the registry op ``special_i1``, summed
  from its power series); ``igamma``/``igammac``, registry ops over Numba kernels;
- PyTorch's ``_standard_gamma`` (standard Gamma draws from tapegrad's seeded generator,
  differentiable by implicit reparameterisation) with its gradient
  ``_standard_gamma_grad``.

The gradient of a sample ``x ~ Gamma(alpha, 1)`` is ``dx/dalpha = -(dP/dalpha)(alpha, x)
/ p(x; alpha)`` (``P`` the CDF, ``p`` the density): the derivative of the sample at a
fixed quantile, computed to float64 rounding (``devices/cpu_kernels/special.py``;
PyTorch uses a rational approximation, within about 1e-3 of it). As PyTorch,
``_standard_gamma_grad`` itself has no derivative: a second derivative through a
Gamma sample raises RuntimeError."""
import math

import numpy as np

from .. import devices as _devices, dtypes as _dt
from ..dispatch import bind
from ..dtypes import is_float as _isf
from ..ops_registry.rules import diagonal as _diagonal
from . import _vmap
from ._decl import S, Sample, TensorSpec, away_from, decl, floating, op_error, rand, register
from .creation import _draw_rate_into, _next_draw, generator

__all__ = ["lgamma", "digamma", "polygamma", "_standard_gamma", "_standard_gamma_grad", "erfinv",
           "mvlgamma", "i0", "igamma", "igammac"]


METHODS = "lgamma digamma"


def _float_infer(name):
    def infer(x, **attrs):
        dt = np.dtype(x.dtype)
        if dt.kind == "b":
            raise op_error(name, f"not implemented for {dt.name} tensors", NotImplementedError)
        return TensorSpec(tuple(x.shape), dt if dt.kind == "f" else np.dtype(np.float32))
    return infer


def _unary_samples(low, high, negative=True):
    def samples(dtype=np.float64):
        out = [Sample((rand((3, 4), dtype, low, high, seed=1),), {}),
               Sample((rand((), dtype, low, high, seed=2),), {}),
               Sample((rand((2, 0), dtype, low, high, seed=3),), {})]
        if negative:  # off the poles at the non-positive integers
            neg = away_from(rand((5,), np.float64, -2.8, -0.2, seed=4), (-2.0, -1.0), 0.2)
            out.append(Sample((neg.astype(dtype),), {}))
        return out
    return samples


def _not_a_tensor():
    return [(("not a tensor",), {}, TypeError)]


def _kernel(name):
    def kernel(x, n=None, out=None):
        with np.errstate(all="ignore"):  # poles give inf, as PyTorch, without a warning
            return _devices.special(name, x, n, out=out)
    kernel.__name__ = name
    return kernel


LGAMMA = register(
    name="lgamma", kernel=_kernel("lgamma"), infer=_float_infer("lgamma"), args=("x",),
    saves=("x",), vjp=lambda ctx, g: (g * ctx.m.digamma(ctx.inputs[0]),), jvp=_diagonal,
    vmap=_vmap.leading, promote="float", samples=_unary_samples(0.2, 4.0),
    error_samples=_not_a_tensor, torch=lambda torch, x: torch.lgamma(x))


def lgamma(input):
    """``log |Gamma(input)|``."""
    return bind(LGAMMA, input)


DIGAMMA = register(
    name="digamma", kernel=_kernel("digamma"), infer=_float_infer("digamma"), args=("x",),
    saves=("x",), vjp=lambda ctx, g: (g * ctx.m.polygamma(1, ctx.inputs[0]),),
    jvp=_diagonal, vmap=_vmap.leading, promote="float", samples=_unary_samples(0.2, 4.0),
    error_samples=_not_a_tensor, torch=lambda torch, x: torch.digamma(x))


def digamma(input):
    """The logarithmic derivative of the Gamma function, ``psi(input)``."""
    return bind(DIGAMMA, input)


def _polygamma_infer(x, n=1):
    _check_order(n)
    return _float_infer("polygamma")(x)


def _check_order(n):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise op_error("polygamma", f"n must be an int, got {n!r}", TypeError)
    if n < 0:
        raise op_error("polygamma", f"n must be non-negative, got {n}", RuntimeError)


def _polygamma_samples(dtype=np.float64):
    pos = _unary_samples(0.2, 4.0, negative=False)(dtype)
    neg = _unary_samples(0.2, 4.0)(dtype)[-1]
    return ([Sample(s.args, {"n": 1}) for s in pos] + [Sample(neg.args, {"n": 1})]
            + [Sample(pos[0].args, {"n": 2}), Sample(pos[0].args, {"n": 3}),
               Sample(pos[1].args, {"n": 0})])


POLYGAMMA = register(
    name="polygamma", kernel=_kernel("polygamma"), infer=_polygamma_infer, args=("x",),
    saves=("x",), vjp=lambda ctx, g: (g * ctx.m.polygamma(ctx.attrs["n"] + 1, ctx.inputs[0]),),
    jvp=_diagonal, vmap=_vmap.leading, promote="float", samples=_polygamma_samples,
    error_samples=lambda: [((rand((3,)),), {"n": -1}, RuntimeError),
                           ((rand((3,)),), {"n": 1.5}, TypeError)],
    torch=lambda torch, x, n=1: torch.polygamma(n, x))


def polygamma(n, input):
    """The ``n``-th derivative of ``digamma`` (``n = 0``: digamma itself)."""
    _check_order(n)
    return bind(POLYGAMMA, input, n=int(n))


def _polygamma_method(self, n):
    return polygamma(n, self)


TABLE = {"polygamma": _polygamma_method}


# ---------------------------------------------------------------- Gamma samples
def _gamma_infer(x):
    dt = np.dtype(x.dtype)
    if dt.kind != "f":
        raise op_error("_standard_gamma", f"not implemented for {dt.name} tensors "
                                          f"(a floating concentration is needed)",
                       RuntimeError)
    return TensorSpec(tuple(x.shape), dt)


def _gamma_kernel(x, out=None):
    if out is not None:  # the float64 draws made below, a block at a time
        return _draw_rate_into(out, x, "standard_gamma", _gamma_kernel)
    xp = _devices.xp_of(x)
    bad = ~(x >= 0)  # negative or NaN concentrations draw NaN, as PyTorch
    safe = xp.where(bad, xp.ones((), x.dtype), x) if bad.any() else x
    out = _devices.standard_gamma(generator(), safe)
    return xp.where(bad, xp.asarray(np.nan, x.dtype), out) if bad.any() else xp.asarray(out)


def _gamma_vjp(ctx, g):
    return (g * bind(GAMMA_GRAD, ctx.inputs[0], ctx.out),)


def _gamma_samples(dtype=np.float64):
    # random draws: forward-only (each call draws anew, finite differences cannot follow);
    # the gradient is tested in tests/distributions against PyTorch and quantiles
    return [Sample((rand((3, 4), dtype, 0.1, 5.0, seed=1),), {}, False),
            Sample((rand((), dtype, 0.5, 2.0, seed=2),), {}, False)]


GAMMA = register(
    name="_standard_gamma", draws=True, kernel=_gamma_kernel, infer=_gamma_infer, args=("x",),
    saves=("x", "out"), vjp=_gamma_vjp, jvp=_diagonal, samples=_gamma_samples,
    error_samples=lambda: [((np.arange(3),), {}, RuntimeError)],
    reference=_next_draw(lambda g, a: np.asarray(g.standard_gamma(a.astype(np.float64)))
                         .astype(a.dtype)))


def _standard_gamma(input):
    """Standard Gamma(``input``) draws (rate 1) from tapegrad's generator
    (``tg.manual_seed``); differentiable in ``input`` (implicit reparameterisation)."""
    return bind(GAMMA, input)


def _gamma_grad_infer(x, output):
    if tuple(x.shape) != tuple(output.shape):
        raise op_error("_standard_gamma_grad", f"expected self and output of one shape, got "
                                               f"{tuple(x.shape)} and {tuple(output.shape)}",
                       RuntimeError)
    dts = {np.dtype(x.dtype), np.dtype(output.dtype)}
    if len(dts) != 1 or next(iter(dts)).kind != "f":
        raise op_error("_standard_gamma_grad", f"expected one floating dtype, got "
                                               f"{np.dtype(x.dtype)} and "
                                               f"{np.dtype(output.dtype)}", RuntimeError)
    return TensorSpec(tuple(x.shape), np.dtype(x.dtype))


def _no_derivative(*args):
    raise RuntimeError("_standard_gamma_grad: the derivative of the implicit Gamma "
                       "reparameterisation gradient is not implemented (as in PyTorch): "
                       "a Gamma, Beta or Dirichlet rsample differentiates once")


def _gamma_grad_samples(dtype=np.float64):
    a = rand((3, 4), np.float64, 0.1, 6.0, seed=5)
    x = np.random.default_rng(6).standard_gamma(a)
    return [Sample((a.astype(dtype), x.astype(dtype)), {}, False),
            Sample((np.array(1.5, dtype), np.array(0.4, dtype)), {}, False)]


def _gamma_grad_ref(a, x):
    # the implicit gradient as the derivative of the quantile at fixed P (SciPy, if
    # present, is test-only: the kernel needs none)
    from scipy import special as sp
    dt = x.dtype
    a, x = a.astype(np.float64), x.astype(np.float64)
    u, h = sp.gammainc(a, x), 1e-6 * a
    d = (sp.gammaincinv(a + h, u) - sp.gammaincinv(a - h, u)) / (2 * h)
    return d.astype(dt)


GAMMA_GRAD = register(
    name="_standard_gamma_grad", kernel=lambda x, output: _devices.gamma_grad(x, output),
    infer=_gamma_grad_infer, args=("x", "output"), saves=(), vjp=_no_derivative,
    jvp=_no_derivative, vmap=_vmap.leading_all, samples=_gamma_grad_samples,
    error_samples=lambda: [((rand((3,)), rand((4,))), {}, RuntimeError)],
    reference=_gamma_grad_ref)


def _standard_gamma_grad(input, output):
    """``d output / d input`` for ``output = _standard_gamma(input)`` (no derivative)."""
    return bind(GAMMA_GRAD, input, output)


standard_gamma = _standard_gamma  # the public spelling for the library layer


_SQRT_PI_2 = math.sqrt(math.pi) / 2


# ---------------------------------------------------------------- erfinv
def _erfinv_infer(x):
    dt = np.dtype(x.dtype)
    if dt.kind == "b":
        raise op_error("erfinv", f"not implemented for {dt.name} tensors", NotImplementedError)
    return TensorSpec(tuple(x.shape), dt if dt.kind == "f" else np.dtype(np.float32))


def _erfinv_kernel(x, out=None):
    if not _isf(x.dtype):  # an integer input: the default float, as the shape rule
        x = x.astype(_dt.default_float_np())
    with np.errstate(all="ignore"):
        return _devices.special("erfinv", x, out=out)


ERFINV = register(
    name="erfinv", autocast={"cuda": "fp32"}, kernel=_erfinv_kernel, infer=_erfinv_infer,
    args=("x",), saves=("out",),
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
    out = lgamma(x)
    for i in range(1, p):
        out = out + lgamma(x - i / 2)
    return out + p * (p - 1) / 4 * math.log(math.pi)


decl(mvlgamma, lambda dtype=np.float64: [S(rand((3, 4), dtype, 1.6, 4.0, seed=1), 2),
                                         S(rand((5,), dtype, 0.2, 3.0, seed=2), 1),
                                         S(rand((2, 3), dtype, 2.1, 5.0, seed=3), 4)],
     infer=lambda x, p: TensorSpec(tuple(x.shape), np.dtype(x.dtype) if _isf(np.dtype(
         x.dtype)) else _dt.default_float_np()),
     errors=lambda: [((np.array([True]), 2), {}, RuntimeError),
                     ((rand((3,)), 0), {}, RuntimeError)],
     torch=lambda torch, x, p: torch.mvlgamma(x, p))


# ---------------------------------------------------------------- i0 (and i1, its derivative)
def _float_kernel_input(x):
    return x if _isf(x.dtype) else x.astype(_dt.default_float_np())


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


def i0(input):
    """The modified Bessel function of the first kind of order 0; its derivative is
    ``I1`` (``special_i1``, differentiable in turn)."""
    return bind(I0, input)


I1 = register(
    name="special_i1", kernel=_i1_kernel, infer=_i_infer("special_i1"), args=("x",),
    saves=("x",), vjp=_i1_vjp, jvp=_diagonal, vmap=_vmap.leading, promote="float",
    samples=_i_samples, error_samples=lambda: [(("not a tensor",), {}, TypeError)],
    torch=lambda torch, x: torch.special.i1(x))


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
        dens = m.exp((a - 1) * m.log(safe) - x - lgamma(a))
        dens = m.where(m.eq(x, 0), 0.0, dens)
        return None, (-g if upper else g) * dens

    def samples(dtype=np.float64):
        # forward-only here (no derivative in a); x's derivatives against PyTorch's in
        # tests/ops/test_special.py
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

