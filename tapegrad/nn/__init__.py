"""``tg.nn``: modules, layers, initialisers and the functional API (PyTorch's names).

>>> import tapegrad as tg
>>> model = tg.nn.Sequential(tg.nn.Linear(4, 8), tg.nn.ReLU(), tg.nn.Linear(8, 2))
>>> model
Sequential(
  (0): Linear(in_features=4, out_features=8, bias=True)
  (1): ReLU()
  (2): Linear(in_features=8, out_features=2, bias=True)
)
"""
from .parameter import Parameter, Buffer
from .module import Module
from .container import Sequential, ModuleList, ModuleDict, ParameterList
from . import layers as _layers
from .layers import *  # noqa: F403
from .attention import MultiheadAttention
from . import spatial as _spatial
from .spatial import *  # noqa: F403
from . import rnn as _rnn, transformer as _transformer
from .rnn import *  # noqa: F403
from .transformer import *  # noqa: F403
from . import compat_layers as _compat_layers
from .compat_layers import *  # noqa: F403
from . import more_layers as _more_layers
from .more_layers import *  # noqa: F403
from .syncbn import SyncBatchNorm
from . import functional, init, utils

__all__ = ["Parameter", "Buffer", "Module", "Sequential", "ModuleList", "ModuleDict",
           "ParameterList", "MultiheadAttention", "functional", "init", "utils"]
__all__ += _layers.__all__ + _spatial.__all__ + _rnn.__all__ + _transformer.__all__
__all__ += _compat_layers.__all__ + _more_layers.__all__ + ["SyncBatchNorm"]

# tg.nn.parallel.DistributedDataParallel (it lives in tapegrad/distributed/ddp.py)
from . import parallel  # noqa: E402
__all__ += ["parallel"]

# tg.nn.modules.loss.MSELoss and friends: PyTorch's module paths, built from the names above
from . import modules  # noqa: E402
__all__ += ["modules"]
