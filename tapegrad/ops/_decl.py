"""Helpers for declaring ops: sample generators and shape rules shared by families, and
the one composite-declaration API.

``composite`` registers a public function as a composite op; ``decl`` is the shorthand
most families use: the composite with PyTorch's function of the same name as its oracle,
a non-tensor first argument as its default error sample, and, where no shape rule is
given, ``eval_infer``: the function run on arrays of the given specs (zeros, or identity
matrices with ``fill="eye"``), which validates the call as the function does, raising
its error. ``S`` builds a ``Sample``; ``floating`` is PyTorch's promotion of an integer
or bool input to the default float dtype."""
import numpy as np

from .. import dtypes as _dt
from .._util import broadcast_shapes, op_error
from ..grad_mode import no_grad
from ..ops_registry import Sample, TensorSpec, register
from ..tensor import Tensor, wrap

__all__ = ["rand", "away_from", "elementwise_infer", "one_dtype", "unary_samples", "binary_samples",
           "bad_broadcast", "composite", "alias"]


_rng = np.random.default_rng(0)


def rand(shape, dtype=np.float64, low=-2.0, high=2.0, seed=None):
    r = np.random.default_rng(seed) if seed is not None else _rng
    return r.uniform(low, high, size=shape).astype(dtype)


def away_from(a, points, margin=0.1):
    """Nudge values off non-smooth points so finite differences are honest."""
    a = np.array(a)
    for p in points:
        near = np.abs(a - p) < margin
        a[near] = p + margin * np.where(a[near] >= p, 1.5, -1.5)
    return a


def _scalar_dtype(v):
    if isinstance(v, bool):
        return np.dtype(bool)
    if isinstance(v, int):
        return np.dtype(np.int64)
    return _dt.default_float_np()


def elementwise_infer(name, promote="same", out_dtype=None):
    """Shape rule of a broadcasting elementwise op."""
    def infer(*specs, **attrs):
        shapes = [s.shape for s in specs if hasattr(s, "shape")]
        shape = (broadcast_shapes(name, *shapes) if len(shapes) > 1
                 else (tuple(shapes[0]) if shapes else ()))
        dims = [np.dtype(s.dtype) for s in specs if hasattr(s, "dtype") and len(s.shape)]
        zero = [np.dtype(s.dtype) for s in specs if hasattr(s, "dtype") and not len(s.shape)]
        scal = [s for s in specs if isinstance(s, (int, float, bool))]
        if dims or zero:  # dispatch's rule (dtypes.operands_type)
            dt = _dt.operands_type(dims, zero, scal)
        else:
            dt = _dt.promote_with_scalars(_scalar_dtype(scal[0]), scal)
        if promote == "float" and not _dt.is_float(dt):
            dt = _dt.default_float_np()
        if out_dtype is not None:
            dt = np.dtype(out_dtype)
        return TensorSpec(shape, dt)
    return infer


def one_dtype(name, specs, names, floating=False):
    """The dtype of a contraction's operands (matmul, dot, tensordot, einsum, linear,
    conv2d), PyTorch's rule: no promotion (a mixed call is a RuntimeError naming both
    dtypes, where an elementwise op would promote), and no bool kernel
    (NotImplementedError); ``floating``: no integer kernel either. ``None`` specs (an
    absent bias) are skipped."""
    dts = [(n, np.dtype(s.dtype)) for n, s in zip(names, specs) if hasattr(s, "dtype")]
    n0, first = dts[0]
    for n, d in dts[1:]:
        if d != first:
            raise op_error(name, f"expected {n0} and {n} to have the same dtype, but got "
                                 f"{first} != {d}", RuntimeError)
    if first.kind == "b" or (floating and not _dt.is_float(first)):
        raise op_error(name, f"not implemented for {first} tensors", NotImplementedError)
    return first


def unary_samples(low=-2.0, high=2.0, avoid=(), shapes=((3, 4), (), (2, 0, 3))):
    def samples(dtype=np.float64):
        out = []
        for k, s in enumerate(shapes):
            a = rand(s, dtype, low, high, seed=k)
            if avoid:
                a = away_from(a, avoid).astype(dtype)
            out.append(Sample((a,), {}))
        return out
    return samples


def binary_samples(low=-2.0, high=2.0, low2=None, high2=None, avoid_diff=False):
    low2 = low if low2 is None else low2
    high2 = high if high2 is None else high2

    def samples(dtype=np.float64):
        pairs = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (2,))]
        out = []
        for k, (s1, s2) in enumerate(pairs):
            a = rand(s1, dtype, low, high, seed=k)
            b = rand(s2, dtype, low2, high2, seed=k + 10)
            if avoid_diff:
                a, b = np.broadcast_arrays(a, b)
                a = a.copy()
                close = np.abs(a - b) < 0.1
                a[close] = b[close] + 0.3
                b = b.copy()
                if s2 == (4,):
                    b = b[0, 0]
                out.append(Sample((a.astype(dtype), b.astype(dtype)), {}))
                continue
            out.append(Sample((a, b), {}))
        return out
    return samples


