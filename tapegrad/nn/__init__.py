"""``tg.nn``: modules, layers, initialisers and the functional API (PyTorch's names).

The module classes live in ``tapegrad/nn/modules/``, one file per family as PyTorch's
``torch.nn.modules``; ``Module`` in ``module.py``, ``Parameter`` in ``parameter.py``.

>>> import tapegrad as tg
>>> model = tg.nn.Sequential(tg.nn.Linear(4, 8), tg.nn.ReLU(), tg.nn.Linear(8, 2))
>>> model
Sequential(
  (0): Linear(in_features=4, out_features=8, bias=True)
  (1): ReLU()
  (2): Linear(in_features=8, out_features=2, bias=True)
)
"""
# Import order matters here: Parameter and Module before the modules that use them; the
# star imports in torch.nn's order, later ones winning.
# isort: skip_file
from .parameter import Parameter, UninitializedParameter, UninitializedBuffer, Buffer
from .module import Module
from . import modules
from .modules.activation import *  # noqa: F403
from .modules.adaptive import *  # noqa: F403
from .modules.batchnorm import *  # noqa: F403
from .modules.channelshuffle import *  # noqa: F403
from .modules.container import *  # noqa: F403
from .modules.conv import *  # noqa: F403
from .modules.distance import *  # noqa: F403
from .modules.dropout import *  # noqa: F403
from .modules.flatten import *  # noqa: F403
from .modules.fold import *  # noqa: F403
from .modules.instancenorm import *  # noqa: F403
from .modules.linear import *  # noqa: F403
from .modules.loss import *  # noqa: F403
from .modules.normalization import *  # noqa: F403
from .modules.padding import *  # noqa: F403
from .modules.pixelshuffle import *  # noqa: F403
from .modules.pooling import *  # noqa: F403
from .modules.rnn import *  # noqa: F403
from .modules.sparse import *  # noqa: F403
from .modules.transformer import *  # noqa: F403
from .modules.upsampling import *  # noqa: F403
from .modules.transformer import generate_square_subsequent_mask
from . import functional, init, utils

__all__ = ["Parameter", "UninitializedParameter", "UninitializedBuffer", "Buffer", "Module",
           "generate_square_subsequent_mask", "functional", "init", "utils", "modules"]
for _family in modules.__all__[1:]:  # (the classes; module.py's hook functions stay there,
    #                                     as in PyTorch)
    __all__ += [n for n in getattr(modules, _family).__all__ if n in globals()]
del _family
__all__ = [n for i, n in enumerate(__all__) if n not in __all__[:i]]  # "Module" once

# tg.nn.parallel.DistributedDataParallel (it lives in tapegrad/distributed/ddp.py)
from . import parallel  # noqa: E402
__all__ += ["parallel"]
