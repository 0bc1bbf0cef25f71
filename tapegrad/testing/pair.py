"""``pair_test``: an op against another framework's version of it, sample by sample.

>>> import torch, tapegrad as tg
>>> report = tg.testing.pair_test("tanh", torch.tanh)        # doctest: +SKIP
>>> report.ok, len(report.rows)                               # doctest: +SKIP
(True, 12)

For every sample of the op's registry declaration (or the ``samples`` given), it runs
the op in tapegrad and ``reference`` in the framework (``"torch"`` or ``"jax"``) on
the same inputs and compares: the forward values; the vjp for a random cotangent
(``tg.grad`` vs ``torch.autograd.grad`` / ``jax.vjp``); the jvp for a random tangent
(``tg.functional.jvp`` vs ``torch.func.jvp`` / ``jax.jvp``); the second order, the
vjp of the vjp's inner product with a random vector. Each check of each sample is a
row of the report (its worst absolute and relative error, or the exception it
raised); ``pair_test`` raises an AssertionError naming the failing rows unless
``raise_on_error=False``.
"""
from dataclasses import dataclass, field

import numpy as np

from ..autodiff import grad as _tg_grad
from ..functional import jvp as _tg_jvp
from ..ops.creation import tensor as _tensor
from ..ops_registry import get as _get

__all__ = ["pair_test", "PairReport"]

CHECKS = ("forward", "vjp", "jvp", "vjp_of_vjp")


@dataclass
class PairReport:
    """The rows of a pair test: ``(sample index, check, max abs error, max rel error,
    ok, error message or None)``."""
    op: str
    framework: str
    rows: list = field(default_factory=list)

    @property
    def ok(self):
        return all(r[4] for r in self.rows)

    def failures(self):
        return [r for r in self.rows if not r[4]]

    def __str__(self):
        lines = [f"pair_test {self.op} vs {self.framework}: "
                 f"{sum(r[4] for r in self.rows)}/{len(self.rows)} checks ok"]
        for k, check, ab, rel, ok, err in self.rows:
            lines.append(f"  sample {k} {check:<11} {'ok ' if ok else 'BAD'} abs {ab:.2e} "
                         f"rel {rel:.2e}" + (f"  {err}" if err else ""))
        return "\n".join(lines)


def _is_array(a):
    return isinstance(a, np.ndarray)


def _errors(got, exp, rtol, atol):
    got = np.asarray(got, dtype=np.float64)
    exp = np.asarray(exp, dtype=np.float64)
    if got.shape != exp.shape:
        return np.inf, np.inf, False, f"shape {got.shape} vs {exp.shape}"
    if got.size == 0:
        return 0.0, 0.0, True, None
    d = np.abs(got - exp)
    d = np.where(np.isnan(got) & np.isnan(exp), 0.0, d)
    ab = float(np.nanmax(d)) if d.size else 0.0
    rel = float(np.nanmax(d / np.maximum(np.abs(exp), 1e-300)))
    ok = bool(np.all(d <= atol + rtol * np.abs(exp)))
    return ab, rel, ok, None


class _Torch:
    name = "torch"

    def __init__(self):
        import torch
        self.t = torch

    def arr(self, a, grad=False):
        t = self.t.from_numpy(np.array(a, copy=True))
        return t.requires_grad_(True) if grad else t

    def host(self, x):
        return x.detach().numpy(force=True)  # a ZeroTensor (a zero jvp) too

    def call(self, ref, args, attrs):
        r = ref(*args, **attrs)
        return list(r) if isinstance(r, (tuple, list)) else [r]

    def vjp(self, ref, args, attrs, pos, cots):
        outs = self.call(ref, args, attrs)
        outs = [o for o in outs if o.is_floating_point()]
        gs = self.t.autograd.grad(outs, [args[i] for i in pos],
                                  [self.arr(c) for c in cots], allow_unused=True,
                                  create_graph=True)
        return [self.t.zeros_like(args[i]) if g is None else g for i, g in zip(pos, gs)]

    def vjp_of_vjp(self, ref, args, attrs, pos, cots, ws):
        gs = self.vjp(ref, args, attrs, pos, cots)
        s = sum((g * self.arr(w)).sum() for g, w in zip(gs, ws))
        if not s.requires_grad:
            return [np.zeros_like(w) for w in ws]
        hs = self.t.autograd.grad(s, [args[i] for i in pos], allow_unused=True)
        return [np.zeros_like(w) if h is None else self.host(h) for h, w in zip(hs, ws)]

    def jvp(self, ref, args, attrs, pos, tans):
        def f(*xs):
            full = list(args)
            for i, x in zip(pos, xs):
                full[i] = x
            outs = self.call(ref, full, attrs)
            return tuple(o for o in outs if o.is_floating_point())
        prim = tuple(args[i].detach() for i in pos)
        _, out = self.t.func.jvp(f, prim, tuple(self.arr(t) for t in tans))
        return [self.host(o) for o in out]


