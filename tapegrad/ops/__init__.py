"""All ops, one module per family. This package is also the namespace ``m`` that
vjps compute with (``ctx.m.exp(x)``), on raw arrays or on Tensors alike."""
from .elementwise import *  # noqa: F401,F403
from .elementwise import abs, round, pow  # noqa: F401
from .reduce import *  # noqa: F401,F403
from .reduce import sum  # noqa: F401
from .shape import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .creation import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .activations import *  # noqa: F401,F403
from . import elementwise, reduce, shape, indexing, linalg, creation, nn, activations  # noqa: F401


def _public(mod):
    return [n for n, v in vars(mod).items() if not n.startswith("_") and callable(v)
            and getattr(v, "__module__", "") == mod.__name__]
