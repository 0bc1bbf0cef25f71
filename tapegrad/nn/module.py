"""``Module``: the base class of layers, holding Parameters, buffers and submodules."""
from collections import OrderedDict, namedtuple

import numpy as np

from ..devices import device as _device
from ..dispatch import notify, observing
from ..dtypes import DType, bfloat16, float16, float32, float64
from ..grad_mode import is_grad_enabled as _grad_enabled
from ..ops import tensor as _tensor
from ..tensor import Tensor, buffer, mark_written
from .hooks import BackwardHook
from .parameter import Buffer, Parameter as _Parameter, UninitializedParameter, is_parameter


def zero_grads(params, set_to_none=True):
    """``.grad = None`` for each of ``params``, or (``set_to_none=False``) its
    gradient zeroed in place, the change counted in its version (Module.zero_grad and
    Optimizer.zero_grad)."""
    if observing():  # tg.compile's capture: clearing or zeroing is a step of the program
        params = list(params)
        notify("zero_grads", params, set_to_none)
    for p in params:
        if p.grad is None:
            continue
        if set_to_none:
            p.grad = None
        else:
            buffer(p.grad)[...] = 0
            mark_written(p.grad)

__all__ = ["Module"]  # (the register_module_*_hook functions: tg.nn.modules.module's, as
#                      PyTorch has them only under torch.nn.modules.module)

# Hooks every module runs, before its own (``torch.nn.modules.module``'s
# ``register_module_*_hook``); tg.compile's guards read ``GLOBAL_CALL_HOOKS``.
_global_forward_pre_hooks = OrderedDict()
_global_forward_hooks = OrderedDict()
_global_forward_hooks_with_kwargs = set()
_global_forward_hooks_always_called = set()
_global_backward_pre_hooks = OrderedDict()
_global_backward_hooks = OrderedDict()
_global_buffer_registration_hooks = OrderedDict()
_global_module_registration_hooks = OrderedDict()
_global_parameter_registration_hooks = OrderedDict()
GLOBAL_CALL_HOOKS = (_global_forward_pre_hooks, _global_forward_hooks,
                     _global_backward_pre_hooks, _global_backward_hooks)


def register_module_forward_pre_hook(hook):
    """``hook(module, args)`` before every module's forward (before the module's own
    pre-hooks); a non-None result replaces the positional arguments. Returns a handle
    with ``remove()``."""
    return _Handle(_global_forward_pre_hooks, hook)


def register_module_forward_hook(hook, *, with_kwargs=False, always_call=False):
    """``hook(module, args, output)`` (``with_kwargs``: ``hook(module, args, kwargs,
    output)``) after every module's forward, before the module's own forward hooks; a
    non-None result replaces the output; ``always_call``: also when forward raised."""
    return _Handle(_global_forward_hooks, hook,
                   extra=(_global_forward_hooks_with_kwargs if with_kwargs else None,
                          _global_forward_hooks_always_called if always_call else None))


def register_module_full_backward_pre_hook(hook):
    """``hook(module, grad_output)`` for every module, before the module's own."""
    return _Handle(_global_backward_pre_hooks, hook)


def register_module_full_backward_hook(hook):
    """``hook(module, grad_input, grad_output)`` for every module, before the module's
    own."""
    return _Handle(_global_backward_hooks, hook)


def register_module_buffer_registration_hook(hook):
    """``hook(module, name, buffer)`` whenever a module registers a buffer; a non-None
    result is registered instead."""
    return _Handle(_global_buffer_registration_hooks, hook)


def register_module_module_registration_hook(hook):
    """``hook(module, name, submodule)`` whenever a module registers a submodule; a
    non-None result is registered instead."""
    return _Handle(_global_module_registration_hooks, hook)


def register_module_parameter_registration_hook(hook):
    """``hook(module, name, param)`` whenever a module registers a parameter; a
    non-None result is registered instead."""
    return _Handle(_global_parameter_registration_hooks, hook)


