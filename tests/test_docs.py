"""The documentation site (mkdocs.yml, docs/): its code runs, its navigation is whole,
and the API it documents has docstrings.

- Every ```python block of docs/**/*.md runs: a page's blocks in order, in one fresh
  namespace (a page reads as one session). Blocks that cannot run here (scripts for
  ``mpiexec``) use another fence (```py, ```bash, ```text): shown, not run.
- Every page of docs/ is in mkdocs.yml's nav (except the generated op pages, which the
  hook adds), and every page the nav names exists (or is generated).
- Every public function and class has a docstring: public means listed in the
  ``__all__`` of a module the API reference documents (``::: module`` in docs/api/),
  or named there itself (``::: module.name``).
"""
import importlib
import inspect
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
# pages the MkDocs hook (docs/hooks.py) generates at build time
GENERATED = {"ops/reference.md", "ops/capabilities.md"}

FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
DIRECTIVE = re.compile(r"^:::\s+([\w.]+)", re.M)


def _pages():
    out = []
    for dirpath, _, files in os.walk(DOCS):
        for f in sorted(files):
            if f.endswith(".md"):
                out.append(os.path.relpath(os.path.join(dirpath, f), DOCS).replace(os.sep, "/"))
    return sorted(out)


def _read(page):
    with open(os.path.join(DOCS, page), encoding="utf-8") as fh:
        return fh.read()


def python_blocks(text):
    """The ```python blocks of a Markdown text, in order."""
    return FENCE.findall(text)


PAGES = _pages()
CODE_PAGES = [p for p in PAGES if python_blocks(_read(p))]


def test_block_extraction():
    text = ("intro\n```python\na = 1\n```\n\n```py\nnot run\n```\n"
            "```bash\nls\n```\n```python\nb = a + 1\n```\n")
    assert python_blocks(text) == ["a = 1\n", "b = a + 1\n"]


def test_the_tutorials_have_code():
    for page in ("getting-started.md", "tutorials/training.md", "tutorials/transforms.md",
                 "tutorials/compile.md", "tutorials/interop.md", "tutorials/onnx.md"):
        assert page in CODE_PAGES, f"docs/{page} has no ```python block"


@pytest.mark.parametrize("page", CODE_PAGES)
def test_page_code_runs(page):
    namespace = {"__name__": f"docs.{page}"}
    for k, block in enumerate(python_blocks(_read(page))):
        code = compile(block, f"docs/{page} (python block {k + 1})", "exec")
        exec(code, namespace)  # a failure's traceback names the page and the block


def _nav_pages(node):
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for v in node.values() for p in _nav_pages(v)]
    return []


def _nav():
    yaml = pytest.importorskip("yaml")  # PyYAML comes with MkDocs (the docs extra)

    class Loader(yaml.SafeLoader):
        pass
    # mkdocs.yml may use tags (!!python/name) MkDocs resolves; the nav needs none
    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as fh:
        return _nav_pages(yaml.load(fh, Loader=Loader)["nav"])


def test_nav_is_whole():
    nav = _nav()
    missing = [p for p in nav if p not in PAGES and p not in GENERATED]
    assert not missing, f"mkdocs.yml's nav names pages that do not exist: {missing}"
    absent = [p for p in PAGES if p not in nav]
    assert not absent, f"pages of docs/ not in mkdocs.yml's nav: {absent}"
    assert "architecture.md" in nav


# ---------------------------------------------------------------- docstrings
def api_targets():
    """The dotted names after ``:::`` in docs/api/*.md."""
    out = []
    for page in PAGES:
        if page.startswith("api/"):
            out += DIRECTIVE.findall(_read(page))
    return out


def _resolve(dotted):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(dotted)


def _own_doc(obj):
    """The docstring written for ``obj`` itself (a class's, not its base's)."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__")
    else:
        doc = getattr(obj, "__doc__", None)
    return (doc or "").strip()


def _documentable(obj):
    return inspect.isclass(obj) or inspect.isroutine(obj) or (
        callable(obj) and not inspect.ismodule(obj) and hasattr(obj, "__wrapped__"))


def public_objects():
    """(public name, object) for each module and object the API reference documents."""
    out = []
    for dotted in api_targets():
        obj = _resolve(dotted)
        if inspect.ismodule(obj):
            for name in getattr(obj, "__all__", ()):
                member = getattr(obj, name)
                if _documentable(member):
                    out.append((f"{dotted}.{name}", member))
        else:
            out.append((dotted, obj))
    return out


def test_api_reference_documents_the_public_modules():
    targets = set(api_targets())
    for mod in ("tapegrad.nn", "tapegrad.nn.functional", "tapegrad.optim",
                "tapegrad.functional", "tapegrad.linalg", "tapegrad.distributed",
                "tapegrad.onnx", "tapegrad.interop", "tapegrad.testing", "tapegrad.ops",
                "tapegrad.ops_registry", "tapegrad.nn.init", "tapegrad.optim.lr_scheduler",
                "tapegrad.autograd", "tapegrad.Tensor", "tapegrad.grad",
                "tapegrad.compile", "tapegrad.vmap"):
        assert mod in targets, f"docs/api/ has no ::: {mod}"


def test_public_api_has_docstrings():
    missing = sorted({name for name, obj in public_objects() if not _own_doc(obj)})
    assert not missing, ("public functions and classes without a docstring (one line "
                         "saying what it does; where it mirrors PyTorch, say so):\n"
                         + "\n".join(missing))


def test_docstring_check_sees_a_missing_docstring():
    def documented():
        """Does something."""

    def bare():
        pass

    class Base:
        """A base."""

    class Child(Base):
        pass

    assert _own_doc(documented) and not _own_doc(bare)
    assert not _own_doc(Child)  # a base's docstring does not count for the subclass
