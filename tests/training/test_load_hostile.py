"""tg.load on hostile files: each one is refused with a ValueError naming the problem,
at a bounded cost. Every load runs in a forked child under an address-space limit
(RLIMIT_AS, 64 MiB above what the child starts with) with a watchdog, so a load that
allocates what a file claims fails the test instead of the machine; where the question
is how much is read, the file goes through a wrapper that counts the bytes."""
import json
import math
import os
import re
import select
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

import tapegrad as tg

resource = pytest.importorskip("resource")   # POSIX only, like fork

pytestmark = pytest.mark.skipif(not (hasattr(os, "fork") and os.path.exists("/proc/self/statm")),
                                reason="bounded loads need fork and /proc (Linux)")

_BUDGET = 64 * 2**20
_WATCHDOG_S = 60
_SERVER = Path(__file__).with_name("_bounded_load.py")


_LOADER = {}


@pytest.fixture(scope="module", autouse=True)
def _loader_process():
    """The process that forks each load (tests/training/_bounded_load.py): single-threaded,
    so a child never inherits a lock that another thread held at the fork (a fork of the
    threaded test worker hung in the child, twice in a row, in a whole-suite run)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               NUMBA_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, str(_SERVER)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, text=True)
    _LOADER["proc"] = proc
    yield
    del _LOADER["proc"]
    proc.stdin.close()
    proc.wait(timeout=60)


def _load_bounded(path, count_reads=False, setup=None):
    """tg.load(path) in a forked child of the loader process, bounded in memory and time:
    (exception class name or 'ok', message, bytes read or -1). ``setup`` is a
    (name, argument) the child applies first (the loader's SETUPS)."""
    req = {"path": str(path), "count_reads": count_reads, "setup": setup,
           "budget": _BUDGET, "watchdog_s": _WATCHDOG_S}
    proc = _LOADER["proc"]
    proc.stdin.write(json.dumps(req) + "\n")
    proc.stdin.flush()
    assert select.select([proc.stdout], [], [], _WATCHDOG_S + 60)[0], \
        "the loader process gave no answer"
    line = proc.stdout.readline()
    assert line, f"the loader process exited ({proc.poll()})"
    return json.loads(line)


def _refused(path, match, **kw):
    kind, msg, bytes_read = _load_bounded(path, **kw)
    assert (kind, re.search(match, msg) is not None) == ("ValueError", True), (kind, msg)
    assert msg.startswith("tg.load: "), msg
    return bytes_read


# ---------------------------------------------------------------- building files
def _npy(descr="<f4", shape=(2,), data=None, fortran=False, header=None, major=1):
    """A .npy member claiming `shape`; `data` defaults to the bytes the claim needs."""
    if header is None:
        header = repr({"descr": descr, "fortran_order": fortran, "shape": shape}).encode()
    if data is None:
        data = bytes(math.prod(shape) * np.dtype(descr).itemsize)
    size = len(header).to_bytes(2 if major == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([major, 0]) + size + header + data


def _manifest(tree):
    text = json.dumps({"format": "tapegrad.save", "version": 1, "tree": tree})
    return _raw_manifest(text.encode())


def _raw_manifest(raw):
    return _npy("|u1", (len(raw),), raw)


def _zip(path, *members, declare=None):
    """Write a zip by hand, so that it can lie (``declare``: the member count the end
    record states, by default the true one). A member is (name, data) or (name, data,
    options): method (8: data is a raw deflate stream), size (the inflated size to declare),
    crc, flags, hole (that many zero bytes after data, as a sparse hole), offset (write no
    local header: the directory entry points at this offset, inside an earlier member)."""
    central = []
    with open(path, "wb") as f:
        for member in members:
            name, data, opt = (*member, {}) if len(member) == 2 else member
            name = name.encode()
            stored = len(data) + opt.get("hole", 0)
            fields = (opt.get("flags", 0), opt.get("method", 0), 0, 0,
                      opt.get("crc", zlib.crc32(data)), stored, opt.get("size", stored))
            offset = opt.get("offset", f.tell())
            if "offset" not in opt:
                offset = f.tell()
                f.write(struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, *fields, len(name), 0))
                f.write(name + data)
                f.seek(opt.get("hole", 0), 1)
            central.append(struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, *fields,
                                       len(name), 0, 0, 0, 0, 0, offset) + name)
        central = b"".join(central)
        start = f.tell()
        count = len(members) if declare is None else declare
        f.write(central + struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, count, count,
                                      len(central), start, 0))
    return path


