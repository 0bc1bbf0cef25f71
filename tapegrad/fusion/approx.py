"""Vectorisable float32 approximations of transcendental functions, as source text.

Numba lowers ``np.exp``/``np.tanh`` on float32 to scalar libm calls (``expf``,
``tanhf``; PyPI's llvmlite has no SVML), which stops LLVM's loop vectoriser. These
helpers use only arithmetic, selects, ``floor`` and bit manipulations on 32-bit
integer lanes (``devices.cpu.jit_helpers``: Numba's own integer arithmetic is int64,
whose conversions from float32 AVX2 cannot vectorise), so a kernel that inlines them
vectorises. They live in one generated module (``helpers()``), njit-ed once per
process with ``cache=True`` and fastmath ``{contract, nsz}`` only: the Cody-Waite
range reductions must not be reassociated, and NaN/inf must propagate. LLVM inlines
them into each kernel, keeping those per-instruction flags.

Methods (constants from Cephes' single-precision library, S. L. Moshier):
- exp: ``k = floor(x log2 e + 1/2)``, ``r = x - k ln2`` in two parts, degree-6
  polynomial, scaled by ``2**k`` built from exponent bits in two halves (so denormal
  results come out right).
- log: exponent and mantissa from the bits (denormals pre-scaled by ``2**23``),
  mantissa in ``[sqrt(1/2), sqrt(2))``, degree-9 polynomial.
- log1p: ``u = 1 + x``; ``log(u) * x / (u - 1)`` (Goldberg's trick; exact ``u - 1``).
- expm1: degree-10 Taylor polynomial for ``|x| < 0.69``, else ``exp(x) - 1``.
- tanh: odd degree-9 polynomial for ``|x| < 0.625``, else ``(1 - e) / (1 + e)`` with
  ``e = exp(-2|x|)`` (an exp of a non-positive argument needs no overflow clamp).
- sigmoid: ``e = exp(-|x|)``; ``1 / (1 + e)`` for ``x >= 0``, ``e / (1 + e)`` below
  (no overflow, and denormal results for ``x < -87`` stay accurate).
- erf: odd polynomial for ``|x| <= 1``; else ``1 - exp(-x*x) / |x| * P(1/x^2)``
  (Cephes' erfcf split), saturating to +-1 at ``|x| >= 4``.

Float64 kernels keep libm (``np.exp`` & co.), which is already correctly rounded to
within an ulp. ``HELPERS`` maps IR op -> (helper name, helpers it needs).
"""

