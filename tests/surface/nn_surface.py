"""The list of PyTorch's ``torch.nn.functional`` functions and ``torch.nn`` module
classes that tapegrad measures itself against, frozen from
PyTorch 2.13 so the target does not move with the installed version.

The rule (mechanical; `derive()` below re-derives both lists from an installed PyTorch
and `test_nn_surface.py` checks the frozen lists equal it when the installed version is
2.13):

- **FUNCTIONAL**: every name ``n`` in ``dir(torch.nn.functional)`` that does not start
  with ``_``, whose value is a Python function or a builtin function, defined in
  ``torch.nn.functional``, ``torch`` or ``torch._C._nn`` (its ``__module__``), minus
  the names matching ``FUNCTIONAL_EXCLUDE``:
    ``*_with_indices``  the halves ``boolean_dispatch`` joins (``max_pool2d(...,
                        return_indices=True)`` is the public spelling);
    ``native_*``        the native kernels behind a public name (``channel_shuffle``);
    ``*grouped_mm``, ``scaled_mm``  low-precision (fp8/MX) scaled GEMMs, CUDA only;
    ``assert_*``        argument-check helpers.
  (TorchScript and ``__torch_function__`` helpers, typing names and modules are not
  functions defined there, so the first clause already leaves them out.)
- **MODULES**: ``torch.nn.modules.__all__`` minus the names matching
  ``MODULES_EXCLUDE``:
    ``Lazy*``           lazy modules (shape inferred at the first call);
    ``SyncBatchNorm``   distributed;
    ``Container``       the deprecated pre-``Sequential`` base;
    ``*Options``        not a module (``LinearCrossEntropyOptions``, a config object).
  ``torch.nn.modules.__all__`` has no quantized, parametrization, pruning or parallel
  names (those live in ``torch.ao``, ``torch.nn.utils``, ``torch.nn.parallel``).

A name counts as covered when tapegrad has it AND its smoke call below runs and agrees
with PyTorch's: the same call on the same inputs (a module built in both with the
same arguments, its state dict keys and shapes equal, PyTorch's weights loaded into
tapegrad's), outputs equal to float32 tolerance; for the random ones (``RANDOM``),
the output shapes equal.
"""
import fnmatch
import types

import numpy as np

FUNCTIONAL_EXCLUDE = ("*_with_indices", "native_*", "*grouped_mm", "scaled_mm", "assert_*")
MODULES_EXCLUDE = ("Lazy*", "SyncBatchNorm", "Container", "*Options")

FUNCTIONAL = (
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "adaptive_max_pool3d", "affine_grid", "alpha_dropout", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "batch_norm", "bilinear", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "celu", "celu_", "channel_shuffle", "conv1d", "conv2d",
    "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "cosine_embedding_loss", "cosine_similarity", "cross_entropy", "ctc_loss", "dropout",
    "dropout1d", "dropout2d", "dropout3d", "elu", "elu_", "embedding", "embedding_bag",
    "feature_alpha_dropout", "fold", "fractional_max_pool2d", "fractional_max_pool3d",
    "gaussian_nll_loss", "gelu", "glu", "grid_sample", "group_norm", "gumbel_softmax",
    "hardshrink", "hardsigmoid", "hardswish", "hardtanh", "hardtanh_", "hinge_embedding_loss",
    "huber_loss", "instance_norm", "interpolate", "kl_div", "l1_loss", "layer_norm",
    "leaky_relu", "leaky_relu_", "linear", "linear_cross_entropy", "local_response_norm",
    "log_softmax", "logsigmoid", "lp_pool1d", "lp_pool2d", "lp_pool3d", "margin_ranking_loss",
    "max_pool1d", "max_pool2d", "max_pool3d", "max_unpool1d", "max_unpool2d", "max_unpool3d",
    "mish", "mse_loss", "multi_head_attention_forward", "multi_margin_loss",
    "multilabel_margin_loss", "multilabel_soft_margin_loss", "nll_loss", "normalize",
    "one_hot", "pad", "pairwise_distance", "pdist", "pixel_shuffle", "pixel_unshuffle",
    "poisson_nll_loss", "prelu", "relu", "relu6", "relu_", "rms_norm", "rrelu", "rrelu_",
    "scaled_dot_product_attention", "selu", "selu_", "sigmoid", "silu", "smooth_l1_loss",
    "soft_margin_loss", "softmax", "softmin", "softplus", "softshrink", "softsign", "tanh",
    "tanhshrink", "threshold", "threshold_", "triplet_margin_loss",
    "triplet_margin_with_distance_loss", "unfold", "upsample", "upsample_bilinear",
    "upsample_nearest",
)

