"""The public op functions' first check: their tensor arguments must be Tensors.

PyTorch's functions refuse anything but a Tensor where a tensor is expected (a Python
number only where PyTorch takes one: ``input``/``other`` next to a Tensor,
``torch.sub(1.0, t)``) with a TypeError naming the function and the argument;
tapegrad's wrappers would otherwise read ``.shape`` of a None or a string and fail
with an AttributeError from inside. ``checked(fn)`` puts those checks in front of a
public function; the package applies it to the public ``tg.*`` and
``tg.nn.functional`` names. The ops namespace the adjoints compute with (``ctx.m``)
keeps the unchecked functions.

Which parameters are tensors is read from their names, PyTorch's names (``input``,
``other``, ``weight``, ``target``, ``tensors``...: ``TENSOR_PARAMS``); a parameter
whose default is ``None`` may be ``None``. A raw NumPy/CuPy array is accepted (a
constant next to Tensors; dispatch refuses a call with no Tensor at all), a complex
one is not (tapegrad computes on real dtypes only).

A function with a ``dim`` (``keepdim``) parameter and none named ``axis``
(``keepdims``) takes that NumPy name as an alias, as PyTorch's functions do. One that
PyTorch gives an ``out=`` (``OUT_OPS``) takes it here when it has none of its own.

A MemoryError from inside (a composite's index or noise array sized from a huge
input) becomes a RuntimeError naming the function, as dispatch does for the ops.

A checked function also names itself in the errors raised inside it: a composite
(``layer_norm``, ``conv1d``, ``cross_entropy``...) fails in the ops it is made of,
and ``mean: expected a floating point input`` becomes ``layer_norm: mean: expected a
floating point input``, the same exception class, so the user reads the function
they called.
"""
import functools
import inspect

import numpy as np

from ..dispatch import autocast_call as _autocast_call
from ..tape import state as _state
from ..tensor import subclasses as _TT

__all__ = ["checked", "TENSOR_PARAMS"]

# a number is an input next to a Tensor (torch.add(2, t), as PyTorch), not alone
_NUMBERS = (int, float, bool)
_CLEAN = (ValueError, TypeError, IndexError, RuntimeError)

# parameter name -> a Python number is accepted there (next to a Tensor)
TENSOR_PARAMS = {
    "input": True, "other": True,
    "weight": False, "bias": False, "target": False, "query": False, "key": False,
    "tensor": False, "a": False, "b": False, "A": False, "running_mean": False,
    "running_var": False, "index": False, "indices": False, "mask": False, "vec2": False,
    "pos_weight": False, "attn_mask": False,
}
# tensor parameters that may be None without a None default (batch_norm's running
# statistics: None when training without them, as PyTorch)
_NONE_OK = ("running_mean", "running_var",
            # multi_head_attention_forward's, None in PyTorch's own calls
            "in_proj_weight", "in_proj_bias", "bias_k", "bias_v", "out_proj_bias")
# a sequence of tensors
_SEQUENCE_PARAMS = ("tensors",)
# names that are tensors only in some functions (``value`` is a number in masked_fill)
_EXTRA = {"scaled_dot_product_attention": ("value",),
          # ops/ufuncs, joining, reduce, indexed_update, sorting, linalg, linalg_decomp
          "cdist": ("x1", "x2"), "trapezoid": ("y", "x"), "trapz": ("y", "x"),
          "cumulative_trapezoid": ("y", "x"), "select_scatter": ("src",),
          "slice_scatter": ("src",), "diagonal_scatter": ("src",),
          "index_add": ("source",), "index_copy": ("source",), "bucketize": ("boundaries",),
          "index_reduce": ("source",), "lu_unpack": ("LU_data", "LU_pivots"),
          "searchsorted": ("sorted_sequence",), "vander": ("x",),
          "addcdiv": ("tensor1", "tensor2"), "addcmul": ("tensor1", "tensor2"),
          "lerp": ("end", "weight"), "isin": ("elements", "test_elements"),
          "addmm": ("mat1", "mat2"), "addmv": ("mat", "vec"), "addr": ("vec1", "vec2"),
          "addbmm": ("batch1", "batch2"), "baddbmm": ("batch1", "batch2"),
          "mv": ("vec",), "bmm": ("mat2",), "cholesky_solve": ("input2",),
          "lu_solve": ("LU_data", "LU_pivots"), "triangular_solve": ("A",),
          "linalg_lu_solve": ("LU", "pivots", "B"),
          # ops/nn: distances, losses, linear layers, sampling...
          "cosine_similarity": ("x1", "x2"), "pairwise_distance": ("x1", "x2"),
          "cosine_embedding_loss": ("input1", "input2"),
          "margin_ranking_loss": ("input1", "input2"),
          "triplet_margin_loss": ("anchor", "positive", "negative"),
          "triplet_margin_with_distance_loss": ("anchor", "positive", "negative"),
          "linear_cross_entropy": ("linear_weight", "linear_bias"),
          "gumbel_softmax": ("logits",), "bilinear": ("input1", "input2"),
          "embedding_bag": ("offsets", "per_sample_weights"), "affine_grid": ("theta",),
          "gaussian_nll_loss": ("var",), "grid_sample": ("grid",),
          "ctc_loss": ("log_probs", "targets"),
          # ops/linalg_decomp.py, indexed_update.py, nn/attention.py
          "orgqr": ("tau",), "ormqr": ("tau",), "householder_product": ("tau",),
          "segment_reduce": ("data", "lengths", "offsets"),
          "multi_head_attention_forward": ("value", "in_proj_weight", "in_proj_bias",
                                           "bias_k", "bias_v", "out_proj_weight",
                                           "out_proj_bias", "key_padding_mask",
                                           "q_proj_weight", "k_proj_weight", "v_proj_weight",
                                           "static_k", "static_v")}