def _registered(hooks, module, name, value):
    for hook in list(hooks.values()):
        res = hook(module, name, value)
        if res is not None:
            value = res
    return value

class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """``load_state_dict``'s result, as PyTorch's (its repr when all keys matched)."""
    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class Module:
    """Base class for layers and models, as ``torch.nn.Module``.

    Assigning a ``Parameter`` or a ``Module`` to an attribute registers it; calling
    the module runs ``forward``:

    >>> import tapegrad as tg
    >>> class Net(tg.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = tg.nn.Linear(4, 2)
    ...     def forward(self, x):
    ...         return self.fc(x).relu()
    >>> [name for name, _ in Net().named_parameters()]
    ['fc.weight', 'fc.bias']
    """

    training: bool

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent_buffers"] = set()
        d["_modules"] = OrderedDict()
        d["_forward_hooks"] = OrderedDict()
        d["_forward_pre_hooks"] = OrderedDict()
        d["_forward_hooks_with_kwargs"] = set()
        d["_forward_pre_hooks_with_kwargs"] = set()
        d["_forward_hooks_always_called"] = set()
        d["_backward_hooks"] = OrderedDict()
        d["_backward_pre_hooks"] = OrderedDict()

    # ---------------------------------------------------------------- forward
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"Module [{type(self).__name__}] is missing the required "
                                  f"\"forward\" function")

    def __call__(self, *args, **kwargs):
        if not (self._forward_hooks or self._forward_pre_hooks or self._backward_hooks
                or self._backward_pre_hooks or _global_forward_pre_hooks
                or _global_forward_hooks or _global_backward_pre_hooks
                or _global_backward_hooks):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def _call_with_hooks(self, args, kwargs):
        """PyTorch's order: forward pre-hooks (the global ones first), the inputs'
        backward hook, forward, forward hooks (the global ones first), the outputs'
        backward hook."""
        pre = [(key, hook, key in self._forward_pre_hooks_with_kwargs)
               for key, hook in self._forward_pre_hooks.items()]
        if _global_forward_pre_hooks:
            pre[:0] = [(key, hook, False) for key, hook in _global_forward_pre_hooks.items()]
        for key, hook, with_kwargs in pre:
            if with_kwargs:
                res = hook(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise RuntimeError("forward pre-hook must return None or a tuple of "
                                           f"(new_args, new_kwargs), but got {res}.")
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        bw = None
        hooks, pre_hooks = self._backward_hooks, self._backward_pre_hooks
        if _global_backward_hooks:
            hooks = OrderedDict([*_global_backward_hooks.items(), *hooks.items()])
        if _global_backward_pre_hooks:
            pre_hooks = OrderedDict([*_global_backward_pre_hooks.items(),
                                     *pre_hooks.items()])
        if (hooks or pre_hooks) and _grad_enabled():
            bw = BackwardHook(self, hooks, pre_hooks)
            args = bw.setup_input_hook(args)
        called = set()
        try:
            out = self.forward(*args, **kwargs)
            for key, hook, with_kwargs, _ in self._post_hooks():
                called.add(key)
                if with_kwargs:
                    res = hook(self, args, kwargs, out)
                else:
                    res = hook(self, args, out)
                if res is not None:
                    out = res
        except Exception:
            for key, hook, with_kwargs, always in self._post_hooks():
                if always and key not in called:
                    try:
                        if with_kwargs:
                            hook(self, args, kwargs, None)
                        else:
                            hook(self, args, None)
                    except Exception:
                        pass
            raise
        if bw is not None:
            out = bw.setup_output_hook(out)
        return out

    def _post_hooks(self):
        """The forward hooks to run now: (key, hook, with_kwargs, always_call), the
        global ones first."""
        post = [(key, hook, key in self._forward_hooks_with_kwargs,
                 key in self._forward_hooks_always_called)
                for key, hook in self._forward_hooks.items()]
        if _global_forward_hooks:
            post[:0] = [(key, hook, key in _global_forward_hooks_with_kwargs,
                         key in _global_forward_hooks_always_called)
                        for key, hook in _global_forward_hooks.items()]
        return post

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False,
                              always_call=False):
        """``hook(module, args, output)`` (``with_kwargs``: ``hook(module, args,
        kwargs, output)``) after each forward; a non-None result replaces the
        output. Returns a handle with ``remove()``."""
        handle = _Handle(self._forward_hooks, hook, prepend,
                         extra=(self._forward_hooks_with_kwargs if with_kwargs else None,
                                self._forward_hooks_always_called if always_call else None))
        return handle

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` (``with_kwargs``: ``hook(module, args, kwargs)``,
        returning ``(args, kwargs)``) before each forward; a non-None result replaces
        the positional arguments (a single value is wrapped in a tuple)."""
        return _Handle(self._forward_pre_hooks, hook, prepend,
                       extra=(self._forward_pre_hooks_with_kwargs if with_kwargs else None,))

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output)`` once the gradients with respect to
        the module's positional tensor inputs are computed; ``grad_input`` and
        ``grad_output`` are tuples (``None`` where an input does not require grad or an
        output got no gradient); a non-None result replaces ``grad_input``."""
        return _Handle(self._backward_hooks, hook, prepend)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """``hook(module, grad_output)`` when the gradients with respect to the module's
        outputs are computed; a non-None result replaces ``grad_output``."""
        return _Handle(self._backward_pre_hooks, hook, prepend)

    def register_backward_hook(self, hook):
        raise NotImplementedError("register_backward_hook is deprecated in PyTorch and not "
                                  "provided; use register_full_backward_hook")

    # ---------------------------------------------------------------- registration
    def __setattr__(self, name, value):
        d = self.__dict__
        params = d.get("_parameters")
        if is_parameter(value):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._forget(name, "_parameters")
            if _global_parameter_registration_hooks:
                value = _registered(_global_parameter_registration_hooks, self, name, value)
            params[name] = value
        elif isinstance(value, Module):
            if params is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._forget(name, "_modules")
            if _global_module_registration_hooks:
                value = _registered(_global_module_registration_hooks, self, name, value)
            d["_modules"][name] = value
        elif isinstance(value, Buffer):
            self._forget(name, "_buffers")
            self.register_buffer(name, value.data, value.persistent)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter "
                                f"'{name}' (tg.nn.Parameter or None expected)")
            params[name] = None
        elif params is not None and name in d["_modules"]:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (tg.nn.Module or None expected)")
            d["_modules"][name] = None
        elif params is not None and name in d["_buffers"]:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer "
                                f"'{name}' (tg.Tensor or None expected)")
            if _global_buffer_registration_hooks:
                value = _registered(_global_buffer_registration_hooks, self, name, value)
            d["_buffers"][name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name, keep=None):
        # ``name`` leaves every store but ``keep``, the one it is assigned in again:
        # there it keeps its place, as in PyTorch (a replaced child stays where it was
        # in children(), state_dict(), parameters())
        d = self.__dict__
        d.pop(name, None)
        for key in ("_parameters", "_buffers", "_modules"):
            if key != keep:
                d[key].pop(name, None)
        d["_non_persistent_buffers"].discard(name)

    def __getattr__(self, name):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            store = d.get(key)
            if store is not None and name in store:
                return store[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            if name in d[key]:
                del d[key][name]
                d["_non_persistent_buffers"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))

    def register_parameter(self, name, param):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name(name, self)
        if param is not None and not is_parameter(param):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (tg.nn.Parameter or None required)")
        self._forget(name, "_parameters")
        if _global_parameter_registration_hooks:
            param = _registered(_global_parameter_registration_hooks, self, name, param)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name(name, self)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                            f"'{name}' (tg.Tensor or None required)")
        self._forget(name, "_buffers")
        if _global_buffer_registration_hooks:
            tensor = _registered(_global_buffer_registration_hooks, self, name, tensor)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent_buffers.add(name)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        _check_name(name, self)
        self._forget(name, "_modules")
        if _global_module_registration_hooks:
            module = _registered(_global_module_registration_hooks, self, name, module)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target):
        mod = self
        for item in target.split(".") if target else ():
            if item not in mod._modules:
                raise AttributeError(f"{type(mod).__name__} has no attribute `{item}`")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target):
        """The Parameter at the dotted path ``target`` (``"0.weight"``)."""
        return self._get_leaf(target, "_parameters", "parameter")

    def get_buffer(self, target):
        """The buffer at the dotted path ``target`` (``"bn.running_mean"``)."""
        return self._get_leaf(target, "_buffers", "buffer")

    def _get_leaf(self, target, table, what):
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if name not in getattr(mod, table):
            raise AttributeError(f"{type(mod).__name__} has no {what} `{name}`")
        return getattr(mod, table)[name]

    # ---------------------------------------------------------------- traversal
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, mod in self._modules.items():
            if mod is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from mod.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, mod in self._modules.items():
            if mod is not None and id(mod) not in seen:
                seen.add(id(mod))
                yield name, mod

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, key, prefix, recurse, remove_duplicate=True):
        seen = set()
        mods = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse
                else [(prefix, self)])
        for mod_prefix, mod in mods:
            for name, v in mod.__dict__[key].items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield mod_prefix + ("." if mod_prefix else "") + name, v

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def share_memory(self):
        """Move every parameter (and its gradient) and buffer into shared memory, as
        PyTorch's (``Tensor.share_memory_``): processes it is sent to, or forked
        after, update one copy (Hogwild training)."""
        for t in list(self.parameters()) + list(self.buffers()):
            t.share_memory_()
            if t.grad is not None:
                t.grad.share_memory_()
        return self

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---------------------------------------------------------------- modes and grads
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            m.__dict__["training"] = mode
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        zero_grads(self.parameters(), set_to_none)

    # ---------------------------------------------------------------- device / dtype
    def to(self, *args, **kwargs):
        """``to(device)``, ``to(dtype)`` or ``to(device, dtype)``: moves and casts the
        parameters and buffers in place (casts floating point ones only)."""
        device = kwargs.pop("device", None)
        dtype = kwargs.pop("dtype", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, DType):
                dtype = a
            elif isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            else:
                device = a
        device = _device(device) if device is not None else None

        def convert(t):
            if t is None:
                return
            new = t
            if dtype is not None and t.is_floating_point():
                new = new.to(dtype)
            if device is not None and new.device != device:
                new = new.to(device)
            if new is not t:
                t.data = new
                if t.grad is not None:
                    t.grad = convert_grad(t.grad)

        def convert_grad(g):
            if dtype is not None:
                g = g.to(dtype)
            return g.to(device) if device is not None else g

        for m in self.modules():
            for t in list(m._parameters.values()) + list(m._buffers.values()):
                convert(t)
        return self

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None
                       else (f"cuda:{device}" if isinstance(device, int) else device))

    def float(self):
        return self.to(float32)

    def double(self):
        return self.to(float64)

    def half(self):
        return self.to(float16)

    def bfloat16(self):
        return self.to(bfloat16)

    # ---------------------------------------------------------------- state dict
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """An ordered dict name -> tensor of parameters and persistent buffers.

        The tensors share memory with the module's (detached unless ``keep_vars``)."""
        if destination is None:
            destination = OrderedDict()
        for mod_prefix, mod in self.named_modules(prefix=prefix.rstrip(".")):
            head = mod_prefix + "." if mod_prefix else ""
            for name, p in mod._parameters.items():
                if p is not None:
                    destination[head + name] = p if keep_vars else p.detach()
            for name, b in mod._buffers.items():
                if b is not None and name not in mod._non_persistent_buffers:
                    destination[head + name] = b if keep_vars else b.detach()
        return destination

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy ``state_dict``'s tensors into this module's parameters and buffers
        (``assign=True``: make them the module's, as PyTorch's: each parameter becomes
        a Parameter over the state dict's tensor, sharing its memory and keeping its
        dtype and device, with the ``requires_grad`` the module's had).

        With ``strict`` (default) missing or unexpected keys raise ``RuntimeError``;
        a shape mismatch always does. Returns ``(missing_keys, unexpected_keys)``."""
        if not hasattr(state_dict, "items"):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        if strict:  # PyTorch's order: missing, unexpected, then size mismatches
            if missing:
                errors.append("Missing key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in missing) + ". ")
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in unexpected) + ". ")
        pending = []
        for key, dst in own.items():
            if key not in state_dict:
                continue
            src = state_dict[key]
            arr = buffer(src) if isinstance(src, Tensor) else np.asarray(src)
            if isinstance(dst, UninitializedParameter):  # a lazy module's: the checkpoint's
                dst.materialize(arr.shape)
            if tuple(arr.shape) != tuple(dst.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape "
                              f"{tuple(arr.shape)} from checkpoint, the shape in current "
                              f"model is {tuple(dst.shape)}.")
                continue
            pending.append((key, dst, src if assign and isinstance(src, Tensor) else arr))
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))
        for key, dst, src in pending:
            if assign:
                self._assign(key, dst, src)
            else:
                _copy_into(dst, src)
        return _IncompatibleKeys(missing, unexpected)

    def _assign(self, key, dst, src):
        """``load_state_dict(assign=True)``'s step for one entry."""
        path, _, name = key.rpartition(".")
        mod = self.get_submodule(path)
        if not isinstance(src, Tensor):
            src = _tensor(src)
        if is_parameter(dst):
            if is_parameter(src):
                src.requires_grad_(dst.requires_grad)
            else:
                src = type(dst)(src.detach(), requires_grad=dst.requires_grad) \
                    if type(dst) is not UninitializedParameter else \
                    _Parameter(src.detach(), dst.requires_grad)
            mod._parameters[name] = src
        else:
            mod._buffers[name] = src

    # ---------------------------------------------------------------- repr
    def extra_repr(self):
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, mod in self._modules.items():
            body = repr(mod).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        main = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __deepcopy__(self, memo):
        """An independent copy (parameters and buffers copied), as
        ``copy.deepcopy(module)`` in PyTorch (``TransformerEncoder`` clones its layer
        so)."""
        import copy
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = copy.deepcopy(v, memo)
        return new



def _copy_into(dst, arr):
    """Write ``arr`` into ``dst``'s buffer (dst's dtype and device), bumping its version."""
    data = buffer(dst)
    if type(arr) is not type(data):
        arr = buffer(_tensor(arr).to(dst.device)) if not isinstance(data, np.ndarray) \
            else np.asarray(arr.get() if hasattr(arr, "get") else arr)
    data[...] = arr.astype(data.dtype, copy=False)
    mark_written(dst)


def _check_name(name, module):
    if not isinstance(name, str):
        raise TypeError(f"attribute name should be a string, got {type(name).__name__}")
    if "." in name or name == "":
        raise KeyError(f"attribute name can't contain \".\" or be empty, got {name!r}")
    if hasattr(type(module), name) and name not in module.__dict__:
        raise KeyError(f"attribute '{name}' already exists")


class _Handle:
    """What a ``register_*_hook`` returns: ``remove()``, or use it as a context
    manager (PyTorch's ``RemovableHandle``)."""
    _next = 0

    def __init__(self, store, hook, prepend=False, extra=()):
        _Handle._next += 1
        self.id = _Handle._next
        self.store = store
        store[self.id] = hook
        if prepend:
            store.move_to_end(self.id, last=False)
        self.extra = [e for e in extra if e is not None]
        for e in self.extra:
            e.add(self.id)

    def remove(self):
        self.store.pop(self.id, None)
        for e in self.extra:
            e.discard(self.id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