MODULES = (
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveLogSoftmaxWithLoss",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "AlphaDropout", "AvgPool1d",
    "AvgPool2d", "AvgPool3d", "BCELoss", "BCEWithLogitsLoss", "BatchNorm1d", "BatchNorm2d",
    "BatchNorm3d", "Bilinear", "CELU", "CTCLoss", "ChannelShuffle", "CircularPad1d",
    "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "CosineEmbeddingLoss", "CosineSimilarity", "CrossEntropyLoss", "CrossMapLRN2d", "Dropout",
    "Dropout1d", "Dropout2d", "Dropout3d", "ELU", "Embedding", "EmbeddingBag",
    "FeatureAlphaDropout", "Flatten", "Fold", "FractionalMaxPool2d", "FractionalMaxPool3d",
    "GELU", "GLU", "GRU", "GRUCell", "GaussianNLLLoss", "GroupNorm", "Hardshrink",
    "Hardsigmoid", "Hardswish", "Hardtanh", "HingeEmbeddingLoss", "HuberLoss", "Identity",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "KLDivLoss", "L1Loss", "LPPool1d",
    "LPPool2d", "LPPool3d", "LSTM", "LSTMCell", "LayerNorm", "LeakyReLU", "Linear",
    "LinearCrossEntropyLoss", "LocalResponseNorm", "LogSigmoid", "LogSoftmax", "MSELoss",
    "MarginRankingLoss", "MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d",
    "MaxUnpool3d", "Mish", "Module", "ModuleDict", "ModuleList", "MultiLabelMarginLoss",
    "MultiLabelSoftMarginLoss", "MultiMarginLoss", "MultiheadAttention", "NLLLoss",
    "NLLLoss2d", "PReLU", "PairwiseDistance", "ParameterDict", "ParameterList", "PixelShuffle",
    "PixelUnshuffle", "PoissonNLLLoss", "RMSNorm", "RNN", "RNNBase", "RNNCell", "RNNCellBase",
    "RReLU", "ReLU", "ReLU6", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
    "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "SELU", "Sequential", "SiLU",
    "Sigmoid", "SmoothL1Loss", "SoftMarginLoss", "Softmax", "Softmax2d", "Softmin", "Softplus",
    "Softshrink", "Softsign", "Tanh", "Tanhshrink", "Threshold", "Transformer",
    "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
    "TransformerEncoderLayer", "TripletMarginLoss", "TripletMarginWithDistanceLoss",
    "Unflatten", "Unfold", "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d",
    "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
)


def derive(torch):
    """Both lists by the rule, from an installed PyTorch."""
    F = torch.nn.functional
    fns = []
    for n in sorted(dir(F)):
        o = getattr(F, n)
        if (n.startswith("_") or not isinstance(o, (types.FunctionType, types.BuiltinFunctionType))
                or getattr(o, "__module__", None) not in ("torch.nn.functional", "torch",
                                                          "torch._C._nn")
                or any(fnmatch.fnmatch(n, p) for p in FUNCTIONAL_EXCLUDE)):
            continue
        fns.append(n)
    mods = [n for n in torch.nn.modules.__all__
            if not any(fnmatch.fnmatch(n, p) for p in MODULES_EXCLUDE)]
    return tuple(fns), tuple(sorted(mods))


# ------------------------------------------------------------------ smoke inputs
def R(*shape, seed=0, low=-1.0, high=1.0):
    """float32 uniform values (the same for both libraries)."""
    return np.random.default_rng(seed + 7 * len(shape)).uniform(low, high, shape).astype(np.float32)


def P(*shape, seed=0):
    """Positive values in (0.1, 0.9)."""
    return R(*shape, seed=seed, low=0.1, high=0.9)


def I(high, *shape, seed=0):  # noqa: E743
    return np.random.default_rng(seed).integers(0, high, shape).astype(np.int64)


def S(*shape, seed=0):
    """Signs, -1 or 1, as float32."""
    return np.where(R(*shape, seed=seed) < 0, -1.0, 1.0).astype(np.float32)


def LP(*shape, seed=0, dim=-1):
    """Log-probabilities along ``dim``."""
    x = R(*shape, seed=seed) * 2
    x = x - np.log(np.exp(x).sum(dim, keepdims=True))
    return x.astype(np.float32)


RANDOM_F = {"alpha_dropout", "dropout", "dropout1d", "dropout2d", "dropout3d",
            "feature_alpha_dropout", "fractional_max_pool2d", "fractional_max_pool3d",
            "gumbel_softmax", "rrelu", "rrelu_"}
