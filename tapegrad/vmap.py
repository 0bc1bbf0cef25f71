"""``vmap``: a function of one example run on a batch, by batching rules.

Inside ``vmap(f)(xs)`` each batched argument is a ``BatchedTensor``: it looks like one
example (its shape, dtype and device are an example's) and holds the whole batch in
its ``value`` with the batch at dim 0. An op call with a batched tensor among its
arguments goes, from dispatch, to ``_batching``: the innermost level's tensors are
unwrapped, the op's batching rule (``OpDef.vmap``) computes the batch with ordinary
op calls on the values, and the results are wrapped again. Because the rule's calls
are ordinary calls, everything composes: values that require grad record (``grad``
of ``vmap``), values that are batched at an outer level dispatch again (nested
``vmap``), dual values carry tangents (``jacfwd`` by ``vmap`` of ``jvp``); and since a
call on batched tensors is recorded like any call (dispatch's recording sees the
example's shapes), a gradient taken inside ``vmap`` runs its adjoints on batched
tensors: ``vmap(grad(f))`` gives per-example gradients.

A batching rule is ``vmap(ctx, *values) -> output value(s)``, every output batched at
dim 0; ``ctx.batched[i]`` says whether input ``i`` is (batched values have the batch at
dim 0), ``ctx.size`` is the batch size, ``ctx.attrs`` the call's attributes, ``ctx.op``
the op, ``ctx.m`` the ops namespace, and ``ctx.ndim(i)`` an example's rank of input
``i``. Elementwise and broadcasting ops derive theirs (``_broadcasting``); an op with
none runs as a loop over the batch, with a warning naming it once.
"""
import contextlib
import itertools
import warnings

from . import ops as _ops
from .devices import xp_of as _xp_of
from .dispatch import bind
from .ops import _vmap as _rules
from .tape import state as _state
from .tensor import Tensor

__all__ = ["vmap", "BatchedTensor", "VmapCtx", "batching_rule_of", "batched_leaf", "flatten"]

_ids = itertools.count(1)


class BatchedTensor(Tensor):
    """A batch seen as one example inside ``vmap`` (see the module docstring).

    Its ``_data`` is a zero-stride stand-in with the example's shape and dtype (so
    metadata reads need no special case); its values live in ``_value``. Reading the
    values of one example (``item``, ``bool``, ``numpy``) is refused: they differ
    across the batch."""

    def __repr__(self):
        return f"BatchedTensor(level={self._vlevel}, shape={tuple(self.shape)}, " \
               f"value={self._value!r})"

    def _refuse(self, what):
        raise RuntimeError(f"vmap: {what} reads the data of one example, which is not "
                           f"defined inside vmap (the batch holds many); "
                           f"data-dependent Python control flow is not supported")

    def item(self):
        self._refuse("item()")

    def tolist(self):
        self._refuse("tolist()")

    def numpy(self, *, force=False):
        self._refuse("numpy()")

    def __array__(self, dtype=None, copy=None):
        self._refuse("converting to an array")

    def __bool__(self):
        self._refuse("bool()")

    def __float__(self):
        self._refuse("float()")

    def __int__(self):
        self._refuse("int()")

    def __index__(self):
        self._refuse("using a tensor as an index")

    def detach(self):
        return _batch(self._value.detach(), self._vlevel)

    @property
    def data(self):
        return self.detach()

    def _check_writable(self, op):
        raise RuntimeError(f"{op}: in-place operations on a batched tensor inside vmap are "
                           f"not supported; use the out-of-place op")


def _batch(value, level):
    """A BatchedTensor holding ``value`` (batch at dim 0) at ``level``."""
    t = BatchedTensor.__new__(BatchedTensor)
    v = value._data  # the stand-in of a lower level's batch is as good: shape and dtype
    t._data = _xp_of(v).broadcast_to(_xp_of(v).zeros((), dtype=v.dtype), tuple(v.shape[1:]))
    t._requires_grad = False
    t._grad = None
    t._node = None
    t._idx = 0
    t._vc = [0]
    t._value = value
    t._vlevel = level
    return t