class _Jax:
    name = "jax"

    def __init__(self):
        import jax
        self.jax = jax
        self.jnp = jax.numpy

    def arr(self, a, grad=False):
        return self.jnp.asarray(a)

    def host(self, x):
        return np.asarray(x)

    def call(self, ref, args, attrs):
        r = ref(*args, **attrs)
        return list(r) if isinstance(r, (tuple, list)) else [r]

    def _f(self, ref, args, attrs, pos):
        def f(*xs):
            full = list(args)
            for i, x in zip(pos, xs):
                full[i] = x
            outs = self.call(ref, full, attrs)
            return tuple(o for o in outs if self.jnp.issubdtype(o.dtype, self.jnp.floating))
        return f

    def vjp(self, ref, args, attrs, pos, cots):
        f = self._f(ref, args, attrs, pos)
        _, pull = self.jax.vjp(f, *[args[i] for i in pos])
        return list(pull(tuple(self.jnp.asarray(c) for c in cots)))

    def vjp_of_vjp(self, ref, args, attrs, pos, cots, ws):
        f = self._f(ref, args, attrs, pos)

        def s(*xs):
            _, pull = self.jax.vjp(f, *xs)
            gs = pull(tuple(self.jnp.asarray(c) for c in cots))
            return sum((g * self.jnp.asarray(w)).sum() for g, w in zip(gs, ws))
        hs = self.jax.grad(s, argnums=tuple(range(len(pos))))(*[args[i] for i in pos])
        return [self.host(h) for h in hs]

    def jvp(self, ref, args, attrs, pos, tans):
        f = self._f(ref, args, attrs, pos)
        _, out = self.jax.jvp(f, tuple(args[i] for i in pos),
                              tuple(self.jnp.asarray(t) for t in tans))
        return [self.host(o) for o in out]


def _tg_call(op, args, attrs):
    from ..dispatch import bind
    r = bind(op, *args, **attrs)
    return list(r) if isinstance(r, tuple) else [r]


