"""Special functions NumPy lacks, as Numba loops on the CPU: digamma, polygamma (through
the Hurwitz zeta function), erfinv (Newton steps from Giles' approximation), the
regularized incomplete gamma functions (series / continued fraction) and the implicit
reparameterisation gradient of a standard
Gamma sample. Each computes in float64 and writes the input's dtype; each compiles on
first use (cached on disk by Numba). The pointwise ones are NumPy ufuncs (``ufunc(name)``): they
broadcast, write into a caller's ``out=`` and cast in buffered chunks.

Methods (written for this file):
- digamma: reflection ``psi(x) = psi(1 - x) - pi / tan(pi x)`` below 0, the recurrence
  ``psi(x) = psi(x + 1) - 1/x`` up to 10, then the asymptotic series in ``1/x^2``
  (Bernoulli numbers; the first omitted term is under 1e-16 at 10);
- polygamma(n, x), n >= 1: ``(-1)^(n+1) n! zeta(n + 1, x)``; the Hurwitz zeta as a
  direct sum up to a shift ``w >= max(12, n + 12)`` and the Euler-Maclaurin tail there
  (10 Bernoulli terms); poles (x a non-positive integer) give inf/nan as PyTorch;
- gamma_grad(alpha, x) = dx/dalpha at fixed CDF ``P(alpha, x)`` (implicit
  differentiation: ``-d_alpha P / p``). With the lower series
  ``P = x^alpha e^-x / Gamma(alpha + 1) * S``, ``S = sum_n t_n``,
  ``t_n = t_(n-1) x / (alpha + n)``, and ``p`` the density, the ratio is free of
  exponentials: ``dx/dalpha = -(x / alpha) ((log x - psi(alpha + 1)) S + S')`` with
  ``S' = -sum_n t_n H_n``, ``H_n = sum_(k<=n) 1 / (alpha + k)``. Exact to float64
  rounding except far in the upper tail, where the two terms cancel (relative error
  about ``1e-16 * e^x x^-alpha Gamma(alpha+1)``, under 1e-8 for every sample up to
  about 8 standard deviations above the mean).
"""
import math

import numpy as np

from ..cpu import numba

# B_2k / (2k) for the digamma series; B_2k / (2k)! for the zeta tail
_B2K = (1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6,
        -3617.0 / 510, 43867.0 / 798, -174611.0 / 330)


def _coefs():
    over_2k = np.array([b / (2 * (k + 1)) for k, b in enumerate(_B2K)])
    over_fact = np.array([b / math.factorial(2 * (k + 1)) for k, b in enumerate(_B2K)])
    # read-only, as Numba types the globals the ufuncs read: the loop that takes one as
    # an argument then calls the scalar functions compiled for them, not a second copy
    over_2k.flags.writeable = over_fact.flags.writeable = False
    return over_2k, over_fact


_OVER_2K, _OVER_FACT = _coefs()


def _digamma1(x, over_2k):
    if np.isnan(x):
        return np.nan
    if x == np.inf:
        return np.inf
    if x <= 0.0 and x == np.floor(x):
        return -np.inf if x == 0.0 else np.nan
    acc = 0.0
    if x < 0.0:
        acc = -np.pi / np.tan(np.pi * x)
        x = 1.0 - x
    while x < 10.0:
        acc -= 1.0 / x
        x += 1.0
    z = 1.0 / (x * x)
    tail = 0.0
    zk = z
    for k in range(7):
        tail += over_2k[k] * zk
        zk *= z
    return acc + np.log(x) - 0.5 / x - tail


def _ipow(x, k):
    """x**k for an integer k >= 0, by squaring (a few multiplications where ``pow``
    costs ~20 ns: polygamma makes over a dozen powers per element)."""
    r = 1.0
    while k:
        if k & 1:
            r *= x
        x *= x
        k >>= 1
    return r


def _zeta1(s, a, over_fact):
    """Hurwitz zeta(s, a) for an integer s >= 2."""
    if np.isnan(a) or a == -np.inf:
        return np.nan
    if a == np.inf:
        return 0.0
    if a <= 0.0 and a == np.floor(a):
        return np.inf
    acc = 0.0
    k = int(s)
    w = max(12.0, s + 12.0)
    while a < w:
        # pow below 0, where the terms alternate in sign and cancel: its rounding
        # is the better one there
        acc += a ** (-s) if a < 0.0 else 1.0 / _ipow(a, k)
        a += 1.0
    inv = 1.0 / a
    a_s1 = _ipow(inv, k - 1)  # a^(1-s)
    a_s = a_s1 * inv  # a^(-s)
    acc += a_s1 / (s - 1.0) + 0.5 * a_s
    # sum_j B_2j / (2j)! * s (s+1) ... (s+2j-2) * a^(-s-2j+1)
    rising = s
    power = a_s * inv
    inv2 = 1.0 / (a * a)
    for j in range(10):
        acc += over_fact[j] * rising * power
        rising *= (s + 2 * j + 1.0) * (s + 2 * j + 2.0)
        power *= inv2
    return acc


