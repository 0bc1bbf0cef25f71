"""``tg.autograd.graph``: ``torch.autograd.graph``'s hooks on saved tensors, and the
recorded graph's ``Node`` (every ``grad_fn``).

>>> import tapegrad as tg
>>> x = tg.tensor([1.0, 2.0], requires_grad=True)
>>> packed = []
>>> with tg.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t,
...                                            lambda t: t):
...     y = (x * x).sum()
>>> len(packed)                      # mul saved both of its inputs
2
>>> y.backward(); x.grad
tensor([2., 4.])

While ``saved_tensors_hooks(pack_hook, unpack_hook)`` is open (in this thread), every
tensor a recorded op saves for its adjoint goes through ``pack_hook`` once, when the
op is recorded, and the node keeps what it returns instead of the tensor; the adjoint
gets ``unpack_hook(packed)`` (a Tensor) each time it reads the value. Hooks nest (the
innermost applies). ``save_on_cpu()`` is the pair that keeps saved tensors in host
memory (on the CPU it keeps them as they are, through the same mechanism).
"""
import contextlib

from ..tape import AccumulateGrad, Node, state as _state
from ..tensor import Tensor, mark_written

__all__ = ["saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks", "Node",
           "AccumulateGrad", "increment_version"]


class saved_tensors_hooks:  # noqa: N801  (PyTorch's name)
    """Context manager: ``pack_hook(tensor) -> anything`` runs on each tensor an op
    saves while it is open, ``unpack_hook(packed) -> Tensor`` when the adjoint needs
    the value back (as ``torch.autograd.graph.saved_tensors_hooks``)."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        if _state.saved_hooks_disabled is not None:
            raise RuntimeError(_state.saved_hooks_disabled)
        self._pair = (self.pack_hook, self.unpack_hook)
        _state.saved_hooks = _state.saved_hooks + (self._pair,)
        return self

    def __exit__(self, *exc):
        hooks = list(_state.saved_hooks)
        for i in range(len(hooks) - 1, -1, -1):
            if hooks[i] is self._pair:
                del hooks[i]
                break
        _state.saved_hooks = hooks
        return False


class save_on_cpu(saved_tensors_hooks):  # noqa: N801  (PyTorch's name)
    """Saved tensors are kept in host memory and moved back to their device when the
    adjoint reads them (``pin_memory`` is accepted; a CPU tensor is kept as it is)."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        def pack(tensor):
            return tensor.device, tensor.cpu()

        def unpack(packed):
            device, tensor = packed
            return tensor.to(device)
        self.pin_memory = pin_memory
        self.device_type = device_type
        super().__init__(pack, unpack)


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message):
    """While open, opening ``saved_tensors_hooks`` raises
    ``RuntimeError(error_message)``; so does opening this while hooks are open, as
    PyTorch's (also a decorator)."""
    if _state.saved_hooks:
        raise RuntimeError(error_message)
    prev = _state.saved_hooks_disabled
    _state.saved_hooks_disabled = error_message
    try:
        yield
    finally:
        _state.saved_hooks_disabled = prev


def increment_version(tensor):
    """Count an in-place write into ``tensor`` that tapegrad did not see (as
    ``torch.autograd.graph.increment_version``)."""
    for t in tensor if isinstance(tensor, (list, tuple)) else (tensor,):
        if isinstance(t, Tensor):
            mark_written(t)