SOURCE = '''
_F_LOG2E = np.float32(1.44269504088896341)
_F_C1 = np.float32(0.693359375)
_F_C2 = np.float32(-2.12194440e-4)
_F_SQRTHF = np.float32(0.707106781186547524)
_F_INF = np.float32(np.inf)
_F_NAN = np.float32(np.nan)
_F0 = np.float32(0.0)
_F1 = np.float32(1.0)
_F2 = np.float32(2.0)
_FH = np.float32(0.5)


@_helper
def _exp_f32(x):
    xc = x if x > np.float32(-104.0) else np.float32(-104.0)
    xc = xc if xc < np.float32(89.0) else np.float32(89.0)
    kf = np.floor(xc * _F_LOG2E + _FH)
    r = xc - kf * _F_C1
    r = r - kf * _F_C2
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    y = p * (r * r) + r + _F1
    y = _f32_ldexp(y, kf)
    return x if x != x else y


@_helper
def _expneg_f32(x):  # exp for x <= 0 (or NaN): _exp_f32 without the overflow clamp
    xc = x if x > np.float32(-104.0) else np.float32(-104.0)
    kf = np.floor(xc * _F_LOG2E + _FH)
    r = xc - kf * _F_C1
    r = r - kf * _F_C2
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    y = p * (r * r) + r + _F1
    y = _f32_ldexp(y, kf)
    return x if x != x else y


@_helper
def _log_f32(x):
    sub = x < np.float32(1.17549435e-38)
    xs = x * np.float32(8388608.0) if sub else x
    ef = _f32_exponent(xs) - (np.float32(149.0) if sub else np.float32(126.0))
    m = _f32_mantissa(xs)
    lo = m < _F_SQRTHF
    ef = ef - _F1 if lo else ef
    f = (m + m - _F1) if lo else (m - _F1)
    z = f * f
    y = np.float32(7.0376836292e-2)
    y = y * f - np.float32(1.1514610310e-1)
    y = y * f + np.float32(1.1676998740e-1)
    y = y * f - np.float32(1.2420140846e-1)
    y = y * f + np.float32(1.4249322787e-1)
    y = y * f - np.float32(1.6668057665e-1)
    y = y * f + np.float32(2.0000714765e-1)
    y = y * f - np.float32(2.4999993993e-1)
    y = y * f + np.float32(3.3333331174e-1)
    y = y * f * z
    y = y + _F_C2 * ef
    y = y - _FH * z
    r = f + y
    r = r + _F_C1 * ef
    r = _F_INF if x == _F_INF else r
    r = -_F_INF if x == _F0 else r
    r = _F_NAN if x < _F0 else r
    return x if x != x else r


@_helper
def _log1p_f32(x):
    u = x + _F1
    d = u - _F1
    r = _log_f32(u) * (x / d)
    r = x if d == _F0 else r
    return x if x == _F_INF else r


@_helper
def _expm1_f32(x):
    p = np.float32(2.7557319e-7)
    p = p * x + np.float32(2.7557319e-6)
    p = p * x + np.float32(2.4801587e-5)
    p = p * x + np.float32(1.9841270e-4)
    p = p * x + np.float32(1.3888889e-3)
    p = p * x + np.float32(8.3333333e-3)
    p = p * x + np.float32(4.1666667e-2)
    p = p * x + np.float32(1.6666667e-1)
    p = p * x + _FH
    small = p * (x * x) + x
    big = _exp_f32(x) - _F1
    return small if np.abs(x) < np.float32(0.69) else big


@_helper
def _tanh_f32(x):
    a = np.abs(x)
    z = x * x
    p = np.float32(-5.70498872745e-3)
    p = p * z + np.float32(2.06390887954e-2)
    p = p * z - np.float32(5.37397155531e-2)
    p = p * z + np.float32(1.33314422036e-1)
    p = p * z - np.float32(3.33332819422e-1)
    small = p * z * x + x
    e = _expneg_f32(-(a + a))
    big = (_F1 - e) / (_F1 + e)
    big = big if x >= _F0 else -big
    return small if a < np.float32(0.625) else big


@_helper
def _sigmoid_f32(x):
    e = _expneg_f32(-np.abs(x))
    s = _F1 / (_F1 + e)
    return s if x >= _F0 else e * s


@_helper
def _erf_f32(x):
    a = np.abs(x)
    z = x * x
    p = np.float32(7.853861353153693e-5)
    p = p * z - np.float32(8.010193625184903e-4)
    p = p * z + np.float32(5.188327685732524e-3)
    p = p * z - np.float32(2.685381193529856e-2)
    p = p * z + np.float32(1.128358514861418e-1)
    p = p * z - np.float32(3.761262582423300e-1)
    p = p * z + np.float32(1.128379165726710e+0)
    small = p * x
    q = _F1 / a
    w = q * q
    r1 = np.float32(2.326819970068386e-2)
    r1 = r1 * w - np.float32(1.387039388740657e-1)
    r1 = r1 * w + np.float32(3.687424674597105e-1)
    r1 = r1 * w - np.float32(5.824733027278666e-1)
    r1 = r1 * w + np.float32(6.210004621745983e-1)
    r1 = r1 * w - np.float32(4.944515323274145e-1)
    r1 = r1 * w + np.float32(3.404879937665872e-1)
    r1 = r1 * w - np.float32(2.741127028184656e-1)
    r1 = r1 * w + np.float32(5.638259427386472e-1)
    r2 = np.float32(-1.047766399936249e+1)
    r2 = r2 * w + np.float32(1.297719955372516e+1)
    r2 = r2 * w - np.float32(7.495518717768503e+0)
    r2 = r2 * w + np.float32(2.921019019210786e+0)
    r2 = r2 * w - np.float32(1.015265279202700e+0)
    r2 = r2 * w + np.float32(4.218463358204948e-1)
    r2 = r2 * w - np.float32(2.820767439740514e-1)
    r2 = r2 * w + np.float32(5.641895067754075e-1)
    r = r1 if a < _F2 else r2
    big = _F1 - _expneg_f32(-z) * q * r
    big = _F1 if a >= np.float32(4.0) else big
    big = big if x >= _F0 else -big
    return x if x != x else (small if a <= _F1 else big)
'''

# op -> (helper function, helpers it calls)
HELPERS = {
    "exp": ("_exp_f32", ()),
    "log": ("_log_f32", ()),
    "log1p": ("_log1p_f32", ("log",)),
    "expm1": ("_expm1_f32", ("exp",)),
    "tanh": ("_tanh_f32", ("_expneg",)),
    "sigmoid": ("_sigmoid_f32", ("_expneg",)),
    "_expneg": ("_expneg_f32", ()),  # not an IR op: exp of a non-positive argument
    "erf": ("_erf_f32", ("_expneg",)),
}


_PREAMBLE = """import numpy as np
from tapegrad.devices.cpu import jit_helpers as _jit_helpers
_h = _jit_helpers()
_f32_ldexp = _h.f32_ldexp
_f32_exponent, _f32_mantissa = _h.f32_exponent, _h.f32_mantissa


def _helper(f):
    return _h.helper(f, cache=True)
"""
_module = []


def module_source():
    """Source of the one module holding every helper (``helpers()`` imports it)."""
    from ..devices.cpu import HELPERS_VERSION
    return f"# tapegrad float32 approximations, jit helpers v{HELPERS_VERSION}\n" + \
        _PREAMBLE + SOURCE


def tag():
    """A digest of the helpers; kernels embed it so that Numba's disk cache of a
    kernel is not reused after the helpers (inlined into it) change."""
    import hashlib
    return hashlib.sha1(module_source().encode()).hexdigest()[:16]


def helpers():
    """The helper module, njit-ed with ``cache=True``: a process compiles (or loads)
    each helper once, however many kernels inline it."""
    if not _module:
        from ..devices import cpu
        _module.append(cpu.load_source(module_source(), prefix="_tg_approx_"))
    return _module[0]


def needed(ops):
    """Helper names needed by kernels using the IR ``ops`` (float32 only)."""
    need = []

    def add(op):
        for dep in HELPERS[op][1]:
            add(dep)
        if HELPERS[op][0] not in need:
            need.append(HELPERS[op][0])
    for op in ops:
        if op in HELPERS:
            add(op)
    return need
