"""What the PyTorch and JAX exports share: the adjoints' namespace over foreign arrays.

A registry adjoint (``op.vjp(ctx, g)``) is written with operators and ``ctx.m.*``,
tapegrad's op functions (public signatures: ``m.sum(g, dim=1, keepdim=True)``). An
export runs it on the other framework's arrays: operators are then that framework's
own, and ``ctx.m`` is an ``AdjointNamespace``: each ``m.X(...)`` runs tapegrad's
``X`` (its argument rules, its canonical attributes) on stand-in NumPy arrays under an
observer that replaces every registry kernel it reaches with the *exported* op on the
foreign arrays behind the stand-ins. So the adjoint becomes a graph of exported ops
and native operators, which the framework differentiates again, to any order.

A stand-in is a zero-copy view of the foreign array (PyTorch) or zeros of its shape
(JAX, whose arrays may be tracers); a kernel is never run on a stand-in that stands
for a foreign array: the exported op computes instead.
"""
import numpy as np

from .. import ops as _ops
from ..dispatch import observe, raw_arrays
from ..grad_mode import no_grad
from ..ops_registry import TensorSpec
from ..tensor import Tensor

__all__ = ["AdjointCtx", "AdjointNamespace", "canonical_attr"]

_STRIP = ("alloc", "workspace", "out")
_PLAIN = frozenset((int, float, bool, str, type(None)))


class AdjointCtx:
    """What ``op.vjp`` sees (the fields of the walker's ``Ctx``), over foreign arrays."""
    __slots__ = ("inputs", "out", "attrs", "shapes", "dtypes", "needs_input_grad", "m", "node",
                 "op")

    def __init__(self, inputs, out, attrs, shapes, dtypes, needs, m, op=None):
        self.inputs = inputs
        self.out = out
        self.attrs = attrs
        self.shapes = shapes
        self.dtypes = dtypes
        self.needs_input_grad = needs
        self.m = m
        self.node = None
        self.op = op


class AdjointNamespace:
    """``ctx.m`` for an export: tapegrad's op functions on the framework's arrays.

    ``fw`` (the framework adapter) gives ``is_array(x)``, ``stand_in(x)`` (a NumPy
    array for tapegrad to see), ``plain(v)`` (any other value as tapegrad takes it),
    ``constant(ndarray)`` (a foreign array of a value
    computed on the host) and ``call(op, args, attrs)`` (the exported op: foreign
    arrays out, one or a tuple)."""

    def __init__(self, fw):
        self._fw = fw
        self._fns = {}

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        fn = self._fns.get(name)
        if fn is None:
            target = getattr(_ops, name, None)
            if target is None or not callable(target):
                raise AttributeError(f"the adjoints' namespace has no op {name!r}")
            fn = self._fns[name] = _bridged(self._fw, name, target)
        return fn


def _bridged(fw, name, target):
    def run(*args, **kwargs):
        known = {}  # id(stand-in) -> (stand-in, foreign array)

        def down(v):
            if fw.is_array(v):
                s = fw.stand_in(v)
                known[id(s)] = (s, v)
                return s
            if type(v) is tuple or type(v) is list:
                return type(v)(down(x) for x in v)
            return fw.plain(v)  # a framework's dtype object: NumPy's

        observer = _observer(fw, known)

        a2 = [down(a) for a in args]
        k2 = {k: down(v) for k, v in kwargs.items()}
        with raw_arrays(), observe(observer):
            r = target(*a2, **k2)
        return _up(r, known, fw)

    run.__name__ = name
    return run


def run_composite(fw, op, args, kwargs):
    """A composite (a public function made of registry ops) on the framework's arrays
    (``run_function`` of ``op.composite``)."""
    return run_function(fw, op.composite, args, kwargs)


def run_function(fw, fn, args, kwargs, log=None):
    """A tapegrad function (a composite, or an op's public function with PyTorch's
    signature) on the framework's arrays: the function itself runs on tapegrad
    Tensors standing in for them (zero-copy views, so it may read dtypes, flags and
    values as on any Tensor) while every registry kernel it reaches is replaced by
    the exported op on the arrays behind its inputs. The result is a graph of
    exported ops, which the framework differentiates. A factory's result (no input
    behind it) becomes a constant array of the framework (``fw.constant``).
    ``log``: a list that gets ``(op, inputs, attrs, outputs)`` of each exported op
    called, on the framework's arrays."""
    known = {}  # id(stand-in array) -> (stand-in array, foreign array)

    def down(v):
        if fw.is_array(v):
            s = fw.stand_in(v)
            known[id(s)] = (s, v)
            return _ops.from_numpy(s)
        if type(v) is tuple or type(v) is list:
            return type(v)(down(x) for x in v)
        return fw.plain(v)

    observer = _observer(fw, known, log)
    a2 = [down(a) for a in args]
    k2 = {k: down(v) for k, v in kwargs.items()}
    with no_grad(), observe(observer):
        r = fn(*a2, **k2)
    return _up_tensors(r, known, fw)


def _up_tensors(r, known, fw):
    if isinstance(r, Tensor):
        out = _up(r.numpy(), known, fw)
        if r.requires_grad and not getattr(out, "requires_grad", True):
            out.requires_grad_(True)  # a factory asked for a leaf that requires grad
        return out
    if isinstance(r, tuple):
        return type(r)(*(_up_tensors(x, known, fw) for x in r)) if hasattr(r, "_fields") \
            else tuple(_up_tensors(x, known, fw) for x in r)
    if isinstance(r, list):
        return [_up_tensors(x, known, fw) for x in r]
    return _up(r, known, fw)


