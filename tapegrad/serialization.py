"""``tg.save`` / ``tg.load``: tensors and nested containers of them, in a format
that cannot run code on load; anything else (a whole module) as a pickle, which
``tg.load`` reads only when the caller passes ``weights_only=False``.

The file is a NumPy ``.npz`` archive (a zip of uncompressed ``.npy`` members, one per
array) plus a member ``__tapegrad__`` holding a JSON manifest of the structure (dicts,
lists, tuples, sets, None, bools, ints, floats, complex numbers, strings, bytes,
``tg.Size``, dtypes, devices and references to the arrays; bytes are arrays too): what
``torch.load(weights_only=True)`` accepts of plain values. CPU tensors that view the
memory of one array (``x`` and ``x[1:]``) share a member of raw bytes, each a view of it
by dtype, shape, strides and offset, so they load as views of one buffer, as PyTorch's
views of one storage.
Reading it unpickles nothing, so under ``weights_only=True`` (the default, as
PyTorch's) a crafted file (a pickle, a ``torch.save`` archive, an ``.npz`` with object
arrays) is refused with a ``ValueError`` and none of its content runs.

An object the format cannot hold (a ``Module``, a custom class) is written as a plain
pickle stream, as ``torch.save`` does; unpickling runs code named by the file, so
``tg.load`` does it only under ``weights_only=False``, the caller's statement that the
file is trusted.

``tg.load`` trusts nothing it has not checked: it looks at the first bytes before
reading on, checks the zip directory (sizes, names, no compression, no overlap) before
reading a member, and a ``.npy`` header's shape against the member's real size before
allocating, so a hostile file costs about what it really holds. The limits below bound
the rest; ``tg.save`` refuses to write a file beyond them.

>>> import io, tapegrad as tg
>>> f = io.BytesIO()
>>> tg.save({"w": tg.ones(2), "step": 3}, f)
>>> _ = f.seek(0)
>>> tg.load(f)
{'w': tensor([1., 1.]), 'step': 3}
"""
import ast
import json
import math
import os
import pickle
import re
import struct
import zipfile
from collections import OrderedDict

import numpy as np

from . import dtypes as _dt
from .devices import Device as _Device, device as _device
from .ops import as_tensor as _as_tensor, tensor as _tensor
from .tensor import Size as _Size, Tensor, buffer, unpickle_tensor

__all__ = ["save", "load", "UnpicklingError"]


class UnpicklingError(pickle.UnpicklingError, ValueError):
    """``tg.load`` refused to unpickle (``weights_only=True``); a ``ValueError`` too,
    as every refusal of ``tg.load``."""


class _NotPlain(TypeError):
    """An object the safe format cannot hold: ``tg.save`` pickles the whole object."""

_MANIFEST = "__tapegrad__"
_FORMAT = "tapegrad.save"
_VERSION = 2                      # 2: tensors sharing memory as views of one storage
_CPU_TENSORS = object()           # seen[_CPU_TENSORS]: [(tensor's array, its node), ...]
_KEY_TYPES = (str, int, float, bool, type(None))

# What a file may hold, so that the worst file within the limits costs about a second
# and a few hundred MiB: JSON parses to ~30x its size in Python objects, and the zip
# directory costs ~7 us and ~550 bytes of ZipInfo a member (np.savez writes ~100 bytes
# of directory a member; the smallest entry takes 51). The directory's size bounds the
# members it can hold whatever count the end record declares: 2.5 MiB is at most ~51,000
# members, ~30 MiB of ZipInfo.
_MAX_ARRAYS = 20_000
_MAX_MANIFEST_BYTES = 8 * 2**20
_MAX_CENTRAL_DIR = _MAX_ARRAYS * 128
_MAX_DEPTH = 200                  # JSON nesting: a dict level takes 3, a list level 2
_MAX_NPY_HEADER = 10_000          # numpy's own limit
_MAX_INT_DIGITS = 4_300           # Python's default int/str conversion limit
_MAX_NDIM = 64
_CHUNK = 2**22
_MEMBER_NAME = re.compile(r"[A-Za-z0-9_]+\.npy")
_OPENING, _CLOSING = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)
_LOCAL_HEADER = 30                # fixed part of a zip member's local header
_ZIP_ERRORS = (zipfile.BadZipFile, EOFError, OSError, struct.error, NotImplementedError)


