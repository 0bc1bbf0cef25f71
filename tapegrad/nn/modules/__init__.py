"""``tg.nn.modules``: PyTorch's module paths, ``tg.nn.modules.loss.MSELoss`` and friends.

Each submodule (``activation``, ``loss``, ``conv``, ``linear``, ``batchnorm``, ...) is laid
out as ``torch.nn.modules.<name>`` and holds the same classes as ``tg.nn`` (those that
tapegrad has: a name PyTorch puts there that tapegrad lacks raises AttributeError), plus
the private bases programs test against (``loss._Loss``, ``batchnorm._BatchNorm``).
They are built here from ``tg.nn`` rather than written as files, so a module added to
``tg.nn`` later appears under its PyTorch path without an edit here.

>>> import tapegrad as tg
>>> from tapegrad.nn.modules.loss import MSELoss
>>> MSELoss is tg.nn.MSELoss
True
"""
import sys
import types

from .. import layers as _layers
from ..module import Module

# torch.nn.modules.<name>.__all__ (PyTorch 2.13), the names a program may import from there
_LAYOUT = {
    "activation": ("Threshold", "ReLU", "RReLU", "Hardtanh", "ReLU6", "Sigmoid", "Hardsigmoid",
                   "Tanh", "SiLU", "Mish", "Hardswish", "ELU", "CELU", "SELU", "GLU", "GELU",
                   "Hardshrink", "LeakyReLU", "LogSigmoid", "Softplus", "Softshrink",
                   "MultiheadAttention", "PReLU", "Softsign", "Tanhshrink", "Softmin",
                   "Softmax", "Softmax2d", "LogSoftmax"),
    "adaptive": ("AdaptiveLogSoftmaxWithLoss",),
    "batchnorm": ("BatchNorm1d", "LazyBatchNorm1d", "BatchNorm2d", "LazyBatchNorm2d",
                  "BatchNorm3d", "LazyBatchNorm3d", "SyncBatchNorm"),
    "channelshuffle": ("ChannelShuffle",),
    "container": ("Container", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
                  "ParameterDict"),
    "conv": ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
             "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d",
             "LazyConvTranspose2d", "LazyConvTranspose3d"),
    "distance": ("PairwiseDistance", "CosineSimilarity"),
    "dropout": ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
                "FeatureAlphaDropout"),
    "flatten": ("Flatten", "Unflatten"),
    "fold": ("Fold", "Unfold"),
    "instancenorm": ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LazyInstanceNorm1d",
                     "LazyInstanceNorm2d", "LazyInstanceNorm3d"),
    "linear": ("Bilinear", "Identity", "LazyLinear", "Linear"),
    "loss": ("L1Loss", "NLLLoss", "NLLLoss2d", "PoissonNLLLoss", "GaussianNLLLoss", "KLDivLoss",
             "MSELoss", "BCELoss", "BCEWithLogitsLoss", "HingeEmbeddingLoss",
             "MultiLabelMarginLoss", "SmoothL1Loss", "HuberLoss", "SoftMarginLoss",
             "CrossEntropyLoss", "LinearCrossEntropyLoss", "MultiLabelSoftMarginLoss",
             "CosineEmbeddingLoss", "MarginRankingLoss", "MultiMarginLoss", "TripletMarginLoss",
             "TripletMarginWithDistanceLoss", "CTCLoss"),
    "module": ("register_module_forward_pre_hook", "register_module_forward_hook",
               "register_module_full_backward_pre_hook", "register_module_backward_hook",
               "register_module_full_backward_hook",
               "register_module_buffer_registration_hook",
               "register_module_module_registration_hook",
               "register_module_parameter_registration_hook", "Module"),
    "normalization": ("LocalResponseNorm", "CrossMapLRN2d", "LayerNorm", "GroupNorm", "RMSNorm"),
    "padding": ("CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d",
                "ConstantPad2d", "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d",
                "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d",
                "ZeroPad1d", "ZeroPad2d", "ZeroPad3d"),
    "pixelshuffle": ("PixelShuffle", "PixelUnshuffle"),
    "pooling": ("MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d",
                "MaxUnpool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "FractionalMaxPool2d",
                "FractionalMaxPool3d", "LPPool1d", "LPPool2d", "LPPool3d", "AdaptiveMaxPool1d",
                "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "AdaptiveAvgPool1d",
                "AdaptiveAvgPool2d", "AdaptiveAvgPool3d"),
    "rnn": ("RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"),
    "sparse": ("Embedding", "EmbeddingBag"),
    "transformer": ("Transformer", "TransformerEncoder", "TransformerDecoder",
                    "TransformerEncoderLayer", "TransformerDecoderLayer"),
    "upsampling": ("Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"),
}
# private bases that programs name (isinstance checks, custom losses)
_PRIVATE = {"loss": {"_Loss": _layers._Loss, "_WeightedLoss": _layers._Loss},
            "batchnorm": {"_BatchNorm": _layers._BatchNorm}}

__all__ = ["Module"] + sorted(_LAYOUT)


def _nn():
    return sys.modules["tapegrad.nn"]


def _submodule(name, names):
    mod = types.ModuleType(f"{__name__}.{name}",
                           f"``torch.nn.modules.{name}``'s classes, as in ``tg.nn``.")
    nn = _nn()
    mod.__all__ = [n for n in names if hasattr(nn, n)]
    for n in mod.__all__:
        setattr(mod, n, getattr(nn, n))
    for n, v in _PRIVATE.get(name, {}).items():
        setattr(mod, n, v)

    def __getattr__(attr):   # a class tg.nn gained after this module was built
        if attr in names and hasattr(_nn(), attr):
            return getattr(_nn(), attr)
        raise AttributeError(f"module {mod.__name__!r} has no attribute {attr!r}"
                             + (" (PyTorch has it; tapegrad does not yet)"
                                if attr in names else ""))
    mod.__getattr__ = __getattr__
    sys.modules[mod.__name__] = mod
    return mod


for _name, _names in _LAYOUT.items():
    globals()[_name] = _submodule(_name, _names)
del _name, _names
