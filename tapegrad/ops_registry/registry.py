"""The name -> OpDef table: ``register``, ``get``, ``list_ops``."""
import sys

from .opdef import OpDef, validate
from .rules import diagonal

_OPS = {}


def register(op=None, **fields):
    """Validate and add an OpDef (or build one from keyword fields); returns it."""
    if op is None:
        op = OpDef(**fields)
    validate(op)
    op.declared_at = _declaration_site()
    if op.jvp is None and op.elementwise and op.differentiable:
        op.jvp = diagonal  # derived from the vjp (rules.py)
    if op.name in _OPS and _OPS[op.name] is not op:
        raise ValueError(f"register {op.name}: an op of that name already exists")
    _OPS[op.name] = op
    return op


def get(name):
    """The OpDef called ``name``; KeyError listing near names if absent."""
    try:
        return _OPS[name]
    except KeyError:
        import difflib
        near = difflib.get_close_matches(name, _OPS, n=3)
        raise KeyError(f"no op named {name!r}" + (f"; did you mean {near}?" if near
                                                  else "")) from None


def list_ops(kind=None):
    """All registered OpDefs (optionally of one kind), in registration order."""
    if kind is not None and kind not in ("basic", "workspace", "dynamic", "view"):
        raise ValueError(f"list_ops: unknown kind {kind!r}")
    return [op for op in _OPS.values() if kind is None or op.kind == kind]


def unregister(name):
    """Remove an op (tests and custom-op redefinition)."""
    _OPS.pop(name, None)


def _declaration_site():
    """(file, line) of the module-level statement whose execution is registering an op
    (declaration helpers in between skipped); else the nearest caller outside this
    package."""
    f = sys._getframe(2)
    first = None
    while f is not None:
        code = f.f_code
        if first is None and not code.co_filename.startswith(_HERE):
            first = (code.co_filename, f.f_lineno)
        if code.co_name == "<module>" and not code.co_filename.startswith("<"):
            return (code.co_filename, f.f_lineno)
        f = f.f_back
    return first


_HERE = __file__.rsplit("registry.py", 1)[0]
