"""The funnel: every op call goes through ``bind`` (moving here from tensor.py)."""
from .tensor import bind, apply_inplace, binary_method, unary_method  # noqa: F401

__all__ = ["bind", "apply_inplace"]
