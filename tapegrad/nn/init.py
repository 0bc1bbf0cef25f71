"""``tg.nn.init``: in-place initialisers drawing from tapegrad's seeded generator
(``tg.manual_seed``), with PyTorch's names and formulas."""
import math
import warnings

import numpy as np

from ..ops import tensor as _tensor
from ..ops.creation import generator as _generator
from ..tensor import buffer, mark_written

__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_",
           "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
           "trunc_normal_", "orthogonal_", "sparse_", "eye_", "dirac_"]


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for ``nonlinearity`` (``param``: leaky_relu's negative slope),
    as ``torch.nn.init.calculate_gain``."""
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "sigmoid", "identity"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity}")


def _fans(tensor):
    shape = tensor.shape
    if len(shape) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer "
                         f"than 2 dimensions (shape {tuple(shape)})")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def _fill(tensor, values):
    data = buffer(tensor)
    if not isinstance(data, np.ndarray):  # another device: copy the host values over
        values = buffer(_tensor(np.asarray(values, dtype=data.dtype), device=tensor.device))
    data[...] = values
    mark_written(tensor)
    return tensor


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fills ``tensor`` in place with draws from U(``a``, ``b``), as
    ``torch.nn.init.uniform_``."""
    g = generator or _generator()
    return _fill(tensor, g.uniform(a, b, size=tensor.shape))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fills ``tensor`` in place with draws from N(``mean``, ``std``²), as
    ``torch.nn.init.normal_``."""
    g = generator or _generator()
    return _fill(tensor, g.normal(mean, std, size=tensor.shape))


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Fills ``tensor`` in place with N(``mean``, ``std``²) draws redrawn until inside
    [``a``, ``b``], as ``torch.nn.init.trunc_normal_``."""
    g = generator or _generator()
    vals = g.normal(mean, std, size=tensor.shape)
    bad = (vals < a) | (vals > b)
    while bad.any():
        vals[bad] = g.normal(mean, std, size=int(bad.sum()))
        bad = (vals < a) | (vals > b)
    return _fill(tensor, vals)


def constant_(tensor, val):
    """Fills ``tensor`` in place with ``val``, as ``torch.nn.init.constant_``."""
    return _fill(tensor, val)


def zeros_(tensor):
    """Fills ``tensor`` in place with zeros, as ``torch.nn.init.zeros_``."""
    return _fill(tensor, 0)


def ones_(tensor):
    """Fills ``tensor`` in place with ones, as ``torch.nn.init.ones_``."""
    return _fill(tensor, 1)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot uniform: U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))``, in place,
    as ``torch.nn.init.xavier_uniform_``."""
    fan_in, fan_out = _fans(tensor)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot normal: N(0, std²) with ``std = gain * sqrt(2 / (fan_in + fan_out))``, in
    place, as ``torch.nn.init.xavier_normal_``."""
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def _kaiming_std(tensor, a, mode, nonlinearity):
    fan_in, fan_out = _fans(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    if fan == 0:
        return 0.0
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He uniform: U(-b, b) with ``b = gain * sqrt(3 / fan)`` (``mode``: fan_in or fan_out),
    in place, as ``torch.nn.init.kaiming_uniform_``."""
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He normal: N(0, std²) with ``std = gain / sqrt(fan)`` (``mode``: fan_in or fan_out),
    in place, as ``torch.nn.init.kaiming_normal_``."""
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


def orthogonal_(tensor, gain=1, generator=None):
    """Fills ``tensor`` in place with a (semi-)orthogonal matrix times ``gain``: the Q of
    the QR decomposition of a standard normal draw, its columns' signs those of R's
    diagonal, so Q is uniform (Haar); dimensions after the first are flattened, as
    ``torch.nn.init.orthogonal_``."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor  # no-op
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    g = generator or _generator()
    flattened = g.normal(0.0, 1.0, size=(rows, cols))
    if rows < cols:
        flattened = flattened.T
    q, r = np.linalg.qr(flattened)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, gain * q.reshape(tensor.shape))


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """Fills the 2-D ``tensor`` in place with N(0, ``std``²) draws, then zeros
    ``ceil(sparsity * rows)`` randomly chosen entries of every column, as
    ``torch.nn.init.sparse_``."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    g = generator or _generator()
    vals = g.normal(0.0, std, size=(rows, cols))
    zeros = int(math.ceil(sparsity * rows))
    for c in range(cols):
        vals[g.permutation(rows)[:zeros], c] = 0
    return _fill(tensor, vals)


def eye_(tensor):
    """Fills the 2-D ``tensor`` in place with the identity (ones on the diagonal), as
    ``torch.nn.init.eye_``."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, np.eye(*tensor.shape))


def dirac_(tensor, groups=1):
    """Fills the 3-, 4- or 5-D ``tensor`` in place with the Dirac delta (a convolution
    with it keeps its input's channels, per group), as ``torch.nn.init.dirac_``."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    shape = tuple(tensor.shape)
    if shape[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_per_group = shape[0] // groups
    vals = np.zeros(shape)
    centre = tuple(k // 2 for k in shape[2:])
    for gi in range(groups):
        for d in range(min(out_per_group, shape[1])):
            vals[(gi * out_per_group + d, d) + centre] = 1
    return _fill(tensor, vals)


def _deprecated(method):
    """PyTorch's deprecated spelling without the trailing underscore: warns
    (FutureWarning, as PyTorch does) and calls ``method``."""
    new_name = method.__name__
    old_name = new_name[:-1]

    def deprecated_init(*args, **kwargs):
        warnings.warn(f"`nn.init.{old_name}` is now deprecated in favor of "
                      f"`nn.init.{new_name}`.", FutureWarning, stacklevel=2)
        return method(*args, **kwargs)

    deprecated_init.__name__ = deprecated_init.__qualname__ = old_name
    deprecated_init.__doc__ = f"Deprecated: use ``{new_name}``."
    return deprecated_init


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
orthogonal = _deprecated(orthogonal_)
sparse = _deprecated(sparse_)
dirac = _deprecated(dirac_)
eye = _deprecated(eye_)