def pair_test(op, reference, *, framework="torch", samples=None, dtype=np.float64,
              checks=CHECKS, rtol=1e-6, atol=1e-9, seed=0, raise_on_error=True):
    """Compare registry op ``op`` (a name or an OpDef) with ``reference``, the same
    function in ``framework`` (``"torch"``: of torch.Tensors, ``"jax"``: of JAX
    arrays; attributes as keywords), on each of the op's samples (``op.samples(dtype)``
    unless ``samples`` is given: a list of ``(args, attrs)`` or ``Sample``s). Returns
    a ``PairReport``; raises an AssertionError listing the failing rows unless
    ``raise_on_error=False``."""
    op = _get(op) if isinstance(op, str) else op
    fw = {"torch": _Torch, "jax": _Jax}.get(framework)
    if fw is None:
        raise ValueError(f"pair_test: framework must be 'torch' or 'jax', got {framework!r}")
    fw = fw()
    bad = [c for c in checks if c not in CHECKS]
    if bad:
        raise ValueError(f"pair_test: unknown checks {bad}; choose from {CHECKS}")
    samples = list(op.samples(dtype) if samples is None else samples)
    if not samples:  # nothing compared must not read as a pass
        raise ValueError(f"pair_test {op.name}: the op declares no samples; pass "
                         f"samples=[(args, attrs), ...] (arrays and attributes to run)")
    report = PairReport(op.name, fw.name)
    rng = np.random.default_rng(seed)

    def row(k, check, fn):
        try:
            got, exp = fn()
            ab, rel, ok, err = 0.0, 0.0, True, None
            if len(got) != len(exp):
                ab, rel, ok, err = np.inf, np.inf, False, f"{len(got)} vs {len(exp)} values"
            for g, e in zip(got, exp):
                a2, r2, ok2, err2 = _errors(g, e, rtol, atol)
                ab, rel, ok, err = max(ab, a2), max(rel, r2), ok and ok2, err or err2
        except Exception as e:  # a failing side is a failing row, reported
            ab, rel, ok, err = np.inf, np.inf, False, f"{type(e).__name__}: {e}"
        report.rows.append((k, check, ab, rel, ok, err))

    for k, s in enumerate(samples):
        args, attrs = (s.args, s.attrs) if hasattr(s, "args") else (s[0], s[1])
        args, attrs = list(args), dict(attrs)
        pos = [i for i, a in enumerate(args) if _is_array(a) and a.dtype.kind == "f"]
        grad_ok = op.differentiable and pos and getattr(s, "grad", True)

        def tg_args(grad=False):
            return [(_tensor(a, requires_grad=grad and i in pos) if _is_array(a) else a)
                    for i, a in enumerate(args)]

        def fw_args(grad=False):
            return [fw.arr(a, grad=grad and i in pos) if _is_array(a) else a
                    for i, a in enumerate(args)]

        outs = []

        def forward():
            got = [o.detach().numpy() for o in _tg_call(op, tg_args(), attrs)]
            outs[:] = got
            return got, [fw.host(o) for o in fw.call(reference, fw_args(), attrs)]
        if "forward" in checks:
            row(k, "forward", forward)
        if not grad_ok:
            continue
        if not outs:
            outs = [o.detach().numpy() for o in _tg_call(op, tg_args(), attrs)]
        fl = [o for o in outs if o.dtype.kind == "f"]
        cots = [rng.standard_normal(o.shape).astype(o.dtype) for o in fl]
        tans = [rng.standard_normal(args[i].shape).astype(args[i].dtype) for i in pos]
        ws = [rng.standard_normal(args[i].shape).astype(args[i].dtype) for i in pos]

        def tg_vjp(create_graph=False):
            ta = tg_args(grad=True)
            res = [o for o in _tg_call(op, ta, attrs) if o.dtype.is_floating_point]
            gs = _tg_grad(res, [ta[i] for i in pos], grad_outputs=[_tensor(c) for c in cots],
                          allow_unused=True, create_graph=create_graph)
            return ta, [_tensor(np.zeros(args[i].shape, args[i].dtype)) if g is None else g
                        for i, g in zip(pos, gs)]

        if "vjp" in checks:
            row(k, "vjp", lambda: ([g.detach().numpy() for g in tg_vjp()[1]],
                                   [fw.host(g) for g in fw.vjp(reference, fw_args(True),
                                                               attrs, pos, cots)]))
        if "jvp" in checks:
            def jvp():
                ta = tg_args()

                def f(*xs):
                    full = list(ta)
                    for i, x in zip(pos, xs):
                        full[i] = x
                    return tuple(o for o in _tg_call(op, full, attrs)
                                 if o.dtype.is_floating_point)
                _, out = _tg_jvp(f, tuple(ta[i] for i in pos), tuple(_tensor(t) for t in tans))
                return ([o.detach().numpy() for o in out],
                        fw.jvp(reference, fw_args(), attrs, pos, tans))
            row(k, "jvp", jvp)
        if "vjp_of_vjp" in checks:
            def second():
                ta, gs = tg_vjp(create_graph=True)
                s = None
                for g, w in zip(gs, ws):
                    t = (g * _tensor(w)).sum()
                    s = t if s is None else s + t
                if s is None or not s.requires_grad:
                    got = [np.zeros_like(w) for w in ws]
                else:
                    hs = _tg_grad(s, [ta[i] for i in pos], allow_unused=True)
                    got = [np.zeros_like(w) if h is None else h.detach().numpy()
                           for h, w in zip(hs, ws)]
                return got, fw.vjp_of_vjp(reference, fw_args(True), attrs, pos, cots, ws)
            row(k, "vjp_of_vjp", second)
    if raise_on_error and not report.ok:
        raise AssertionError(str(report))
    return report