RANDOM_M = {"AlphaDropout", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
            "FeatureAlphaDropout", "FractionalMaxPool2d", "FractionalMaxPool3d", "RReLU"}


def _t(lib, *arrays):
    """numpy arrays as the library's tensors; other arguments as they are."""
    return [lib.tensor(a) if isinstance(a, np.ndarray) else a for a in arrays]


def _f(name, *arrays, **kw):
    """``F.name(*tensors, **kw)``."""
    def call(lib):
        return getattr(lib.nn.functional, name)(*_t(lib, *arrays), **kw)
    return call


def _unpool(n):
    def call(lib):
        F = lib.nn.functional
        x = lib.tensor(R(1, 2, *([4] * n)))
        out, idx = getattr(F, f"max_pool{n}d")(x, 2, return_indices=True)
        return getattr(F, f"max_unpool{n}d")(out, idx, 2)
    return call


def _mha_f(lib):
    E, H = 8, 2
    q, k, v = _t(lib, R(3, 2, E, seed=1), R(4, 2, E, seed=2), R(4, 2, E, seed=3))
    w, b, ow, ob = _t(lib, R(3 * E, E, seed=4), R(3 * E, seed=5), R(E, E, seed=6), R(E, seed=7))
    return lib.nn.functional.multi_head_attention_forward(
        q, k, v, E, H, w, b, None, None, False, 0.0, ow, ob, training=False)


def _ctc(lib):
    lp, tg_, il, tl = _t(lib, LP(6, 2, 4), I(3, 2, 3) + 1, np.array([6, 5]), np.array([3, 2]))
    return lib.nn.functional.ctc_loss(lp, tg_, il, tl)


def _lce(lib):
    x, w, t = _t(lib, R(3, 4), R(5, 4, seed=1), I(5, 3))
    return lib.nn.functional.linear_cross_entropy(x, w, t)


def _with_copy(name, *arrays, **kw):
    """An in-place function on a fresh tensor (returns the written tensor)."""
    def call(lib):
        return getattr(lib.nn.functional, name)(*_t(lib, *arrays), **kw)
    return call