def _gamma_grad1(alpha, x, over_2k):
    # as PyTorch: NaN for a NaN, an infinite sample or a concentration outside
    # (0, inf); 0 for a sample at (or below) 0
    if np.isnan(x) or np.isnan(alpha) or x == np.inf or not (0.0 < alpha < np.inf):
        return np.nan
    if x <= 0.0:
        return 0.0
    t = 1.0
    s = 1.0
    ds = 0.0
    h = 0.0
    n = 0
    while n < 1000000:
        n += 1
        t *= x / (alpha + n)
        h += 1.0 / (alpha + n)
        s += t
        ds -= t * h
        if t * (1.0 + h) < 1e-17 * (s - ds) and n > x - alpha:
            break
    return -(x / alpha) * ((np.log(x) - _digamma1(alpha + 1.0, over_2k)) * s + ds)


def _gamma_grad_loop(alpha, x, out, over_2k):
    for i in range(x.size):
        out[i] = _gamma_grad1(alpha[i], x[i], over_2k)


def _erfinv1(y):
    # Giles' single-precision approximation (2010) as the start, then Newton steps on
    # erf (|y| <= 0.5) or on erfc with 1 - |y| (exact there), which keeps full
    # relative precision into the tails
    if np.isnan(y) or y < -1.0 or y > 1.0:
        return np.nan
    if y == 1.0:
        return np.inf
    if y == -1.0:
        return -np.inf
    if y == 0.0:
        return y
    a = abs(y)
    w = -math.log((1.0 - a) * (1.0 + a))
    if w < 5.0:
        w -= 2.5
        p = 2.81022636e-08
        p = 3.43273939e-07 + p * w
        p = -3.5233877e-06 + p * w
        p = -4.39150654e-06 + p * w
        p = 0.00021858087 + p * w
        p = -0.00125372503 + p * w
        p = -0.00417768164 + p * w
        p = 0.246640727 + p * w
        p = 1.50140941 + p * w
    else:
        w = math.sqrt(w) - 3.0
        p = -0.000200214257
        p = 0.000100950558 + p * w
        p = 0.00134934322 + p * w
        p = -0.00367342844 + p * w
        p = 0.00573950773 + p * w
        p = -0.0076224613 + p * w
        p = 0.00943887047 + p * w
        p = 1.00167406 + p * w
        p = 2.83297682 + p * w
    x = p * a
    c = 1.1283791670955126  # 2 / sqrt(pi)
    if a <= 0.5:
        for _ in range(3):
            x -= (math.erf(x) - a) / (c * math.exp(-x * x))
    else:  # Newton on log erfc(x) = log(1 - a): nearly quadratic in x, fast in the tail
        lt = math.log(1.0 - a)
        for _ in range(8):
            e = math.erfc(x)
            if e <= 0.0:
                break
            step = (math.log(e) - lt) * e / (c * math.exp(-x * x))
            x += step
            if abs(step) <= 1e-16 * x:
                break
    return x if y > 0 else -x


