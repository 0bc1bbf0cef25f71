"""The operator registry: every op declared once, usable on raw arrays."""
from .opdef import OpDef, TensorSpec, Sample, KINDS, DECOMPOSED
from .registry import register, get, list_ops, unregister
from .compute import compute, infer, workspace_bytes

__all__ = ["OpDef", "TensorSpec", "Sample", "KINDS", "DECOMPOSED", "register", "get", "list_ops",
           "unregister", "compute", "infer", "workspace_bytes"]