def _deflated_zeros(prefix, n_mib, fill=b"\0"):
    """A raw deflate stream of `prefix` + n_mib MiB of `fill`, built in milliseconds: a
    full flush makes each MiB's compressed block independent, so it can be repeated."""
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = co.compress(prefix) + co.flush(zlib.Z_FULL_FLUSH)
    block = co.compress(fill * 2**20) + co.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(prefix)
    for _ in range(n_mib):
        crc = zlib.crc32(fill * 2**20, crc)
    return head + block * n_mib + co.flush(), crc, len(prefix) + n_mib * 2**20


def _tapegrad_zip(path, tree, *arrays):
    return _zip(path, ("__tapegrad__.npy", _manifest(tree)), *arrays)


TENSOR_A0 = {"tensor": "a0", "device": "cpu", "id": "a0"}


# ---------------------------------------------------------------- the harness itself
def test_a_real_file_loads_under_the_same_bounds(tmp_path):
    tg.save({"w": tg.ones(1000), "n": [1, 2.5, "x"]}, tmp_path / "ok.tg")
    assert _load_bounded(tmp_path / "ok.tg")[:2] == ["ok", ""]
    _tapegrad_zip(tmp_path / "hand.tg", TENSOR_A0, ("a0.npy", _npy()))
    assert _load_bounded(tmp_path / "hand.tg")[:2] == ["ok", ""]


def test_the_harness_catches_an_allocation_over_budget(tmp_path):
    # an anonymous map of twice the budget: new address space, as a large array's buffer
    # takes when the heap has no free block for it
    assert _load_bounded(tmp_path / "missing", setup=("allocate", 2 * _BUDGET))[0] \
        == "MemoryError"


# ---------------------------------------------------------------- the signature comes first
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_is_refused_from_its_first_bytes():
    assert _refused("/dev/zero", "not a zip archive", count_reads=True) <= 64


def test_a_2gib_foreign_file_is_not_read(tmp_path):
    path = tmp_path / "big.bin"
    with open(path, "wb") as f:
        f.truncate(2**31)      # sparse: no disk
    assert _refused(path, "not a zip archive", count_reads=True) <= 64


def test_a_2gib_zip_directory_is_refused_by_its_declared_size(tmp_path):
    path = tmp_path / "bigdir.zip"
    size = 2**31
    with open(path, "wb") as f:
        f.write(b"PK\x03\x04")
        f.truncate(size - 22)
        f.seek(size - 22)
        f.write(struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 1, 1, size - 22, 0, 0))
    assert _refused(path, "zip directory declares", count_reads=True) < 2**20


def test_missing_file_and_directory_raise_the_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        tg.load(tmp_path / "nope.tg")
    with pytest.raises(IsADirectoryError):
        tg.load(tmp_path)


# ---------------------------------------------------------------- zip bombs
def test_a_compressed_array_member_is_refused(tmp_path):
    stream, crc, size = _deflated_zeros(_npy("<f4", (64 * 2**20,), data=b""), 256)
    path = _tapegrad_zip(tmp_path / "bomb.tg", TENSOR_A0,
                         ("a0.npy", stream, {"method": 8, "crc": crc, "size": size}))
    assert os.path.getsize(path) < 2**20
    _refused(path, "member 'a0.npy' is compressed")


def test_a_compressed_manifest_is_refused(tmp_path):
    n = 256 * 2**20
    stream, crc, size = _deflated_zeros(_npy("|u1", (n,), data=b""), 256, fill=b" ")
    path = _zip(tmp_path / "bomb.tg",
                ("__tapegrad__.npy", stream, {"method": 8, "crc": crc, "size": size}))
    _refused(path, "member '__tapegrad__.npy' is compressed")


def test_a_huge_stored_manifest_is_refused_by_size_before_it_is_read(tmp_path):
    n = 256 * 2**20
    path = _zip(tmp_path / "big.tg",
                ("__tapegrad__.npy", _npy("|u1", (n,), data=b""), {"hole": n, "crc": 0}))
    assert _refused(path, r"manifest is \d+ bytes, over", count_reads=True) < 2**20


# ---------------------------------------------------------------- .npy headers
@pytest.mark.parametrize("shape", [(2**31,), (2**40,), (2**62, 2**62)])
def test_a_shape_larger_than_the_member_is_refused_before_allocating(tmp_path, shape):
    path = _tapegrad_zip(tmp_path / "shape.tg", TENSOR_A0,
                         ("a0.npy", _npy("<f4", shape, data=bytes(64))))
    _refused(path, rf"declares shape \({shape[0]},.* but holds 64 bytes")


@pytest.mark.parametrize("shape, match", [((-1,), "invalid shape"), ((1.5,), "invalid shape"),
                                          ((1,) * 65, "invalid shape")])
