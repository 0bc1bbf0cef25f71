"""``tg.compile``: capture a function once (its forward, the backward walk, optimizer
updates, in-place ops), then replay it as a straight line of kernel calls.

``capture``: the observer that records one eager call into a ``graph.Graph``;
``program``: passes (DCE, elementwise fusion, effect order), the static memory plan
and the generated replay function. See ``docs/architecture.md`` ("Compile").
"""
from .api import Compiled, compile, is_compiling, reset  # noqa: A001
from .capture import capturing

__all__ = ["compile", "Compiled", "capturing", "is_compiling", "reset"]
