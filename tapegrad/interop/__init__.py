"""Share operators with other frameworks: tapegrad's registry as PyTorch and JAX
functions (``torch_ops``, ``jax_ops``), and their functions as registered tapegrad
ops (``from_torch``, ``from_jax``). PyTorch and JAX are imported on first use."""

__all__ = ["torch_ops"]


def torch_ops():
    """A namespace with every registered op (built-in and custom, as registered at
    this call) as a function of ``torch.Tensor``s: zero-copy through DLPack,
    differentiable in PyTorch's autograd to any order."""
    from ._torch import torch_ops as make
    return make()
