"""PyTorch's random sampling functions: ``bernoulli``, ``multinomial``, ``normal``,
``poisson``, ``randint_like``. Every draw comes from tapegrad's generator
(``tg.manual_seed``, ``get_rng_state``), so a seed repeats them; the numbers are NumPy's,
not PyTorch's (the distributions are the same). The factories ``rand``, ``randn``,
``randint``, ``randperm`` and the generator itself live in ``creation``.

- ``normal(mean, std)`` is ``mean + std * randn``: differentiable in ``mean`` and
  ``std`` (PyTorch's gradients: ``g`` and ``g * eps``);
- ``bernoulli`` (``rand < p``) and ``poisson`` have no gradient (PyTorch's is zero);
- ``multinomial`` draws with replacement by inverting the CDF, without replacement
  by PyTorch's method (the ``num_samples`` largest ``p / E``, ``E`` exponential), so
  zero-probability categories come last, as in PyTorch."""
import numpy as np

from .. import devices as _devices, dtypes as _dt
from .._util import op_error
from ..dispatch import bind
from ..dtypes import is_float as _isf
from . import creation as C
from ._checks import any_value
from ._decl import Sample, TensorSpec, composite, rand, register
from .creation import (
    _draw_into,
    _draw_rate_into,
    _next_draw,
    _np_dtype,
    _place,
    drawing_from,
    generator,
)
from .indexing import _raw

__all__ = ["bernoulli", "multinomial", "normal", "poisson", "randint_like"]


def _host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else a


def _floating(name, dt, what="input"):
    dt = np.dtype(dt)
    if dt.kind != "f":
        raise op_error(name, f"not implemented for {_dt.from_np(dt)} {what} (a floating "
                             f"dtype is needed)", NotImplementedError)
    return dt


# ---------------------------------------------------------------- bernoulli
def _check_p(name, p):
    if isinstance(p, bool) or not isinstance(p, (int, float, np.number)):
        raise op_error(name, f"p must be a number, got {type(p).__name__}", TypeError)
    if not 0 <= p <= 1:
        raise op_error(name, f"expects p to be in [0, 1], but got p={p}", RuntimeError)


def _bernoulli_kernel(x, p=None, out=None):
    if out is not None:
        if p is None and x.size and not (x.min() >= 0 and x.max() <= 1):
            _bernoulli_kernel(x)  # its error
        g = generator()

        def fill(xb, ob):  # the draw's float64 uniforms, as below, a block at a time
            np.less(g.random(xb.size), xb if p is None else p, out=ob)
        if not _draw_into(out, x, fill):
            out[...] = _bernoulli_kernel(x, p)
        return out
    xr = _host(x)
    g = generator()
    u = g.random(xr.shape)
    if p is None:
        with np.errstate(invalid="ignore"):
            bad = ~((xr >= 0) & (xr <= 1))
        if bad.any():
            raise op_error("bernoulli", "expects every probability in input to be in "
                                        "[0, 1]", RuntimeError)
        out = u < xr
    else:
        out = u < p
    return _place(out.astype(xr.dtype), _devices.device_of(x))


def _bernoulli_infer(x, p=None):
    _floating("bernoulli", x.dtype)
    if p is not None:
        _check_p("bernoulli", p)
    return TensorSpec(tuple(x.shape), np.dtype(x.dtype))


BERNOULLI = register(
    name="bernoulli", draws=True, kernel=_bernoulli_kernel, infer=_bernoulli_infer, args=("x",),
    differentiable=False,
    # (probabilities up to 0.95: the compile test scales its inputs by 1.01)
    samples=lambda dtype=np.float64: [Sample((rand((3, 4), dtype, 0.0, 0.95, seed=1),), {}),
                                      Sample((rand((5,), dtype, seed=2),), {"p": 0.3}),
                                      Sample((np.array([0.0, 0.95, 0.5], dtype),), {})],
    error_samples=lambda: [((np.array([0.5, 1.5]),), {}, RuntimeError),
                           ((np.zeros(3),), {"p": -0.1}, RuntimeError),
                           ((np.array([0, 1]),), {}, NotImplementedError)],
    reference=_next_draw(lambda g, x, p=None: (g.random(x.shape) < (x if p is None else p))
                         .astype(x.dtype)))


