"""The fusion layer: elementwise ops from scalar expressions (``@fuse``, which traces
calls of ops, sits above ``ops``, in ``tapegrad/tracing.py``).

``expr`` parses expressions into an interned DAG and derives adjoints symbolically;
``codegen_numba`` / ``codegen_cuda`` turn the DAG into kernel source that
``tapegrad.devices`` compiles; ``approx`` holds the vectorisable float32
approximations; ``op`` makes registry OpDefs of it all.
"""
from .api import elementwise
from .op import ExprOp, config, stats

__all__ = ["elementwise", "config", "stats", "ExprOp"]
