"""The fusion layer: elementwise ops from scalar expressions, and ``@fuse``.

``expr`` parses expressions into an interned DAG and derives adjoints symbolically;
``codegen_numba`` / ``codegen_cuda`` turn the DAG into kernel source that
``tapegrad.devices`` compiles; ``approx`` holds the vectorisable float32
approximations; ``op`` makes registry OpDefs of it all; ``trace`` implements ``fuse``.
"""
from .api import elementwise
from .op import config, stats, ExprOp
from .trace import fuse

__all__ = ["elementwise", "fuse", "config", "stats", "ExprOp"]