# a ``*tensors`` parameter of these names: each element must be a Tensor
_VARARGS = ("tensors", "matrices")
# tensor parameters that also take a Python number in one function (lerp's weight)
_NUMBER_OK = {"lerp": ("weight",), "gaussian_nll_loss": ("var",), "select": ("index",),
              "select_scatter": ("index",)}

# the functions that PyTorch gives an ``out=``: one tensor result copied into that
# tensor (``compat.write_out``), or a pair (values, indices: ``max(x, dim)``, ``sort``)
# into a pair of tensors (``compat.write_outs``); those with their own take it
OUT_OPS = frozenset("""
abs acos acosh any arccos arcsin arctan arctan2 asin asinh atan atan2 atanh bitwise_or diff
log10 log2 logical_xor mean msort norm rad2deg square
add addbmm addcdiv addcmul addmm addmv addr all amax amin baddbmm bitwise_and
bitwise_left_shift bitwise_not bitwise_right_shift bitwise_xor bmm bucketize ceil
cholesky cholesky_inverse cholesky_solve clamp clip column_stack copysign cos cosh
cross cumprod cumsum deg2rad diag digamma div divide dot dstack eq erf erfc erfinv
exp exp2 expm1 fix float_power floor floor_divide fmax fmin fmod frac gather gcd ge
ger greater greater_equal gt heaviside histc hstack hypot i0 igamma igammac
index_select inner inverse isneginf isposinf kron lcm ldexp le lerp less less_equal
lgamma log log1p logaddexp logaddexp2 logcumsumexp logical_and logical_not
logical_or logit logsumexp lt masked_select matrix_power maximum minimum mm mv
mvlgamma nan_to_num nanmean narrow_copy ne neg negative nextafter nonzero not_equal
outer polygamma pow reciprocal remainder renorm round row_stack rsqrt searchsorted
sgn sigmoid sign signbit sin sinc sinh sqrt std sub subtract take_along_dim tan
tanh tril triu trunc var vdot vstack where xlogy
sum prod nansum argmax argmin max min sort topk kthvalue median nanmedian mode cummax cummin
""".split())

_wrapped = {}  # fn -> its checked version: tg.linear is tg.nn.functional.linear


def _is_array(v):
    tp = type(v)
    return tp in _TT or isinstance(v, np.ndarray) or tp.__module__.startswith("cupy")


def _what(v):
    return "None" if v is None else type(v).__name__


def _check_one(name, pname, v, numbers, others):
    """Raise the TypeError for ``v`` at tensor parameter ``pname`` of ``name``."""
    tp = type(v)
    if tp in _TT:
        return
    if isinstance(v, np.ndarray) or tp.__module__.startswith("cupy"):
        if v.dtype.kind == "c":
            raise TypeError(f"{name}: argument '{pname}' is complex ({v.dtype}); tapegrad "
                            f"computes on real dtypes only")
        return
    if numbers and (tp in _NUMBERS or isinstance(v, np.generic) and v.dtype.kind in "biuf") \
            and any(a is not v and _is_array(a) for a in others):
        return
    if hasattr(tp, "_layout_bind"):  # a sparse tensor: the op accepts or refuses its layout
        return
    raise TypeError(f"{name}: argument '{pname}' must be a Tensor, not {_what(v)}")


def _plan(fn):
    """[(position, name, optional, numbers ok, sequence)] of ``fn``'s tensor parameters."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    extra = _EXTRA.get(fn.__name__, ())
    plan = []
    for i, p in enumerate(params):
        if p.kind == p.VAR_POSITIONAL and p.name in _VARARGS:
            plan.append((i, p.name, False, False, "var"))
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        seq = p.name in _SEQUENCE_PARAMS
        if p.name not in TENSOR_PARAMS and p.name not in extra and not seq:
            continue
        pos = i if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else None
        optional = p.default is None or p.name in _NONE_OK
        numbers = TENSOR_PARAMS.get(p.name, False) or p.name in _NUMBER_OK.get(fn.__name__, ())
        plan.append((pos, p.name, optional, numbers, seq))
    return plan


_MISSING = object()
_ALIASES = (("axis", "dim"), ("keepdims", "keepdim"))


def _aliases(fn):
    """The (alias, name) pairs ``fn`` takes through its wrapper: NumPy's ``axis`` and
    ``keepdims`` where it has ``dim``/``keepdim`` and not the alias itself."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return ()
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return ()
    return tuple((a, n) for a, n in _ALIASES if n in params and a not in params)