def batched_leaf(t):
    """A new leaf that requires grad, holding the batch of ``t`` (a transform's own
    variable inside vmap: its gradient is per example)."""
    leaf = _batch(t._value, t._vlevel)
    leaf._requires_grad = True
    return leaf


class VmapCtx:
    """What a batching rule sees (see the module docstring)."""
    __slots__ = ("op", "attrs", "batched", "size", "m", "shapes")

    def ndim(self, i):
        return len(self.shapes[i])

    def dim(self, d, i=0):
        """The value's dim for an example's dim ``d`` of input ``i`` (negative dims
        counted from the example's rank; the batch is dim 0)."""
        n = self.ndim(i)
        if not -max(n, 1) <= d < max(n, 1):
            return d  # out of range: the op's own call explains it
        return (d % max(n, 1)) + 1

    def dims(self, dims, i=0):
        """``dims`` (an int, a tuple, or None for all of an example's dims) as value
        dims."""
        if dims is None:
            return tuple(range(1, self.ndim(i) + 1))
        if isinstance(dims, int):
            return self.dim(dims, i)
        return tuple(self.dim(d, i) for d in dims)

    def unbatched_to_batched(self, v):
        """``v`` (unbatched) with a batch dim of this call's size in front (a view)."""
        m = self.m
        return m.broadcast_to(m.unsqueeze(v, 0), (self.size,) + tuple(v.shape))

    def all_batched(self, values):
        """Every tensor input with the batch in front (unbatched ones broadcast)."""
        return [self.unbatched_to_batched(v) if not b and isinstance(v, Tensor) else v
                for v, b in zip(values, self.batched)]


def _broadcasting(ctx, *values):
    """Elementwise and broadcasting ops: each batched value gets singleton dims after
    its batch dim up to the widest example rank, so the batch lines up; unbatched
    values broadcast as they are."""
    m = ctx.m
    rank = max((ctx.ndim(i) for i, v in enumerate(values) if isinstance(v, Tensor)),
               default=0)
    args = []
    for i, (v, b) in enumerate(zip(values, ctx.batched)):
        if b and ctx.ndim(i) < rank:
            shape = tuple(v.shape)
            v = m.reshape(v, shape[:1] + (1,) * (rank - ctx.ndim(i)) + shape[1:])
        args.append(v)
    return bind(ctx.op, *args, **ctx.attrs)


def batching_rule_of(op):
    """The op's batching rule: declared, derived (elementwise/broadcasting), or None
    (the op then runs as a loop over the batch)."""
    if op.vmap is not None:
        return op.vmap
    if op.composite is not None:  # its constituent ops batch (dispatch calls it first)
        return op.composite
    if op.elementwise or op.name in _ELEMENTWISE_BROADCASTING:
        return _broadcasting
    return None


# ops declared broadcasting=True that are elementwise, without an expression
_ELEMENTWISE_BROADCASTING = frozenset((
    "floor_divide", "remainder", "fmod", "relu_backward", "eq", "ne", "lt", "le", "gt",
    "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
    "bitwise_xor", "clamp_tensor", "masked_fill",
    # unary elementwise ops without an expression
    "sign", "floor", "ceil", "trunc", "round", "isnan", "isinf", "isfinite", "logical_not",
    "bitwise_not", "clamp"))

def _levels_in(values):
    found = []
    for v in values:
        if isinstance(v, Tensor):
            if v._vlevel is not None:
                found.append(v._vlevel)
        elif isinstance(v, (tuple, list)):
            found += _levels_in(v)
    return found


def _example(v, level, b):
    """Attribute value ``v`` for example ``b`` (batched tensors of ``level`` sliced)."""
    if isinstance(v, Tensor):
        if v._vlevel != level:
            return v
        x = v._value[b]
        return x._data if x._vlevel is None else x  # an index: raw, as the op takes it
    if isinstance(v, (tuple, list)):
        return type(v)(_example(x, level, b) for x in v)
    return v