X = R(2, 3, 4)
FUNCTIONAL_SMOKE = {
    "adaptive_avg_pool1d": _f("adaptive_avg_pool1d", R(2, 3, 8), 3),
    "adaptive_avg_pool2d": _f("adaptive_avg_pool2d", R(2, 3, 6, 6), (3, 2)),
    "adaptive_avg_pool3d": _f("adaptive_avg_pool3d", R(1, 2, 4, 4, 4), 2),
    "adaptive_max_pool1d": _f("adaptive_max_pool1d", R(2, 3, 8), 3),
    "adaptive_max_pool2d": _f("adaptive_max_pool2d", R(2, 3, 6, 6), (3, 2)),
    "adaptive_max_pool3d": _f("adaptive_max_pool3d", R(1, 2, 4, 4, 4), 2),
    "affine_grid": lambda lib: lib.nn.functional.affine_grid(lib.tensor(R(2, 2, 3)),
                                                             [2, 3, 4, 5], align_corners=False),
    "alpha_dropout": _f("alpha_dropout", X, 0.5, True),
    "avg_pool1d": _f("avg_pool1d", R(2, 3, 8), 2),
    "avg_pool2d": _f("avg_pool2d", R(2, 3, 6, 6), 2),
    "avg_pool3d": _f("avg_pool3d", R(1, 2, 4, 4, 4), 2),
    "batch_norm": _f("batch_norm", R(4, 3), R(3, seed=1), P(3, seed=2)),
    "bilinear": _f("bilinear", R(4, 3), R(4, 5, seed=1), R(2, 3, 5, seed=2), R(2, seed=3)),
    "binary_cross_entropy": _f("binary_cross_entropy", P(3, 4), P(3, 4, seed=1)),
    "binary_cross_entropy_with_logits": _f("binary_cross_entropy_with_logits", R(3, 4),
                                           P(3, 4, seed=1)),
    "celu": _f("celu", X, 0.7),
    "celu_": _with_copy("celu_", X),
    "channel_shuffle": _f("channel_shuffle", R(1, 4, 2, 2), 2),
    "conv1d": _f("conv1d", R(2, 3, 8), R(4, 3, 3, seed=1)),
    "conv2d": _f("conv2d", R(2, 3, 5, 5), R(4, 3, 3, 3, seed=1)),
    "conv3d": _f("conv3d", R(1, 2, 4, 4, 4), R(3, 2, 2, 2, 2, seed=1), R(3, seed=2), padding=1),
    "conv_tbc": _f("conv_tbc", R(5, 2, 3), R(3, 3, 4, seed=1), R(4, seed=2), 1),
    "conv_transpose1d": _f("conv_transpose1d", R(2, 3, 5), R(3, 4, 3, seed=1), stride=2),
    "conv_transpose2d": _f("conv_transpose2d", R(2, 3, 4, 4), R(3, 2, 3, 3, seed=1)),
    "conv_transpose3d": _f("conv_transpose3d", R(1, 2, 3, 3, 3), R(2, 3, 2, 2, 2, seed=1),
                           stride=2),
    "cosine_embedding_loss": _f("cosine_embedding_loss", R(4, 5), R(4, 5, seed=1), S(4)),
    "cosine_similarity": _f("cosine_similarity", R(4, 5), R(4, 5, seed=1)),
    "cross_entropy": _f("cross_entropy", R(4, 5), I(5, 4)),
    "ctc_loss": _ctc,
    "dropout": _f("dropout", X, 0.5),
    "dropout1d": _f("dropout1d", X, 0.5),
    "dropout2d": _f("dropout2d", R(2, 3, 4, 4), 0.5),
    "dropout3d": _f("dropout3d", R(2, 3, 2, 2, 2), 0.5),
    "elu": _f("elu", X),
    "elu_": _with_copy("elu_", X),
    "embedding": _f("embedding", I(10, 2, 3), R(10, 4)),
    "embedding_bag": _f("embedding_bag", I(10, 2, 3), R(10, 4)),
    "feature_alpha_dropout": _f("feature_alpha_dropout", R(2, 3, 4, 4), 0.5, True),
    "fold": _f("fold", R(1, 12, 9), (4, 4), 2),
    "fractional_max_pool2d": _f("fractional_max_pool2d", R(1, 2, 8, 8), 2, output_size=4),
    "fractional_max_pool3d": _f("fractional_max_pool3d", R(1, 2, 6, 6, 6), 2, output_size=3),
    "gaussian_nll_loss": _f("gaussian_nll_loss", R(3, 4), R(3, 4, seed=1), P(3, 4, seed=2)),
    "gelu": _f("gelu", X),
    "glu": _f("glu", R(3, 4)),
    "grid_sample": _f("grid_sample", R(1, 2, 4, 4), R(1, 3, 3, 2, seed=1), align_corners=False),
    "group_norm": _f("group_norm", R(2, 4, 3), 2),
    "gumbel_softmax": _f("gumbel_softmax", R(3, 5)),
    "hardshrink": _f("hardshrink", X, 0.3),
    "hardsigmoid": _f("hardsigmoid", X * 4),
    "hardswish": _f("hardswish", X * 4),
    "hardtanh": _f("hardtanh", X * 2),
    "hardtanh_": _with_copy("hardtanh_", X * 2),
    "hinge_embedding_loss": _f("hinge_embedding_loss", R(3, 4), S(3, 4, seed=1)),
    "huber_loss": _f("huber_loss", R(3, 4), R(3, 4, seed=1)),
    "instance_norm": _f("instance_norm", R(2, 3, 5)),
    "interpolate": _f("interpolate", R(1, 2, 4, 4), scale_factor=2),
    "kl_div": _f("kl_div", LP(3, 4), P(3, 4, seed=1), reduction="batchmean"),
    "l1_loss": _f("l1_loss", R(3, 4), R(3, 4, seed=1)),
    "layer_norm": _f("layer_norm", X, (4,)),
    "leaky_relu": _f("leaky_relu", X, 0.2),
    "leaky_relu_": _with_copy("leaky_relu_", X, 0.2),
    "linear": _f("linear", R(3, 4), R(5, 4, seed=1), R(5, seed=2)),
    "linear_cross_entropy": _lce,
    "local_response_norm": _f("local_response_norm", R(1, 4, 3, 3), 3),
    "log_softmax": _f("log_softmax", X, dim=1),
    "logsigmoid": _f("logsigmoid", X),
    "lp_pool1d": _f("lp_pool1d", R(2, 3, 8), 2, 2),
    "lp_pool2d": _f("lp_pool2d", R(2, 3, 6, 6), 2, 2),
    "lp_pool3d": _f("lp_pool3d", R(1, 2, 4, 4, 4), 2, 2),
    "margin_ranking_loss": _f("margin_ranking_loss", R(5), R(5, seed=1), S(5, seed=2)),
    "max_pool1d": _f("max_pool1d", R(2, 3, 8), 2),
    "max_pool2d": _f("max_pool2d", R(2, 3, 6, 6), 2),
    "max_pool3d": _f("max_pool3d", R(1, 2, 4, 4, 4), 2),
    "max_unpool1d": _unpool(1),
    "max_unpool2d": _unpool(2),
    "max_unpool3d": _unpool(3),
    "mish": _f("mish", X),
    "mse_loss": _f("mse_loss", R(3, 4), R(3, 4, seed=1)),
    "multi_head_attention_forward": _mha_f,
    "multi_margin_loss": _f("multi_margin_loss", R(3, 5), I(5, 3)),
    "multilabel_margin_loss": _f("multilabel_margin_loss", R(2, 4),
                                 np.array([[3, 0, -1, 1], [1, 2, 3, -1]])),
    "multilabel_soft_margin_loss": _f("multilabel_soft_margin_loss", R(2, 4),
                                      I(2, 2, 4).astype(np.float32)),
    "nll_loss": _f("nll_loss", LP(4, 5), I(5, 4)),
    "normalize": _f("normalize", R(3, 4)),
    "one_hot": _f("one_hot", I(5, 4), 5),
    "pad": _f("pad", R(1, 2, 4, 4), (1, 2, 2, 1), mode="reflect"),
    "pairwise_distance": _f("pairwise_distance", R(4, 5), R(4, 5, seed=1)),
    "pdist": _f("pdist", R(4, 3)),
    "pixel_shuffle": _f("pixel_shuffle", R(1, 8, 2, 3), 2),
    "pixel_unshuffle": _f("pixel_unshuffle", R(1, 2, 4, 6), 2),
    "poisson_nll_loss": _f("poisson_nll_loss", R(3, 4), P(3, 4, seed=1)),
    "prelu": _f("prelu", X, R(3, seed=1)),
    "relu": _f("relu", X),
    "relu6": _f("relu6", X * 8),
    "relu_": _with_copy("relu_", X),
    "rms_norm": _f("rms_norm", X, (4,)),
    "rrelu": _f("rrelu", X, training=True),
    "rrelu_": _with_copy("rrelu_", X, training=True),
    "scaled_dot_product_attention": _f("scaled_dot_product_attention", R(2, 3, 4),
                                       R(2, 5, 4, seed=1), R(2, 5, 4, seed=2)),
    "selu": _f("selu", X),
    "selu_": _with_copy("selu_", X),
    "sigmoid": _f("sigmoid", X),
    "silu": _f("silu", X),
    "smooth_l1_loss": _f("smooth_l1_loss", R(3, 4), R(3, 4, seed=1)),
    "soft_margin_loss": _f("soft_margin_loss", R(3, 4), S(3, 4, seed=1)),
    "softmax": _f("softmax", X, dim=1),
    "softmin": _f("softmin", X, dim=1),
    "softplus": _f("softplus", X),
    "softshrink": _f("softshrink", X, 0.3),
    "softsign": _f("softsign", X),
    "tanh": _f("tanh", X),
    "tanhshrink": _f("tanhshrink", X),
    "threshold": _f("threshold", X, 0.1, 20.0),
    "threshold_": _with_copy("threshold_", X, 0.1, 20.0),
    "triplet_margin_loss": _f("triplet_margin_loss", R(4, 5), R(4, 5, seed=1), R(4, 5, seed=2)),
    "triplet_margin_with_distance_loss": _f("triplet_margin_with_distance_loss", R(4, 5),
                                            R(4, 5, seed=1), R(4, 5, seed=2)),
    "unfold": _f("unfold", R(1, 2, 4, 4), 2),
    "upsample": _f("upsample", R(1, 2, 3, 3), scale_factor=2, mode="nearest"),
    "upsample_bilinear": _f("upsample_bilinear", R(1, 2, 3, 3), scale_factor=2),
    "upsample_nearest": _f("upsample_nearest", R(1, 2, 3, 3), scale_factor=2),
}


