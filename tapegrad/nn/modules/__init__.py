"""``tg.nn.modules``: the module classes, one file per family, laid out as PyTorch's
``torch.nn.modules`` (``tg.nn.modules.loss.MSELoss`` is ``tg.nn.MSELoss``).

Each submodule (``activation``, ``loss``, ``conv``, ``linear``, ``batchnorm``, ...) holds
the classes of ``torch.nn.modules.<name>`` that tapegrad has (a name PyTorch puts there
that tapegrad lacks raises AttributeError saying so), plus the private bases programs
test against (``loss._Loss``, ``batchnorm._BatchNorm``). ``Module`` itself is
``tapegrad/nn/module.py``.

>>> import tapegrad as tg
>>> from tapegrad.nn.modules.loss import MSELoss
>>> MSELoss is tg.nn.MSELoss
True
"""
from ..module import Module
from . import (
    activation,
    adaptive,
    batchnorm,
    channelshuffle,
    container,
    conv,
    distance,
    dropout,
    flatten,
    fold,
    instancenorm,
    lazy,  # noqa: F401 - LazyModuleMixin's module, not a family tg.nn re-exports (as torch.nn)
    linear,
    loss,
    module,
    normalization,
    padding,
    pixelshuffle,
    pooling,
    rnn,
    sparse,
    transformer,
    upsampling,
)

__all__ = ["Module"] + ["activation", "adaptive", "batchnorm", "channelshuffle", "container",
           "conv", "distance", "dropout", "flatten", "fold", "instancenorm", "linear",
           "loss", "module", "normalization", "padding", "pixelshuffle", "pooling",
           "rnn", "sparse", "transformer", "upsampling"]
