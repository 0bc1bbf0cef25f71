"""One expression run on PyTorch and on tapegrad, outcomes compared: tensors by dtype,
shape and values; tuples, lists and Python scalars by type and value; an exception by
PyTorch's built-in class (tapegrad's must be an instance of it)."""
import builtins

import numpy as np

import tapegrad as tg


def outcome(case, lib):
    try:
        return case(lib)
    except Exception as e:  # the comparison is the point: PyTorch's class is the oracle
        return e


def _builtin_class(exc):
    for cls in type(exc).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls
    return Exception


def _dtype_name(d):
    return str(d).rsplit(".", 1)[-1]


def _compare(ours, theirs, path, rtol, atol):
    import torch
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, tg.Tensor), f"{path}: {type(ours).__name__}, not a Tensor"
        assert _dtype_name(ours.dtype) == _dtype_name(theirs.dtype), \
            f"{path}: dtype {ours.dtype} vs {theirs.dtype}"
        assert tuple(ours.shape) == tuple(theirs.shape), \
            f"{path}: shape {tuple(ours.shape)} vs {tuple(theirs.shape)}"
        a = np.asarray(ours.detach().to(tg.float64))
        b = theirs.detach().to(torch.float64).numpy()
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True, err_msg=path)
    elif isinstance(theirs, torch.dtype):
        assert _dtype_name(ours) == _dtype_name(theirs), f"{path}: {ours} vs {theirs}"
    elif isinstance(theirs, (tuple, list)):
        assert isinstance(ours, tuple if isinstance(theirs, tuple) else list), \
            f"{path}: {type(ours).__name__} vs {type(theirs).__name__}"
        assert len(ours) == len(theirs), f"{path}: length {len(ours)} vs {len(theirs)}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _compare(a, b, f"{path}[{i}]", rtol, atol)
    elif isinstance(theirs, dict):
        assert sorted(ours) == sorted(theirs), f"{path}: keys {sorted(ours)} vs {sorted(theirs)}"
        for k in theirs:
            _compare(ours[k], theirs[k], f"{path}[{k!r}]", rtol, atol)
    elif isinstance(theirs, float):
        assert type(ours) is float, f"{path}: {type(ours).__name__}, not float"
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, err_msg=path)
    else:
        assert type(ours) is type(theirs) and ours == theirs, f"{path}: {ours!r} vs {theirs!r}"


def same(case, rtol=1e-6, atol=1e-6):
    """``case(lib)`` gives PyTorch's outcome for ``lib=torch`` and tapegrad's for
    ``lib=tg``; they must agree."""
    import torch
    theirs, ours = outcome(case, torch), outcome(case, tg)
    if isinstance(theirs, Exception):
        cls = _builtin_class(theirs)
        assert isinstance(ours, cls), \
            f"PyTorch raises {cls.__name__} ({theirs}); tapegrad: {ours!r}"
        return
    if isinstance(ours, Exception):
        raise ours
    _compare(ours, theirs, "result", rtol, atol)