# ------------------------------------------------------------------ modules
class M:
    """A module smoke call: ``build(lib)`` makes it, ``run(module, lib)`` calls it."""

    def __init__(self, args=(), kwargs=None, inputs=(), build=None, run=None, name=None):
        self.args, self.kwargs, self.inputs = args, kwargs or {}, inputs
        self._build, self._run, self.name = build, run, name

    def build(self, lib, name):
        if self._build is not None:
            return self._build(lib)
        return getattr(lib.nn, name)(*self.args, **self.kwargs)

    def run(self, module, lib):
        if self._run is not None:
            return self._run(module, lib)
        return module(*_t(lib, *self.inputs))


def _loss(*inputs, **kw):
    return M(kwargs=kw, inputs=inputs)


def _unpool_m(n):
    def run(m, lib):
        x = lib.tensor(R(1, 2, *([4] * n)))
        out, idx = getattr(lib.nn.functional, f"max_pool{n}d")(x, 2, return_indices=True)
        return m(out, idx)
    return M((2,), run=run)


def _pad(n, *args):
    return M(args, inputs=(R(1, 2, *([3] * n)),))


def _count_params(m, lib):
    return np.array([sum(int(np.prod(tuple(p.shape))) for p in m.parameters())])


def _seq(lib):
    return lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.ReLU(), lib.nn.Linear(4, 2))


