"""``tg.save`` / ``tg.load``: tensors and nested containers of them, in a format
that cannot run code on load.

The file is a NumPy ``.npz`` archive: one ``.npy`` member per array, read back with
``allow_pickle=False``, plus a member ``__tapegrad__`` holding a JSON manifest of the
structure (dicts, lists, tuples, None, bools, ints, floats, strings and references to
the arrays). Nothing is ever unpickled, so a crafted file (a pickle, a ``torch.save``
archive, an ``.npz`` with object arrays) is refused with a ``ValueError``.

>>> import io, tapegrad as tg
>>> f = io.BytesIO()
>>> tg.save({"w": tg.ones(2), "step": 3}, f)
>>> _ = f.seek(0)
>>> tg.load(f)
{'w': tensor([1., 1.]), 'step': 3}
"""
import io
import json
import os
import zipfile
from collections import OrderedDict

import numpy as np

from . import dtypes as _dt
from .devices import device as _device
from .ops import tensor as _tensor
from .tensor import Tensor, buffer

__all__ = ["save", "load"]

_MANIFEST = "__tapegrad__"
_FORMAT = "tapegrad.save"
_VERSION = 1
_KEY_TYPES = (str, int, float, bool, type(None))


# ---------------------------------------------------------------- save
def save(obj, f):
    """Write ``obj`` (Tensors, NumPy arrays and nested dict/list/tuple of them with
    Python scalars and strings) to ``f``, a path or a binary file object."""
    arrays = {}
    seen = {}
    tree = _encode(obj, arrays, seen, "obj")
    manifest = json.dumps({"format": _FORMAT, "version": _VERSION, "tree": tree})
    members = dict(arrays)
    members[_MANIFEST] = np.frombuffer(manifest.encode("utf-8"), dtype=np.uint8)
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            np.savez(fh, **members)
    else:
        np.savez(f, **members)