def test_invalid_shapes_are_refused(tmp_path, shape, match):
    path = _tapegrad_zip(tmp_path / "shape.tg", TENSOR_A0,
                         ("a0.npy", _npy("<f4", shape, data=bytes(4))))
    _refused(path, match)


def test_a_huge_declared_header_is_not_read(tmp_path):
    member = b"\x93NUMPY\x02\x00" + (2**32 - 1).to_bytes(4, "little") + bytes(100)
    path = _tapegrad_zip(tmp_path / "hdr.tg", TENSOR_A0, ("a0.npy", member))
    _refused(path, "array 'a0' declares a 4294967295-byte header")


@pytest.mark.parametrize("header", [b"{'descr': '<f4', " + b"(" * 5000, b"1+" * 4000 + b"1",
                                    b"-" * 9000 + b"1", b"{'descr': 'banana', "
                                    b"'fortran_order': False, 'shape': (1,)}"])
def test_garbage_headers_are_refused(tmp_path, header):
    path = _tapegrad_zip(tmp_path / "hdr.tg", TENSOR_A0, ("a0.npy", _npy(header=header)))
    _refused(path, "array 'a0' has an (unreadable header|invalid dtype)")


@pytest.mark.parametrize("descr", ["|O", [("x", "<f4"), ("y", "|O")]])
def test_object_dtypes_are_refused_from_the_header(tmp_path, descr):
    n = 2**20
    member = _npy(descr, (n,), data=b"")
    path = _tapegrad_zip(tmp_path / "obj.tg", {"ndarray": "a0", "id": "a0"},
                         ("a0.npy", member, {"hole": n * np.dtype(descr).itemsize, "crc": 0}))
    assert _refused(path, "dtype object, which can't be loaded without unpickling",
                    count_reads=True) < 2**20


def test_data_that_fails_its_crc_is_refused(tmp_path):
    path = tmp_path / "ok.tg"
    tg.save(tg.ones(100), path)
    data = bytearray(path.read_bytes())
    data[data.index(b"\x00\x00\x80\x3f") + 3] ^= 1      # one bit of one float
    path.write_bytes(bytes(data))
    _refused(path, "array 'a0' is corrupt .*CRC")


# ---------------------------------------------------------------- the zip directory
def test_duplicate_member_names_are_refused(tmp_path):
    path = _tapegrad_zip(tmp_path / "dup.tg", TENSOR_A0,
                         ("a0.npy", _npy()), ("a0.npy", _npy("<f8", (3,))))
    _refused(path, "duplicate member 'a0.npy'")


@pytest.mark.parametrize("name", ["../a0.npy", "dir/a0.npy", "a0.npy\\x", "a0.pkl"])
def test_member_names_that_are_not_plain_are_refused(tmp_path, name):
    path = _tapegrad_zip(tmp_path / "name.tg", TENSOR_A0, ("a0.npy", _npy()), (name, _npy()))
    _refused(path, "is not a plain array name")


def test_members_sharing_bytes_are_refused(tmp_path):
    # a1's whole record sits inside a0's data: reading both reads those bytes twice, and
    # n members nested this way read n**2 / 2 times the file (a quoted-overlap bomb)
    a1 = _npy()
    a1_record = struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, 0, 0, 0, zlib.crc32(a1),
                            len(a1), len(a1), len("a1.npy"), 0) + b"a1.npy" + a1
    a0 = _npy("|u1", (len(a1_record),), data=a1_record)
    manifest = _manifest({"list": [{"ndarray": "a0", "id": "a0"}, {"ndarray": "a1", "id": "a1"}]})
    a0_start = 30 + len("__tapegrad__.npy") + len(manifest)
    a1_start = a0_start + 30 + len("a0.npy") + len(a0) - len(a1_record)
    path = _zip(tmp_path / "overlap.tg", ("__tapegrad__.npy", manifest), ("a0.npy", a0),
                ("a1.npy", a1, {"offset": a1_start}))
    _refused(path, "member 'a0.npy' overlaps")


def test_a_member_larger_than_the_file_is_refused(tmp_path):
    path = _tapegrad_zip(tmp_path / "long.tg", TENSOR_A0, ("a0.npy", _npy()))
    data = bytearray(path.read_bytes())
    entry = data.index(b"PK\x01\x02", data.index(b"PK\x01\x02") + 4)
    struct.pack_into("<2I", data, entry + 20, 2**31, 2**31)
    path.write_bytes(bytes(data))
    _refused(path, "member 'a0.npy' overlaps the next one or the zip directory")


def test_encrypted_members_are_refused(tmp_path):
    path = _tapegrad_zip(tmp_path / "enc.tg", TENSOR_A0, ("a0.npy", _npy(), {"flags": 1}))
    _refused(path, "member 'a0.npy' is encrypted")


