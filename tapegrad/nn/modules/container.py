"""Containers (``torch.nn.modules.container``): Sequential, ModuleList, ModuleDict,
ParameterList, ParameterDict."""
from collections import OrderedDict

from ..module import Module
from ..parameter import Parameter, is_parameter
from ._absent import absent

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


class Sequential(Module):
    """Runs its modules in order: ``Sequential(Linear(4, 8), ReLU(), Linear(8, 2))`` or
    ``Sequential(OrderedDict(fc=..., act=...))``."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, mod in args[0].items():
                self.add_module(name, mod)
        else:
            for i, mod in enumerate(args):
                self.add_module(str(i), mod)

    def forward(self, input):
        for mod in self._modules.values():
            input = mod(input)
        return input

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_index(idx, len(self))]

    def __setitem__(self, idx, module):
        key = list(self._modules)[_index(idx, len(self))]
        self.add_module(key, module)

    def __delitem__(self, idx):
        keys = list(self._modules)
        for k in (keys[idx] if isinstance(idx, slice) else [keys[_index(idx, len(keys))]]):
            del self._modules[k]

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self


class ModuleList(Module):
    """A list of modules whose parameters are registered: ``ModuleList([...])``."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_index(idx, len(self)))]

    def __setitem__(self, idx, module):
        self.add_module(str(_index(idx, len(self))), module)

    def __delitem__(self, idx):
        mods = list(self._modules.values())
        del mods[idx]
        self._modules.clear()
        self.extend(mods)

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        self.extend(mods)

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList has no forward; iterate over it instead")


class ModuleDict(Module):
    """Holds submodules in a dict, registered by key, as ``torch.nn.ModuleDict``."""
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            for k, v in dict(modules).items():
                self.add_module(k, v)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()


class ParameterList(Module):
    """Holds parameters in a list, registered by position, as ``torch.nn.ParameterList``."""
    def __init__(self, values=None):
        super().__init__()
        for v in values or ():
            self.append(v)

    def append(self, value):
        if not is_parameter(value):
            raise TypeError(f"ParameterList: expected a Parameter, got {type(value).__name__}")
        self.register_parameter(str(len(self._parameters)), value)
        return self

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def __getitem__(self, idx):
        return self._parameters[str(_index(idx, len(self)))]


def _index(idx, n):
    idx = int(idx)
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range for a container of length {n}")
    return idx % n


class ParameterDict(Module):
    """Parameters by name (a plain tensor is made a Parameter, as PyTorch)."""

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def _as_param(self, value):
        if value is None or is_parameter(value):
            return value
        return Parameter(value)

    def __getitem__(self, key):
        return self._parameters[key]

    def __setitem__(self, key, value):
        self.register_parameter(key, self._as_param(value))

    def __delitem__(self, key):
        del self._parameters[key]

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def __contains__(self, key):
        return key in self._parameters

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()

    def get(self, key, default=None):
        return self._parameters.get(key, default)

    def pop(self, key):
        v = self._parameters[key]
        del self._parameters[key]
        return v

    def update(self, parameters):
        items = parameters.items() if hasattr(parameters, "items") else parameters
        for k, v in items:
            self[k] = v


__getattr__ = absent(__name__, ["Container"])