def _loop_attrs(ctx, values, level):
    """A call whose attributes hold batched tensors (an index): once per example."""
    op = ctx.op
    if ("attrs", op.name) not in _rules._warned:
        _rules._warned.add(("attrs", op.name))
        warnings.warn(f"vmap: {op.name} with a batched tensor in its index runs as a loop "
                      f"over the batch ({ctx.size} calls)", RuntimeWarning, stacklevel=4)
    outs = []
    for b in range(ctx.size):
        args = [v[b] if bt else v for v, bt in zip(values, ctx.batched)]
        attrs = {k: _example(v, level, b) for k, v in ctx.attrs.items()}
        outs.append(bind(op, *args, **attrs))
    m = ctx.m
    if op.nout == 1:
        return m.stack(outs)
    return tuple(m.stack([o[k] for o in outs]) for k in range(op.nout))


def _batching(op, args, attrs):
    """Dispatch's hook: ``op`` on arguments some of which are batched."""
    in_attrs = _levels_in(attrs.values())
    level = max([a._vlevel for a in args if isinstance(a, Tensor) and a._vlevel is not None]
                + in_attrs)
    values, batched, shapes = [], [], []
    size = None
    for a in args:
        shapes.append(tuple(a.shape) if hasattr(a, "shape") else None)  # raw arrays too
        if isinstance(a, Tensor):
            if a._vlevel == level:
                values.append(a._value)
                batched.append(True)
                size = a._value.shape[0]
                continue
        values.append(a)
        batched.append(False)
    ctx = VmapCtx()
    ctx.op, ctx.attrs, ctx.batched, ctx.size, ctx.m = op, attrs, tuple(batched), size, _ops
    ctx.shapes = tuple(shapes)
    if level in in_attrs:  # a batched index: one call per example
        outs = _loop_attrs(ctx, values, level)
    else:
        rule = batching_rule_of(op) or _rules.loop
        outs = rule(ctx, *values)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return tuple(_batch(o, level) for o in outs)


_state.__class__.batching = staticmethod(_batching)


# ------------------------------------------------------------------ the transform
def flatten(tree):
    """Leaves of nested tuples/lists/dicts, and a function rebuilding the tree."""
    if isinstance(tree, (tuple, list)):
        parts = [flatten(t) for t in tree]
        leaves = [x for p, _ in parts for x in p]

        def rebuild(xs, parts=parts, kind=type(tree)):
            out, k = [], 0
            for p, r in parts:
                out.append(r(xs[k:k + len(p)]))
                k += len(p)
            return kind(out) if kind in (tuple, list) else kind(*out)
        return leaves, rebuild
    if isinstance(tree, dict):
        keys = list(tree)
        leaves, rebuild_vals = flatten([tree[k] for k in keys])
        return leaves, lambda xs: dict(zip(keys, rebuild_vals(xs)))
    return [tree], lambda xs: xs[0]


def _broadcast_dims(dims, tree, what):
    """``dims`` (an int/None, or a tree matching ``tree``'s prefix) for each leaf."""
    if dims is None or isinstance(dims, int):
        leaves, _ = flatten(tree)
        return [dims] * len(leaves)
    if isinstance(dims, (tuple, list)) and isinstance(tree, (tuple, list)):
        if len(dims) != len(tree):
            raise ValueError(f"vmap: {what}={dims!r} has {len(dims)} entries for "
                             f"{len(tree)} {'arguments' if what == 'in_dims' else 'outputs'}")
        return [d for sub_d, sub_t in zip(dims, tree) for d in _broadcast_dims(sub_d, sub_t, what)]
    if isinstance(dims, dict) and isinstance(tree, dict):
        return [d for k in tree for d in _broadcast_dims(dims[k], tree[k], what)]
    raise ValueError(f"vmap: {what}={dims!r} does not match the structure of the "
                     f"{'arguments' if what == 'in_dims' else 'outputs'}")


