"""The layering, checked on the source: imports point down only, and the upper layers
use public names.

Every module of the package belongs to one layer of ``LAYERS`` (bottom to top), by the
longest matching module-name prefix, so a new file under a listed package is covered
at once; a module that matches no prefix fails ``test_every_module_has_a_layer``. A
module may import modules of its own layer and of the layers below it, nothing above.
Imports are read with ``ast``: imports inside functions count, and so do string
imports (``__import__("cupy")``, ``importlib.import_module("numba")``). ``import
tapegrad`` and ``from tapegrad import name`` (a name that is not a submodule) import the
package's ``__init__``, the top of the library: inside the library that is the
half-built package, so only the example programs may do it.

Modules from the ``autodiff`` layer up use public names only:
- they read none of Tensor's private members (``._data``, ``._version``, ``._node``,
  ``._base``, ``._tapes``, and whatever else ``Tensor`` declares with one leading
  underscore) on anything but ``self``/``cls``: ``tapegrad.tensor.buffer(t)`` and
  ``mark_written(t)``, ``t.data``, ``t.grad_fn`` and public ops are the way in;
- they import no name starting with ``_`` (nor a private module) from a tapegrad
  package other than their own, and reach none through a module
  (``tg.autodiff._state``). ``ALLOWED_PRIVATE`` lists the exceptions, each with its
  reason.

Also: only ``devices/`` imports CuPy or Numba, and the walker names no op.

A violation that is known and owned by someone else is listed in ``KNOWN`` (the test
of that module is an ``xfail(strict=True)`` naming it): when it is fixed the test
XPASSes, which fails the run, and the entry must go.
"""
import ast
import functools
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "tapegrad")

# bottom to top: (layer, module-name prefixes). "tapegrad" itself (the package's
# __init__) matches only itself, never as a prefix.
LAYERS = (
    ("leaf", ("tapegrad.dtypes", "tapegrad._util")),
    ("devices", ("tapegrad.devices",)),
    ("ops_registry", ("tapegrad.ops_registry",)),
    # thread-local recording state, grad mode and Nodes
    ("record", ("tapegrad.tape", "tapegrad.grad_mode")),
    ("tensor", ("tapegrad.tensor",)),
    # the reverse walk wraps gradients as Tensors when it records (create_graph)
    ("walker", ("tapegrad.walker",)),
    ("dispatch", ("tapegrad.dispatch",)),
    # expression ops and their code generation: ops declare activations with them
    ("fusion", ("tapegrad.fusion",)),
    ("ops", ("tapegrad.ops",)),
    # the user-facing recording API over the core (backward, grad, Tape, checkpoint,
    # custom ops, transforms, the @fuse tracer, which traces calls of ops) and the thin
    # public namespaces over ops and devices (tg.linalg, tg.cuda)
    ("autodiff", ("tapegrad.autodiff", "tapegrad.autograd", "tapegrad.legacy",
                  "tapegrad.accelerator", "tapegrad.backends", "tapegrad.custom",
                  "tapegrad.functional", "tapegrad.forward_ad",
                  "tapegrad.vmap",
                  "tapegrad.tracing", "tapegrad.linalg", "tapegrad.cuda",
                  "tapegrad.utilities")),
    ("library", ("tapegrad.nn", "tapegrad.optim", "tapegrad.data", "tapegrad.serialization",
                 "tapegrad.distributions", "tapegrad.utils", "tapegrad.amp",
                 "tapegrad.distributed",
                 "tapegrad.testing", "tapegrad.viz", "tapegrad.profiler", "tapegrad.interop",
                 "tapegrad.multiprocessing")),
    # tg.compile (capture and replay of whole programs) observes the core as the tracer
    # does, and hears the library's events (optimizer updates, zero_grad) through
    # dispatch.notify: nothing below imports it
    ("compiler", ("tapegrad.compiler",)),
    # the ONNX export, built on the compiler's capture
    ("export", ("tapegrad.onnx",)),
    # what every op supports, probed through the compiler and the export (the op
    # reference of the documentation)
    ("capabilities", ("tapegrad.testing.capabilities",)),
    ("package", ("tapegrad",)),
    # programs shipped with the package, written as a user writes them (import tapegrad
    # as tg); nothing in the library imports them. ``python -m tapegrad.ops_registry``
    # is one: it prints the op table that tapegrad.testing.capabilities builds
    ("examples", ("tapegrad.examples", "tapegrad.ops_registry.__main__")),
)
LAYER_NAMES = [name for name, _ in LAYERS]
# from this layer up: public names only. The autodiff layer is the recording API
# itself (a Tape marks the tensors it watches, backward reads what a Tensor
# records), so it may use the core's fields, as the layers below it do.
PUBLIC_FROM = LAYER_NAMES.index("library")
# layers above that which record like the autodiff layer: the compiler's capture reads
# the buffers the kernels see, as the recording API does
CORE_FIELDS = {"compiler"}

