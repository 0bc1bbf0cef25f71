"""Share operators with other frameworks: tapegrad's registry as PyTorch and JAX
functions (``torch_ops``, ``jax_ops``), and their functions as registered tapegrad
ops (``from_torch``, ``from_jax``). PyTorch and JAX are imported on first use."""

__all__ = ["torch_ops", "jax_ops", "from_torch", "from_jax"]


def torch_ops():
    """A namespace with every registered op (built-in and custom, as registered at
    this call) as a function of ``torch.Tensor``s: zero-copy through DLPack,
    differentiable in PyTorch's autograd to any order."""
    from ._torch import torch_ops as make
    return make()


def jax_ops():
    """A namespace with every registered op (as registered at this call) as a function
    of JAX arrays: a host callback on CPU inside ``jax.custom_vjp``; ``jax.grad`` (any
    order), ``jax.jit`` and ``jax.vmap`` work on each."""
    from ._jax import jax_ops as make
    return make()


def from_torch(fn, *, name, nout=1):
    """Register ``fn``, a function of torch.Tensors (keyword arguments are attributes),
    as the tapegrad op ``name``; returns its function of Tensors. The shape rule runs
    ``fn`` on meta tensors, the kernel on DLPack views of the inputs, the adjoint (and
    its adjoint, and so on) is ``torch.func.vjp`` of it: tapegrad's gradients of any
    order go through. ``nout``: the number of tensors ``fn`` returns."""
    from ._torch import from_torch as make
    return make(fn, name=name, nout=nout)


def from_jax(fn, *, name, nout=1):
    """Register ``fn``, a function of JAX arrays, as the tapegrad op ``name``, as
    ``from_torch`` does: shape rule from ``jax.eval_shape``, adjoint from ``jax.vjp``."""
    from ._jax import from_jax as make
    return make(fn, name=name, nout=nout)