def _encode(obj, arrays, seen, path):
    if obj is None or type(obj) in (bool, str):
        return obj
    if type(obj) is int:
        return {"int": str(obj)} if abs(obj) >= 2 ** 53 else obj
    if type(obj) is float:
        return {"float": repr(obj)}
    if isinstance(obj, np.generic):
        return _encode(obj.item(), arrays, seen, path)
    if isinstance(obj, Tensor) or isinstance(obj, np.ndarray):
        return _encode_array(obj, arrays, seen, path)
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if type(k) not in _KEY_TYPES:
                raise TypeError(f"tg.save: dict keys must be str, int, float, bool or None; "
                                f"got {type(k).__name__} at {path}")
            items.append([_encode(k, arrays, seen, path), _encode(v, arrays, seen,
                                                                   f"{path}[{k!r}]")])
        kind = "odict" if isinstance(obj, OrderedDict) else "dict"
        return {kind: items}
    if isinstance(obj, (list, tuple)):
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [_encode(v, arrays, seen, f"{path}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, _dt.DType):
        return {"dtype": str(obj)}
    raise TypeError(f"tg.save: can't save an object of type {type(obj).__name__} at {path}; "
                    f"supported: Tensor, numpy array, dict, list, tuple, str, int, float, "
                    f"bool, None")


def _encode_array(obj, arrays, seen, path):
    if id(obj) in seen:
        return {"ref": seen[id(obj)]}
    key = f"a{len(arrays)}"
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError(f"tg.save: object arrays can't be saved (at {path})")
        arrays[key] = obj
        node = {"ndarray": key}
    else:
        from .nn.parameter import is_parameter
        data = buffer(obj)
        arrays[key] = data if isinstance(data, np.ndarray) else data.get()
        node = {"tensor": key, "device": str(obj.device)}
        if obj.requires_grad:
            node["requires_grad"] = True
        if is_parameter(obj):
            node["parameter"] = True
    seen[id(obj)] = key
    node["id"] = key
    return node


# ---------------------------------------------------------------- load
def load(f, map_location=None, weights_only=True):
    """Read what ``save`` wrote. ``map_location`` (a device or string) places the
    tensors; by default they go back to the device they were saved from.

    Raises ``ValueError`` for anything that is not a tapegrad file, without
    executing any of its content."""
    name = os.fspath(f) if isinstance(f, (str, os.PathLike)) else getattr(f, "name", "<file>")
    data = _read_bytes(f)
    _check_magic(data, name)
    try:
        npz = np.load(io.BytesIO(data), allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise ValueError(f"tg.load: {name} is a corrupt archive ({e})") from None
    with npz:
        if _MANIFEST not in npz.files:
            hint = (" (it looks like a torch.save file, which tapegrad never unpickles)"
                    if any(m.endswith("data.pkl") for m in npz.files) else "")
            raise ValueError(f"tg.load: {name} is a zip archive but not a tapegrad file: "
                             f"no {_MANIFEST} manifest{hint}")
        manifest = _read_manifest(npz, name)
        decoder = _Decoder(npz, name, map_location)
        return decoder.decode(manifest["tree"], depth=0)


def _read_bytes(f):
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return fh.read()
    return f.read()


def _check_magic(data, name):
    if data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
        return
    if data[:1] == b"\x80" or data[:1] in (b"(", b"c", b"]", b"}"):
        what = "a Python pickle"
    elif data[:6] == b"\x93NUMPY":
        what = "a single .npy array (use numpy.load)"
    elif not data:
        what = "empty"
    else:
        what = "not a zip archive"
    raise ValueError(f"tg.load: {name} is not a tapegrad file ({what}); tapegrad files are "
                     f".npz archives written by tg.save, and pickles are never loaded")


def _read_manifest(npz, name):
    try:
        raw = npz[_MANIFEST]
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError("manifest is not a byte string")
        manifest = json.loads(raw.tobytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError, zipfile.BadZipFile, OSError) as e:
        raise ValueError(f"tg.load: {name} has a corrupt manifest ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT \
            or "tree" not in manifest:
        raise ValueError(f"tg.load: {name} has a manifest of unknown format")
    if manifest.get("version", 0) > _VERSION:
        raise ValueError(f"tg.load: {name} was written by a newer tapegrad (format version "
                         f"{manifest['version']} > {_VERSION})")
    return manifest


class _Decoder:
    def __init__(self, npz, name, map_location):
        self.npz, self.name = npz, name
        self.map_location = map_location
        self.objects = {}

    def fail(self, msg):
        raise ValueError(f"tg.load: {self.name}: corrupt manifest: {msg}")

    def decode(self, node, depth):
        if depth > 1000:
            self.fail("nesting too deep")
        if node is None or type(node) in (bool, str, int):
            return node
        if type(node) is not dict or len(node) == 0:
            self.fail(f"unexpected entry {node!r:.80}")
        if "tensor" in node or "ndarray" in node:
            return self.array(node)
        if "ref" in node:
            if node["ref"] not in self.objects:
                self.fail(f"dangling reference {node['ref']!r}")
            return self.objects[node["ref"]]
        (kind, value), = list(node.items())[:1]
        if kind in ("dict", "odict"):
            out = OrderedDict() if kind == "odict" else {}
            for pair in self.seq(value):
                if type(pair) is not list or len(pair) != 2:
                    self.fail("bad dict item")
                key = self.decode(pair[0], depth + 1)
                if type(key) not in _KEY_TYPES:
                    self.fail("bad dict key")
                out[key] = self.decode(pair[1], depth + 1)
            return out
        if kind in ("list", "tuple"):
            items = [self.decode(v, depth + 1) for v in self.seq(value)]
            return items if kind == "list" else tuple(items)
        if kind == "int" and type(value) is str:
            return int(value)
        if kind == "float" and type(value) is str:
            return float(value)
        if kind == "dtype" and type(value) is str:
            try:
                return _dt.as_dtype(value.replace("tapegrad.", "").replace("torch.", ""))
            except TypeError:
                pass
            self.fail(f"unknown dtype {value!r}")
        self.fail(f"unknown entry kind {kind!r}")

    def seq(self, value):
        if type(value) is not list:
            self.fail("expected a list")
        return value

    def array(self, node):
        key = node.get("tensor", node.get("ndarray"))
        if type(key) is not str or key not in self.npz.files or key == _MANIFEST:
            self.fail(f"missing array {key!r}")
        try:
            arr = self.npz[key]
        except ValueError as e:   # object arrays need pickle: refused
            raise ValueError(f"tg.load: {self.name}: array {key!r} can't be loaded without "
                             f"unpickling ({e}); refusing") from None
        if arr.dtype.hasobject:
            self.fail(f"array {key!r} has dtype object")
        if "ndarray" in node:
            obj = arr
        else:
            device = self.map_location if self.map_location is not None \
                else node.get("device", "cpu")
            t = _tensor(arr, device=_device(device))
            if node.get("parameter"):
                from .nn.parameter import Parameter
                t = Parameter(t, requires_grad=bool(node.get("requires_grad")))
            elif node.get("requires_grad"):
                t.requires_grad_(True)
            obj = t
        self.objects[node.get("id", key)] = obj
        return obj