def bad_broadcast(*extra):
    def errors():
        return [((rand((3, 4)), rand((5,))) + tuple(extra), {}, ValueError)]
    return errors


def composite(fn, *, infer, samples, name=None, args=("input",), torch=None, reference=None,
              error_samples=None, nout=1, differentiable=True, sequence=False, by_name=False,
              optional=(), kind="basic", doc="", dynamic_kernel=None, autocast=None,
              autocast_when=None, widen=False):
    """Declare the public function ``fn``, built from other ops, in the registry
    (``OpDef.composite``): ``bind``/``compute`` on it call ``fn``, whose constituent
    ops record, differentiate, batch and forward-differentiate; ``infer`` is its
    shape rule; dispatch checks its tensor inputs first (``args``, ``optional``), in the
    op's terms, and its errors name ``name``. ``nout``:
    1, or more for a function that returns a tuple (split, chunk: the count follows
    the call). ``sequence``: ``fn`` takes its tensors as one sequence (``hstack(tensors)``);
    the op takes them as its inputs (as ``cat``). ``by_name``: the op's inputs are
    ``fn``'s parameters ``args``, passed by name (``layer_norm(input, normalized_shape,
    weight, bias)`` as the op ``(input, weight, bias)``, ``normalized_shape`` an
    attribute); ``optional``: the inputs that may be None. ``kind="dynamic"``: a
    data-dependent output shape (``argwhere``); ``dynamic_kernel(*arrays, alloc=,
    **attrs)``, when given, is what a caller's allocator runs (sizes first, then written
    into its memory) instead of ``fn`` followed by a copy. ``autocast``,
    ``autocast_when``: the op's ``OpDef.autocast`` policy and the calls it applies
    to, applied where its public function is called from ``tg.*`` /
    ``tg.nn.functional`` (``guard.checked``) and on ``bind``. ``widen``: the op's
    ``OpDef.widen`` (half-width inputs computed in float32, see ``widened_call``),
    applied at the same places. Returns ``fn`` (the public function stays as it is)."""
    from ..grad_mode import no_grad
    from ..tensor import Tensor, buffer, wrap
    from .guard import _CLEAN, _named

    name = name or fn.__name__
    if sequence:
        def call(*tensors, **attrs):
            return fn(list(tensors), **attrs)
    elif by_name:
        def call(*ins, **attrs):
            return fn(**dict(zip(args, ins)), **attrs)
    else:
        call = fn

    def public(*a, **k):  # its errors name it (an alias's: "subtract: sub: ...")
        try:
            return widened_call(call, a, k) if widen else call(*a, **k)
        except _CLEAN as e:
            raise _named(name, e) from None
    public.__name__ = name

    def kernel(*arrays, alloc=None, **attrs):
        if alloc is not None and dynamic_kernel is not None:
            return dynamic_kernel(*arrays, alloc=alloc, **attrs)
        ins = [wrap(a) if hasattr(a, "shape") and hasattr(a, "dtype") and not isinstance(a, Tensor)
               else a for a in arrays]
        with no_grad():
            out = public(*ins, **attrs)
        outs = tuple(buffer(o) if isinstance(o, Tensor) else o
                     for o in (out if isinstance(out, tuple) else (out,)))
        if alloc is not None:  # a dynamic op: the outputs in the caller's memory
            outs = tuple(_into(alloc(o.shape, o.dtype), o) for o in outs)
        return outs if isinstance(out, tuple) else outs[0]
    _COMPOSITES[fn] = register(name=name, kernel=kernel, infer=infer, args=args,
                               composite=public, kind=kind, optional=tuple(optional),
                               samples=samples, torch=torch, reference=reference,
                               error_samples=error_samples, nout=nout,
                               differentiable=differentiable, doc=doc or (fn.__doc__ or ""),
                               autocast=autocast, autocast_when=autocast_when, widen=widen)
    return fn


_COMPOSITES = {}  # a composite's public function -> its OpDef


def widened_call(fn, args, kwargs):
    """``fn(*args, **kwargs)`` for a composite declared ``widen``: when its floating
    Tensor arguments (in lists too) are all bfloat16, or all float16, it runs on
    float32 copies of them and each float32 output is rounded once back to that
    dtype. The casts are ``cast`` op calls, so they record: the gradient flows back
    through the float32 body and is rounded once at the cast. Mixed dtypes, or a
    call that names a ``dtype=``, run as given."""
    low = None
    for a in (*args, *kwargs.values()):
        for t in (a if type(a) is list or type(a) is tuple else (a,)):
            if isinstance(t, Tensor) and _dt.is_float(t._data.dtype):
                if low is None:
                    low = t._data.dtype
                elif t._data.dtype != low:
                    return fn(*args, **kwargs)
    if low not in _dt.LOW or kwargs.get("dtype") is not None:
        return fn(*args, **kwargs)
    half = _dt.from_np(low)

    def up(a):
        if isinstance(a, Tensor):
            return a.float() if a._data.dtype == low else a
        return type(a)(up(e) for e in a) if type(a) is list or type(a) is tuple else a

    def down(o):
        if isinstance(o, Tensor):
            return o.to(half) if o._data.dtype == _dt.float32.np else o
        if isinstance(o, tuple):
            vals = [down(e) for e in o]
            return type(o)(*vals) if hasattr(o, "_fields") else type(o)(vals)
        return o
    return down(fn(*[up(a) for a in args], **{k: up(v) for k, v in kwargs.items()}))


