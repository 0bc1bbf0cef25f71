"""Test tools: gradient checks against finite differences (``gradcheck``,
``gradgradcheck``: ``gradcheck.py``), ``assert_close`` (``comparison.py``) and
``pair_test`` (one program run on tapegrad and on PyTorch: ``pair.py``).
"""
from .. import autograd as _autograd
from .comparison import assert_close
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .pair import PairReport, pair_test

# ``torch.autograd.gradcheck``'s place too (set from this layer: the autograd
# namespace sits below it)
_autograd.gradcheck, _autograd.gradgradcheck = gradcheck, gradgradcheck

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError", "assert_close", "pair_test",
           "PairReport"]
