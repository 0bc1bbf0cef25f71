"""All ops, one module per family. This package is also the namespace ``m`` that
vjps compute with (``ctx.m.exp(x)``), on raw arrays or on Tensors alike."""
# Import order matters here: the families register their ops in this order, which is the
# registry's order.
# isort: skip_file
from . import elementwise, ufuncs, special, reduce, sorting, histograms
from . import shape, joining, indexing, indexed_update
from . import linalg, linalg_decomp, creation, random, nn, activations, compat
from . import sparse  # noqa: F401  (tg.sparse: sparse COO tensors, their own namespace)

_FAMILIES = (elementwise, ufuncs, special, reduce, sorting, histograms, shape, joining, indexing,
             indexed_update, linalg, linalg_decomp, creation, random, nn, activations, compat)

# used by vjps through ``m`` but not part of the public ``tg.*`` namespace
_INTERNAL = {"sum_to", "getitem", "getitem_raw", "setitem", "index_add_into",
             "index_put_zero", "cast", "to_device", "generator", "diagonal_into",
             "reverse_cumsum", "index_onehot"}


def _public(mod):
    """A family's public names: its ``__all__``, else the functions it defines."""
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n, v in vars(mod).items()
                 if not n.startswith("_") and callable(v) and not isinstance(v, type)
                 and getattr(v, "__module__", "") == mod.__name__]
    return list(names)


__all__ = []
for _mod in _FAMILIES:
    for _name in _public(_mod):
        globals()[_name] = getattr(_mod, _name)
        if _name not in _INTERNAL and _name not in __all__:
            __all__.append(_name)
    # the namespace m also needs the family's internal vjp helpers
    for _name in _INTERNAL:
        if hasattr(_mod, _name) and not _name.startswith("_"):
            globals()[_name] = getattr(_mod, _name)
del _mod, _name
