"""Registry-driven forward mode: every differentiable op declares a forward-mode rule
(``OpDef.jvp``) and every rule is right.

For each differentiable op and each of its gradient samples (float64), the tangent
that ``tg.forward_ad`` computes through the op's rule is compared with central
differences of the op's kernel and with ``torch.func.jvp`` of its PyTorch oracle;
forward over reverse (the tangent of the op's vjp, which runs the rules of the
vjp's own ops) is compared with central differences of the vjp and with PyTorch's
``jvp`` of ``vjp``. A differentiable op without a rule fails ``test_every_op_has_a_rule``.
The main suite checks each op's first gradient sample; the exhaustive tier (``-m slow``)
the others.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import forward_ad as fwAD
from tapegrad.dispatch import bind
from tapegrad.tensor import buffer

torch = pytest.importorskip("torch")

F64 = np.dtype(np.float64)
OPS = [op for op in tg.ops_registry.list_ops() if op.differentiable]
# a composite's tangents come from its constituent ops' rules: its samples still run
EPS = 1e-6
TOL = {"rtol": 1e-5, "atol": 1e-7}
SECOND_MAX_ELEMENTS = 64


def _float_pos(args):
    return [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]


def _samples(where=lambda s: True):
    """Each op's gradient samples (``where`` them): the first runs in the main suite,
    the others in the exhaustive tier (marked slow)."""
    out = []
    for op in OPS:
        first = True
        for k, s in enumerate(op.samples(F64) if op.samples else ()):
            if s.grad and _float_pos(s.args) and where(s):
                out.append(pytest.param(op, s, id=f"{op.name}-sample{k}",
                                        marks=() if first else pytest.mark.slow))
                first = False
    return out


SAMPLES = _samples()
SMALL = _samples(lambda s: sum(a.size for a in s.args if isinstance(a, np.ndarray))
                 <= SECOND_MAX_ELEMENTS)


def _tangents(op, args, seed):
    rng = np.random.default_rng(seed)
    ts = {i: rng.standard_normal(args[i].shape) for i in _float_pos(args)}
    if op.name in ("linalg_cholesky", "cholesky"):
        # our kernel factors sym(A), PyTorch's reads A's lower triangle: the two agree
        # on symmetric perturbations (the ones the factorization is defined for)
        ts = {i: (t + np.swapaxes(t, -1, -2)) / 2 for i, t in ts.items()}
    return ts


def _np(t):
    return t.numpy(force=True)  # also PyTorch's ZeroTensor (a tangent known to be 0)


def _torch_forward_trusted(op, attrs):
    """Whether PyTorch's forward mode is a reference for this call. Not where it is
    wrong or absent (checked against central differences instead, which every sample
    also is): scatter_reduce's "prod" tangent in PyTorch 2.13 differs from central
    differences of PyTorch's own forward (ours agrees with them), and index_reduce has
    no forward-mode formula in PyTorch (NotImplementedError), nor do ormqr,
    segment_reduce and sparse COO tensors (sparse_mm, sparse_coo_to_dense: "Cannot
    access data pointer of Tensor that doesn't have storage")."""
    if op.name == "scatter_reduce" and attrs.get("reduce") == "prod":
        return False
    return op.name not in ("index_reduce", "ormqr", "segment_reduce", "sparse_mm",
                           "sparse_coo_to_dense")


def _torch_differentiates(op, args, attrs):
    """Whether the op's torch oracle is differentiable there (some call a PyTorch
    backward function, whose result does not require grad)."""
    targs = _torch_args(args)
    for i in _float_pos(args):
        targs[i].requires_grad_(True)
    return any(isinstance(o, torch.Tensor) and o.requires_grad
               for o in _outs(op.torch(torch, *targs, **attrs)))


def _outs(res):
    return list(res) if isinstance(res, tuple) else [res]


def _float_outs(res):
    return [o for o in _outs(res) if np.asarray(o).dtype.kind == "f"]


def _tensors(args):
    return [tg.tensor(a.copy()) if isinstance(a, np.ndarray) else a for a in args]


def _ours(op, args, attrs, tangents):
    """The op's output tangents by forward mode (zeros where the rule gave none)."""
    with fwAD.dual_level():
        ts = _tensors(args)
        for i, t in tangents.items():
            ts[i] = fwAD.make_dual(ts[i], tg.tensor(t))
        outs = [o for o in _outs(bind(op, *ts, **attrs)) if o.is_floating_point()]
        res = []
        for o in outs:
            p, t = fwAD.unpack_dual(o)
            res.append(np.zeros(tuple(p.shape)) if t is None else np.asarray(buffer(t)))
    return res


def _central(f, args, tangents):
    """(f(x + eps t) - f(x - eps t)) / 2 eps for each float output of f."""
    def at(sign):
        moved = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        for i, t in tangents.items():
            moved[i] = np.asarray(args[i] + sign * EPS * t)
        return [np.asarray(o, dtype=np.float64) for o in _float_outs(f(moved))]
    return [(p - m) / (2 * EPS) for p, m in zip(at(1), at(-1))]


def _torch_args(args):
    return [torch.from_numpy(np.array(a, order="C")) if isinstance(a, np.ndarray) else a
            for a in args]


def _torch_jvp(op, args, attrs, tangents):
    pos = sorted(tangents)
    targs = _torch_args(args)

    def f(*xs):
        full = list(targs)
        for i, x in zip(pos, xs):
            full[i] = x
        return tuple(o for o in _outs(op.torch(torch, *full, **attrs))
                     if isinstance(o, torch.Tensor) and o.is_floating_point())
    _, tout = torch.func.jvp(f, tuple(targs[i] for i in pos),
                             tuple(torch.from_numpy(tangents[i]) for i in pos))
    return [_np(t) for t in tout]


def test_every_op_has_a_rule():
    missing = [op.name for op in OPS if op.jvp is None and op.composite is None]
    assert not missing, f"differentiable ops without a forward-mode rule: {missing}"


@pytest.mark.parametrize("op,sample", SAMPLES)
def test_rule_matches_finite_differences(op, sample):
    args, attrs = list(sample.args), sample.attrs
    tangents = _tangents(op, args, 0)
    ours = _ours(op, args, attrs, tangents)
    fd = _central(lambda a: op.compute(*a, **attrs), args, tangents)
    assert len(ours) == len(fd)
    for o, e in zip(ours, fd):
        np.testing.assert_allclose(o, e, rtol=1e-5, atol=1e-6)


# ops whose torch oracle is a backward function PyTorch does not differentiate
# (conv2d_input_grad...) are checked against finite differences only
_DIFFERENTIATES = {}


def _oracle_differentiates(op, sample):
    """``_torch_differentiates``, a property of the op: asked of its first sample only
    (every xdist worker lists these cases at collection)."""
    if op.name not in _DIFFERENTIATES:
        _DIFFERENTIATES[op.name] = _torch_differentiates(op, sample.args, sample.attrs)
    return _DIFFERENTIATES[op.name]


TORCH_SAMPLES = [p for p in SAMPLES if p.values[0].torch is not None
                 and _torch_forward_trusted(p.values[0], p.values[1].attrs)
                 and _oracle_differentiates(*p.values)]


@pytest.mark.parametrize("op,sample", TORCH_SAMPLES)
def test_rule_matches_torch_func_jvp(op, sample):
    args, attrs = list(sample.args), sample.attrs
    tangents = _tangents(op, args, 1)
    theirs = _torch_jvp(op, args, attrs, tangents)
    ours = _ours(op, args, attrs, tangents)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, **TOL)