# Tensor members that count as private even if tensor.py stops declaring them
TENSOR_PRIVATE_BASE = {"_data", "_version", "_node", "_base", "_tapes"}

# (importing module, private name) -> why it is allowed for now
ALLOWED_PRIVATE = {}

# test -> {module: its known violation, which the module's owner is fixing}: the module's
# case is xfail(strict=True), so the entry must go once it is fixed (see the docstring)
KNOWN = {}

GPU_LIBS = ("cupy", "cupyx", "numba")


# ---------------------------------------------------------------- reading the source
def _modules(pkg=PKG, root=ROOT):
    out = []
    for dirpath, dirs, files in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                is_pkg = f == "__init__.py"
                name = rel[: -len(".__init__")] if is_pkg else rel
                out.append((name, path, is_pkg))
    return sorted(out)


MODULES = _modules()
MODULE_NAMES = {m for m, _, _ in MODULES}


def _under(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def layer_of(name):
    """The index in LAYERS of module (or imported name) ``name``; None if unlayered."""
    if name == "tapegrad":
        return LAYER_NAMES.index("package")
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if p != "tapegrad" and _under(name, p) and len(p) > best_len:
                best, best_len = i, len(p)
    return best


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


@functools.lru_cache(maxsize=None)  # each file is read by several checks: parsed once
def _parse(path):
    with open(path, encoding="utf-8") as fh:
        return ast.parse(fh.read(), path)


def _from_targets(module, is_pkg, node, modules):
    """``from BASE import a, b``: what each alias refers to, as a dotted name: the
    submodule ``BASE.a`` when there is one, else the name ``BASE.a`` defined by BASE
    (its layer is BASE's). Yields (alias, dotted name, the module that runs)."""
    base = _resolve(module, is_pkg, node.level, node.module)
    for a in node.names:
        if a.name == "*":
            yield a, base, base
        elif f"{base}.{a.name}" in modules:
            yield a, f"{base}.{a.name}", f"{base}.{a.name}"
        else:
            yield a, f"{base}.{a.name}", base


def imports_of(module, path, is_pkg, modules=None):
    """Every module a file imports (the module whose code the import runs, as
    ``from tapegrad import x`` runs tapegrad's ``__init__`` unless x is a submodule),
    with line numbers."""
    if modules is None:  # the package's own files: read once for the checks that need them
        return _package_imports(module, path, is_pkg)
    return _imports(module, path, is_pkg, modules)


@functools.lru_cache(maxsize=None)
def _package_imports(module, path, is_pkg):
    return tuple(_imports(module, path, is_pkg, MODULE_NAMES))


def _imports(module, path, is_pkg, modules):
    found = []
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            for a in node.names:
                found.append((a.name, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            for _, _, runs in _from_targets(module, is_pkg, node, modules):
                found.append((runs, node.lineno))
        else:
            s = _string_import(node)
            if s is not None:
                found.append((s, node.lineno))
    return found


@functools.lru_cache(maxsize=None)
def _tensor_private():
    """Tensor's single-underscore members, as tensor.py declares them."""
    names = set(TENSOR_PRIVATE_BASE)
    for node in ast.walk(_parse(os.path.join(PKG, "tensor.py"))):
        if isinstance(node, ast.ClassDef) and node.name == "Tensor":
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    for t in targets:
                        if isinstance(t, ast.Name):
                            names.add(t.id)
                            listed = isinstance(item.value, (ast.Tuple, ast.List))
                            if t.id == "__slots__" and listed:
                                names.update(e.value for e in item.value.elts
                                             if isinstance(e, ast.Constant))
    return frozenset(n for n in names if n.startswith("_") and not n.startswith("__"))


def _private(part):
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _package_of(name):
    """tapegrad.nn.modules.linear -> tapegrad.nn; tapegrad.functional -> tapegrad.functional."""
    return ".".join(name.split(".")[:2])


def private_uses(module, path, is_pkg, modules=None, tensor_private=None, allowed=None):
    """(line, what) for every private reach-in of a file (see the module docstring)."""
    modules = MODULE_NAMES if modules is None else modules
    tensor_private = _tensor_private() if tensor_private is None else tensor_private
    tree = _parse(path)
    own = _package_of(module)

    def foreign_private(dotted):
        """The dotted name (under tapegrad) names something private of another package."""
        parts = dotted.split(".")
        return (parts[0] == "tapegrad" and _package_of(dotted) != own
                and any(_private(p) for p in parts[1:]))

    found = []
    aliases = {}  # local name -> the tapegrad module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if foreign_private(a.name):
                    found.append((node.lineno, f"imports {a.name}"))
                if _under(a.name, "tapegrad"):
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "tapegrad"
        elif isinstance(node, ast.ImportFrom):
            for a, dotted, _ in _from_targets(module, is_pkg, node, modules):
                if _under(dotted, "tapegrad") and foreign_private(dotted):
                    found.append((node.lineno, f"imports {dotted}"))
                if dotted in modules:
                    aliases[a.asname or a.name] = dotted
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if node.attr in tensor_private and not (isinstance(base, ast.Name)
                                                and base.id in ("self", "cls")):
            found.append((node.lineno, f"reads .{node.attr}"))
            continue
        chain = [node.attr]
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id in aliases and _private(node.attr):
            dotted = ".".join([aliases[base.id]] + chain[::-1])
            if foreign_private(dotted):
                found.append((node.lineno, f"reaches {dotted}"))
    allowed = ALLOWED_PRIVATE if allowed is None else allowed
    allowed = {name for (mod, name) in allowed if mod == module}
    return sorted({(line, what) for line, what in found
                   if what.split(" ", 1)[1] not in allowed})


# ---------------------------------------------------------------- the checks
def _params(test):
    known = KNOWN.get(test, {})
    out = []
    for m in MODULES:
        marks = ()
        if m[0] in known:
            marks = pytest.mark.xfail(strict=True, reason=f"{m[0]}: {known[m[0]]}")
        out.append(pytest.param(*m, id=m[0], marks=marks))
    return out


def test_every_module_has_a_layer():
    unlayered = [os.path.relpath(p, ROOT) for m, p, _ in MODULES if layer_of(m) is None]
    assert not unlayered, ("modules in no layer of tests/test_layering.py LAYERS (add "
                           "their prefix to the layer they belong to):\n" + "\n".join(unlayered))


def test_layers_are_disjoint():
    prefixes = [p for _, ps in LAYERS for p in ps]
    assert len(prefixes) == len(set(prefixes))


def layer_violations(module, path, is_pkg, modules=None):
    mine = layer_of(module)
    bad = []
    for name, line in imports_of(module, path, is_pkg, modules):
        if not _under(name, "tapegrad"):
            continue
        theirs = layer_of(name)
        if theirs is None:  # a name no layer lists: defined by the package __init__
            theirs = LAYER_NAMES.index("package")
        if theirs > mine:
            bad.append(f"{os.path.relpath(path, ROOT)}:{line} ({LAYER_NAMES[mine]}) "
                       f"imports {name} ({LAYER_NAMES[theirs]})")
    return sorted(set(bad))


@pytest.mark.parametrize("module,path,is_pkg", _params("test_layer_imports"))
def test_layer_imports(module, path, is_pkg):
    if layer_of(module) is None:
        pytest.skip("in no layer (test_every_module_has_a_layer fails)")
    bad = layer_violations(module, path, is_pkg)
    assert not bad, ("imports of a higher layer (bottom to top: " + " -> ".join(LAYER_NAMES)
                     + "):\n" + "\n".join(bad))


@pytest.mark.parametrize("module,path,is_pkg", _params("test_public_names_only"))
def test_public_names_only(module, path, is_pkg):
    layer = layer_of(module)
    if layer is None or layer < PUBLIC_FROM or LAYER_NAMES[layer] in CORE_FIELDS:
        return
    bad = [f"{os.path.relpath(path, ROOT)}:{line} {what}"
           for line, what in private_uses(module, path, is_pkg)]
    assert not bad, ("private reach-ins above the ops layer (use tapegrad.tensor.buffer/"
                     "mark_written, public ops and methods):\n" + "\n".join(bad))


@pytest.mark.parametrize("module,path,is_pkg", MODULES, ids=[m[0] for m in MODULES])
def test_gpu_libraries_only_under_devices(module, path, is_pkg):
    if _under(module, "tapegrad.devices"):
        return
    bad = [f"{os.path.relpath(path, ROOT)}:{line} imports {name}"
           for name, line in imports_of(module, path, is_pkg)
           if any(_under(name, lib) for lib in GPU_LIBS)]
    assert not bad, ("only tapegrad/devices/ may import CuPy or Numba (ask the device "
                     "for its namespace or kernels instead):\n" + "\n".join(bad))


def test_known_violations_name_real_modules():
    stale = [m for known in KNOWN.values() for m in known if m not in MODULE_NAMES]
    stale += [m for m, _ in ALLOWED_PRIVATE if m not in MODULE_NAMES]
    assert not stale, f"KNOWN/ALLOWED_PRIVATE entries for modules that do not exist: {stale}"


def test_allowed_private_entries_are_used():
    paths = {m: (m, p, is_pkg) for m, p, is_pkg in MODULES}
    unused = [(mod, name) for mod, name in ALLOWED_PRIVATE
              if mod in paths and not any(what.split(" ", 1)[1] == name for _, what
                                          in private_uses(*paths[mod], allowed={}))]
    assert not unused, f"ALLOWED_PRIVATE entries nothing needs any more: {unused}"


def _op_names():
    import tapegrad as tg
    names = {op.name for op in tg.ops_registry.list_ops()}
    return names | {"add", "mul", "sub", "div", "exp", "log", "sum", "matmul", "relu",
                    "reshape", "getitem", "where", "neg", "pow", "mean"}


@pytest.mark.parametrize("fname", ["tape.py", "walker.py"])
def test_walker_knows_no_op_by_name(fname):
    path = os.path.join(PKG, fname)
    if not os.path.exists(path):
        pytest.skip(f"no tapegrad/{fname}")
    names = _op_names()
    hits = [f"{fname}:{node.lineno} {node.value!r}" for node in ast.walk(_parse(path))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in names]
    assert not hits, "the walker names ops:\n" + "\n".join(hits)


# ---------------------------------------------------------------- the checker itself
def _plant(tmp_path, files):
    """A fake package ``tapegrad`` under tmp_path with the given {relpath: source}."""
    for rel, src in files.items():
        p = tmp_path / "tapegrad" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(src)
    mods = _modules(str(tmp_path / "tapegrad"), str(tmp_path))
    return {m: (m, p, is_pkg) for m, p, is_pkg in mods}, {m for m, _, _ in mods}


def test_checker_finds_imports(tmp_path):
    src = ("from .ops import add\nimport importlib\n"
           "def f():\n    from . import tensor\n    return __import__('cupy')\n")
    mods, names = _plant(tmp_path, {"__init__.py": "", "tape.py": src, "tensor.py": "",
                                    "ops/__init__.py": ""})
    found = {n for n, _ in imports_of(*mods["tapegrad.tape"], names)}
    assert {"tapegrad.ops", "tapegrad.tensor", "cupy"} <= found


def test_checker_finds_upward_imports(tmp_path):
    mods, names = _plant(tmp_path, {
        "__init__.py": "", "tensor.py": "", "ops/__init__.py": "",
        "ops/nn/__init__.py": "", "nn/__init__.py": "", "nn/modules/__init__.py": "",
        "ops/nn/conv.py": "from ...nn import Module\n",                  # ops -> library
        "tape.py": "def f():\n    from .tensor import Tensor\n",         # record -> tensor
        "nn/modules/linear.py": "import tapegrad as tg\nfrom tapegrad import no_grad\n"
                                "from ... import ops\n",                 # -> package
        "optim/sgd.py": "from ..ops import relu\nfrom ..tensor import buffer\n",  # fine
    })
    def what(mod):
        return [b.split(" ", 1)[1] for b in layer_violations(*mods[mod], names)]
    assert what("tapegrad.ops.nn.conv") == ["(ops) imports tapegrad.nn (library)"]
    assert what("tapegrad.tape") == ["(record) imports tapegrad.tensor (tensor)"]
    assert what("tapegrad.nn.modules.linear") == ["(library) imports tapegrad (package)"] * 2
    assert what("tapegrad.optim.sgd") == []
    assert layer_of("tapegrad.ops.nn.conv") == LAYER_NAMES.index("ops")
    assert layer_of("tapegrad.devices.cpu_kernels.pool") == LAYER_NAMES.index("devices")
    assert layer_of("tapegrad.walker") == LAYER_NAMES.index("walker")
    assert layer_of("tapegrad.newthing") is None
    assert layer_of("tapegrad") == LAYER_NAMES.index("package")


def test_checker_finds_private_reach_ins(tmp_path):
    mods, names = _plant(tmp_path, {
        "__init__.py": "", "autodiff.py": "", "tape.py": "", "nn/__init__.py": "",
        "nn/module.py": "",
        "nn/bad.py": ("import tapegrad as tg\nfrom .. import tape as _t\n"
                      "from ..autodiff import _state\n"
                      "def f(p, q):\n"
                      "    p._data[...] = 0\n"
                      "    q.grad._version += 1\n"
                      "    return tg.autodiff._state.tapes, _t._hooks, p._node\n"),
        "nn/good.py": ("from .module import _Handle\nfrom ..tensor import buffer\n"
                       "class P:\n    def f(self):\n        return self._data, self._node\n"
                       "def g(p):\n    return buffer(p), p.grad_fn, p._not_a_tensor_field\n"),
    })
    priv = {"_data", "_version", "_node"}
    bad = private_uses(*mods["tapegrad.nn.bad"], names, priv)
    assert [w for _, w in bad] == [
        "imports tapegrad.autodiff._state", "reads ._data", "reads ._version",
        "reaches tapegrad.autodiff._state", "reaches tapegrad.tape._hooks", "reads ._node"]
    assert private_uses(*mods["tapegrad.nn.good"], names, priv) == []


def test_tensor_private_members_are_read_from_tensor_py():
    assert {"_data", "_version", "_node", "_idx", "_host"} <= _tensor_private()
    assert "__init__" not in _tensor_private()