def _has_out(fn):
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return "out" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def _unalias(name, aliases, kwargs):
    for alias, real in aliases:
        if alias in kwargs:
            if real in kwargs:
                raise TypeError(f"{name}: got both '{real}' and its alias '{alias}'")
            kwargs = dict(kwargs)
            kwargs[real] = kwargs.pop(alias)
    return kwargs


def checked(fn):
    """``fn`` with its tensor arguments checked first and its errors naming it (``fn``
    itself if it takes no tensor argument)."""
    if fn in _wrapped:
        return _wrapped[fn]
    if getattr(fn, "_checked", False):
        return fn
    plan = _plan(fn)
    if not plan:
        return fn
    name = fn.__name__

    def check(args, kwargs):
        for pos, pname, optional, numbers, seq in plan:
            if seq == "var":  # f(*tensors), or f([t1, t2]) as PyTorch accepts
                rest = args[pos:]
                if len(rest) == 1 and isinstance(rest[0], (list, tuple)):
                    rest = rest[0]
                for k, e in enumerate(rest):
                    if type(e) in _TT:
                        continue
                    if not _is_array(e):
                        raise TypeError(f"{name}: argument '{pname}' must be a sequence of "
                                        f"Tensors, but element {k} is {_what(e)}")
                    _check_one(name, f"{pname}[{k}]", e, False, ())
                continue
            if pos is not None and pos < len(args):
                v = args[pos]
            else:
                v = kwargs.get(pname, _MISSING)
                if v is _MISSING:
                    continue  # a default, or Python's own TypeError for a missing one
            if type(v) in _TT or (v is None and optional):
                continue
            if seq:
                if type(v) is list or type(v) is tuple or isinstance(v, (list, tuple)):
                    for k, e in enumerate(v):
                        if type(e) in _TT:
                            continue
                        if not _is_array(e):
                            raise TypeError(f"{name}: argument '{pname}' must be a sequence "
                                            f"of Tensors, but element {k} is {_what(e)}")
                        _check_one(name, f"{pname}[{k}]", e, False, ())
                elif not _is_array(v):
                    raise TypeError(f"{name}: argument '{pname}' must be a sequence of "
                                    f"Tensors, not {_what(v)}")
                continue
            _check_one(name, pname, v, numbers, args)

    first = plan[0]
    simple = len(plan) == 1 and first[0] == 0 and not first[2] and not first[4]
    aliases = _aliases(fn)
    takes_out = name in OUT_OPS and not _has_out(fn)
    from ._decl import composite_op, widened_call
    op = composite_op(fn)  # a composite's autocast policy applies at its public entry
    run = fn
    if op is not None and op.widen:  # (and its half-width inputs computed in float32)
        def run(*a, **k):
            return widened_call(fn, a, k)

    @functools.wraps(fn)
    def f(*args, **kwargs):
        if kwargs:
            if aliases:
                kwargs = _unalias(name, aliases, kwargs)
            if takes_out and "out" in kwargs:
                kwargs = dict(kwargs)
                out = kwargs.pop("out")
                if out is not None:
                    from .compat import write_out, write_outs
                    res = f(*args, **kwargs)
                    if isinstance(res, tuple):  # (values, indices): out a pair
                        return write_outs(name, res, out)
                    return write_out(name, res, out)
        if simple and args and type(args[0]) in _TT:
            pass  # the common case: one tensor argument, given a Tensor
        else:
            check(args, kwargs)
        try:
            if op is not None and _state.autocast is not None:
                return _autocast_call(op, run, args, kwargs)
            return run(*args, **kwargs)
        except _CLEAN as e:
            raise _named(name, e) from None
        except MemoryError as e:  # a composite's own array too large (as dispatch's ops)
            raise RuntimeError(f"{name}: not enough memory for the result: {e}") from None
    f._checked = True
    _wrapped[fn] = f
    return f


def _named(name, e):
    """``e`` as an error of ``name`` (the same class, its message prefixed), or ``e``
    itself when it already names ``name`` first (or its class takes no message)."""
    msg = str(e)
    if msg.startswith(name + ":") or msg.startswith(name + "("):
        return e
    try:
        new = type(e)(f"{name}: {msg}")
    except Exception:  # noqa: BLE001 - an exception class with another constructor
        return e
    return new.with_traceback(e.__traceback__)
