"""The operator registry: every op declared once, usable on raw arrays."""
from .compute import compute, infer, workspace_bytes
from .opdef import DECOMPOSED, KINDS, OpDef, Sample, TensorSpec
from .registry import get, list_ops, register, unregister

__all__ = ["OpDef", "TensorSpec", "Sample", "KINDS", "DECOMPOSED", "register", "get", "list_ops",
           "unregister", "compute", "infer", "workspace_bytes"]