# ---------------------------------------------------------------- save
def save(obj, f, pickle_module=None, pickle_protocol=pickle.DEFAULT_PROTOCOL):
    """Write ``obj`` to ``f``, a path or a binary file object. Tensors, NumPy arrays
    and nested dict/list/tuple/set of them with Python scalars, complex numbers,
    strings, bytes, ``tg.Size``, dtypes and devices go into the safe format (what
    ``torch.load(weights_only=True)`` accepts of plain values); anything else (a whole
    ``Module``, a custom class) is pickled whole (with ``pickle_module``, default
    ``pickle``), which ``tg.load`` reads back only with ``weights_only=False``.

    Raises ``ValueError`` for a safe-format file ``tg.load`` would refuse: more than
    20,000 arrays, a manifest over 8 MiB, or nesting deeper than about 66 dicts."""
    arrays = {}
    seen = {}
    try:
        tree = _encode(obj, arrays, seen, "obj")
    except _NotPlain:
        _save_pickle(obj, f, pickle_module or pickle, pickle_protocol)
        return
    shared = _share_storages(seen.get(_CPU_TENSORS, ()), arrays)
    manifest = json.dumps({"format": _FORMAT, "version": _VERSION if shared else 1,
                           "tree": tree})
    manifest = manifest.encode("utf-8")
    _check_save_limits(len(arrays), manifest)
    members = dict(arrays)
    members[_MANIFEST] = np.frombuffer(manifest, dtype=np.uint8)
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            np.savez(fh, **members)
    else:
        np.savez(f, **members)


def _save_pickle(obj, f, pickle_module, protocol):
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            pickle_module.dump(obj, fh, protocol=protocol)
    else:
        pickle_module.dump(obj, f, protocol=protocol)


def _check_save_limits(n_arrays, manifest):
    if n_arrays > _MAX_ARRAYS:
        raise ValueError(f"tg.save: {n_arrays} arrays, over the {_MAX_ARRAYS} a file may "
                         f"hold; stack small tensors into fewer")
    if len(manifest) > _MAX_MANIFEST_BYTES:
        raise ValueError(f"tg.save: the structure needs a {len(manifest)}-byte manifest, "
                         f"over the {_MAX_MANIFEST_BYTES} tg.load accepts; store long "
                         f"lists of numbers as arrays")
    depth = _json_depth(manifest)
    if depth > _MAX_DEPTH:
        raise ValueError(f"tg.save: the structure nests {depth} JSON levels deep, over the "
                         f"{_MAX_DEPTH} tg.load accepts")