def composite_op(fn):
    """The OpDef of the composite whose public function is ``fn`` (None if not one)."""
    try:
        return _COMPOSITES.get(fn)
    except TypeError:  # an unhashable callable
        return None


def _into(dst, src):
    dst[...] = src
    return dst


def alias(fn, name, of, *, torch_name=None, infer=None, samples=None, error_samples=None,
          args=None):
    """Declare ``name``, another name of the registry op ``of`` (``subtract`` of
    ``sub``), as a composite: the public function ``fn`` under ``name``, with the
    op's shape rule, samples and error samples unless given, and PyTorch's function of
    that name (``torch.subtract``, or ``torch_name``) as its oracle, so the test checks
    the alias against PyTorch's alias."""
    import inspect

    from ..ops_registry import get
    op = get(of)
    if args is None:
        params = list(inspect.signature(fn).parameters)
        args = tuple(params[:len(op.args)])
    tname = torch_name or name
    if samples is None:  # the op's own test covers the rest: the alias's needs a few
        def samples(dtype=np.float64):
            return list(op.samples(dtype))[:2]

    def torch_fn(torch, *a, **k):
        return getattr(torch, tname)(*a, **k)
    return composite(fn, name=name, infer=infer or op.infer, samples=samples,
                     args=args, torch=torch_fn, error_samples=error_samples or op.error_samples,
                     nout=op.nout, differentiable=op.differentiable,
                     doc=f"``{name}``: another name of ``{of}``.")


# ------------------------------------------------------------------ declaration helpers
def S(*args, **attrs):
    return Sample(tuple(args), attrs)


def eval_infer(fn, fill=0.0):
    """A shape rule that runs ``fn`` on arrays of ``fill`` of the given specs
    (``"eye"``: identity matrices where the last two dims are square, else zeros)."""
    def infer(*specs, **attrs):
        def arr(s):
            if isinstance(s, (list, tuple)) and s and all(hasattr(e, "shape") for e in s):
                return [arr(e) for e in s]
            if hasattr(s, "shape") and hasattr(s, "dtype") and not isinstance(s, Tensor):
                dt = np.dtype(getattr(s.dtype, "np", s.dtype))
                shape = tuple(s.shape)
                if fill == "eye" and len(shape) >= 2 and shape[-1] == shape[-2] and dt.kind == "f":
                    a = np.broadcast_to(np.eye(shape[-1], dtype=dt), shape).copy()
                else:
                    a = np.full(shape, fill if dt.kind == "f" and fill != "eye" else 0, dtype=dt)
                return wrap(a)
            return s
        with no_grad(), np.errstate(all="ignore"):
            out = fn(*[arr(s) for s in specs], **attrs)
        if isinstance(out, tuple):
            return tuple(TensorSpec(tuple(o.shape), o.dtype.np) for o in out)
        return TensorSpec(tuple(out.shape), out.dtype.np)
    return infer


def decl(fn, samples, *, name=None, args=("input",), infer=None, torch=None, errors=None,
         nout=1, differentiable=True, sequence=False, optional=(), fill=0.0, reference=None,
         autocast=None, autocast_when=None, widen=False):
    """Declare the public function ``fn`` (a composite) in the registry."""
    name = name or fn.__name__
    if torch is None and reference is None:
        def torch(T, *a, **k):
            return getattr(T, name)(*a, **k)
    if errors is None:
        def errors():
            s = samples(np.float64)[0]
            return [(("not a tensor",) + tuple(s.args[1:]), dict(s.attrs), TypeError)]
    if infer is None:
        infer = eval_infer((lambda *ts, **k: fn(list(ts), **k)) if sequence else fn, fill)
    composite(fn, name=name, args=args, infer=infer,
              samples=samples, torch=torch, reference=reference, error_samples=errors,
              nout=nout, differentiable=differentiable, sequence=sequence,
              optional=optional, autocast=autocast, autocast_when=autocast_when,
              widen=widen)
    return fn


def floating(x):
    """``x``, or ``x`` in the default float dtype when it is integer or bool (the
    promotion PyTorch's float functions make)."""
    if isinstance(x, Tensor) and not x.dtype.is_floating_point:
        from .creation import cast  # creation declares its ops with this module
        return cast(x, _dt.get_default_dtype())
    return x

