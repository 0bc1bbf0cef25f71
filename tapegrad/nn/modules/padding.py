"""The padding modules (``torch.nn.modules.padding``): constant, zero, reflection,
replication and circular padding of 1, 2 or 3 dims, over ``F.pad``."""
from .. import functional as F
from ..module import Module

__all__ = ["CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d",
           "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
           "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "ZeroPad1d",
           "ZeroPad2d", "ZeroPad3d"]


class _PadNd(Module):
    _n = 1
    _mode = "constant"

    def __init__(self, padding, value=None):
        super().__init__()
        self.padding = tuple(padding) if isinstance(padding, (tuple, list)) \
            else (padding,) * (2 * self._n)
        if len(self.padding) != 2 * self._n:
            raise ValueError(f"{type(self).__name__}: padding must be an int or "
                             f"{2 * self._n} ints, got {self.padding}")
        if value is not None:
            self.value = value

    def forward(self, input):
        if input.ndim not in (self._n + 1, self._n + 2):
            raise ValueError(f"{type(self).__name__}: expected {self._n + 1}D or "
                             f"{self._n + 2}D input, got {input.ndim}D")
        if self._mode == "constant":
            return F.pad(input, self.padding, "constant", self.value)
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self):
        return f"{self.padding}" + (f", value={self.value}" if self._mode == "constant" else "")


def _pads():
    made = {}
    for kind, mode in (("Constant", "constant"), ("Zero", "constant"), ("Reflection", "reflect"),
                       ("Replication", "replicate"), ("Circular", "circular")):
        for n in (1, 2, 3):
            name = f"{kind}Pad{n}d"
            body = {"_n": n, "_mode": mode, "__module__": __name__,
                    "__doc__": f"``F.pad(input, padding, {mode!r})`` over the last {n} dims."}
            if kind == "Constant":
                def __init__(self, padding, value):
                    _PadNd.__init__(self, padding, value)
                body["__init__"] = __init__
            elif kind == "Zero":
                def __init__(self, padding):
                    _PadNd.__init__(self, padding, 0.0)
                body["__init__"] = __init__
            made[name] = type(name, (_PadNd,), body)
    return made


_PADS = _pads()
ConstantPad1d = _PADS["ConstantPad1d"]
ConstantPad2d = _PADS["ConstantPad2d"]
ConstantPad3d = _PADS["ConstantPad3d"]
ZeroPad1d = _PADS["ZeroPad1d"]
ZeroPad2d = _PADS["ZeroPad2d"]
ZeroPad3d = _PADS["ZeroPad3d"]
ReflectionPad1d = _PADS["ReflectionPad1d"]
ReflectionPad2d = _PADS["ReflectionPad2d"]
ReflectionPad3d = _PADS["ReflectionPad3d"]
ReplicationPad1d = _PADS["ReplicationPad1d"]
ReplicationPad2d = _PADS["ReplicationPad2d"]
ReplicationPad3d = _PADS["ReplicationPad3d"]
CircularPad1d = _PADS["CircularPad1d"]
CircularPad2d = _PADS["CircularPad2d"]
CircularPad3d = _PADS["CircularPad3d"]
