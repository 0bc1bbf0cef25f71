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

Methods (Cody-Waite and log/erf constants from Cephes' single-precision library,
S. L. Moshier; the exp polynomial is a minimax fit):
- exp: ``t = x log2 e + 1.5 * 2**23`` rounds to ``k`` in the low bits of ``t``
  (``kf = t - 1.5 * 2**23``; no floor, no float->int conversion), ``r = x - k ln2`` in
  two parts, ``exp(r) = 1 + r + r**2 q(r)`` with ``q`` of degree 4, scaled by ``2**k``
  built from ``t``'s bits: in two halves for the full range, in one step times a
  ``2**-64`` folded into the polynomial for ``exp`` of a non-positive argument (so
  denormal results come out right). The clamps are selects ordered so that NaN passes
  through them (x86 min/max return their second operand on NaN): no NaN select.
- log: exponent and mantissa from the bits (denormals pre-scaled by ``2**23``),
  mantissa in ``[sqrt(1/2), sqrt(2))``, degree-9 polynomial.
- log2, log10: the same reduction, ``e + log(m) log2(e)`` and ``e log10(2) + log(m)
  log10(e)`` (``log10(2)`` in two parts): log2 exact at powers of two, log10 at the
  float32 nearest each power of ten, as NumPy's; 1.75 and 1.83 ulp at most.
