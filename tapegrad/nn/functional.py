"""``tg.nn.functional`` (PyTorch's ``F``): the functional NN ops of ``tapegrad.ops``.

Names are looked up in ``tapegrad.ops`` on first use (and cached here), so this
module imports even while an op is not present; using a missing one raises
``AttributeError`` naming it.

>>> import tapegrad as tg
>>> import tapegrad.nn.functional as F
>>> F.relu(tg.tensor([-1.0, 2.0]))
tensor([0., 2.])
"""
import tapegrad as _tg
from tapegrad import ops as _ops

_NAMES = (
    # layers and losses
    "linear", "bilinear", "conv1d", "conv2d", "conv_transpose2d", "max_pool1d",
    "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d",
    "adaptive_avg_pool2d", "adaptive_max_pool2d", "softmax", "log_softmax", "softmin",
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits", "layer_norm",
    "batch_norm", "group_norm", "instance_norm", "rms_norm", "normalize", "dropout",
    "dropout1d", "dropout2d", "embedding", "scaled_dot_product_attention", "one_hot",
    "pad", "unfold", "fold", "interpolate", "cosine_similarity", "pairwise_distance",
    # activations
    "relu", "relu6", "leaky_relu", "elu", "selu", "celu", "gelu", "silu", "mish",
    "softplus", "softsign", "tanh", "sigmoid", "hardtanh", "hardsigmoid", "hardswish",
    "logsigmoid", "glu", "tanhshrink", "threshold",
)

__all__ = list(_NAMES)


def __getattr__(name):
    if name in _NAMES:
        fn = getattr(_ops, name, None)
        if fn is None:
            raise AttributeError(f"tapegrad.nn.functional.{name} is not available: "
                                 f"tapegrad.ops has no op '{name}'")
        globals()[name] = fn
        return fn
    raise AttributeError(f"module 'tapegrad.nn.functional' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | {n for n in _NAMES if hasattr(_ops, n)})


def _available():
    """The names of this module that tapegrad.ops provides now."""
    return [n for n in _NAMES if hasattr(_ops, n)]


del _tg