def _observer(fw, known, log=None):
    """Run each registry kernel reached with a stand-in for a foreign array as the
    exported op on the foreign arrays (its outputs become stand-ins too, and the call
    goes into ``log`` when given); a kernel on constants alone computes on the host."""
    def observer(op, kernel, *arrays, **kw):
        mapped = []
        foreign = False
        for a in arrays:
            hit = known.get(id(a)) if isinstance(a, np.ndarray) else None
            if hit is not None and hit[0] is a:
                mapped.append(hit[1])
                foreign = True
            else:
                mapped.append(a)
        attrs = {k: _up_index(v, known) for k, v in kw.items() if k not in _STRIP}
        if any(_mentions(v, known) for v in attrs.values()):
            foreign = True
        if not foreign:  # constants only: compute on the host as tapegrad would
            return kernel(*arrays, **kw)
        mapped = [fw.constant(a) if isinstance(a, np.ndarray) and not _is_known(a, known)
                  else a for a in mapped]
        outs = fw.call(op, mapped, attrs)
        if log is not None:
            log.append((op, mapped, attrs, outs))
        single = not isinstance(outs, tuple)
        res = []
        for o in (outs,) if single else outs:
            s = fw.stand_in(o)
            known[id(s)] = (s, o)
            res.append(s)
        return res[0] if single else tuple(res)
    return observer


def _is_known(a, known):
    hit = known.get(id(a))
    return hit is not None and hit[0] is a


def _mentions(v, known):
    if isinstance(v, np.ndarray):
        return _is_known(v, known)
    if type(v) is tuple or type(v) is list:
        return any(_mentions(x, known) for x in v)
    return False


def _up_index(v, known):
    """An attribute (an index tuple) with stand-ins: their foreign arrays."""
    if isinstance(v, np.ndarray) and _is_known(v, known):
        return known[id(v)][1]
    if type(v) is tuple or type(v) is list:
        return type(v)(_up_index(x, known) for x in v)
    return v


def _up(r, known, fw):
    if isinstance(r, np.ndarray):
        if _is_known(r, known):
            return known[id(r)][1]
        return fw.constant(r)
    if isinstance(r, tuple):
        return type(r)(*(_up(x, known, fw) for x in r)) if hasattr(r, "_fields") else \
            tuple(_up(x, known, fw) for x in r)
    if isinstance(r, list):
        return [_up(x, known, fw) for x in r]
    return r


def canonical_attr(v, to_numpy):
    """An attribute value as tapegrad takes it: foreign arrays inside (an index
    tuple) become NumPy arrays through ``to_numpy``."""
    tv = type(v)
    if tv in _PLAIN or tv is tuple and all(type(x) in _PLAIN for x in v):
        return v
    if tv is tuple or tv is list:
        return type(v)(canonical_attr(x, to_numpy) for x in v)
    r = to_numpy(v)
    return v if r is None else r


_DL_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
               10: "rocm", 13: "cuda_managed", 14: "oneapi"}


def check_host_device(op, name, a):
    """A DLPack producer handed to an export must live in host memory (the export
    computes on the CPU): the op's RuntimeError naming the device, otherwise."""
    dev = getattr(a, "__dlpack_device__", None)
    if dev is None:
        return
    kind = dev()[0]
    if int(kind) not in (1, 3):  # kDLCPU, kDLCUDAHost (pinned host memory)
        where = _DL_DEVICES.get(int(kind), f"DLPack device type {int(kind)}")
        raise RuntimeError(f"{op.name}: input {name!r} is on {where}; this export computes "
                           f"on the CPU (tapegrad's NumPy arrays): move it to the host first")


def specs(values, spec_of):
    return [spec_of(v) for v in values]


def out_specs(op, in_specs, attrs):
    """The op's output specs (a list), from its shape rule."""
    s = op.infer(*in_specs, **attrs)
    return list(s) if isinstance(s, tuple) and not isinstance(s, TensorSpec) else [s]


def bind_inputs(op, args, attrs):
    """A call's tensor inputs in the op's order, as its public function binds them:
    an input passed by keyword (``conv2d(x, w, bias=b)``, ``add(a, other=b)``) takes
    its position, and optional inputs left out (``conv2d(x, w)``) are ``None``, so the
    shape rule, the kernel and the adjoint all see every input where it belongs.
    Returns ``(args, attrs)``; ``args``/``attrs`` are returned as given when there is
    nothing to bind."""
    names = op.args
    n = len(args)
    if n >= len(names) and not attrs:
        return args, attrs
    if attrs and any(k in names for k in attrs):
        attrs = dict(attrs)
        args = list(args)
        for i, name in enumerate(names):
            if name not in attrs:
                continue
            if i < n:
                raise TypeError(f"{op.name}() got multiple values for argument {name!r}")
            while len(args) < i:
                missing = names[len(args)]
                if missing not in op.optional:
                    raise TypeError(f"{op.name}() missing required argument {missing!r}")
                args.append(None)
            args.append(attrs.pop(name))
    if len(args) < len(names) and all(nm in op.optional for nm in names[len(args):]):
        args = list(args) + [None] * (len(names) - len(args))
    return args, attrs
