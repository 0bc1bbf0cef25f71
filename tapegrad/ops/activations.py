"""Composite activations declared as scalar expressions, so each runs as one fused
kernel forward and one backward (derived from the expression): gelu (exact and
tanh), silu, softplus, logsigmoid, elu, leaky_relu, mish.

The expressions are written to be stable: no branch of a ``where`` overflows (the
derivative of the branch not taken is multiplied by a zero adjoint, and inf * 0 is
NaN), so softplus and logsigmoid use the expression primitive ``softplus`` (computed
as ``max(x, 0) + log1p(exp(-|x|))``, differentiated as ``sigmoid``, exact at 0) and elu
takes ``expm1`` of ``x`` only where ``x <= 0``.
"""
import math

import numpy as np

from .._util import ArgumentError, op_error, require_floating as _floating
from ..fusion import elementwise as _elementwise
from ..ops_registry import Sample
from ._decl import away_from, rand

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


def _samples(low=-3.0, high=3.0, avoid=(), attrs=({},)):
    def samples(dtype=np.float64):
        out = []
        for k, shape in enumerate(((3, 4), (), (2, 0, 3), (5,))):
            a = rand(shape, dtype, low, high, seed=k)
            if avoid:
                a = away_from(a, avoid).astype(dtype)
            out.append(Sample((a,), dict(attrs[k % len(attrs)])))
        # non-contiguous input
        out.append(Sample((away_from(rand((4, 3), dtype, low, high, seed=7), avoid)
                           .astype(dtype).T,), dict(attrs[0])))
        return out
    return samples


def _errors():
    return [(("not a tensor",), {}, TypeError)]


_GELU = _elementwise("gelu", f"x * 0.5 * (1 + erf(x * {_INV_SQRT_2!r}))",
                     samples=_samples(), error_samples=_errors,
                     torch=lambda torch, x: torch.nn.functional.gelu(x))
_GELU_TANH = _elementwise(
    "gelu_tanh", f"x * 0.5 * (1 + tanh({_SQRT_2_OVER_PI!r} * (x + 0.044715 * x * x * x)))",
    samples=_samples(), error_samples=_errors,
    torch=lambda torch, x: torch.nn.functional.gelu(x, approximate="tanh"))
_GELU_TANH.op.grad_fn_name = "GeluBackward0"  # (PyTorch's gelu with approximate="tanh")
_SILU = _elementwise("silu", "x * sigmoid(x)", samples=_samples(), error_samples=_errors,
                     torch=lambda torch, x: torch.nn.functional.silu(x))
# torch: x where beta * x > threshold, else log1p(exp(beta * x)) / beta; the stable
# form below needs no exp of a large argument on either side of the switch
_SOFTPLUS = _elementwise(
    "softplus", "where(x * beta > threshold, x, softplus(x * beta) / beta)",
    attrs=("beta", "threshold"),
    samples=_samples(avoid=(0.0,), attrs=({"beta": 1.0, "threshold": 20.0},
                                          {"beta": 2.0, "threshold": 3.0})),
    error_samples=_errors,
    torch=lambda torch, x, beta, threshold: torch.nn.functional.softplus(
        x, beta=beta, threshold=threshold))
_SOFTPLUS.op.autocast = {"cuda": "fp32"}  # on PyTorch's CUDA autocast list
_LOGSIGMOID = _elementwise("logsigmoid", "-softplus(-x)",
                           samples=_samples(avoid=(0.0,)), error_samples=_errors,
                           torch=lambda torch, x: torch.nn.functional.logsigmoid(x))
_LOGSIGMOID.op.grad_fn_name = "LogSigmoidBackward0"
_LOGSIGMOID.op.fusion.contiguous_out = True  # (PyTorch's log_sigmoid writes row-major)
# NOTE: the gradient at x == 0 is alpha (the x <= 0 branch), as PyTorch's; a
# minimum(x, 0) here would split it in half at the tie
# at x == 0 the value is 0, the slope alpha and the curvature 0, as PyTorch's (its
# double backward masks with x < 0): the x == 0 case is its own linear branch
_ELU = _elementwise("elu", "where(x > 0, x, where(x < 0, alpha * expm1(where(x < 0, x, 0)), "
                    "alpha * x))",
                    attrs=("alpha",),
                    samples=_samples(avoid=(0.0,), attrs=({"alpha": 1.0}, {"alpha": 0.5})),
                    error_samples=_errors,
                    torch=lambda torch, x, alpha: torch.nn.functional.elu(x, alpha=alpha))
_LEAKY_RELU = _elementwise(
    "leaky_relu", "where(x > 0, x, x * negative_slope)", attrs=("negative_slope",),
    samples=_samples(avoid=(0.0,), attrs=({"negative_slope": 0.01},
                                          {"negative_slope": 0.2})),
    error_samples=_errors,
    torch=lambda torch, x, negative_slope: torch.nn.functional.leaky_relu(
        x, negative_slope=negative_slope))
_MISH = _elementwise("mish", "x * tanh(maximum(x, 0) + log1p(exp(-abs(x))))",
                     samples=_samples(avoid=(0.0,)), error_samples=_errors,
                     torch=lambda torch, x: torch.nn.functional.mish(x))


def gelu(input, approximate="none"):
    """Gaussian error linear unit: ``x * Phi(x)``; ``approximate="tanh"`` uses the
    tanh approximation (as PyTorch). Runs as one fused kernel.

    >>> import tapegrad as tg
    >>> tg.gelu(tg.tensor([0.0, 1.0]))
    tensor([0.0000, 0.8413])
    """
    if approximate == "none":
        return _GELU(_floating("gelu", input))
    if approximate == "tanh":
        return _GELU_TANH(_floating("gelu", input))
    raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input):
    """``x * sigmoid(x)`` (swish), one fused kernel."""
    return _SILU(_floating("silu", input))


def _number(name, v, what):
    """A scalar attribute as a float; a string or None is PyTorch's TypeError (float()
    would turn '1.5' into a number and 'a' into a ValueError)."""
    if v is None or isinstance(v, (str, bytes)):
        raise op_error(name, f"{what} must be a number, got {v!r}", TypeError)
    return float(v)


def softplus(input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``;
    never overflows."""
    return _SOFTPLUS(_floating("softplus", input), beta=_number("softplus", beta, "beta"),
                     threshold=_number("softplus", threshold, "threshold"))


def logsigmoid(input):
    """``log(sigmoid(x))`` computed without overflow."""
    return _LOGSIGMOID(_floating("logsigmoid", input))


def elu(input, alpha=1.0):
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    return _ELU(_floating("elu", input), alpha=_number("elu", alpha, "alpha"))


def leaky_relu(input, negative_slope=0.01):
    """``x`` for ``x > 0``, else ``negative_slope * x``."""
    return _LEAKY_RELU(_floating("leaky_relu", input),
                       negative_slope=_number("leaky_relu", negative_slope, "negative_slope"))


def mish(input):
    """``x * tanh(softplus(x))``."""
    return _MISH(_floating("mish", input))


swish = silu


def _swish_registry():
    """``swish``, another name of ``silu``, in the registry (PyTorch has it as
    ``torch.nn.functional.silu``)."""
    from ..ops_registry import get
    from ._decl import composite
    op = get("silu")
    composite(silu, name="swish", infer=op.infer,
              samples=lambda dtype=np.float64: list(op.samples(dtype))[:2],
              error_samples=op.error_samples,
              torch=lambda torch, x: torch.nn.functional.silu(x))


_swish_registry()
# torch.Tensor has none of these as methods (they live in torch.nn.functional)
METHODS = ""
