"""Forward-mode AD, as ``torch.autograd.forward_ad``.

Inside ``with dual_level():``, ``make_dual(primal, tangent)`` gives a tensor that
carries ``tangent`` at that level; every op on it computes its output's tangent from
the registry's forward-mode rule (``OpDef.jvp``, run by dispatch), and
``unpack_dual(t)`` gives ``(primal, tangent)`` back. Levels nest: a tensor carries one
tangent per level (``Tensor._fw``), an op propagates each with that level's own rule
running with the level closed, so tangents of tangents (a ``jvp`` of a ``jvp``) and
gradients of tangents (reverse over forward, or forward over reverse) come out right.
A level's tangents are dropped when it closes.
"""
import contextlib
import itertools
from collections import namedtuple

from .ops.shape import reshape
from .tape import state as _state
from .tensor import Tensor

__all__ = ["dual_level", "enter_dual_level", "exit_dual_level", "make_dual",
           "unpack_dual", "UnpackedDualTensor"]

_ids = itertools.count(1)

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


def enter_dual_level():
    """Open a new (innermost) level; returns its id."""
    level = next(_ids)
    _state.dual = _state.dual + (level,)
    return level


def exit_dual_level(*, level=None):
    """Close the innermost level (or ``level``, which must be it)."""
    levels = _state.dual
    if not levels:
        raise RuntimeError("exit_dual_level: no dual level is open")
    if level is not None and level != levels[-1]:
        raise RuntimeError(f"exit_dual_level: level {level} is not the innermost open "
                           f"level ({levels[-1]})")
    _state.dual = levels[:-1]


@contextlib.contextmanager
def dual_level():
    """A forward-mode level: tangents made with ``make_dual`` inside it propagate
    through every op until it closes."""
    level = enter_dual_level()
    try:
        yield level
    finally:
        exit_dual_level(level=level)


def _current(level, fn):
    levels = _state.dual
    if not levels:
        raise RuntimeError(f"{fn}: must be called inside a dual_level() context "
                           f"(tg.forward_ad.dual_level)")
    if level is None:
        return levels[-1]
    if level not in levels:
        raise RuntimeError(f"{fn}: dual level {level} is not open")
    return level


def make_dual(tensor, tangent, *, level=None):
    """A view of ``tensor`` carrying ``tangent`` at the innermost (or given) level.
    The view is differentiable with respect to ``tensor`` as any view is."""
    level = _current(level, "make_dual")
    if not isinstance(tensor, Tensor) or not isinstance(tangent, Tensor):
        raise TypeError(f"make_dual: expected Tensors, got {type(tensor).__name__} and "
                        f"{type(tangent).__name__}")
    if tuple(tensor.shape) != tuple(tangent.shape):
        raise RuntimeError(f"make_dual: the tangent's shape {tuple(tangent.shape)} must be "
                           f"the primal's {tuple(tensor.shape)}")
    if not tensor.is_floating_point() or tangent.dtype != tensor.dtype:
        raise RuntimeError(f"make_dual: expected a floating point primal and a tangent of "
                           f"its dtype, got {tensor.dtype} and {tangent.dtype}")
    if tangent.device != tensor.device:
        raise RuntimeError(f"make_dual: the tangent is on {tangent.device}, the primal on "
                           f"{tensor.device}")
    dual = reshape(tensor, tuple(tensor.shape))  # an alias, through the primal's history
    fw = dict(dual._fw or {})
    fw[level] = tangent
    dual._fw = fw
    return dual


def unpack_dual(tensor, *, level=None):
    """``(primal, tangent)``: the tensor without this level's tangent (a view of it)
    and the tangent, ``None`` for a tensor without one."""
    levels = _state.dual
    if not levels:
        return UnpackedDualTensor(tensor, None)
    level = levels[-1] if level is None else level
    fw = getattr(tensor, "_fw", None)
    if not isinstance(tensor, Tensor) or not fw or level not in fw:
        return UnpackedDualTensor(tensor, None)
    prev = _state.dual
    _state.dual = tuple(lv for lv in prev if lv != level)
    try:
        primal = reshape(tensor, tuple(tensor.shape))
    finally:
        _state.dual = prev
    rest = {lv: t for lv, t in (primal._fw or {}).items() if lv != level}
    primal._fw = rest or None
    return UnpackedDualTensor(primal, fw[level])