def _vjp_fn(op, attrs, pos, cot):
    """args -> the op's gradients of the float inputs for cotangents ``cot``, via
    tg.grad recording (so forward mode can run through the backward)."""
    def f(args):
        ts = list(args)
        ins = [ts[i] for i in pos]
        outs = [o for o in _outs(bind(op, *ts, **attrs)) if o.is_floating_point()]
        gs = tg.grad(outs, ins, grad_outputs=[tg.tensor(c) for c in cot], create_graph=True,
                     allow_unused=True, materialize_grads=True)
        return gs
    return f


@pytest.mark.parametrize("op,sample", SMALL)
def test_forward_over_reverse(op, sample):
    """The tangent of the vjp (the rules of the vjp's own ops, through the walker)
    against central differences of the vjp, and against PyTorch's jvp of its vjp."""
    args, attrs = list(sample.args), sample.attrs
    pos = _float_pos(args)
    tangents = _tangents(op, args, 2)
    outs = _float_outs(op.compute(*args, **attrs))
    rng = np.random.default_rng(3)
    cot = [rng.standard_normal(np.shape(o)) for o in outs]
    vjp = _vjp_fn(op, attrs, pos, cot)

    def fd_vjp(a):
        ts = _tensors(a)
        for i in pos:
            ts[i].requires_grad_(True)
        return tuple(np.asarray(buffer(g)) for g in vjp(ts))
    fd = _central(fd_vjp, args, tangents)

    with fwAD.dual_level():
        ts = _tensors(args)
        for i in pos:
            ts[i] = fwAD.make_dual(ts[i].requires_grad_(True), tg.tensor(tangents[i]))
        gs = vjp(ts)
        ours = [np.asarray(buffer(t)) if t is not None else np.zeros(tuple(g.shape))
                for g, t in (fwAD.unpack_dual(g) for g in gs)]
    for o, e in zip(ours, fd):
        np.testing.assert_allclose(o, e, rtol=1e-4, atol=1e-6)

    if op.torch is None or not _torch_forward_trusted(op, attrs) or \
            not _torch_differentiates(op, args, attrs):
        return
    targs = _torch_args(args)

    def tvjp(*xs):
        full = list(targs)
        for i, x in zip(pos, xs):
            full[i] = x

        def f(*ys):
            full2 = list(full)
            for i, y in zip(pos, ys):
                full2[i] = y
            return tuple(o for o in _outs(op.torch(torch, *full2, **attrs))
                         if isinstance(o, torch.Tensor) and o.is_floating_point())
        _, back = torch.func.vjp(f, *xs)
        return back(tuple(torch.from_numpy(c) for c in cot))
    _, theirs = torch.func.jvp(tvjp, tuple(targs[i] for i in pos),
                               tuple(torch.from_numpy(tangents[i]) for i in pos))
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, _np(t), rtol=1e-5, atol=1e-7)