def bernoulli(input, p=None, *, generator=None):
    """0/1 draws (``input``'s dtype) with probabilities ``input`` (or the number ``p``
    for every element); no gradient."""
    with drawing_from(generator):
        if p is not None:
            _check_p("bernoulli", p)
            return bind(BERNOULLI, input, p=float(p))
        return bind(BERNOULLI, input)


# ---------------------------------------------------------------- multinomial
def _mn_infer(x, num_samples, replacement=False):
    name = "multinomial"
    if len(x.shape) not in (1, 2):
        raise op_error(name, f"prob_dist must be 1 or 2 dim, got shape {tuple(x.shape)}",
                       RuntimeError)
    if not _isf(np.dtype(x.dtype)):
        raise op_error(name, f"multinomial only supports floating-point dtypes for input, "
                             f"got {_dt.from_np(np.dtype(x.dtype))}", RuntimeError)
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)):
        raise op_error(name, f"num_samples must be an int, got {num_samples!r}", TypeError)
    n = x.shape[-1]
    if num_samples <= 0:
        raise op_error(name, f"cannot sample n_sample <= 0 samples (got {num_samples})",
                       RuntimeError)
    if not replacement and num_samples > n:
        raise op_error(name, f"cannot sample n_sample > prob_dist.size(-1) samples without "
                             f"replacement (n_sample {num_samples}, {n} categories)",
                       RuntimeError)
    return TensorSpec(tuple(x.shape[:-1]) + (num_samples,), np.dtype(np.int64))


def _mn_draw(g, x, num_samples, replacement=False):
    p = np.asarray(x, dtype=np.float64).reshape(-1, x.shape[-1])
    if not np.isfinite(p).all() or (p < 0).any():
        raise op_error("multinomial", "probability tensor contains either `inf`, `nan` or "
                                      "element < 0", RuntimeError)
    total = p.sum(axis=1, keepdims=True)
    if (total <= 0).any():
        raise op_error("multinomial", "invalid multinomial distribution (sum of "
                                      "probabilities <= 0)", RuntimeError)
    if replacement:
        cdf = np.cumsum(p / total, axis=1)
        cdf[:, -1] = 1.0
        u = g.random((p.shape[0], num_samples))
        out = np.stack([np.searchsorted(c, r, side="right") for c, r in zip(cdf, u)])
        out = np.minimum(out, p.shape[1] - 1)
    else:
        e = g.exponential(1.0, p.shape)
        with np.errstate(divide="ignore"):
            key = p / e
        out = np.argsort(-key, axis=1, kind="stable")[:, :num_samples]
    return out.reshape(tuple(x.shape[:-1]) + (num_samples,)).astype(np.int64)


def _mn_kernel(x, num_samples, replacement=False):
    out = _mn_draw(generator(), _host(x), num_samples, replacement)
    return _place(out, _devices.device_of(x))


MULTINOMIAL = register(
    name="multinomial", draws=True, kernel=_mn_kernel, infer=_mn_infer, args=("x",),
    differentiable=False,
    samples=lambda dtype=np.float64: [
        Sample((rand((5,), dtype, 0.1, 1.0, seed=1),), {"num_samples": 3}),
        Sample((rand((2, 4), dtype, 0.0, 1.0, seed=2),), {"num_samples": 6, "replacement": True}),
        Sample((np.array([1.0, 0.0, 2.0], dtype),), {"num_samples": 3})],
    error_samples=lambda: [((np.zeros(3),), {"num_samples": 1}, RuntimeError),
                           ((np.array([-1.0, 2.0]),), {"num_samples": 1}, RuntimeError),
                           ((np.ones(3),), {"num_samples": 4}, RuntimeError),
                           ((np.ones((2, 2, 2)),), {"num_samples": 1}, RuntimeError)],
    reference=_next_draw(_mn_draw))