- exp2: ``k = round(x)`` by the same trick, ``2**k exp((x - k) ln2)``: exact at integers.
- log1p: ``u = 1 + x``; ``log(u) * x / (u - 1)`` (Goldberg's trick; exact ``u - 1``).
- expm1: ``2**k (exp(r) - 1) + (2**k - 1)`` with ``exp(r) - 1 = r + r**2 q(r)``, as
  ``2 (h u + (h - 1/2))``, ``h = 2**(k-1)`` (no overflow before the last step); no
  branch, no cancellation.
- tanh: ``e = expm1(-2x)`` the same way (clamped to ``|x| <= 10``, one-constant
  reduction), ``tanh = -e / (e + 2)``: one division, no branch. (A rational
  ``x P(x**2) / Q(x**2)``, Eigen's, is cheaper but its float32 evaluation errs by
  4.7 ulp near ``|x| = 7``.)
- sigmoid: ``e = exp(-|x|)``; ``n / (1 + e)`` with ``n = e`` for ``x < 0`` (one blend
  on the sign bit), else 1: one division, no overflow, and denormal results for
  ``x < -87`` stay accurate.
- softplus: ``max(x, 0) + log1p(exp(-|x|))`` from the two helpers above (no overflow).
- erf: ``x + x T(x**2)`` below ``|x| = 0.921875``; above, ``1 - exp(L(|x|))`` with
  ``L`` a degree-6 polynomial fitted to ``log(erfc)`` on ``[0.921875, 4]`` (weighted
  by ``erfc``, the error it makes in the result), ``|x|`` clamped to 4, where erf
  rounds to 1; the sign by one blend. Both branches are computed and one selected:
  no division, ~1.6x faster than Cephes' erfcf split with its two rational tails,
  1.15 ulp at most (every 61st float32 in ``[1e-8, 120]``). The coefficients are
  minimax (Lawson) fits of relative error in float64, rounded to float32.

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
_F_MAGIC = np.float32(12582912.0)  # 1.5 * 2**23: (v + _F_MAGIC) - _F_MAGIC rounds v
_F_LN2 = np.float32(0.693147180559945309)
_F_LOG10E = np.float32(0.434294481903251828)
_F_LOG10_2HI = np.float32(0.301025390625)  # 0x3e9a2000: 11 significant bits
_F_LOG10_2LO = np.float32(4.6050389811980175e-06)  # log10(2) - _F_LOG10_2HI


_Q = (1.3814539415761828e-3, 8.36874544620514e-3, 4.166838899254799e-2,
      1.666652113199234e-1, 4.999999403953552e-1)
_Q4, _Q3, _Q2, _Q1, _Q0 = [np.float32(c) for c in _Q]
# the same scaled by 2**-64 (exact), for _expneg_f32
_S4, _S3, _S2, _S1, _S0 = [np.float32(c * 2.0 ** -64) for c in _Q]
_F_2M64 = np.float32(2.0 ** -64)


@_helper
def _exp_poly(r):
    # (exp(r) - 1 - r) / r**2 for |r| <= ln2 / 2 (minimax; exp's error < 0.07 ulp)
    p = _Q4 * r + _Q3
    p = p * r + _Q2
    p = p * r + _Q1
    return p * r + _Q0


@_helper
def _exp_f32(x):
    # the clamps are written so that NaN passes through them (x86 min/max operand order)
    xc = np.float32(-104.0) if x < np.float32(-104.0) else x
    xc = np.float32(89.0) if xc > np.float32(89.0) else xc
    t = xc * _F_LOG2E + _F_MAGIC
    kf = t - _F_MAGIC
    r = xc - kf * _F_C1
    r = r - kf * _F_C2
    y = (_exp_poly(r) * r + _F1) * r + _F1
    return _f32_ldexp_magic(y, t)


@_helper
def _expneg_f32(x):  # exp for x <= 0 (or NaN): k in [-150, 0], one scaling step
    xc = np.float32(-104.0) if x < np.float32(-104.0) else x
    t = xc * _F_LOG2E + _F_MAGIC
    kf = t - _F_MAGIC
    r = xc - kf * _F_C1
    r = r - kf * _F_C2
    # y = exp(r) * 2**-64 (the polynomial's coefficients are scaled, exactly), then
    # y * 2**(k + 64): 2**(k + 64) is a normal float, and the product rounds once
    # into the denormals
    p = _S4 * r + _S3
    p = p * r + _S2
    p = p * r + _S1
    p = p * r + _S0
    y = (p * r + _F_2M64) * r + _F_2M64
    return y * _f32_pow2_magic(t, 191)


@_helper
def _log_reduce(x):
    # x = 2**ef * (1 + f), 1 + f in [sqrt(1/2), sqrt(2)); y: the polynomial part of
    # log(1 + f) - f + f**2 / 2, z = f**2
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
    return ef, f, y * f * z, z


@_helper
def _log_special(x, r):
    # a logarithm's result r, or its value at inf, 0, a negative x and NaN
    r = _F_INF if x == _F_INF else r
    r = -_F_INF if x == _F0 else r
    r = _F_NAN if x < _F0 else r
    return x if x != x else r


@_helper
def _log_f32(x):
    ef, f, y, z = _log_reduce(x)
    y = y + _F_C2 * ef
    y = y - _FH * z
    r = f + y
    r = r + _F_C1 * ef
    return _log_special(x, r)


@_helper
def _log2_f32(x):
    # ef + log(1 + f) log2(e): exactly ef at a power of two (f == 0)
    ef, f, y, z = _log_reduce(x)
    return _log_special(x, ef + (f + (y - _FH * z)) * _F_LOG2E)


@_helper
def _log10_f32(x):
    # ef log10(2) (in two parts: the first exact for |ef| < 2**11) + log(1 + f) log10(e)
    ef, f, y, z = _log_reduce(x)
    return _log_special(x, ef * _F_LOG10_2HI + (ef * _F_LOG10_2LO + (f + (y - _FH * z))
                                                * _F_LOG10E))


@_helper
def _logaddexp_f32(x, y):
    # as NumPy's: x + log 2 where x == y (two equal infinities give that infinity), else
    # the larger plus log1p(exp(-|x - y|)); a NaN passes through the difference
    m = x if x > y else y
    r = m + _log1p_f32(_expneg_f32(-np.abs(x - y)))
    return x + _F_LN2 if x == y else r


@_helper
def _exp2_f32(x):
    # 2**k exp(f ln2), k = round(x), |f| <= 1/2: exactly 2**k at an integer
    xc = np.float32(-152.0) if x < np.float32(-152.0) else x
    xc = np.float32(129.0) if xc > np.float32(129.0) else xc
    t = xc + _F_MAGIC
    r = (xc - (t - _F_MAGIC)) * _F_LN2
    y = (_exp_poly(r) * r + _F1) * r + _F1
    return _f32_ldexp_magic(y, t)


@_helper
def _log1p_f32(x):
    u = x + _F1
    d = u - _F1
    r = _log_f32(u) * (x / d)
    r = x if d == _F0 else r
    return x if x == _F_INF else r


@_helper
def _expm1_f32(x):
    # 2**k * (exp(r) - 1) + (2**k - 1), computed as 2 * (h * u + (h - 1/2)) with
    # h = 2**(k-1) (normal for k in [-43, 128]); no cancellation for k != 0
    xc = np.float32(-30.0) if x < np.float32(-30.0) else x
    xc = np.float32(89.0) if xc > np.float32(89.0) else xc
    t = xc * _F_LOG2E + _F_MAGIC
    kf = t - _F_MAGIC
    r = xc - kf * _F_C1
    r = r - kf * _F_C2
    u = (_exp_poly(r) * r) * r + r  # exp(r) - 1 = r + r**2 q(r), exact in r
    h = _f32_pow2_magic(t, 126)
    return (h * u + (h - _FH)) * _F2


@_helper
def _tanh_f32(x):
    # e = expm1(-2x) = 2**k * u + (2**k - 1), tanh(x) = -e / (e + 2); |x| <= 10 suffices
    # (tanh rounds to +-1 from 9.02 on)
    xc = np.float32(10.0) if x > np.float32(10.0) else x
    xc = np.float32(-10.0) if xc < np.float32(-10.0) else xc
    t = xc * np.float32(-2.88539008177792682) + _F_MAGIC
    kf = t - _F_MAGIC
    # one-constant reduction: its error (k * 2e-9 in r) is damped by tanh's slope
    # (d tanh / d log(e + 1) ~ 2 * exp(-2|x|)) wherever k != 0
    r = xc * np.float32(-2.0) - kf * _F_LN2
    u = (_exp_poly(r) * r) * r + r  # exp(r) - 1 = r + r**2 q(r), exact in r
    s = _f32_pow2_magic(t, 127)
    e = s * u + (s - _F1)
    return -e / (e + _F2)


@_helper
def _sigmoid_f32(x):
    # e = exp(-|x|): 1 / (1 + e) for x >= 0, e / (1 + e) below (no overflow, and
    # denormal results for x < -87 stay accurate)
    e = _expneg_f32(-np.abs(x))
    num = _f32_select_sign(x, e, _F1)  # e for x < 0 (or -0.0, where e = 1)
    return num / (_F1 + e)


@_helper
def _softplus_f32(x):
    # max(x, 0) + log1p(exp(-|x|)): no overflow; NaN passes (through exp and log1p)
    m = x if x > _F0 else _F0
    return m + _log1p_f32(_expneg_f32(-np.abs(x)))


@_helper
def _erf_f32(x):
    # |x| < 0.921875: x + x T(x**2); above: 1 - exp(L(|x|)), L ~ log(erfc) on
    # [0.921875, 4] (erf rounds to 1 from 3.92 on), with x's sign. Both branches
    # are computed (no division) and one is selected; NaN passes through both
    a = np.abs(x)
    z = x * x
    p = np.float32(-0.0005990856443531811)
    p = p * z + np.float32(0.0049931807443499565)
    p = p * z - np.float32(0.026766616851091385)
    p = p * z + np.float32(0.1128181591629982)
    p = p * z - np.float32(0.37612494826316833)
    p = p * z + np.float32(0.12837915122509003)
    small = p * x + x
    t = np.float32(4.0) if a > np.float32(4.0) else a
    q = np.float32(0.00019572160090319812)
    q = q * t - np.float32(0.003041102085262537)
    q = q * t + np.float32(0.0222184881567955)
    q = q * t - np.float32(0.10391410440206528)
    q = q * t - np.float32(0.6372022032737732)
    q = q * t - np.float32(1.1276637315750122)
    q = q * t - np.float32(0.00019854253332596272)
    big = _F1 - _expneg_f32(q)
    big = _f32_select_sign(x, -big, big)
    return small if a < np.float32(0.921875) else big
'''

# op -> (helper function, helpers it calls)
HELPERS = {
    "exp": ("_exp_f32", ("_exp_poly",)),
    "log": ("_log_f32", ("_log_reduce", "_log_special")),
    "log2": ("_log2_f32", ("_log_reduce", "_log_special")),
    "log10": ("_log10_f32", ("_log_reduce", "_log_special")),
    "exp2": ("_exp2_f32", ("_exp_poly",)),
    "log1p": ("_log1p_f32", ("log",)),
    "expm1": ("_expm1_f32", ("_exp_poly",)),
    "tanh": ("_tanh_f32", ("_exp_poly",)),
    "sigmoid": ("_sigmoid_f32", ("_expneg",)),
    # not IR ops: exp of a non-positive argument; the shared polynomial
    "_expneg": ("_expneg_f32", ("_exp_poly",)),
    "_exp_poly": ("_exp_poly", ()),
    "_log_reduce": ("_log_reduce", ()),
    "_log_special": ("_log_special", ()),
    "erf": ("_erf_f32", ("_expneg",)),
    "softplus": ("_softplus_f32", ("log1p", "_expneg")),
    "logaddexp": ("_logaddexp_f32", ("log1p", "_expneg")),
}


_PREAMBLE = """import numpy as np
from tapegrad.devices.cpu import jit_helpers as _jit_helpers
_h = _jit_helpers()
_f32_ldexp_magic, _f32_pow2_magic = _h.f32_ldexp_magic, _h.f32_pow2_magic
_f32_select_sign = _h.f32_select_sign
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