def _igamma1(a, x, upper):
    # the regularized incomplete gamma functions P(a, x) (upper=False) and Q = 1 - P:
    # the series of P for x < a + 1, the continued fraction of Q (modified Lentz)
    # beyond, each giving the other by subtraction where it is the larger
    if np.isnan(a) or np.isnan(x) or a < 0.0 or x < 0.0 or (a == 0.0 and x == 0.0):
        return np.nan
    if a == 0.0:
        return 0.0 if upper else 1.0
    if x == 0.0:
        return 1.0 if upper else 0.0
    if a == np.inf:
        return np.nan if x == np.inf else (1.0 if upper else 0.0)
    if x == np.inf:
        return 0.0 if upper else 1.0
    lpre = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = 1.0 / a
        total = term
        ap = a
        for _ in range(100000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-17:
                break
        p = total * math.exp(lpre)
        return 1.0 - p if upper else p
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 100000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        if abs(d) < tiny:
            d = tiny
        c = b + an / c
        if abs(c) < tiny:
            c = tiny
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    q = math.exp(lpre) * h
    return q if upper else 1.0 - q


_SCALARS = ("_digamma1", "_ipow", "_zeta1", "_gamma_grad1", "_erfinv1", "_igamma1")
_LOOPS = ("_gamma_grad_loop",)
_compiled = {}


def _loop(name):
    """The Numba loop ``name``, compiling all of them on first use: the scalar
    functions first, rebound in this module so the loops call them compiled."""
    if not _compiled:
        nb = numba()
        g = globals()
        for n in _SCALARS:
            g[n] = nb.njit(cache=True, nogil=True, no_cfunc_wrapper=True)(g[n])
        for n in _LOOPS:
            _compiled[n] = nb.njit(cache=True, nogil=True, no_cfunc_wrapper=True)(g[n])
    return _compiled[name]


def _run(loop, dtype, *arrays, extra=()):
    tail = _TAIL[loop]
    loop = _loop(loop.__name__)
    flat = [np.ascontiguousarray(a, dtype=np.float64).ravel() for a in arrays]
    out = np.empty(flat[0].size, np.float64)
    loop(*extra, *flat, out, *tail)
    return out.reshape(arrays[0].shape).astype(dtype, copy=False)


_TAIL = {_gamma_grad_loop: (_OVER_2K,)}


# (np.float64, not float: under Numba float() keeps a float32 a float32, so the float32
# loops computed in float32 and compiled a float32 copy of each scalar function)
def _erfinv_u(y):
    return _erfinv1(np.float64(y))


def _digamma_u(x):
    return _digamma1(np.float64(x), _OVER_2K)


def _polygamma_u(n, x):
    x = np.float64(x)
    if n == 0:
        return _digamma1(x, _OVER_2K)
    fact = 1.0
    for k in range(2, n + 1):
        fact *= k
    return (1.0 if n % 2 == 1 else -1.0) * fact * _zeta1(n + 1.0, x, _OVER_FACT)


def _igamma_lo_u(a, x):
    # (np.bool_: a boolean, where a literal False/True would compile _igamma1 once per value)
    return _igamma1(np.float64(a), np.float64(x), np.bool_(False))


def _igamma_up_u(a, x):
    return _igamma1(np.float64(a), np.float64(x), np.bool_(True))


_UFUNCS = {"erfinv": (_erfinv_u, 1), "digamma": (_digamma_u, 1),
           "polygamma": (_polygamma_u, 2), "igamma": (_igamma_lo_u, 2),
           "igammac": (_igamma_up_u, 2)}
_ufuncs = {}


def ufunc(name):
    """The NumPy ufunc (Numba ``vectorize``) of special function ``name``: float64 and
    float32 loops, each computing in float64; as any ufunc it broadcasts, writes into an
    ``out=`` (an input's own memory included) and casts in buffered chunks."""
    fn = _ufuncs.get(name)
    if fn is None:
        _loop("_gamma_grad_loop")  # the scalar functions compiled, rebound here
        py, nargs = _UFUNCS[name]
        # (float32 first: NumPy takes the first loop the inputs cast to safely)
        if name == "polygamma":
            sigs = ["float32(int64, float32)", "float64(int64, float64)"]
        else:
            sigs = ["float32(" + ", ".join(["float32"] * nargs) + ")",
                    "float64(" + ", ".join(["float64"] * nargs) + ")"]
        fn = _ufuncs[name] = numba().vectorize(sigs, cache=True)(py)
    return fn


def igamma(a, x, upper, dtype, out=None):
    """The regularized lower (``upper=False``) or upper incomplete gamma function."""
    f = ufunc("igammac" if upper else "igamma")
    if out is not None:
        return f(a, x, out=out)
    return np.asarray(f(a, x)).astype(dtype, copy=False)


def erfinv(x, dtype, out=None):
    return ufunc("erfinv")(x, out=out) if out is not None else \
        np.asarray(ufunc("erfinv")(x)).astype(dtype, copy=False)


def digamma(x, dtype, out=None):
    return ufunc("digamma")(x, out=out) if out is not None else \
        np.asarray(ufunc("digamma")(x)).astype(dtype, copy=False)


def polygamma(n, x, dtype, out=None):
    f = ufunc("polygamma")
    return f(int(n), x, out=out) if out is not None else \
        np.asarray(f(int(n), x)).astype(dtype, copy=False)


def gamma_grad(alpha, x, dtype):
    """dx/dalpha of standard Gamma(alpha) samples ``x`` (same shape as ``alpha``)."""
    alpha, x = np.broadcast_arrays(np.asarray(alpha), np.asarray(x))
    return _run(_gamma_grad_loop, dtype, alpha, x)