def multinomial(input, num_samples, replacement=False, *, generator=None):
    """``num_samples`` category indices per row of the (unnormalised) probabilities
    ``input`` (1-D or 2-D), int64; without ``replacement`` each index at most once."""
    with drawing_from(generator):
        return bind(MULTINOMIAL, input, num_samples=num_samples,
                    replacement=bool(replacement))


# ---------------------------------------------------------------- poisson
def _poisson_kernel(x, out=None):
    if out is not None:  # the float64 draws made below, a block at a time
        return _draw_rate_into(out, x, "poisson", _poisson_kernel)
    xr = _host(x)
    if (xr < 0).any():
        raise op_error("poisson", "invalid Poisson rate, expected rate to be non-negative",
                       RuntimeError)
    out = generator().poisson(xr.astype(np.float64)).astype(xr.dtype)
    return _place(out, _devices.device_of(x))


POISSON = register(
    name="poisson", draws=True, kernel=_poisson_kernel,
    infer=lambda x: TensorSpec(tuple(x.shape), _floating("poisson", x.dtype)), args=("x",),
    differentiable=False,
    samples=lambda dtype=np.float64: [Sample((rand((3, 4), dtype, 0.0, 5.0, seed=1),), {}),
                                      Sample((np.array([0.0, 100.0], dtype),), {})],
    error_samples=lambda: [((np.array([-1.0]),), {}, RuntimeError),
                           ((np.array([1, 2]),), {}, NotImplementedError)],
    reference=_next_draw(lambda g, x: g.poisson(x.astype(np.float64)).astype(x.dtype)))


def poisson(input, generator=None):
    """Poisson draws with rates ``input`` (its dtype); no gradient."""
    with drawing_from(generator):
        return bind(POISSON, input)


# ---------------------------------------------------------------- normal
def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, device=None,
           requires_grad=False):
    """Normal draws ``mean + std * eps``: ``normal(mean_tensor, std_tensor)`` (shapes
    broadcast), ``normal(mean_tensor, std=1.0)``, ``normal(mean, std_tensor)``, or
    ``normal(mean, std, size)`` for numbers. Differentiable in tensor ``mean`` and
    ``std`` (the reparameterised gradient PyTorch gives)."""
    with drawing_from(generator):
        return _normal(mean, std, size, dtype, device, requires_grad)


def _normal(mean, std, size, dtype, device, requires_grad):
    from ..tensor import Tensor
    tm, ts = isinstance(mean, Tensor), isinstance(std, Tensor)
    if not tm and not ts:
        if size is None:
            raise op_error("normal", "normal(mean, std) of two numbers needs size=",
                           TypeError)
        if std < 0:
            raise op_error("normal", f"normal expects std >= 0.0, but found std {std}",
                           RuntimeError)
        eps = C.randn(*((size,) if isinstance(size, int) else tuple(size)), dtype=dtype,
                      device=device)
        out = eps * std + mean
        return out.requires_grad_(True) if requires_grad else out
    if size is not None:
        raise op_error("normal", "size= is only for a number mean and std", TypeError)
    for what, v in (("mean", mean), ("std", std)):
        if not isinstance(v, Tensor) and (isinstance(v, bool) or not isinstance(
                v, (int, float, np.number))):
            raise op_error("normal", f"{what} must be a Tensor or a number, got "
                                     f"{type(v).__name__}", TypeError)
    if tm and not mean.dtype.is_floating_point:
        raise op_error("normal", f"expected a floating mean, got {mean.dtype}",
                       NotImplementedError)
    if ts and not std.dtype.is_floating_point:  # as PyTorch: std takes mean's dtype
        std = C.cast(std, mean.dtype if tm else _dt.get_default_dtype())
    if ts:
        if any_value(std, lambda s: s < 0):
            raise op_error("normal", "normal expects all elements of std >= 0.0",
                           RuntimeError)
    elif std < 0:
        raise op_error("normal", f"normal expects std >= 0.0, but found std {std}",
                       RuntimeError)
    like = mean if tm else std
    if tm and ts:
        try:
            shape = tuple(np.broadcast_shapes(tuple(mean.shape), tuple(std.shape)))
        except ValueError:
            raise op_error("normal", f"the shapes of mean {tuple(mean.shape)} and std "
                                     f"{tuple(std.shape)} do not broadcast",
                           RuntimeError) from None
        dt = _dt.from_np(np.result_type(_raw(mean).dtype, _raw(std).dtype))
    else:
        shape, dt = tuple(like.shape), like.dtype
    eps = C.randn(*shape, dtype=dt, device=like.device)
    return mean + std * eps


