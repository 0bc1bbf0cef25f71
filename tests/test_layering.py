"""The layering of DESIGN.md, checked on the source: arrows point down only.

``ops``, ``fusion``, ``autodiff``, ``nn`` -> ``tensor`` -> ``tape`` -> ``ops_registry``
-> ``devices`` -> leaf helpers. Imports are read with ``ast`` (including imports
inside functions), and string-based lazy imports (``__import__("cupy")``,
``importlib.import_module("numba")``) count as imports too.
"""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "tapegrad")

UPPER = ("tapegrad.ops", "tapegrad.fusion", "tapegrad.nn", "tapegrad.autodiff")
# module prefix -> module prefixes it must not import (DESIGN.md, "Forbidden, and tested",
# plus devices, the bottom layer, importing the layers above it)
FORBIDDEN = {
    "tapegrad.tape": UPPER + ("tapegrad.tensor",),
    "tapegrad.tensor": UPPER,
    "tapegrad.ops_registry": UPPER + ("tapegrad.tensor", "tapegrad.tape"),
    "tapegrad.devices": UPPER + ("tapegrad.tensor", "tapegrad.tape", "tapegrad.ops_registry"),
}
GPU_LIBS = ("cupy", "cupyx", "numba")


def _modules():
    out = []
    for dirpath, _, files in os.walk(PKG):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                is_pkg = f == "__init__.py"
                name = rel[: -len(".__init__")] if is_pkg else rel
                out.append((name, path, is_pkg))
    return sorted(out)


MODULES = _modules()


def _resolve(module, is_pkg, level, target):
    if level == 0:
        return target
    parts = module.split(".")
    base = parts if is_pkg else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _string_import(node):
    """``__import__("x")`` / ``importlib.import_module("x")`` -> "x"."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    arg = node.args[0]
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return None
    fn = node.func
    name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
    if name in ("__import__", "import_module"):
        return arg.value
    return None


def imports_of(module, path, is_pkg):
    """Every module name imported by the file, with line numbers."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                found.append((a.name, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_pkg, node.level, node.module)
            if base != "tapegrad":  # `from .. import devices` runs no extra code
                found.append((base, node.lineno))
            for a in node.names:  # `from . import ops` imports the submodule
                if a.name != "*":
                    found.append((f"{base}.{a.name}", node.lineno))
        else:
            s = _string_import(node)
            if s is not None:
                found.append((s, node.lineno))
    return found


def _under(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("module,path,is_pkg", MODULES, ids=[m[0] for m in MODULES])
def test_no_forbidden_arrows(module, path, is_pkg):
    rules = [bad for layer, bad in FORBIDDEN.items() if _under(module, layer)]
    bad = []
    for name, line in imports_of(module, path, is_pkg):
        for forbidden in rules:
            for f in forbidden:
                # `import tapegrad` from a low layer pulls in everything above it
                if _under(name, f) or name == "tapegrad":
                    bad.append(f"{os.path.relpath(path, ROOT)}:{line} imports {name}")
    assert not bad, "forbidden imports (DESIGN.md layering):\n" + "\n".join(sorted(set(bad)))


@pytest.mark.parametrize("module,path,is_pkg", MODULES, ids=[m[0] for m in MODULES])
def test_gpu_libraries_only_under_devices(module, path, is_pkg):
    if _under(module, "tapegrad.devices"):
        return
    bad = [f"{os.path.relpath(path, ROOT)}:{line} imports {name}"
           for name, line in imports_of(module, path, is_pkg)
           if any(_under(name, lib) for lib in GPU_LIBS)]
    assert not bad, ("only tapegrad/devices/ may import CuPy or Numba (ask the device "
                     "for its namespace or kernels instead):\n" + "\n".join(bad))


def _op_names():
    import tapegrad as tg
    names = {op.name for op in tg.ops_registry.list_ops()}
    return names | {"add", "mul", "sub", "div", "exp", "log", "sum", "matmul", "relu",
                    "reshape", "getitem", "where", "neg", "pow", "mean"}


def test_walker_knows_no_op_by_name():
    path = os.path.join(PKG, "tape.py")
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    names = _op_names()
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            hits.append(f"tape.py:{node.lineno} {node.value!r}")
    assert not hits, "the walker names ops:\n" + "\n".join(hits)


def test_layering_checker_catches_violations(tmp_path):
    """The checker itself works: a planted forbidden import is found."""
    src = tmp_path / "tape.py"
    src.write_text("from .ops import add\nimport importlib\n"
                   "def f():\n    from . import tensor\n    return __import__('cupy')\n")
    found = {n for n, _ in imports_of("tapegrad.tape", str(src), False)}
    assert {"tapegrad.ops", "tapegrad.ops.add", "tapegrad.tensor", "cupy"} <= found
