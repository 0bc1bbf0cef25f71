"""``LazyModuleMixin`` (``torch.nn.modules.lazy``): modules whose parameters take
their shapes from the first input."""
from ...grad_mode import no_grad
from ..parameter import UninitializedBuffer, UninitializedParameter

__all__ = ["LazyModuleMixin"]


class LazyModuleMixin:
    """A module whose ``UninitializedParameter``s get their shapes from its first
    call: a forward pre-hook runs ``initialize_parameters(*args, **kwargs)``, then the
    module becomes its ``cls_to_become`` (``LazyLinear`` a ``Linear``), as PyTorch's.
    ``load_state_dict`` materializes them from the checkpoint's shapes instead."""
    cls_to_become = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._initialize_hook = self.register_forward_pre_hook(self._infer_parameters,
                                                               with_kwargs=True)

    def has_uninitialized_params(self):
        """Whether a parameter or buffer of this module (not its children) has no shape
        yet."""
        return any(isinstance(p, (UninitializedParameter, UninitializedBuffer))
                   for p in (*self._parameters.values(), *self._buffers.values()))

    def initialize_parameters(self, *args, **kwargs):
        raise NotImplementedError(f"initialize_parameters is not implemented for "
                                  f"{type(self).__name__}")

    def _infer_parameters(self, module, args, kwargs=None):
        with no_grad():
            self.initialize_parameters(*args, **(kwargs or {}))
        if self.has_uninitialized_params():
            raise RuntimeError(f"module {self._get_name()} has not been fully initialized")
        self._initialize_hook.remove()
        del self._initialize_hook
        if self.cls_to_become is not None:
            self.__class__ = self.cls_to_become