def test_a_zip_of_100000_members_is_refused_from_its_end_record(tmp_path):
    path = tmp_path / "members.tg"
    with zipfile.ZipFile(path, "w") as z:    # more than 65535 members: a zip64 end record
        z.writestr("__tapegrad__.npy", _manifest(None))
        for i in range(100_000):
            z.writestr(f"a{i}.npy", b"")
    _refused(path, "100001 members, over the 20000 arrays limit")


def test_a_zip_of_100000_members_that_declares_two_is_refused_by_its_directory_size(tmp_path):
    path = _zip(tmp_path / "members.tg", ("__tapegrad__.npy", _manifest(None)),
                *[(f"a{i}.npy", b"") for i in range(100_000)], declare=2)
    _refused(path, "the zip directory declares [0-9]+ bytes, over the [0-9]+ limit")


def test_too_many_members_are_refused(tmp_path):
    path = _tapegrad_zip(tmp_path / "many.tg", None,
                         *[(f"a{i}.npy", _npy()) for i in range(3)])
    _refused(path, "4 members, over the 2 arrays limit", setup=("max_arrays", 2))


# ---------------------------------------------------------------- the manifest
def test_a_manifest_nested_100000_deep_is_refused_before_parsing(tmp_path):
    deep = '{"list": [' * 100_000 + "null" + "]}" * 100_000
    raw = ('{"format": "tapegrad.save", "version": 1, "tree": ' + deep + "}").encode()
    path = _zip(tmp_path / "deep.tg", ("__tapegrad__.npy", _raw_manifest(raw)))
    _refused(path, "manifest nests 200001 levels deep, over the 200 limit")


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path):
    tree = {"list": ["[" * 1000, '\\"{' * 1000, {"list": []}]}
    path = _zip(tmp_path / "str.tg", ("__tapegrad__.npy", _manifest(tree)))
    assert _load_bounded(path)[:2] == ["ok", ""]


@pytest.mark.parametrize("raw, match", [
    (b'{"format": "tapegrad.save", "version": "1", "tree": null}', "unknown format"),
    (b'{"format": "tapegrad.save", "version": 1, "tree": {"ref": []}}', "dangling reference"),
    (b'{"format": "tapegrad.save", "version": 1, "tree": {"int": "' + b"9" * 100_000 + b'"}}',
     "bad int entry"),
])
def test_manifests_of_the_wrong_shape_are_refused(tmp_path, raw, match):
    path = _zip(tmp_path / "m.tg", ("__tapegrad__.npy", _raw_manifest(raw)))
    _refused(path, match)


@pytest.mark.skipif(not hasattr(sys, "set_int_max_str_digits"), reason="Python < 3.11")
def test_a_huge_json_integer_is_refused_even_with_the_int_limit_off(tmp_path):
    raw = b'{"format": "tapegrad.save", "version": ' + b"7" * 4_000_000 + b', "tree": null}'
    path = _zip(tmp_path / "int.tg", ("__tapegrad__.npy", _raw_manifest(raw)))
    _refused(path, "integer literal of 4000000 digits", setup=("int_max_str_digits", 0))


def test_a_manifest_that_is_not_a_byte_string_is_refused_from_its_header(tmp_path):
    n = 2**20
    path = _zip(tmp_path / "m.tg", ("__tapegrad__.npy", _npy("<f4", (n,), data=b""),
                                     {"hole": 4 * n, "crc": 0}))
    assert _refused(path, "manifest is not a byte string", count_reads=True) < 2**20


def test_an_array_used_twice_is_refused(tmp_path):
    # two nodes reading one member would copy it twice: shared arrays are refs
    tree = {"list": [TENSOR_A0, {"tensor": "a0", "device": "cpu", "id": "b"}]}
    path = _tapegrad_zip(tmp_path / "twice.tg", tree, ("a0.npy", _npy()))
    _refused(path, "array 'a0' is used twice")


@pytest.mark.parametrize("node, member, match", [
    ({"tensor": "a0", "device": "banana", "id": "a0"}, _npy(), "device: expected"),
    (TENSOR_A0, _npy("<u2", (2,)), "unsupported NumPy dtype"),
    ({**TENSOR_A0, "requires_grad": True}, _npy("<i8", (2,)), "floating point"),
    ({"tensor": "a0", "id": []}, _npy(), "bad or repeated id"),
])
def test_array_nodes_that_make_no_tensor_are_refused(tmp_path, node, member, match):
    path = _tapegrad_zip(tmp_path / "node.tg", node, ("a0.npy", member))
    _refused(path, match)
