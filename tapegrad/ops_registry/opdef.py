"""The OpDef: one declaration per op.

Contract
--------
An ``OpDef`` holds everything about one operator:

``name``
    public name (``"add"``, ``"conv2d"``); unique in the registry.
``kind``
    ``"basic"`` (output shapes follow from input shapes), ``"workspace"`` (also
    declares scratch bytes that the caller hands in), ``"dynamic"`` (output shape
    depends on the data: the kernel is handed an allocator), ``"view"`` (the output
    aliases the first input; nothing is computed).
``args``
    names of the tensor inputs, the public argument names (``("x", "other")``).
``optional``
    the inputs that may be ``None`` (``("bias",)``); any other ``None`` input is
    refused by dispatch with a TypeError naming the argument.
``infer_first``
    dispatch validates a call with ``infer`` before the kernel (True, the rule), so
    kernels need not re-check. False only for a kernel that is NumPy's own indexing,
    which checks itself and is memory-safe (getitem, index, masked_index; their shape
    rule probes the index at up to the kernel's cost): ``infer`` then explains a
    failure.
``kernel(*arrays, **attrs)``
    computes on raw NumPy/CuPy arrays and returns an array (or a tuple for
    ``nout > 1``). Workspace kernels also take ``workspace=``; dynamic kernels take
    ``alloc=`` (``alloc(shape, dtype) -> array``); both may take ``out=``.
``infer(*specs, **attrs)``
    shapes and dtypes from ``TensorSpec``s alone; validates the attrs and raises
    the op's clear error. Dynamic ops give ``None`` for data-dependent sizes.
``workspace(*specs, **attrs)``
    scratch bytes (workspace kind only).
``vjp(ctx, g)``
    returns one gradient (or ``None``) per input. ``ctx.inputs`` holds the saved
    inputs (others ``None``), ``ctx.out`` the output if saved, ``ctx.attrs``,
    ``ctx.shapes`` the input shapes, ``ctx.needs_input_grad``, and ``ctx.m``, the
    namespace to compute with: ``tapegrad.ops``. The walker runs the vjp on raw
    arrays when nothing records (fast) and on Tensors when a higher-order gradient
    is wanted, so a vjp written with ``m.*`` and operators differentiates again.
    For several outputs ``g`` is a tuple with ``None`` for outputs without gradient.
``saves``
    which of ``args`` and ``"out"`` the vjp reads, so that exactly those are kept: a
    tuple (what every input's gradient reads), or a dict per input, ``{input: tuple}``
    (``mul``: ``{"x": ("other",), "other": ("x",)}``; an input not named reads
    nothing), of which a call keeps only what the gradients of its inputs that
    require grad read (``x * 2`` then saves nothing). The vjp is handed ``None`` for
    a value not kept, and computes only the gradients ``ctx.needs_input_grad`` asks
    for. ``saved_for(needs)`` gives the positions kept for one call.
``jvp(ctx, *tangents)``
    optional forward-mode rule (tangents ``None`` for constant inputs).
``vmap(ctx, *values)``
    optional batching rule (``tapegrad.vmap``): the outputs for a batch, each with
    the batch at dim 0, from the inputs' values (``ctx.batched[i]``: whether input
    ``i`` has the batch at its dim 0); elementwise and broadcasting ops derive theirs.
``composite``
    for a public function built from other ops (``transpose``, ``cross_entropy``): the
    function itself. Calling the op (``bind``) calls it, so its constituent ops record,
    differentiate, batch and forward-differentiate (it needs no vjp, jvp or vmap of
    its own); ``kernel`` runs it on raw arrays, ``infer`` is its shape rule.
``widen``
    a composite that PyTorch computes in one kernel (``layer_norm``, attention): with
    bfloat16 or float16 inputs (all of one dtype) its body runs on float32 copies of
    them and each float32 output is rounded once, forward and backward, as a
    primitive's kernel and vjp are.
``expr``
    optional scalar expression (elementwise ops), e.g. ``"x * sigmoid(x)"``.
``broadcasting``
    inputs broadcast; the registry sums each gradient back to its input's shape.
``promote``
    ``"same"`` (inputs promoted to one dtype), ``"float"`` (and ints become the
    default float), ``"none"`` (the kernel takes dtypes as they come).
``autocast``
    what ``tg.autocast`` does to the op's floating inputs (PyTorch's op lists, per
    device): ``"lower"`` (cast to the autocast dtype: matmul, linear, conv...),
    ``"fp32"`` (cast to float32: the losses...), ``"fp32_unless_dtype"`` (float32
    unless the call names a ``dtype=``: CUDA's softmax, sum...), ``"promote"`` (cast
    to the widest floating input: cat, stack...), ``"unsafe"`` (a call inside a region
    raises RuntimeError: CUDA's binary_cross_entropy), ``"keep"`` (run as given with
    autocast off inside: an op PyTorch's lists leave out whose own kernel computes it,
    where this op is made of listed ones: CPU matrix_exp, adaptive_avg_pool2d...), or
    None (run as given, its inner ops cast per their own policies). One string
    for both devices, or a dict ``{"cpu": ..., "cuda": ...}``; dispatch applies it.
``autocast_when``
    optional ``autocast_when(device_type, args, attrs) -> bool``: whether this call
    gets the op's ``autocast`` policy, for an op PyTorch casts for only on the calls
    that reach a listed op inside it (CPU einsum: only when it sums a subscript two
    operands share, through bmm; tensordot: unless it is a dot product). A call it
    rejects runs as given, autocast off inside (a composite's inner ops do not cast).
``halfwidth``
    True when the kernel takes bfloat16 and float16 arrays itself, computing in
    float32 and rounding each output once (the fused expression kernels, which read
    and write the 16-bit elements directly); otherwise dispatch runs the kernel on
    float32 copies of such inputs and rounds its outputs.
``differentiable``
    False for comparisons, argmax and friends: nothing is recorded.
``draws``
    True for an op whose kernel draws from tapegrad's global generator (bernoulli,
    poisson, multinomial; and the unregistered ops of kind ``"random"``: dropout's
    mask, the random factories' draws, bound only while tg.compile's capture watches):
    the capture records its call as a step that draws again on every replay, in the
    program's order, never folded, hoisted or recomputed.
``samples(dtype)``
    a list of ``Sample(args, attrs)`` of NumPy arrays for tests.
``error_samples()``
    a list of ``(args, attrs, exception class)`` the op must reject.
``torch``
    optional ``torch_fn(torch, *tensors, **attrs)``: PyTorch's version for oracles.
``onnx``
    the op's ONNX form, for ``tg.onnx.export``: a lowering ``lower(b, st)`` that emits
    the ONNX nodes of one call through the graph builder ``b`` (``tapegrad.onnx``'s
    ``Builder``: ``b.input(st, j)``, ``b.output(st, k)``, ``b.node(...)``,
    ``b.const(...)``; ``st.attrs`` the call's attributes), ``DECOMPOSED`` (a
    composite that exports as the ops it is made of, which the capture records by
    itself), or a string: the reason it cannot export (a random draw, no ONNX
    equivalent). ``tg.onnx.support()`` reports it for every op.
``declared_at``
    set by ``register``: ``(file, line)`` of the statement that declared the op (the
    module-level line whose execution registered it: the declaration in an op family's
    file, a user's ``custom_op`` call).
``reference``
    optional ``reference(*arrays, **attrs)``: an independent NumPy implementation of
    the forward (an expression op's is its IR evaluated op by op, beside the compiled
    kernel), the registry tests' oracle where ``torch`` is absent. Every op declares
    at least one of ``torch`` and ``reference``.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional

KINDS = ("basic", "workspace", "dynamic", "view")
DECOMPOSED = "decomposed"  # an ``onnx`` field: the op exports as the ops it is made of
AUTOCAST = ("lower", "fp32", "fp32_unless_dtype", "promote", "unsafe", "keep")
AUTOCAST_DEVICES = ("cpu", "cuda")


class TensorSpec(NamedTuple):
    """Shape and dtype of a tensor, no data (``None`` sizes: data-dependent)."""
    shape: tuple
    dtype: Any


class Sample(NamedTuple):
    args: tuple
    attrs: dict = {}
    grad: bool = True  # False: forward-only sample (non-smooth point, int inputs...)


@dataclass(eq=False)
class OpDef:
    name: str
    kernel: Callable
    infer: Callable
    args: tuple = ("x",)
    kind: str = "basic"
    vjp: Optional[Callable] = None
    saves: Any = ()
    jvp: Optional[Callable] = None
    vmap: Optional[Callable] = None
    composite: Optional[Callable] = None
    expr: Optional[str] = None
    workspace: Optional[Callable] = None
    broadcasting: bool = False
    promote: str = "none"
    autocast: Any = None
    autocast_when: Optional[Callable] = None
    widen: bool = False
    differentiable: bool = True
    draws: bool = False
    nout: int = 1
    samples: Optional[Callable] = None
    error_samples: Optional[Callable] = None
    torch: Optional[Callable] = None
    reference: Optional[Callable] = None
    doc: str = ""
    onnx: Any = None
    # PyTorch's name of the backward node a call records (``grad_fn.name()``): None for
    # the op's name in CamelCase + "Backward0", a string, or fn(attrs, shapes) -> str
    # for an op whose PyTorch name depends on the call (``sum`` with a dim is
    # ``SumBackward1``); shapes are the inputs' (None for a Python number)
    grad_fn_name: Any = None
    # filled by register(): positions of saved inputs, whether "out" is saved (for a
    # per-input ``saves``, of all inputs together), and per input position the
    # (positions, out) its gradient reads (None: ``saves`` is one tuple for all)
    save_idx: tuple = field(default=(), repr=False)
    # the output whose version a node that saves "out" checks before its vjp runs: the
    # one the vjp reads (sort, topk, max(dim): the indices, so that writing into the
    # values in place, as PyTorch allows, is no error)
    out_checked: int = 0
    save_out: bool = field(default=False, repr=False)
    save_for: Optional[tuple] = field(default=None, repr=False)
    _saved_by_needs: dict = field(default_factory=dict, repr=False)
    optional: tuple = ()
    infer_first: bool = True
    halfwidth: bool = False
    fast: bool = field(default=False, repr=False)
    elementwise: bool = field(default=False, repr=False)
    takes_out: bool = field(default=False, repr=False)
    # filled by register(): (file, line) of the module-level statement that declared it
    declared_at: Optional[tuple] = field(default=None, repr=False)

    def __repr__(self):
        return f"OpDef({self.name!r}, kind={self.kind!r})"

    def autocast_policy(self, device_type):
        """What ``tg.autocast`` does to this op's floating inputs on ``device_type``
        (``"cpu"``, ``"cuda"``): one of ``AUTOCAST``, or None (they run as given)."""
        p = self.autocast
        return p.get(device_type) if type(p) is dict else p

    # the compute API lives in compute.py; bound here for op.infer(...) style use
    def compute(self, *arrays, out=None, workspace=None, **attrs):
        from .compute import compute
        return compute(self, *arrays, out=out, workspace=workspace, **attrs)

    def saved_for(self, needs):
        """``(positions, out)``: the inputs (and whether the output) one call keeps
        when ``needs`` (one flag per input) says which inputs want a gradient."""
        if self.save_for is None:
            return self.save_idx, self.save_out
        key = tuple(bool(n) for n in needs)
        hit = self._saved_by_needs.get(key)
        if hit is None:
            idx, out = set(), False
            for i, (pos, o) in enumerate(self.save_for):
                if i < len(key) and key[i]:
                    idx.update(pos)
                    out = out or o
            hit = self._saved_by_needs[key] = (tuple(sorted(idx)), out)
        return hit

    def workspace_bytes(self, *specs, **attrs):
        from .compute import workspace_bytes
        return workspace_bytes(self, *specs, **attrs)


def validate(op):
    """Reject a malformed declaration at import, naming the op."""
    if op.kind not in KINDS:
        raise ValueError(f"register {op.name}: kind {op.kind!r} is not one of {KINDS}")
    if op.kind == "workspace" and op.workspace is None:
        raise ValueError(f"register {op.name}: a workspace op needs a workspace rule")
    if op.differentiable and op.vjp is None and op.composite is None:
        raise ValueError(f"register {op.name}: a differentiable op needs a vjp")
    if op.samples is None:
        raise ValueError(f"register {op.name}: every op needs samples for its tests")
    for a in op.optional:
        if a not in op.args:
            raise ValueError(f"register {op.name}: optional input {a!r} is not one of its "
                             f"inputs ({', '.join(op.args)})")
    per_input = op.saves if isinstance(op.saves, dict) else None
    if per_input is not None:
        for a in per_input:
            if a not in op.args:
                raise ValueError(f"register {op.name}: saves names {a!r}, which is not one "
                                 f"of its inputs ({', '.join(op.args)})")
        names = tuple(dict.fromkeys(s for v in per_input.values() for s in v))
    else:
        names = tuple(op.saves)
    for s in names:
        if s != "out" and s not in op.args:
            raise ValueError(f"register {op.name}: saves {s!r} is neither an input "
                             f"({', '.join(op.args)}) nor 'out'")
    if op.promote not in ("same", "float", "none"):
        raise ValueError(f"register {op.name}: promote must be same/float/none")
    policies = op.autocast if isinstance(op.autocast, dict) else {d: op.autocast for d in
                                                                   AUTOCAST_DEVICES}
    for dev, pol in policies.items():
        if dev not in AUTOCAST_DEVICES or (pol is not None and pol not in AUTOCAST):
            raise ValueError(f"register {op.name}: autocast must be one of {AUTOCAST} (or a "
                             f"dict of them by device, {AUTOCAST_DEVICES}), got {op.autocast!r}")
    op.save_idx = tuple(i for i, a in enumerate(op.args) if a in names)
    op.save_out = "out" in names
    op.save_for = None if per_input is None else tuple(
        (tuple(i for i, b in enumerate(op.args) if b in per_input.get(a, ())),
         "out" in per_input.get(a, ())) for a in op.args)
    op._saved_by_needs = {}
    import inspect
    try:
        op.takes_out = "out" in inspect.signature(op.kernel).parameters
    except (TypeError, ValueError):  # builtins such as np.add
        op.takes_out = False
    # dispatch's lane: one output, no scratch/allocator, at most two inputs
    op.fast = (op.kind in ("basic", "view") and op.nout == 1 and len(op.args) <= 2
               and op.composite is None)
    # an op with a scalar expression is elementwise: its kernel checks broadcasting
    # itself, so dispatch runs ``infer`` for it only to explain a failure
    op.elementwise = op.expr is not None and op.kind == "basic" and op.nout == 1
