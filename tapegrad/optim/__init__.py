"""``tg.optim``: optimizers and learning-rate schedulers with PyTorch's update formulas.

>>> import tapegrad as tg
>>> w = tg.nn.Parameter(tg.tensor([1.0, -2.0]))
>>> opt = tg.optim.SGD([w], lr=0.1)
>>> (w * w).sum().backward()
>>> opt.step()
>>> [round(v, 4) for v in w.tolist()]
[0.8, -1.6]
"""
from . import lr_scheduler  # noqa: F401
from .adadelta import Adadelta
from .adam import Adam, AdamW
from .adamax import Adamax
from .asgd import ASGD, Rprop
from .lbfgs import LBFGS
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import Adagrad, RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax",
           "NAdam", "RAdam", "ASGD", "Rprop", "LBFGS", "lr_scheduler"]