def _normal_ref(g, mean, std=1.0, size=None, dtype=None):
    if size is not None:
        eps = g.standard_normal(size).astype(_np_dtype(dtype) or _dt.get_default_dtype().np)
        return eps * std + mean
    m, s = np.asarray(mean), np.asarray(std)
    shape = np.broadcast_shapes(m.shape, s.shape)
    dt = np.result_type(*[a.dtype for a in (m, s) if isinstance(a, np.ndarray)
                          and _isf(a.dtype)] or [np.float64])
    if not isinstance(mean, np.ndarray):
        dt = s.dtype
    elif not isinstance(std, np.ndarray):
        dt = m.dtype
    eps = g.standard_normal(shape).astype(dt)
    return (mean + std * eps).astype(dt)


def _normal_infer(mean, std=1.0, size=None, dtype=None):
    shapes = [tuple(a.shape) for a in (mean, std) if hasattr(a, "shape")]
    if size is not None:
        return TensorSpec(tuple(size), _np_dtype(dtype) or _dt.get_default_dtype().np)
    dts = [np.dtype(a.dtype) for a in (mean, std) if hasattr(a, "dtype")]
    return TensorSpec(tuple(np.broadcast_shapes(*shapes)), np.result_type(*dts))


composite(normal, infer=_normal_infer, args=("mean", "std"),
          samples=lambda dtype=np.float64: [
              Sample((rand((3, 4), dtype, seed=1), rand((3, 4), dtype, 0.1, 2.0, seed=2)), {},
                     False),
              Sample((rand((2, 1), dtype, seed=3), rand((3,), dtype, 0.1, 2.0, seed=4)), {},
                     False),
              Sample((rand((3,), dtype, seed=5), 0.5), {}, False),
              Sample((0.5, 2.0), {"size": (2, 3)}, False)],
          error_samples=lambda: [((np.zeros(2), -np.ones(2)), {}, RuntimeError),
                                 ((0.0, 1.0), {}, TypeError)],
          reference=_next_draw(_normal_ref))


# ---------------------------------------------------------------- randint_like
def randint_like(input, low=0, high=None, *, generator=None, dtype=None, device=None,
                 requires_grad=False):
    """Random integers in ``[low, high)`` of ``input``'s shape (and dtype unless
    given): ``randint_like(input, high)`` or ``randint_like(input, low, high)``."""
    if high is None:
        low, high = 0, low
    dt = _np_dtype(dtype) or np.dtype(_raw(input).dtype)
    if dt.kind == "b" and (low < 0 or high > 2):
        raise op_error("randint_like", f"[{low}, {high}) is out of the range of bool "
                                       f"(from 0 to 2)", RuntimeError)
    out = C.randint(low, high, tuple(input.shape), dtype=_dt.from_np(np.dtype(np.int64)),
                    device=device or input.device, generator=generator)
    out = C.cast(out, _dt.from_np(dt))
    return out.requires_grad_(True) if requires_grad else out


composite(randint_like, infer=lambda x, low=0, high=None, dtype=None: TensorSpec(
              tuple(x.shape), _np_dtype(dtype) or np.dtype(x.dtype)),
          differentiable=False,
          samples=lambda dtype=np.float64: [Sample((rand((2, 3), dtype), 5), {}),
                                            Sample((np.arange(4), -2, 3), {}),
                                            Sample((rand((3,), dtype), 0, 4),
                                                   {"dtype": np.dtype(np.int32)})],
          error_samples=lambda: [((rand((3,)), 5, 2), {}, RuntimeError)],
          reference=_next_draw(lambda g, x, low=0, high=None, dtype=None: g.integers(
              *((0, low) if high is None else (low, high)), size=x.shape).astype(
                  _np_dtype(dtype) or x.dtype)))