def _enc_layer(lib):
    return lib.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)


def _dec_layer(lib):
    return lib.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0)


SRC, TGT = R(5, 2, 8, seed=11), R(4, 2, 8, seed=12)

MODULES_SMOKE = {
    "AdaptiveAvgPool1d": M((3,), inputs=(R(2, 3, 8),)),
    "AdaptiveAvgPool2d": M(((3, 2),), inputs=(R(2, 3, 6, 6),)),
    "AdaptiveAvgPool3d": M((2,), inputs=(R(1, 2, 4, 4, 4),)),
    "AdaptiveLogSoftmaxWithLoss": M((8, 10, [4, 8]), inputs=(R(5, 8), I(10, 5))),
    "AdaptiveMaxPool1d": M((3,), inputs=(R(2, 3, 8),)),
    "AdaptiveMaxPool2d": M(((3, 2),), inputs=(R(2, 3, 6, 6),)),
    "AdaptiveMaxPool3d": M((2,), inputs=(R(1, 2, 4, 4, 4),)),
    "AlphaDropout": M((0.5,), inputs=(X,)),
    "AvgPool1d": M((2,), inputs=(R(2, 3, 8),)),
    "AvgPool2d": M((2,), inputs=(R(2, 3, 6, 6),)),
    "AvgPool3d": M((2,), inputs=(R(1, 2, 4, 4, 4),)),
    "BCELoss": _loss(P(3, 4), P(3, 4, seed=1)),
    "BCEWithLogitsLoss": _loss(R(3, 4), P(3, 4, seed=1)),
    "BatchNorm1d": M((3,), inputs=(R(4, 3),)),
    "BatchNorm2d": M((3,), inputs=(R(2, 3, 4, 4),)),
    "BatchNorm3d": M((2,), inputs=(R(2, 2, 2, 3, 3),)),
    "Bilinear": M((3, 5, 2), inputs=(R(4, 3), R(4, 5, seed=1))),
    "CELU": M((0.7,), inputs=(X,)),
    "CTCLoss": M(run=lambda m, lib: m(*_t(lib, LP(6, 2, 4), I(3, 2, 3) + 1, np.array([6, 5]),
                                             np.array([3, 2])))),
    "ChannelShuffle": M((2,), inputs=(R(1, 4, 2, 2),)),
    "CircularPad1d": _pad(1, 2),
    "CircularPad2d": _pad(2, (1, 2, 2, 1)),
    "CircularPad3d": _pad(3, 1),
    "ConstantPad1d": _pad(1, 2, 0.5),
    "ConstantPad2d": _pad(2, (1, 2, 2, 1), 0.5),
    "ConstantPad3d": _pad(3, 1, 0.5),
    "Conv1d": M((3, 4, 3), inputs=(R(2, 3, 8),)),
    "Conv2d": M((3, 4, 3), inputs=(R(2, 3, 5, 5),)),
    "Conv3d": M((2, 3, 2), {"padding": 1}, inputs=(R(1, 2, 4, 4, 4),)),
    "ConvTranspose1d": M((3, 4, 3), {"stride": 2}, inputs=(R(2, 3, 5),)),
    "ConvTranspose2d": M((3, 2, 3), inputs=(R(2, 3, 4, 4),)),
    "ConvTranspose3d": M((2, 3, 2), {"stride": 2}, inputs=(R(1, 2, 3, 3, 3),)),
    "CosineEmbeddingLoss": _loss(R(4, 5), R(4, 5, seed=1), S(4)),
    "CosineSimilarity": M(inputs=(R(4, 5), R(4, 5, seed=1))),
    "CrossEntropyLoss": _loss(R(4, 5), I(5, 4)),
    "CrossMapLRN2d": M((3,), inputs=(R(1, 4, 3, 3),)),
    "Dropout": M((0.5,), inputs=(X,)),
    "Dropout1d": M((0.5,), inputs=(X,)),
    "Dropout2d": M((0.5,), inputs=(R(2, 3, 4, 4),)),
    "Dropout3d": M((0.5,), inputs=(R(2, 3, 2, 2, 2),)),
    "ELU": M(inputs=(X,)),
    "Embedding": M((10, 4), inputs=(I(10, 2, 3),)),
    "EmbeddingBag": M((10, 4), inputs=(I(10, 2, 3),)),
    "FeatureAlphaDropout": M((0.5,), inputs=(R(2, 3, 4, 4),)),
    "Flatten": M(inputs=(X,)),
    "Fold": M(((4, 4), 2), inputs=(R(1, 12, 9),)),
    "FractionalMaxPool2d": M((2,), {"output_size": 4}, inputs=(R(1, 2, 8, 8),)),
    "FractionalMaxPool3d": M((2,), {"output_size": 3}, inputs=(R(1, 2, 6, 6, 6),)),
    "GELU": M(inputs=(X,)),
    "GLU": M(inputs=(R(3, 4),)),
    "GRU": M((3, 4), inputs=(R(5, 2, 3),)),
    "GRUCell": M((3, 4), inputs=(R(2, 3),)),
    "GaussianNLLLoss": _loss(R(3, 4), R(3, 4, seed=1), P(3, 4, seed=2)),
    "GroupNorm": M((2, 4), inputs=(R(2, 4, 3),)),
    "Hardshrink": M(inputs=(X,)),
    "Hardsigmoid": M(inputs=(X * 4,)),
    "Hardswish": M(inputs=(X * 4,)),
    "Hardtanh": M(inputs=(X * 2,)),
    "HingeEmbeddingLoss": _loss(R(3, 4), S(3, 4, seed=1)),
    "HuberLoss": _loss(R(3, 4), R(3, 4, seed=1)),
    "Identity": M(inputs=(X,)),
    "InstanceNorm1d": M((3,), inputs=(R(2, 3, 5),)),
    "InstanceNorm2d": M((3,), {"affine": True}, inputs=(R(2, 3, 4, 4),)),
    "InstanceNorm3d": M((2,), {"track_running_stats": True}, inputs=(R(2, 2, 2, 3, 3),)),
    "KLDivLoss": _loss(LP(3, 4), P(3, 4, seed=1), reduction="batchmean"),
    "L1Loss": _loss(R(3, 4), R(3, 4, seed=1)),
    "LPPool1d": M((2, 2), inputs=(R(2, 3, 8),)),
    "LPPool2d": M((2, 2), inputs=(R(2, 3, 6, 6),)),
    "LPPool3d": M((2, 2), inputs=(R(1, 2, 4, 4, 4),)),
    "LSTM": M((3, 4), inputs=(R(5, 2, 3),)),
    "LSTMCell": M((3, 4), inputs=(R(2, 3),)),
    "LayerNorm": M((4,), inputs=(X,)),
    "LeakyReLU": M((0.2,), inputs=(X,)),
    "Linear": M((4, 5), inputs=(R(3, 4),)),
    "LinearCrossEntropyLoss": M((4, 5), inputs=(R(3, 4), I(5, 3))),
    "LocalResponseNorm": M((3,), inputs=(R(1, 4, 3, 3),)),
    "LogSigmoid": M(inputs=(X,)),
    "LogSoftmax": M((1,), inputs=(X,)),
    "MSELoss": _loss(R(3, 4), R(3, 4, seed=1)),
    "MarginRankingLoss": _loss(R(5), R(5, seed=1), S(5, seed=2)),
    "MaxPool1d": M((2,), inputs=(R(2, 3, 8),)),
    "MaxPool2d": M((2,), inputs=(R(2, 3, 6, 6),)),
    "MaxPool3d": M((2,), inputs=(R(1, 2, 4, 4, 4),)),
    "MaxUnpool1d": _unpool_m(1),
    "MaxUnpool2d": _unpool_m(2),
    "MaxUnpool3d": _unpool_m(3),
    "Mish": M(inputs=(X,)),
    "Module": M(run=_count_params),
    "ModuleDict": M(build=lambda lib: lib.nn.ModuleDict({"a": lib.nn.Linear(3, 2)}),
                    run=lambda m, lib: m["a"](lib.tensor(R(4, 3)))),
    "ModuleList": M(build=lambda lib: lib.nn.ModuleList([lib.nn.Linear(3, 2)]),
                    run=lambda m, lib: m[0](lib.tensor(R(4, 3)))),
    "MultiLabelMarginLoss": _loss(R(2, 4), np.array([[3, 0, -1, 1], [1, 2, 3, -1]])),
    "MultiLabelSoftMarginLoss": _loss(R(2, 4), I(2, 2, 4).astype(np.float32)),
    "MultiMarginLoss": _loss(R(3, 5), I(5, 3)),
    "MultiheadAttention": M((8, 2), inputs=(R(3, 2, 8), R(4, 2, 8, seed=1), R(4, 2, 8, seed=2))),
    "NLLLoss": _loss(LP(4, 5), I(5, 4)),
    "NLLLoss2d": _loss(LP(2, 3, 4, 4, dim=1), I(3, 2, 4, 4)),
    "PReLU": M(inputs=(X,)),
    "PairwiseDistance": M(inputs=(R(4, 5), R(4, 5, seed=1))),
    "ParameterDict": M(build=lambda lib: lib.nn.ParameterDict(
                           {"w": lib.nn.Parameter(lib.tensor(R(2, 3)))}),
                       run=lambda m, lib: m["w"] * 2),
    "ParameterList": M(build=lambda lib: lib.nn.ParameterList(
                           [lib.nn.Parameter(lib.tensor(R(2, 3)))]),
                       run=lambda m, lib: m[0] * 2),
    "PixelShuffle": M((2,), inputs=(R(1, 8, 2, 3),)),
    "PixelUnshuffle": M((2,), inputs=(R(1, 2, 4, 6),)),
    "PoissonNLLLoss": _loss(R(3, 4), P(3, 4, seed=1)),
    "RMSNorm": M((4,), inputs=(X,)),
    "RNN": M((3, 4), inputs=(R(5, 2, 3),)),
    "RNNBase": M(("LSTM", 3, 4), run=_count_params),
    "RNNCell": M((3, 4), inputs=(R(2, 3),)),
    "RNNCellBase": M((3, 4, True, 4), run=_count_params),
    "RReLU": M(inputs=(X,)),
    "ReLU": M(inputs=(X,)),
    "ReLU6": M(inputs=(X * 8,)),
    "ReflectionPad1d": _pad(1, 2),
    "ReflectionPad2d": _pad(2, (1, 2, 2, 1)),
    "ReflectionPad3d": _pad(3, 1),
    "ReplicationPad1d": _pad(1, 2),
    "ReplicationPad2d": _pad(2, (1, 2, 2, 1)),
    "ReplicationPad3d": _pad(3, 1),
    "SELU": M(inputs=(X,)),
    "Sequential": M(build=_seq, inputs=(R(4, 3),)),
    "SiLU": M(inputs=(X,)),
    "Sigmoid": M(inputs=(X,)),
    "SmoothL1Loss": _loss(R(3, 4), R(3, 4, seed=1)),
    "SoftMarginLoss": _loss(R(3, 4), S(3, 4, seed=1)),
    "Softmax": M((1,), inputs=(X,)),
    "Softmax2d": M(inputs=(R(2, 3, 4, 4),)),
    "Softmin": M((1,), inputs=(X,)),
    "Softplus": M(inputs=(X,)),
    "Softshrink": M(inputs=(X,)),
    "Softsign": M(inputs=(X,)),
    "Tanh": M(inputs=(X,)),
    "Tanhshrink": M(inputs=(X,)),
    "Threshold": M((0.1, 20.0), inputs=(X,)),
    "Transformer": M(kwargs=dict(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                 dim_feedforward=16, dropout=0.0), inputs=(SRC, TGT)),
    "TransformerDecoder": M(build=lambda lib: lib.nn.TransformerDecoder(_dec_layer(lib), 2),
                            inputs=(TGT, SRC)),
    "TransformerDecoderLayer": M(build=_dec_layer, inputs=(TGT, SRC)),
    "TransformerEncoder": M(build=lambda lib: lib.nn.TransformerEncoder(
                                _enc_layer(lib), 2, enable_nested_tensor=False), inputs=(SRC,)),
    "TransformerEncoderLayer": M(build=_enc_layer, inputs=(SRC,)),
    "TripletMarginLoss": _loss(R(4, 5), R(4, 5, seed=1), R(4, 5, seed=2)),
    "TripletMarginWithDistanceLoss": _loss(R(4, 5), R(4, 5, seed=1), R(4, 5, seed=2)),
    "Unflatten": M((2, (2, 2)), inputs=(X,)),
    "Unfold": M((2,), inputs=(R(1, 2, 4, 4),)),
    "Upsample": M(kwargs={"scale_factor": 2}, inputs=(R(1, 2, 3, 3),)),
    "UpsamplingBilinear2d": M(kwargs={"scale_factor": 2}, inputs=(R(1, 2, 3, 3),)),
    "UpsamplingNearest2d": M(kwargs={"scale_factor": 2}, inputs=(R(1, 2, 3, 3),)),
    "ZeroPad1d": _pad(1, 2),
    "ZeroPad2d": _pad(2, (1, 2, 2, 1)),
    "ZeroPad3d": _pad(3, 1),
}
