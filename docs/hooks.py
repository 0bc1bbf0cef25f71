"""MkDocs hook: the op reference and the capability matrix, generated from the
registry at build time (``tapegrad.testing.capabilities``, the table that
``python -m tapegrad.ops_registry`` prints); nothing generated is committed."""
import os
import sys

from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REFERENCE = """# Op reference

Every op of the registry (`tapegrad.ops_registry.list_ops()`), one row each, with what
it supports; generated from the registry when this site was built. The same table:
`python -m tapegrad.ops_registry` (`--markdown`, `--summary`, `--no-compile`, or op
names). The totals are on the [capability matrix](capabilities.md).

| column | meaning |
| --- | --- |
| kind | `basic`, `workspace` (takes scratch memory), `dynamic` (output size depends on the data), `view` (aliases its input) |
| dtypes | input dtypes its samples exercise (the registry tests run each in float64, and in float32 where an input is floating) |
| grad | gradient orders the registry tests check against finite differences: `1`, `2` (gradients of gradients; adjoints are written with ops and record like any call, so higher orders take the same path), `0` (differentiable, no gradient sample), `-` (not differentiable) |
| jvp | forward mode (`tg.forward_ad`, `jvp`, `jacfwd`): `rule` (declared), `derived` (an elementwise op's, from its vjp), `composite` (through the ops it calls), `none`, `-` (not differentiable) |
| vmap | batching rule (`tg.vmap`): `rule`, `derived` (elementwise, broadcasting), `composite`, `loop` (runs example by example, with a warning) |
| out | the kernel writes into the caller's memory (`out=`) |
| compile | `replays`: `tg.compile` replays a program of it (its first sample, forward and backward); `eager`: such a program runs eagerly |
| onnx | `tg.onnx.support()`: `lowered` (its ONNX lowering), `decomposed` (exported as the ops it is made of), `no` (hover for the reason; the [capability matrix](capabilities.md) lists them) |
| export | `tapegrad.interop.torch_ops()` / `jax_ops()` export it (dynamic ops: PyTorch only) |
| declared | the line of the repository that declares it (`OpDef.declared_at`) |

"""

CAPABILITIES = """# Capability matrix

How many of the registry's ops support each feature: the columns of the
[op reference](reference.md) summed (generated when this site was built;
`python -m tapegrad.ops_registry --summary` prints it).

"""


def _table():
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from tapegrad.testing import capabilities
    return capabilities, capabilities.rows()


def on_files(files, config):
    cap, table = _table()
    for path, text in (("ops/reference.md", REFERENCE + cap.markdown_table(table)),
                       ("ops/capabilities.md", CAPABILITIES + cap.markdown_summary(table))):
        files.append(File.generated(config, path, content=text))
    return files