def _encode(obj, arrays, seen, path):
    if obj is None or type(obj) in (bool, str):
        return obj
    if type(obj) is int:
        return {"int": str(obj)} if abs(obj) >= 2 ** 53 else obj
    if type(obj) is float:
        return {"float": repr(obj)}
    if isinstance(obj, np.generic):
        return _encode(obj.item(), arrays, seen, path)
    if getattr(obj, "is_sparse", False) is True and isinstance(obj, Tensor):
        d = buffer(obj)   # (a sparse COO tensor: its indices, values and size)
        # (requires_grad: the values')
        return {"sparse_coo": {
            "indices": _encode_array(d.indices, arrays, seen, f"{path}.indices"),
            "values": _encode_array(d.values, arrays, seen, f"{path}.values"),
            "size": [int(n) for n in d.shape], "coalesced": bool(d.coalesced)}}
    if isinstance(obj, Tensor) or isinstance(obj, np.ndarray):
        return _encode_array(obj, arrays, seen, path)
    if type(obj) is complex:
        return {"complex": [repr(obj.real), repr(obj.imag)]}
    if type(obj) in (bytes, bytearray):
        key = f"a{len(arrays)}"
        arrays[key] = np.frombuffer(bytes(obj), dtype=np.uint8)
        return {type(obj).__name__: key}
    if isinstance(obj, _Size):
        return {"size": [int(n) for n in obj]}
    if isinstance(obj, _Device):
        return {"device": str(obj)}
    if type(obj) in (set, frozenset):
        if any(not _plain_key(v) for v in obj):
            raise _NotPlain(f"tg.save: a set holding other than plain values at {path}")
        return {type(obj).__name__: [_encode(v, arrays, seen, path) for v in obj]}
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if not _plain_key(k):
                raise _NotPlain(f"tg.save: dict keys must be str, int, float, bool, None or "
                                f"tuples of them; got {type(k).__name__} at {path}")
            items.append([_encode(k, arrays, seen, path), _encode(v, arrays, seen,
                                                                   f"{path}[{k!r}]")])
        kind = "odict" if isinstance(obj, OrderedDict) else "dict"
        return {kind: items}
    if isinstance(obj, (list, tuple)):
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [_encode(v, arrays, seen, f"{path}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, _dt.DType):
        return {"dtype": str(obj)}
    raise _NotPlain(f"tg.save: an object of type {type(obj).__name__} at {path}")


def _plain_key(k):
    """A dict key or set element the format holds: a plain scalar or a tuple of them."""
    if type(k) in _KEY_TYPES or type(k) is complex:
        return True
    return type(k) is tuple and all(_plain_key(v) for v in k)


def _encode_array(obj, arrays, seen, path):
    if id(obj) in seen:
        return {"ref": seen[id(obj)]}
    key = f"a{len(arrays)}"
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise _NotPlain(f"tg.save: an object array at {path}")
        arrays[key] = obj
        node = {"ndarray": key}
    else:
        from .nn.parameter import is_parameter
        data = buffer(obj)
        arrays[key] = data if isinstance(data, np.ndarray) else data.get()
        node = {"tensor": key, "device": str(obj.device)}
        if isinstance(data, np.ndarray):
            seen.setdefault(_CPU_TENSORS, []).append((data, node))
        if obj.requires_grad:
            node["requires_grad"] = True
        if is_parameter(obj):
            node["parameter"] = True
    if arrays[key].dtype is _dt.BF16:  # .npy has no bfloat16: its bits, as uint16
        arrays[key] = arrays[key].view(np.uint16)
        node["bits_of"] = "bfloat16"
    seen[id(obj)] = key
    node["id"] = key
    return node


def _byte_bounds(a):
    """The first and one-past-the-last byte address ``a`` reads (``np.byte_bounds``)."""
    low = high = a.__array_interface__["data"][0]
    if a.size:
        for n, step in zip(a.shape, a.strides):
            if step < 0:
                low += (n - 1) * step
            else:
                high += (n - 1) * step
        high += a.itemsize
    return low, high


def _root(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _share_storages(tensors, arrays):
    """Tensors whose arrays view the memory of one NumPy array, as PyTorch's views of
    one storage: their bytes are written once, from that memory's start to the end of
    the last of them, as a uint8 member ``s<n>``, and each tensor's node becomes a view
    of it (dtype, shape, byte strides, byte offset). Whether any were."""
    groups = {}
    for data, node in tensors:
        groups.setdefault(id(_root(data)), []).append((data, node))
    shared = False
    for group in groups.values():
        if len(group) < 2:
            continue
        shared = True
        start = min(_byte_bounds(_root(group[0][0]))[0],
                    *(_byte_bounds(d)[0] for d, _ in group))
        end = max(_byte_bounds(d)[1] for d, _ in group)
        key = f"s{sum(k.startswith('s') for k in arrays)}"
        arrays[key] = np.asarray(_Memory(start, end - start, group[0][0]))
        for data, node in group:
            del arrays[node.pop("tensor")]
            node.pop("bits_of", None)
            node.update({"view": key, "dtype": str(_dt.from_np(data.dtype)),
                         "shape": list(data.shape), "strides": list(data.strides),
                         "offset": data.__array_interface__["data"][0] - start})
    return shared


class _Memory:
    """``size`` bytes from address ``start`` as a uint8 array (NumPy's array interface),
    keeping ``owner``, whose memory they are, alive."""

    def __init__(self, start, size, owner):
        self.owner = owner
        self.__array_interface__ = {"data": (start, True), "shape": (size,),
                                    "typestr": "|u1", "version": 3}


# ---------------------------------------------------------------- load
def load(f, map_location=None, pickle_module=None, *, weights_only=True, mmap=None,
         **pickle_load_args):
    """Read what ``save`` wrote. ``map_location`` (a device, a string, or a dict from
    saved device to device, as PyTorch's) places the tensors; by default they go back
    to the device they were saved from.

    ``weights_only=True`` (the default; ``None`` means the same, as PyTorch's) reads
    only the safe format: tensors, containers and plain values. A pickle (a whole
    module ``tg.save`` wrote, or any other) is refused with ``UnpicklingError`` (a
    ``ValueError``) naming the argument, and nothing in it runs; ``weights_only=False``
    is the caller's statement that the file is trusted, and unpickles it (with
    ``pickle_module``, default ``pickle``).

    Raises ``ValueError`` for anything that is not a tapegrad file, without executing
    any of its content and after reading only what the archive declares; a missing
    file or a directory raises the OS error. A file object must be seekable, as for
    ``torch.load``. ``mmap`` is accepted and has no effect."""
    trusted = weights_only is False
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return _load(fh, os.fspath(f), map_location, trusted, pickle_module,
                         pickle_load_args)
    return _load(f, getattr(f, "name", "<file>"), map_location, trusted, pickle_module,
                 pickle_load_args)


def _load(fh, name, map_location, trusted, pickle_module, pickle_load_args):
    if not (callable(getattr(fh, "seekable", None)) and fh.seekable()):
        raise ValueError(f"tg.load: {name} is not seekable; read it into an io.BytesIO "
                         f"first")
    start = fh.tell()
    head = fh.read(8)
    fh.seek(start)
    if _is_pickle(head):
        if not trusted:
            raise UnpicklingError(
                f"tg.load: {name} is a Python pickle (as tg.save writes a whole module), "
                f"and unpickling runs code the file names; refused under "
                f"weights_only=True, the default. If you trust the file, pass "
                f"weights_only=False; else save model.state_dict() instead")
        return _unpickler(fh, map_location, pickle_module, pickle_load_args).load()
    _check_magic(head, name)
    archive = _Archive(fh, name)
    with archive.zf:
        manifest = archive.manifest()
        return _Decoder(archive, name, map_location).decode(manifest["tree"])


def _is_pickle(head):
    return head[:1] == b"\x80" or head[:1] in (b"(", b"c", b"]", b"}")


def _placement(map_location, saved, array):
    """The device for a tensor saved from device ``saved`` (a string), of values
    ``array``. A callable ``map_location`` is called as PyTorch's, with the values as
    a CPU tensor (its "storage") and ``saved``: None keeps the saved device, a tensor
    names the device to load onto."""
    if map_location is None:
        return _device(saved)
    if isinstance(map_location, dict):
        return _device(map_location.get(saved, saved))
    if callable(map_location):
        r = map_location(_as_tensor(array), saved)
        if r is None:
            return _device(saved)
        if not hasattr(r, "device"):
            raise TypeError(f"tg.load: map_location returned a {type(r).__name__}; it "
                            f"should return None or a tensor (its device is used)")
        return _device(str(r.device))
    return _device(map_location)


def _unpickler(fh, map_location, pickle_module, kwargs):
    base = (pickle_module or pickle).Unpickler

    class Unpickler(base):
        def find_class(self, module, name):
            if (module, name) == ("tapegrad.tensor", "unpickle_tensor"):
                return _placed
            return super().find_class(module, name)

    def _placed(array, device, requires_grad):
        return unpickle_tensor(array, str(_placement(map_location, device, array)),
                               requires_grad)
    return Unpickler(fh, **kwargs)


def _check_magic(head, name):
    if head[:4] == b"PK\x03\x04" or head[:4] == b"PK\x05\x06":
        return
    if head[:6] == b"\x93NUMPY":
        what = "a single .npy array (use numpy.load)"
    elif not head:
        what = "empty"
    else:
        what = "not a zip archive"
    raise ValueError(f"tg.load: {name} is not a tapegrad file ({what}); tapegrad files are "
                     f".npz archives written by tg.save, and pickles are never loaded")


def _json_depth(raw):
    """The deepest nesting of JSON text, found without parsing it (the parser recurses).
    Escaped backslashes and quotes are blanked first, paired left to right as JSON pairs
    them, so the count of quotes so far tells which brackets are inside strings."""
    text = np.frombuffer(raw.replace(b"\\\\", b"__").replace(b'\\"', b"__"), dtype=np.uint8)
    depth = deepest = in_string = 0
    for start in range(0, len(text), 2**20):     # in chunks: a few MiB at most
        chunk = text[start:start + 2**20]
        inside = (np.cumsum(chunk == ord('"'), dtype=np.uint8) + in_string) & 1
        outside = inside == 0
        steps = (np.isin(chunk, _OPENING) & outside).astype(np.int8) \
            - (np.isin(chunk, _CLOSING) & outside)
        levels = np.cumsum(steps, dtype=np.int32) + depth
        deepest, depth, in_string = max(deepest, int(levels.max())), int(levels[-1]), inside[-1]
    return deepest


def _parse_int(text):
    if len(text) > 20:   # tg.save writes larger ints as {"int": "..."}
        raise ValueError(f"integer literal of {len(text)} digits")
    return int(text)


class _Archive:
    """The members of a tapegrad file, checked against the zip directory before any
    is read; each is read at most once, and only as far as its header declares."""

    def __init__(self, fh, name):
        self.name = name
        try:
            end = zipfile._EndRecData(fh)     # the end record: reads 64 KiB at most
        except _ZIP_ERRORS as e:
            self.corrupt(e)
        if end is None:
            self.fail("no zip end record (a truncated or foreign file)")
        if end[zipfile._ECD_ENTRIES_TOTAL] > _MAX_ARRAYS + 1:
            self.fail(f"{end[zipfile._ECD_ENTRIES_TOTAL]} members, over the {_MAX_ARRAYS} "
                      f"arrays limit")
        if end[zipfile._ECD_SIZE] > _MAX_CENTRAL_DIR:
            self.fail(f"the zip directory declares {end[zipfile._ECD_SIZE]} bytes, over "
                      f"the {_MAX_CENTRAL_DIR} limit")
        try:
            self.zf = zipfile.ZipFile(fh)
        except (*_ZIP_ERRORS, ValueError) as e:   # ValueError: a bad UTF-8 member name
            self.corrupt(e)
        try:
            self.members = self._check_members(self.zf.infolist())
        except ValueError:
            self.zf.close()
            raise
        self.used = set()

    def corrupt(self, e):
        raise ValueError(f"tg.load: {self.name} is a corrupt archive ({e})") from None

    def fail(self, msg):
        raise ValueError(f"tg.load: {self.name}: {msg}")

    def _check_members(self, infos):
        names = [i.orig_filename for i in infos]
        if _MANIFEST + ".npy" not in names:
            hint = (" (it looks like a torch.save file, which tapegrad never unpickles)"
                    if any(n.endswith("data.pkl") for n in names) else "")
            raise ValueError(f"tg.load: {self.name} is a zip archive but not a tapegrad "
                             f"file: no {_MANIFEST} manifest{hint}")
        if len(infos) > _MAX_ARRAYS + 1:
            self.fail(f"{len(infos)} members, over the {_MAX_ARRAYS} arrays limit")
        for info in infos:
            n = info.orig_filename
            if not _MEMBER_NAME.fullmatch(n):
                self.fail(f"member name {n!r:.80} is not a plain array name")
            if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
                self.fail(f"member {n!r} is compressed (or its two sizes disagree); tg.save "
                          f"writes stored members only, and an inflated size can't be "
                          f"trusted")
            if info.flag_bits & 0x41:
                self.fail(f"member {n!r} is encrypted")
        seen = set()
        for n in names:
            if n in seen:
                self.fail(f"duplicate member {n!r}")
            seen.add(n)
        # members may not overlap, so together they read at most the file once
        spans = sorted((i.header_offset, _LOCAL_HEADER + len(i.orig_filename) +
                        i.compress_size, i.orig_filename) for i in infos)
        ends = [start for start, _, _ in spans[1:]] + [self.zf.start_dir]
        for (start, size, n), limit in zip(spans, ends):
            if start < 0 or start + size > limit:
                self.fail(f"member {n!r} overlaps the next one or the zip directory")
        return {i.orig_filename[:-len(".npy")]: i for i in infos}

    def manifest(self):
        size = self.members[_MANIFEST].file_size
        if size > _MAX_MANIFEST_BYTES + _MAX_NPY_HEADER:
            self.fail(f"the manifest is {size} bytes, over the {_MAX_MANIFEST_BYTES} limit")
        raw = self.array(_MANIFEST, byte_string=True).tobytes()
        depth = _json_depth(raw)
        if depth > _MAX_DEPTH:
            self.fail(f"the manifest nests {depth} levels deep, over the {_MAX_DEPTH} limit")
        try:
            manifest = json.loads(raw.decode("utf-8"), parse_int=_parse_int)
        except ValueError as e:   # JSONDecodeError and UnicodeDecodeError are ValueErrors
            self.fail(f"corrupt manifest ({e})")
        if type(manifest) is not dict or manifest.get("format") != _FORMAT \
                or "tree" not in manifest or type(manifest.get("version", 0)) is not int:
            self.fail("the manifest is of unknown format")
        if manifest.get("version", 0) > _VERSION:
            self.fail(f"written by a newer tapegrad (format version {manifest['version']} > "
                      f"{_VERSION})")
        return manifest

    def array(self, key, byte_string=False):
        """The array in member ``key``, read once, after its header passed the checks."""
        if key in self.used:
            self.fail(f"array {key!r} is used twice (a shared array is written once and "
                      f"referenced)")
        self.used.add(key)
        info = self.members[key]
        try:
            with self.zf.open(info) as member:
                dtype, shape, fortran = self._npy_header(member, info, key, byte_string)
                flat = np.empty(math.prod(shape), dtype=dtype)
                _read_exactly(member, flat.view(np.uint8))
        except _ZIP_ERRORS as e:
            self.fail(f"array {key!r} is corrupt ({e})")
        if fortran:
            return flat.reshape(shape[::-1]).transpose()
        return flat.reshape(shape)

    def _npy_header(self, member, info, key, byte_string):
        """dtype, shape and order of a .npy member, checked against its real size."""
        magic = member.read(8)
        if magic[:6] != b"\x93NUMPY" or len(magic) < 8 or magic[6] not in (1, 2, 3):
            self.fail(f"array {key!r} is not a .npy member")
        size_len = 2 if magic[6] == 1 else 4
        header_len = int.from_bytes(member.read(size_len), "little")
        data_start = 8 + size_len + header_len
        if header_len > _MAX_NPY_HEADER or data_start > info.file_size:
            self.fail(f"array {key!r} declares a {header_len}-byte header")
        text = member.read(header_len)
        try:
            header = ast.literal_eval(text.decode("latin1" if magic[6] < 3 else "utf8"))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
            self.fail(f"array {key!r} has an unreadable header ({type(e).__name__})")
        if type(header) is not dict or set(header) != {"descr", "fortran_order", "shape"} \
                or type(header["fortran_order"]) is not bool:
            self.fail(f"array {key!r} has an unreadable header")
        shape = header["shape"]
        if type(shape) is not tuple or len(shape) > _MAX_NDIM \
                or any(type(n) is not int or n < 0 for n in shape):
            self.fail(f"array {key!r} has an invalid shape {shape!r:.80}")
        try:
            dtype = np.lib.format.descr_to_dtype(header["descr"])
        except (TypeError, ValueError, RecursionError) as e:
            self.fail(f"array {key!r} has an invalid dtype ({e})")
        if dtype.hasobject:
            self.fail(f"array {key!r} has dtype object, which can't be loaded without "
                      f"unpickling; refusing")
        if byte_string and (dtype != np.uint8 or len(shape) != 1):
            self.fail("the manifest is not a byte string")
        declared = math.prod(shape) * dtype.itemsize
        if dtype.itemsize == 0 or declared != info.file_size - data_start:
            self.fail(f"array {key!r} declares shape {shape} of {dtype} ({declared} bytes) "
                      f"but holds {info.file_size - data_start} bytes")
        return dtype, shape, header["fortran_order"]


def _read_exactly(member, out):
    view = memoryview(out)
    done = 0
    while done < len(view):
        chunk = member.read(min(_CHUNK, len(view) - done))
        if not chunk:
            raise EOFError("member shorter than its header declares")
        view[done:done + len(chunk)] = chunk
        done += len(chunk)


class _Decoder:
    def __init__(self, archive, name, map_location):
        self.archive, self.name = archive, name
        self.map_location = map_location
        self.objects = {}
        self.storages = {}

    def fail(self, msg):
        raise ValueError(f"tg.load: {self.name}: corrupt manifest: {msg}")

    def decode(self, node):
        # recursion is bounded: the manifest's depth was checked before parsing
        if node is None or type(node) in (bool, str, int):
            return node
        if type(node) is not dict or len(node) == 0:
            self.fail(f"unexpected entry {node!r:.80}")
        if "tensor" in node or "ndarray" in node:
            return self.array(node)
        if "view" in node:
            return self.view(node)
        if "ref" in node:
            if type(node["ref"]) is not str or node["ref"] not in self.objects:
                self.fail(f"dangling reference {node['ref']!r:.80}")
            return self.objects[node["ref"]]
        kind, value = next(iter(node.items()))
        if kind in ("dict", "odict"):
            out = OrderedDict() if kind == "odict" else {}
            for pair in self.seq(value):
                if type(pair) is not list or len(pair) != 2:
                    self.fail("bad dict item")
                key = self.decode(pair[0])
                if not _plain_key(key):
                    self.fail("bad dict key")
                out[key] = self.decode(pair[1])
            return out
        if kind in ("list", "tuple"):
            items = [self.decode(v) for v in self.seq(value)]
            return items if kind == "list" else tuple(items)
        if kind in ("set", "frozenset"):
            items = [self.decode(v) for v in self.seq(value)]
            if not all(_plain_key(v) for v in items):
                self.fail(f"bad {kind} element")
            return set(items) if kind == "set" else frozenset(items)
        if kind in ("int", "float", "dtype"):
            return self.scalar(kind, value)
        if kind == "complex":
            parts = self.seq(value)
            if len(parts) != 2:
                self.fail("bad complex entry")
            return complex(self.scalar("float", parts[0]), self.scalar("float", parts[1]))
        if kind in ("bytes", "bytearray"):
            if type(value) is not str or value not in self.archive.members or \
                    value == _MANIFEST:
                self.fail(f"missing array {value!r:.80}")
            arr = self.archive.array(value)
            if arr.dtype != np.uint8 or arr.ndim != 1:
                self.fail(f"array {value!r}: bytes must be a 1-D uint8 array")
            return bytes(arr) if kind == "bytes" else bytearray(arr.tobytes())
        if kind == "sparse_coo":
            return self.sparse(value)
        if kind == "size":
            dims = self.seq(value)
            if not all(type(n) is int and n >= 0 for n in dims):
                self.fail("bad size entry")
            return _Size(dims)
        if kind == "device":
            try:
                return _device(value) if type(value) is str else self.fail("bad device")
            except (TypeError, ValueError, RuntimeError):
                self.fail(f"bad device entry {value!r:.80}")
        self.fail(f"unknown entry kind {kind!r:.80}")

    def sparse(self, node):
        """A sparse COO tensor from its indices, values and size, checked as
        ``sparse_coo_tensor`` checks them (a file may say anything)."""
        from .ops.sparse import sparse_coo_tensor
        if type(node) is not dict or set(node) - {"indices", "values", "size", "coalesced"}:
            self.fail("bad sparse entry")
        indices, values = self.decode(node.get("indices")), self.decode(node.get("values"))
        size = self.seq(node.get("size"))
        if not (isinstance(indices, Tensor) and isinstance(values, Tensor)) or \
                not all(type(n) is int and n >= 0 for n in size):
            self.fail("bad sparse entry")
        try:
            t = sparse_coo_tensor(indices, values, size)
            if node.get("coalesced") is True:
                t = t.coalesce()
        except (RuntimeError, TypeError, ValueError, IndexError) as e:
            self.fail(f"bad sparse entry: {e}")
        return t

    def seq(self, value):
        if type(value) is not list:
            self.fail("expected a list")
        return value

    def scalar(self, kind, value):
        if type(value) is not str or len(value) > _MAX_INT_DIGITS:
            self.fail(f"bad {kind} entry {value!r:.80}")
        try:
            if kind == "int":
                return int(value)
            if kind == "float":
                return float(value)
            return _dt.as_dtype(value.replace("tapegrad.", "").replace("torch.", ""))
        except (TypeError, ValueError):
            self.fail(f"bad {kind} entry {value!r:.80}")

    def array(self, node):
        key = node.get("tensor", node.get("ndarray"))
        ident = node.get("id", key)
        if type(key) is not str or key not in self.archive.members or key == _MANIFEST:
            self.fail(f"missing array {key!r:.80}")
        if type(ident) is not str or ident in self.objects:
            self.fail(f"bad or repeated id {ident!r:.80}")
        arr = self.archive.array(key)
        if "bits_of" in node:
            if node["bits_of"] != "bfloat16" or arr.dtype != np.uint16:
                self.fail(f"array {key!r}: bad bits_of entry {node['bits_of']!r:.80}")
            arr = arr.view(_dt.bfloat16.np)
        obj = arr if "ndarray" in node else self.tensor(node, key, arr)
        self.objects[ident] = obj
        return obj

    def view(self, node):
        """A tensor viewing a storage shared with others (read once): NumPy's own
        check keeps the view's extent inside the storage."""
        key, ident = node["view"], node.get("id")
        if type(key) is not str or not key.startswith("s") or \
                key not in self.archive.members:
            self.fail(f"missing storage {key!r:.80}")
        if type(ident) is not str or ident in self.objects:
            self.fail(f"bad or repeated id {ident!r:.80}")
        if key not in self.storages:
            storage = self.archive.array(key)
            if storage.dtype != np.uint8 or storage.ndim != 1:
                self.fail(f"storage {key!r} must be a 1-D uint8 array")
            self.storages[key] = storage
        shape, strides, offset = node.get("shape"), node.get("strides"), node.get("offset")
        if type(shape) is not list or type(strides) is not list or \
                len(shape) != len(strides) or len(shape) > _MAX_NDIM or \
                not all(type(n) is int and n >= 0 for n in shape) or \
                not all(type(n) is int for n in strides) or type(offset) is not int or \
                offset < 0:
            self.fail(f"view of {key!r}: bad shape, strides or offset")
        dtype = self.scalar("dtype", node.get("dtype")).np
        try:
            arr = np.ndarray(tuple(shape), dtype, buffer=self.storages[key], offset=offset,
                             strides=tuple(strides))
        except (TypeError, ValueError) as e:
            self.fail(f"view of {key!r}: {e}")
        obj = self.tensor(node, key, arr, share=True)
        self.objects[ident] = obj
        return obj

    def tensor(self, node, key, arr, share=False):
        try:
            dev = _placement(self.map_location, node.get("device", "cpu"), arr)
        except (TypeError, ValueError) as e:
            self.fail(f"array {key!r}: {e}")
        try:
            t = (_as_tensor if share else _tensor)(arr, device=dev)
        except TypeError as e:      # a dtype tapegrad has no tensors of
            self.fail(f"array {key!r}: {e}")
        try:
            if node.get("parameter"):
                from .nn.parameter import Parameter
                t = Parameter(t, requires_grad=bool(node.get("requires_grad")))
            elif node.get("requires_grad"):
                t.requires_grad_(True)
        except RuntimeError as e:   # requires_grad on an integer tensor
            self.fail(f"array {key!r}: {e}")
        return t
