"""``Optimizer``: parameter groups, per-parameter state, ``state_dict``.

Updates run in place on the parameters' buffers (``tensor.buffer(p)``) with NumPy ufuncs
writing into preallocated scratch (``out=``), never through the tape; each write
bumps the parameter's version counter so a stale saved value is caught.
"""
import copy
import warnings

from ..devices import xp_of
from ..dispatch import notify, observing
from ..grad_mode import enable_grad
from ..nn.module import zero_grads
from ..tensor import Tensor, buffer, mark_written

__all__ = ["Optimizer", "required"]


class _Required:
    def __repr__(self):
        return "<required parameter>"


required = _Required()


class Optimizer:
    """Base class: ``Optimizer(params, defaults)``; ``params`` is an iterable of
    tensors or of dicts (parameter groups with their own options)."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = {}
        self.param_groups = []
        self._scratch = {}
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got a Tensor")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, param_group):
        group = dict(param_group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params "
                                f"is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            group.setdefault(name, default)
        if len({id(p) for p in group["params"]}) != len(group["params"]):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; "
                          "in future, this will cause an error (as PyTorch's, each "
                          "occurrence is stepped)", UserWarning, stacklevel=3)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    # ---------------------------------------------------------------- stepping
    def zero_grad(self, set_to_none=True):
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        obs = observing()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if obs:  # tg.compile's capture: the update is one step of the program
                        notify("update", self, group, p)
                    self._update(p, buffer(p.grad), group)
                    mark_written(p)
        return loss

    def _update(self, p, g, group):
        raise NotImplementedError

    def _buffer(self, p, name, fill=0):
        """State tensor ``name`` of ``p`` (zeros like p at first)."""
        st = self.state.setdefault(p, {})
        t = st.get(name)
        if t is None:
            x = buffer(p)
            xp = xp_of(x)
            arr = xp.zeros_like(x) if fill == 0 else xp.full_like(x, fill)
            t = st[name] = Tensor(arr)
        return buffer(t)

    def _grad_with_decay(self, g, x, wd, maximize, t, t2):
        """The gradient an update uses (the NumPy paths): negated for ``maximize``,
        plus ``wd * x`` (L2 weight decay), in the scratch ``t`` (``t2`` is spare)."""
        xp = xp_of(x)
        if maximize:
            xp.negative(g, out=t)
            g = t
        if wd != 0:
            xp.multiply(x, wd, out=t2)
            xp.add(g, t2, out=t)
            g = t
        return g

    def _tmp(self, k, like):
        """Scratch array ``k`` shaped like ``like``: a view of one growing flat buffer
        per (k, dtype, array type), so a step allocates nothing."""
        key = (k, like.dtype, type(like))
        buf = self._scratch.get(key)
        if buf is None or buf.size < like.size:
            buf = self._scratch[key] = xp_of(like).empty((like.size,), like.dtype)
        return buf[:like.size].reshape(like.shape)

    # ---------------------------------------------------------------- state dict
    def state_dict(self):
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``
        as PyTorch; tensors in it are references to the live state."""
        index = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                packed["params"].append(index[id(p)])
            groups.append(packed)
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't "
                                 "match the size of optimizer's group")
        id_map = {}
        for mine, theirs in zip(self.param_groups, groups):
            for p, i in zip(mine["params"], theirs["params"]):
                id_map[i] = p
        state = {}
        for key, values in state_dict["state"].items():
            key = int(key)
            if key not in id_map:
                continue
            p = id_map[key]
            state[p] = {name: _cast_like(v, p) for name, v in values.items()}
        self.state = state
        for mine, theirs in zip(self.param_groups, groups):
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = copy.deepcopy(v)

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        return "\n".join(lines) + "\n)"


def _cast_like(v, p):
    """A copy of a loaded state value, on p's device and (for float tensors) dtype."""
    if isinstance(v, Tensor):
        t = v.to(p.device)
        if t.is_floating_point() and t.dtype != p.dtype and t.ndim > 0:
            t = t.to(p.dtype)
        return Tensor(buffer(t).copy())
    return copy.deepcopy(v)
