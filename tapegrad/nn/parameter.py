"""``Parameter``: a leaf Tensor that a Module registers as one of its weights."""
import numpy as np

from ..ops import as_tensor, empty
from ..tensor import Tensor, buffer

__all__ = ["Parameter", "UninitializedParameter", "UninitializedBuffer", "Buffer",
           "is_parameter"]


def is_parameter(t):
    return isinstance(t, Parameter)


class Parameter(Tensor):
    """``Parameter(data=None, requires_grad=True)``: a Tensor subclass that a Module
    registers as a weight. Shares ``data``'s buffer, as ``torch.nn.Parameter``:

    >>> import tapegrad as tg
    >>> w = tg.nn.Parameter(tg.zeros(2, 3))
    >>> isinstance(w, tg.nn.Parameter), w.requires_grad
    (True, True)
    """
    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            data = as_tensor(np.asarray(data))
        t = Tensor.__new__(cls)
        Tensor.__init__(t, buffer(data), requires_grad=requires_grad)
        return t

    def __init__(self, data=None, requires_grad=True):
        pass  # all done in __new__

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, proto):
        # a Parameter again, over the pickled Tensor of its values
        return (Parameter, (self.detach(), self.requires_grad))

    def __deepcopy__(self, memo):
        """A new Parameter with a copy of the data (``copy.deepcopy(module)``)."""
        new = memo.get(id(self))
        if new is None:
            new = memo[id(self)] = Parameter(Tensor(buffer(self).copy()), self.requires_grad)
        return new


class UninitializedParameter(Parameter):
    """A lazy module's parameter before its first forward has shown it its shape, as
    ``torch.nn.UninitializedParameter``: empty until ``materialize(shape)`` gives it
    values (uninitialized, as ``empty``) and makes it a ``Parameter``, the same object,
    so an optimizer made before that holds it."""
    __slots__ = ()
    cls_to_become = Parameter

    def __new__(cls, requires_grad=True, device=None, dtype=None):
        return Parameter.__new__(cls, empty(0, dtype=dtype, device=device), requires_grad)

    def __init__(self, requires_grad=True, device=None, dtype=None):
        pass  # all done in __new__

    def materialize(self, shape, device=None, dtype=None):
        self.data = empty(tuple(shape), dtype=dtype or self.dtype,
                          device=device or self.device)
        self.__class__ = self.cls_to_become

    def __repr__(self):
        return "<UninitializedParameter>"

    def __reduce_ex__(self, proto):
        return (UninitializedParameter, (self.requires_grad,))

    def __deepcopy__(self, memo):
        new = memo.get(id(self))
        if new is None:
            new = memo[id(self)] = UninitializedParameter(self.requires_grad, self.device,
                                                          self.dtype)
        return new


class UninitializedBuffer(Tensor):
    """A lazy module's buffer before its first forward (``torch.nn.UninitializedBuffer``):
    empty until ``materialize(shape)`` makes it a plain Tensor of that shape."""
    __slots__ = ()

    def __new__(cls, requires_grad=False, device=None, dtype=None):
        t = Tensor.__new__(cls)
        Tensor.__init__(t, buffer(empty(0, dtype=dtype, device=device)),
                        requires_grad=requires_grad)
        return t

    def __init__(self, requires_grad=False, device=None, dtype=None):
        pass  # all done in __new__

    def materialize(self, shape, device=None, dtype=None):
        self.data = empty(tuple(shape), dtype=dtype or self.dtype,
                          device=device or self.device)
        self.__class__ = Tensor

    def __repr__(self):
        return "<UninitializedBuffer>"

    def __reduce_ex__(self, proto):
        return (UninitializedBuffer, (self.requires_grad,))

    def __deepcopy__(self, memo):
        new = memo.get(id(self))
        if new is None:
            new = memo[id(self)] = UninitializedBuffer(self.requires_grad, self.device,
                                                       self.dtype)
        return new


class Buffer:
    """Marks a tensor as a module buffer when assigned as an attribute
    (``self.running_mean = tg.nn.Buffer(tg.zeros(3))``), as ``torch.nn.Buffer``."""

    def __init__(self, data, persistent=True):
        self.data = data
        self.persistent = persistent
