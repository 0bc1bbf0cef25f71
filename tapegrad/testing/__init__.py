"""Test tools: gradient checks against finite differences (``gradcheck``,
``gradgradcheck``: ``gradcheck.py``), ``assert_close`` (``comparison.py``) and
``pair_test`` (one program run on tapegrad and on PyTorch: ``pair.py``).
"""
from .comparison import assert_close
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .pair import PairReport, pair_test

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError", "assert_close", "pair_test",
           "PairReport"]