@contextlib.contextmanager
def _level(randomness, size):
    level = next(_ids)
    prev = (_state.vmap_randomness, _state.vmap_random)
    _state.vmap_levels = _state.vmap_levels + (level,)
    _state.vmap_randomness = randomness
    _state.vmap_random = lambda draw: _batch(draw(size), level)  # "different": a draw each
    try:
        yield level
    finally:
        _state.vmap_randomness, _state.vmap_random = prev
        _state.vmap_levels = tuple(lv for lv in _state.vmap_levels if lv != level)


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """``func`` of one example -> a function of a batch, as ``torch.func.vmap``.

    ``in_dims``: for each positional argument the dim its batch is in (None: not
    batched; nested like the argument for tuples/lists/dicts); ``out_dims`` likewise
    for the outputs. ``randomness``: "error" (random ops refuse), "different" (each
    example draws its own), "same" (one draw for the batch). ``chunk_size`` runs the
    batch in chunks of that many examples."""
    if randomness not in ("error", "different", "same"):
        raise ValueError(f"vmap: randomness must be 'error', 'different' or 'same', got "
                         f"{randomness!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size must be a positive int or None, got {chunk_size!r}")
    if not callable(func):
        raise TypeError(f"vmap: expected a function, got {type(func).__name__}")

    def wrapped(*args, **kwargs):
        leaves, rebuild = flatten(list(args))
        dims = _broadcast_dims(tuple(in_dims) if isinstance(in_dims, list) else in_dims,
                               tuple(args), "in_dims") if not isinstance(in_dims, int) \
            and in_dims is not None else [in_dims] * len(leaves)
        size = None
        for x, d in zip(leaves, dims):
            if d is None:
                continue
            if not isinstance(x, Tensor):
                raise ValueError(f"vmap: in_dims={d} for an argument that is not a Tensor "
                                 f"({type(x).__name__}); use None for it")
            if not -max(x.ndim, 1) <= d < max(x.ndim, 1) or x.ndim == 0:
                raise ValueError(f"vmap: in_dim {d} is out of range for a tensor of shape "
                                 f"{tuple(x.shape)}")
            n = x.shape[d]
            if size is not None and n != size:
                raise ValueError(f"vmap: expected all batched inputs to have the same batch "
                                 f"size, got {size} and {n} (shape {tuple(x.shape)}, dim {d})")
            size = n
        if size is None:
            raise ValueError("vmap: at least one argument must be batched (in_dims all None "
                             "or no Tensor arguments)")
        if chunk_size is None or chunk_size >= size:
            return _run(func, leaves, dims, rebuild, kwargs, size)
        parts = []
        for start in range(0, size, chunk_size):
            stop = min(start + chunk_size, size)
            chunk = [x[(slice(None),) * (d % x.ndim) + (slice(start, stop),)]
                     if d is not None else x for x, d in zip(leaves, dims)]
            parts.append(_run(func, chunk, dims, rebuild, kwargs, stop - start))
        outs0, rebuild_out = flatten(parts[0])
        odims = _out_dims(parts[0], len(outs0))
        flat = [flatten(p)[0] for p in parts]
        joined = [_ops.cat([f[k] for f in flat], dim=d) for k, d in enumerate(odims)]
        return rebuild_out(joined)

    def _out_dims(out, n):
        if isinstance(out_dims, int) or out_dims is None:
            return [out_dims] * n
        return _broadcast_dims(out_dims, out if isinstance(out, (tuple, list)) else (out,),
                               "out_dims")

    def _run(func, leaves, dims, rebuild, kwargs, size):
        with _level(randomness, size) as level:
            ins = [x if d is None else _batch(_ops.movedim(x, d, 0), level)
                   for x, d in zip(leaves, dims)]
            out = func(*rebuild(ins), **kwargs)
            outs, rebuild_out = flatten(out)
            odims = _out_dims(out, len(outs))
            res = []
            for o, d in zip(outs, odims):
                if not isinstance(o, Tensor):
                    raise ValueError(f"vmap: the function must return Tensors, got "
                                     f"{type(o).__name__}")
                if d is None:
                    if o._vlevel == level:
                        raise ValueError("vmap: out_dims=None is only for outputs that are "
                                         "not batched")
                    res.append(o)
                    continue
                if o._vlevel == level:
                    v = o._value
                else:  # not batched: the same for every example
                    v = _ops.broadcast_to(_ops.unsqueeze(o, 0), (size,) + tuple(o.shape))
                res.append(_ops.movedim(v, 0, d) if d != 0 else v)
        return rebuild_out(res)

    wrapped.__name__ = getattr(func, "__name__", "vmapped")
    return wrapped
