"""Fusions across a GEMM or a partial reduction, which the elementwise pass cannot do.

``fuse_epilogues`` rewrites these patterns of a captured program into one step each,
run by a small compiled loop that does the same arithmetic in the same order as the
eager kernels (the results are bitwise those of eager):

- ``relu(linear(x, w, b))`` with a 2-D ``x``, the linear's result read by nothing
  else: one GEMM into the result's buffer, then one pass adding the bias and
  applying the ReLU in place (eager: the GEMM, a bias pass, a ReLU pass into a
  second buffer).
- ``sum(relu_backward(g, y), dim=0)`` of 2-D values (a hidden layer's bias gradient):
  one pass writes the masked gradient and accumulates its column sums, rows in order
  as NumPy's ``sum(axis=0)`` adds them.
- ``conv2d`` read only by a ``relu`` (and the ``max_pool2d`` of that ReLU's result,
  if any): one step that runs the ReLU and the pooling on each chunk of the batch
  right after its GEMMs, while in cache; ``relu_backward(max_pool2d_input_grad(g,
  i), y)``: one pass per plane (its mask from the pooled values where the pooling of
  ``y`` is in the graph: ``fuse_pool_relu_grads``); a conv's ``conv2d_input_grad`` and
  ``conv2d_weight_grad`` of one ``g``: one parallel region (``_fuse_conv``); and
  that pooling gradient with the conv gradients of its result: one region, each
  chunk of the batch making its rows of the gradient first (``_join_grads``); two
  ``conv2d+relu[+max_pool2d]`` layers in a row: one region (``_join_layers``), and
  two layers' pooling+conv gradient steps, the second's ``g`` the first's input
  gradient: one region (``_join_grad_layers``).

Each fused step is an ``op`` step whose ``op`` is an ``Epilogue`` (the attributes the
passes, the memory plan and the code generator read from a registry op): it writes
into the planned buffers (``out=``) like any registry kernel.
"""
import numpy as np

from ..devices import cpu as _cpu
from ..devices.cpu_kernels.tiled_gemm import matmul as _gemm
from .graph import Step

__all__ = ["fuse_epilogues", "Epilogue", "join_slice_grads", "fuse_pool_relu_grads"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


class Epilogue:
    """An op-like description of a fused step (``kind``, ``kernel``, ``takes_out``...)."""
    kind = "basic"
    takes_out = True
    elementwise = False
    expr = None
    fusion = None
    args = ()

    def __init__(self, name, kernel, nout):
        self.name, self.kernel, self.nout = name, kernel, nout

    def __repr__(self):
        return f"Epilogue({self.name})"


# ---------------------------------------------------------------- kernels
def _bias_relu_rows(out, b):
    for r in range(out.shape[0]):
        for j in range(out.shape[1]):
            v = out[r, j] + b[j]
            out[r, j] = v if not v <= 0 else 0  # NaN passes, as eager's relu


def _relu_rows(out):
    for r in range(out.shape[0]):
        for j in range(out.shape[1]):
            v = out[r, j]
            out[r, j] = v if not v <= 0 else 0


def _relu_backward_colsum(g, y, d, s):
    rows, n = d.shape
    for j in range(n):
        v = g[0, j] * (0 if y[0, j] <= 0 else 1)
        d[0, j] = v
        s[j] = 0 + v  # (NumPy's sum starts from 0: a column of -0.0 sums to +0.0)
    for r in range(1, rows):
        for j in range(n):
            v = g[r, j] * (0 if y[r, j] <= 0 else 1)
            d[r, j] = v
            s[j] += v


def _bias_relu_cols(out_t, b):
    for j in range(out_t.shape[0]):
        bj = b[j]
        for r in range(out_t.shape[1]):
            v = out_t[j, r] + bj
            out_t[j, r] = v if not v <= 0 else 0


def _mask_colsum(d, y, s):
    """``_relu_backward_colsum`` in place (one array: the loop vectorizes)."""
    rows, n = d.shape
    for j in range(n):
        v = d[0, j] * (0 if y[0, j] <= 0 else 1)
        d[0, j] = v
        s[j] = 0 + v
    for r in range(1, rows):
        for j in range(n):
            v = d[r, j] * (0 if y[r, j] <= 0 else 1)
            d[r, j] = v
            s[j] += v


def _mask_rows(g, y, d):
    for j in range(d.shape[0]):
        for r in range(d.shape[1]):
            d[j, r] = g[j, r] * (0 if y[j, r] <= 0 else 1)


def _mask_rows_inplace(d, y):
    for j in range(d.shape[0]):
        for r in range(d.shape[1]):
            d[j, r] = d[j, r] * (0 if y[j, r] <= 0 else 1)


_BIAS_RELU = _cpu.njit(_bias_relu_rows, error_model="numpy")
_BIAS_RELU_COLS = _cpu.njit(_bias_relu_cols, error_model="numpy")
_RELU = _cpu.njit(_relu_rows, error_model="numpy")
_RB_COLSUM = _cpu.njit(_relu_backward_colsum, error_model="numpy")
_MASK_COLSUM = _cpu.njit(_mask_colsum, error_model="numpy")
_MASK_ROWS = _cpu.njit(_mask_rows, error_model="numpy")
_MASK_ROWS_INPLACE = _cpu.njit(_mask_rows_inplace, error_model="numpy")
_ONES = {}


def _row_sums(a, out):
    """The sums of C-contiguous 2-D ``a``'s rows into ``out``, as one matrix-vector
    product (NumPy's reduction over short contiguous rows runs several times slower)."""
    key = (a.shape[1], a.dtype)
    ones = _ONES.get(key)
    if ones is None:
        ones = _ONES[key] = np.ones(a.shape[1], a.dtype)
    return np.matmul(a, ones, out=out)


def _transposed_buffer(out, rows, cols, dtype):
    """A C-contiguous (cols, rows) array over ``out``'s memory (a new one without
    ``out``): its transpose is the (rows, cols) result, features major."""
    if out is None or not out.flags.c_contiguous:
        return np.empty((cols, rows), dtype)
    return out.reshape(cols, rows)


def _features_major(a):
    """Whether 2-D ``a`` is the transpose of a C-contiguous array (and not itself one)."""
    return type(a) is np.ndarray and a.T.flags.c_contiguous and not a.flags.c_contiguous


def _linear_relu(x, w, b=None, out=None, features_major=False):
    """``relu(x @ w.T + b)``. ``features_major``: the result is the transpose of a
    C-contiguous (features, rows) array over ``out``'s memory, its GEMM ``w @ x.T``
    (OpenBLAS runs a product with fewer rows than columns 15-20% slower than its
    transpose; the next layer's ``w2 @ h.T`` then reads that array as it lies)."""
    if features_major:
        res = _transposed_buffer(out, x.shape[0], w.shape[0], x.dtype)
        _gemm(w, x.T, res)
        if b is None:
            _RELU(res)
        else:
            _BIAS_RELU_COLS(res, b)
        return res.T
    if out is None:
        out = np.empty((x.shape[0], w.shape[0]), x.dtype)
    _gemm(x, w.T, out)
    if b is None:
        _RELU(out)
    else:
        _BIAS_RELU(out, b)
    return out


def _relu_backward_sum0(g, y, out=None, features_major=False):
    """``d = relu_backward(g, y)`` and ``d.sum(0)``; ``features_major`` (and ``g`` and
    ``y`` both so): ``d`` too, over the transpose of its buffer."""
    d, s = out if out is not None else (np.empty(g.shape, g.dtype),
                                         np.empty(g.shape[1:], g.dtype))
    if features_major and _features_major(g) and _features_major(y) and g.shape[0]:
        d_t = _transposed_buffer(d, g.shape[0], g.shape[1], g.dtype)
        _MASK_ROWS(g.T, y.T, d_t)
        return d_t.T, _row_sums(d_t, s)
    _RB_COLSUM(np.ascontiguousarray(g), np.ascontiguousarray(y), d, s)
    return d, s


def _matmul_relu_backward_sum0(a, b, y, out=None, features_major=False):
    """``d = relu_backward(a @ b, y)`` and ``d.sum(0)``, the product written where
    ``d`` goes and masked in place; ``features_major`` (and ``y`` features major, as
    ``_linear_relu`` leaves it): the product computed transposed, ``b.T @ a.T``, and
    ``d`` its transpose."""
    d, s = out if out is not None else (np.empty((a.shape[0], b.shape[1]), a.dtype),
                                         np.empty(b.shape[1:], a.dtype))
    if features_major and _features_major(y) and a.shape[0]:
        d_t = _transposed_buffer(d, a.shape[0], b.shape[1], a.dtype)
        _gemm(b.T, a.T, d_t)
        _MASK_ROWS_INPLACE(d_t, y.T)
        return d_t.T, _row_sums(d_t, s)
    if not d.flags.c_contiguous:
        d = np.empty(d.shape, d.dtype)
    _gemm(a, b, d)
    _MASK_COLSUM(d, np.ascontiguousarray(y), s)
    return d, s


LINEAR_RELU = Epilogue("linear+relu", _linear_relu, 1)
RELU_BACKWARD_SUM0 = Epilogue("relu_backward+sum", _relu_backward_sum0, 2)
MATMUL_RELU_BACKWARD_SUM0 = Epilogue("matmul+relu_backward+sum", _matmul_relu_backward_sum0, 2)


# ---------------------------------------------------------------- the pass
def _readers(g, steps, reads_all):
    n = {}
    for st in steps:
        for v in reads_all(st):
            n[v] = n.get(v, 0) + 1
    return n


def _op(st, name):
    return st.kind == "op" and getattr(st.op, "name", None) == name


def _plain(g, v, shape_len, dtype=None):
    """A value of ``shape_len`` dims of a float dtype (``dtype`` if given), not a view."""
    return (type(v) is int and len(g.shapes[v]) == shape_len and g.dtypes[v] in _FLOATS
            and (dtype is None or g.dtypes[v] == dtype) and v not in g.alias)


def _uses(g, steps, reads_all):
    """What the rewrites must keep: the values that escape the program (its outputs,
    the gradients it sets), each value's readers, and the roots of aliased values."""
    escapes = set(g.output_values())
    for st in steps:
        if st.kind == "setgrad":
            escapes.update(st.reads())
    return escapes, _readers(g, steps, reads_all), {g.root(v) for v in g.alias}


def fuse_epilogues(g, steps, reads_all):
    """Steps with the patterns of the module docstring fused; the number fused."""
    escapes, readers, aliased = _uses(g, steps, reads_all)
    reader_of = {}
    for k, st in enumerate(steps):
        for v in reads_all(st):
            reader_of.setdefault(v, k)
    drop, replace, count = set(), {}, 0
    for i, st in enumerate(steps):
        if i in drop:
            continue
        if _op(st, "linear") and not st.attrs and len(st.ins) in (2, 3) \
                and len(st.outs) == 1:
            h = st.outs[0]
            if not _plain(g, h, 2) or h in escapes or h in aliased or readers.get(h) != 1:
                continue
            dt = g.dtypes[h]
            x, w = st.ins[0], st.ins[1]
            b = st.ins[2] if len(st.ins) == 3 else None
            if type(b) is not int and b is not None:
                if b[1] is not None:  # (a literal bias other than None)
                    continue
                b = None
            if not (type(x) is int and len(g.shapes[x]) == 2 and g.dtypes[x] == dt and
                    type(w) is int and len(g.shapes[w]) == 2 and g.dtypes[w] == dt):
                continue
            if b is not None and not (type(b) is int and g.shapes[b] == g.shapes[h][1:]
                                      and g.dtypes[b] == dt):
                continue
            j = reader_of[h]
            r = steps[j]
            if not (_op(r, "relu") and not r.attrs and r.ins == [h] and len(r.outs) == 1
                    and _plain(g, r.outs[0], 2, dt) and g.shapes[r.outs[0]] == g.shapes[h]):
                continue
            new = Step("op", LINEAR_RELU, [x, w] + ([b] if b is not None else []), {})
            new.outs = [r.outs[0]]
            replace[i] = new
            drop.add(j)
            count += 1
        elif _op(st, "relu_backward") and not st.attrs and len(st.outs) == 1:
            d = st.outs[0]
            gr, y = st.ins
            if not (_plain(g, d, 2) and type(gr) is int and
                    type(y) is int and g.shapes[gr] == g.shapes[d] == g.shapes[y] and
                    g.dtypes[gr] == g.dtypes[y] == g.dtypes[d]):
                continue
            j = next((k for k in range(i + 1, len(steps)) if k not in drop and
                      _op(steps[k], "sum") and steps[k].ins == [d] and
                      _dim0(steps[k].attrs)), None)
            if j is None:
                continue
            s = steps[j]
            if len(s.outs) != 1 or not _plain(g, s.outs[0], 1, g.dtypes[d]) or \
                    s.outs[0] in aliased or g.shapes[d][0] < 1:
                continue
            new = Step("op", RELU_BACKWARD_SUM0, [gr, y], {})
            new.outs = [d, s.outs[0]]
            replace[i] = new
            drop.add(j)
            count += 1
    out = [replace.get(k, st) for k, st in enumerate(steps) if k not in drop]
    out, n = _fuse_matmul_relu_grads(g, out, escapes, readers, aliased)
    _choose_layouts(g, out, escapes, reads_all)
    out, m = _fuse_conv(g, out, reads_all)
    return out, count + n + m


def _fuse_matmul_relu_grads(g, steps, escapes, readers, aliased):
    """``relu_backward+sum`` of a ``matmul``'s result read by nothing else: one step,
    the product written where the masked gradient goes."""
    made = {}
    for k, st in enumerate(steps):
        for o in st.outs:
            if o is not None:
                made[o] = k
    drop, replace = set(), {}
    for i, st in enumerate(steps):
        if not (st.kind == "op" and st.op is RELU_BACKWARD_SUM0):
            continue
        t, y = st.ins
        k = made.get(t)
        if k is None or k in drop or not _op(steps[k], "matmul") or steps[k].attrs:
            continue
        a, b = steps[k].ins if len(steps[k].ins) == 2 else (None, None)
        dt = g.dtypes[t]
        if not (type(a) is int and type(b) is int and len(g.shapes[a]) == 2 and
                len(g.shapes[b]) == 2 and g.dtypes[a] == g.dtypes[b] == dt and
                _plain(g, t, 2) and t not in escapes and t not in aliased and
                readers.get(t) == 1):
            continue
        roots = {g.root(a), g.root(b)}
        if any(steps[j].into is not None and g.root(steps[j].into) in roots
               for j in range(k + 1, i)):
            continue
        new = Step("op", MATMUL_RELU_BACKWARD_SUM0, [a, b, y], {})
        new.outs = list(st.outs)
        replace[i] = new
        drop.add(k)
    out = [replace.get(k, st) for k, st in enumerate(steps) if k not in drop]
    return out, len(drop)


# the steps that read a features-major value (the transpose of a C-contiguous array)
# at full speed: NumPy's GEMM takes either order, and the fused loops above read it
LAYOUT_READERS = frozenset({"linear", "linear+relu", "matmul", "transpose", "permute",
                            "relu_backward", "relu_backward+sum",
                            "matmul+relu_backward+sum"})


def layout_free(g, v, steps, reads_all, readers=LAYOUT_READERS):
    """Whether the program may leave value ``v`` features major: every step reading
    it (or a view of it) is one of ``readers`` and none writes into it."""
    for st in steps:
        if st.into is not None and g.root(st.into) == v:
            return False
        if any(type(u) is int and g.root(u) == v for u in reads_all(st)):
            if not (st.kind == "op" and getattr(st.op, "name", None) in readers):
                return False
    return True


def _choose_layouts(g, steps, escapes, reads_all):
    """``features_major`` for each ``linear+relu`` and masked gradient whose result has
    fewer rows than columns and is free to take that order: read only by GEMMs and
    the loops above, and not escaping the program (or escaping only as a value saved
    for the backward that ``partition`` found free: ``g.layout_free``)."""
    free = getattr(g, "layout_free", frozenset())
    for st in steps:
        if not (st.kind == "op" and st.op in (LINEAR_RELU, RELU_BACKWARD_SUM0,
                                              MATMUL_RELU_BACKWARD_SUM0)):
            continue
        v = st.outs[0]
        rows, cols = g.shapes[v]
        if 0 < rows < cols and (v not in escapes or v in free) and \
                layout_free(g, v, steps, reads_all):
            st.attrs = dict(st.attrs, features_major=True)


# ---------------------------------------------------------------- conv2d -> relu -> max_pool2d
def _conv2d_relu(x, w, b=None, *, conv, pool=None, workspace, out=None):
    """``relu(conv2d(x, w, b))`` (and its ``max_pool2d`` with ``pool``'s attributes),
    the ReLU and the pooling in the conv's epilogue where ``conv2d_relu_pool``
    applies; else the three registry kernels in turn (the same results)."""
    from ..ops.elementwise import RELU
    from ..ops.nn.conv import CONV2D, conv2d_relu_pool
    from ..ops.nn.pool import MAX_POOL2D
    outs = (out,) if pool is None and out is not None else out
    if outs is not None:
        y = outs[0]
        geo = None if pool is None else (
            pool["kernel_size"], pool["stride"], pool["padding"], pool["dilation"], outs[1],
            outs[2])
        if conv2d_relu_pool(x, w, b, y, geo, **conv, workspace=workspace):
            return out
    y = CONV2D.kernel(x, w, b, **conv, workspace=workspace,
                      out=None if outs is None else outs[0])
    y = RELU.kernel(y, out=y)
    if pool is None:
        return y
    m, i = MAX_POOL2D.kernel(y, **pool, out=None if outs is None else outs[1:])
    return y, m, i


def _pool_relu_grad(g, indices, y, *, input_shape, overlap, pooled=False, out=None):
    """``relu_backward(max_pool2d_input_grad(g, indices), y)`` in one pass where
    ``max_pool2d_relu_input_grad`` applies; else the two registry kernels in turn.
    ``pooled``: ``y`` is the pooled values (``max_pool2d``'s, whose indices these
    are), the mask taken from them (``_pool_relu_grad_step``)."""
    from ..ops.elementwise import RELU_BACKWARD
    from ..ops.nn.pool import MAX_POOL2D_INPUT_GRAD, max_pool2d_relu_input_grad
    if out is not None and max_pool2d_relu_input_grad(g, indices, y, input_shape=input_shape,
                                                      overlap=overlap, pooled=pooled,
                                                      out=out):
        return out
    d = MAX_POOL2D_INPUT_GRAD.kernel(g, indices, input_shape=input_shape, overlap=overlap)
    if pooled:  # the pooled values at their argmax positions (summed where windows
        #         overlap: the same sign, or NaN), 0 elsewhere, where d is 0 too
        y = MAX_POOL2D_INPUT_GRAD.kernel(y, indices, input_shape=input_shape, overlap=overlap)
    return RELU_BACKWARD.kernel(d, y, out=out)


def _conv2d_grads(g, w, x, *, input_shape, weight_shape, stride, padding, dilation, groups,
                  split, workspace, out=None):
    """``conv2d_input_grad(g, w)`` and ``conv2d_weight_grad(x, g)``: in one parallel
    region where ``conv2d_input_weight_grad`` applies, else the two registry kernels
    (the input gradient's scratch the first ``split`` bytes of ``workspace``)."""
    from ..ops.nn.conv import CONV2D_INPUT_GRAD, CONV2D_WEIGHT_GRAD, conv2d_input_weight_grad
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    if out is not None and conv2d_input_weight_grad(g, w, x, out[0], out[1], **attrs,
                                                    workspace=workspace, split=split):
        return out
    gx = CONV2D_INPUT_GRAD.kernel(g, w, input_shape=input_shape, **attrs,
                                  workspace=workspace[:split],
                                  out=None if out is None else out[0])
    gw = CONV2D_WEIGHT_GRAD.kernel(x, g, weight_shape=weight_shape, **attrs,
                                   workspace=workspace[split:],
                                   out=None if out is None else out[1])
    return gx, gw


CONV2D_GRADS = Epilogue("conv2d_input_grad+conv2d_weight_grad", _conv2d_grads, 2)
CONV2D_GRADS.kind = "workspace"
def _pool_grad_ok(gp, indices, y, out):
    """Whether the pooling gradient's pass can run in a conv gradient's region."""
    return type(indices) is np.ndarray and indices.flags.c_contiguous and \
        all(type(a) is np.ndarray and a.flags.c_contiguous and a.dtype == out.dtype
            for a in (gp, y))


def _pool_relu_conv_grads_plan(gp, indices, y, w, x, *, overlap, stride, padding, dilation,
                               groups, split, workspace, pooled=False, out, **_):
    """``_pool_relu_conv_grads``'s one region, not run: (its plan, the call finishing
    the weight gradient after it), or None."""
    from ..devices.cpu_kernels.pool import scatter_relu_rows
    from ..ops.nn.conv import conv2d_input_weight_grad_plan
    if not _pool_grad_ok(gp, indices, y, out[0]):
        return None
    return conv2d_input_weight_grad_plan(
        out[0], w, x, out[1], out[2], stride=stride, padding=padding, dilation=dilation,
        groups=groups, workspace=workspace, split=split,
        pre=(scatter_relu_rows(overlap, pooled), gp, indices, y))


def _pool_relu_weight_grad_plan(gp, indices, y, x, *, overlap, weight_shape, stride, padding,
                                dilation, groups, workspace, pooled=False, out, **_):
    """``_pool_relu_weight_grad``'s one region, not run (as
    ``_pool_relu_conv_grads_plan``)."""
    from ..devices.cpu_kernels.pool import scatter_relu_rows
    from ..ops.nn.conv import conv2d_weight_grad_after_plan
    if not _pool_grad_ok(gp, indices, y, out[0]):
        return None
    return conv2d_weight_grad_after_plan(
        (scatter_relu_rows(overlap, pooled), gp, indices, y), x, out[0], out[1],
        weight_shape=weight_shape, stride=stride, padding=padding, dilation=dilation,
        groups=groups, workspace=workspace)


def _run_plan(plan):
    from ..devices.cpu_kernels.conv import run_plans
    run_plans(plan[0])
    plan[1]()


def _pool_relu_conv_grads(gp, indices, y, w, x, *, overlap, grad_shape, input_shape,
                          weight_shape, stride, padding, dilation, groups, split, workspace,
                          pooled=False, out=None):
    """``d = relu_backward(max_pool2d_input_grad(gp, indices), y)`` (shape
    ``grad_shape``) and the conv's two gradients of ``d``, in one parallel region where
    ``conv2d_input_weight_grad`` applies (each chunk of the batch makes its rows of d
    first); else the fused steps' kernels in turn."""
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    plan = None if out is None else _pool_relu_conv_grads_plan(
        gp, indices, y, w, x, overlap=overlap, **attrs, split=split, workspace=workspace,
        pooled=pooled, out=out)
    if plan is not None:
        _run_plan(plan)
        return out
    d = _pool_relu_grad(gp, indices, y, input_shape=grad_shape, overlap=overlap, pooled=pooled,
                        out=None if out is None else out[0])
    gx, gw = _conv2d_grads(d, w, x, input_shape=input_shape, weight_shape=weight_shape,
                           **attrs, split=split, workspace=workspace,
                           out=None if out is None else out[1:])
    return d, gx, gw


def _pool_relu_weight_grad(gp, indices, y, x, *, overlap, grad_shape, weight_shape, stride,
                           padding, dilation, groups, workspace, pooled=False, out=None):
    """``d`` as ``_pool_relu_conv_grads``'s and ``conv2d_weight_grad(x, d)``, in one
    parallel region where ``conv2d_weight_grad_after`` applies; else in turn."""
    from ..ops.nn.conv import CONV2D_WEIGHT_GRAD
    attrs = dict(weight_shape=weight_shape, stride=stride, padding=padding, dilation=dilation,
                 groups=groups)
    plan = None if out is None else _pool_relu_weight_grad_plan(
        gp, indices, y, x, overlap=overlap, **attrs, workspace=workspace, pooled=pooled,
        out=out)
    if plan is not None:
        _run_plan(plan)
        return out
    d = _pool_relu_grad(gp, indices, y, input_shape=grad_shape, overlap=overlap, pooled=pooled,
                        out=None if out is None else out[0])
    gw = CONV2D_WEIGHT_GRAD.kernel(x, d, **attrs, workspace=workspace,
                                   out=None if out is None else out[1])
    return d, gw


_GRAD_PARTS = {"conv": (_pool_relu_conv_grads_plan, _pool_relu_conv_grads),
               "weight": (_pool_relu_weight_grad_plan, _pool_relu_weight_grad)}


def _grads_chain(*ins, first, second, kinds, n1, split, workspace, out=None):
    """Two layers' pooling+ReLU+conv gradient steps, the second's ``gp`` the first's
    input gradient (its second result): in one parallel region where both plans apply
    (each chunk of the batch runs the first's gradients, then the second's from its
    rows of that input gradient), the weight gradients' sums over the batch after it;
    else the two steps in turn."""
    from ..devices.cpu_kernels.conv import run_plans
    (plan1, fn1), (plan2, fn2) = _GRAD_PARTS[kinds[0]], _GRAD_PARTS[kinds[1]]
    a1, a2 = ins[:n1], ins[n1:]
    k1 = 3 if kinds[0] == "conv" else 2
    o1 = o2 = None
    if out is not None:
        o1, o2 = out[:k1], out[k1:]
        p1 = plan1(*a1, **first, workspace=workspace[:split], out=o1)
        p2 = None if p1 is None else plan2(o1[1], *a2, **second, workspace=workspace[split:],
                                           out=o2)
        if p2 is not None:
            run_plans(p1[0], p2[0])
            p1[1]()
            p2[1]()
            return out
    r1 = tuple(fn1(*a1, **first, workspace=workspace[:split], out=o1))
    r2 = tuple(fn2(r1[1], *a2, **second, workspace=workspace[split:], out=o2))
    return r1 + r2


POOL_RELU_CONV_GRADS = Epilogue(
    "max_pool2d_input_grad+relu_backward+conv2d_input_grad+conv2d_weight_grad",
    _pool_relu_conv_grads, 3)
POOL_RELU_WEIGHT_GRAD = Epilogue("max_pool2d_input_grad+relu_backward+conv2d_weight_grad",
                                 _pool_relu_weight_grad, 2)
POOL_RELU_CONV_GRADS.kind = POOL_RELU_WEIGHT_GRAD.kind = "workspace"
_GRAD_CHAINS = {n: Epilogue("(max_pool2d_input_grad+relu_backward+conv2d grads) x2",
                            _grads_chain, n) for n in (4, 5, 6)}
for _e in _GRAD_CHAINS.values():
    _e.kind = "workspace"
def _pool_geometry(pool, outs):
    if pool is None:
        return None
    return (pool["kernel_size"], pool["stride"], pool["padding"], pool["dilation"], outs[1],
            outs[2])


def _conv_chain(*ins, first, second, n1, split, workspace, out=None):
    """Two ``conv2d+relu[+max_pool2d]`` steps, the second on the first's result (the
    pooled values, or the ReLU's without pooling):
    in one parallel region where ``conv2d_relu_pool`` applies to both (each chunk of
    the batch runs the first layer, then the second on its result), else in turn."""
    from ..ops.nn.conv import conv2d_relu_pool, conv2d_relu_pool_plan
    k1 = 1 if first.get("pool") is None else 3
    a1, a2 = ins[:n1], ins[n1:]
    if out is not None:
        o1, o2 = out[:k1], out[k1:]
        plan = conv2d_relu_pool_plan(*a1, o1[0], _pool_geometry(first.get("pool"), o1),
                                     **first["conv"], workspace=workspace[:split])
        if plan is not None and conv2d_relu_pool(
                o1[k1 // 2], *a2, o2[0], _pool_geometry(second.get("pool"), o2),
                **second["conv"], workspace=workspace[split:], pre=plan):
            return out
    r1 = _conv2d_relu(*a1, **first, workspace=workspace[:split],
                      out=None if out is None else (out[0] if k1 == 1 else out[:k1]))
    r1 = (r1,) if k1 == 1 else tuple(r1)
    k2 = 1 if second.get("pool") is None else 3
    r2 = _conv2d_relu(r1[k1 // 2], *a2, **second, workspace=workspace[split:],
                      out=None if out is None else (out[k1] if k2 == 1 else out[k1:]))
    return r1 + ((r2,) if k2 == 1 else tuple(r2))


_CHAINS = {n: Epilogue("conv2d+relu[+max_pool2d] x2", _conv_chain, n) for n in (2, 4, 6)}
for _e in _CHAINS.values():
    _e.kind = "workspace"
CONV2D_RELU = Epilogue("conv2d+relu", _conv2d_relu, 1)
CONV2D_RELU_POOL = Epilogue("conv2d+relu+max_pool2d", _conv2d_relu, 3)
CONV2D_RELU.kind = CONV2D_RELU_POOL.kind = "workspace"
POOL_RELU_GRAD = Epilogue("max_pool2d_input_grad+relu_backward", _pool_relu_grad, 1)
_POOL_ATTRS = {"kernel_size", "stride", "padding", "dilation", "ceil_mode"}


def _fuse_conv(g, steps, reads_all):
    """The CNN layer's patterns: ``conv2d`` whose result only a ``relu`` reads, that
    ReLU and the ``max_pool2d`` of its result (if any) as one step
    (``conv2d+relu[+max_pool2d]``, at the conv's place; the ReLU's result is still
    written, a backward may read it); ``relu_backward(max_pool2d_input_grad(g, i),
    y)`` as one step at the ReLU gradient's place; ``conv2d_input_grad(g, w)`` and a
    later ``conv2d_weight_grad(x, g)`` of the same conv as one step at the first's
    place (``x`` made before it). Only across steps that mutate nothing. Returns
    (steps, the number fused)."""
    escapes, readers, aliased = _uses(g, steps, reads_all)
    reader_of = {}
    for k, st in enumerate(steps):
        for v in reads_all(st):
            reader_of.setdefault(v, k)

    def private(v):  # read once, not returned, not aliased
        return _plain(g, v, 4) and v not in escapes and v not in aliased and \
            readers.get(v) == 1

    def still(a, b):  # no step strictly between a and b mutates anything
        return not any(steps[t].mutates() for t in range(a + 1, b))

    made = _producers(steps)
    drop, replace, count = set(), {}, 0
    for i, st in enumerate(steps):
        if i in drop or st.kind != "op" or len(st.outs) != 1:
            continue
        if _op(st, "conv2d_input_grad") and all(type(v) is int for v in st.ins) and \
                _plain(g, st.outs[0], 4):
            gr, w = st.ins
            attrs = {k: v for k, v in st.attrs.items() if k != "input_shape"}
            j = next((t for t in range(i + 1, len(steps)) if t not in drop and
                      _op(steps[t], "conv2d_weight_grad") and steps[t].ins[1:] == [gr]), None)
            if j is None:
                continue
            r = steps[j]
            x = r.ins[0]
            dt = g.dtypes[gr]
            if not (type(x) is int and made.get(x, -1) < i and len(r.outs) == 1 and
                    _plain(g, r.outs[0], 4, dt) and
                    {k: v for k, v in r.attrs.items() if k != "weight_shape"} == attrs and
                    tuple(r.attrs.get("weight_shape", ())) == tuple(g.shapes[w]) and
                    tuple(st.attrs.get("input_shape", ())) == tuple(g.shapes[x]) and
                    g.dtypes[w] == g.dtypes[x] == g.dtypes[st.outs[0]] == dt and
                    still(i, j)):
                continue
            new = Step("op", CONV2D_GRADS, [gr, w, x],
                       dict(attrs, input_shape=st.attrs["input_shape"],
                            weight_shape=r.attrs["weight_shape"], split=st.workspace))
            new.workspace = st.workspace + r.workspace
            new.outs = [st.outs[0], r.outs[0]]
            replace[i] = new
            drop.add(j)
            count += 1
        elif _op(st, "conv2d") and len(st.ins) == 3 and private(st.outs[0]):
            h = st.outs[0]
            j = reader_of[h]
            r = steps[j]
            if not (_op(r, "relu") and not r.attrs and r.ins == [h] and len(r.outs) == 1
                    and _plain(g, r.outs[0], 4, g.dtypes[h])
                    and g.shapes[r.outs[0]] == g.shapes[h] and still(i, j)):
                continue
            y = r.outs[0]
            k = next((t for t in range(j + 1, len(steps)) if _op(steps[t], "max_pool2d")
                      and steps[t].ins == [y]), None)
            p = steps[k] if k is not None else None
            if p is not None and not (
                    set(p.attrs) <= _POOL_ATTRS and len(p.outs) == 2 and
                    _plain(g, p.outs[0], 4, g.dtypes[y]) and type(p.outs[1]) is int and
                    p.outs[1] not in g.alias and g.dtypes[p.outs[1]] == np.int64 and
                    still(j, k)):
                p = None
            new = Step("op", CONV2D_RELU if p is None else CONV2D_RELU_POOL, list(st.ins),
                       {"conv": dict(st.attrs)} if p is None else
                       {"conv": dict(st.attrs), "pool": dict(p.attrs)})
            new.workspace = st.workspace
            new.outs = [y] if p is None else [y] + list(p.outs)
            replace[i] = new
            drop.add(j)
            if p is not None:
                drop.add(k)
            count += 1
        elif _op(st, "max_pool2d_input_grad"):
            found = _pool_relu_grad_step(g, steps, i, private, reader_of, made)
            if found is None:
                continue
            j, new = found
            replace[j] = new
            drop.add(i)
            count += 1
    if not count and not any(st.kind == "op" and st.op is POOL_RELU_GRAD for st in steps):
        return steps, 0
    steps = [replace.get(k, st) for k, st in enumerate(steps) if k not in drop]
    steps, n = _join_grads(g, steps)
    steps, n2 = _join_layers(g, steps)
    steps, n3 = _join_grad_layers(g, steps)
    return steps, count + n + n2 + n3


def _join_grad_layers(g, steps):
    """A pooling+ReLU+conv gradient step with the conv's input gradient (a
    ``max_pool2d_input_grad+relu_backward+conv2d_input_grad+conv2d_weight_grad``
    step) and the next reader of that input gradient, such a step of the layer before
    (its ``gp``, the same batch): one step at the first's place, one parallel region
    (``_grads_chain``). Returns (steps, the number joined)."""
    made = _producers(steps)
    kinds = {POOL_RELU_CONV_GRADS: "conv", POOL_RELU_WEIGHT_GRAD: "weight"}
    drop, replace, count = set(), {}, 0
    for k, st in enumerate(steps):
        if st.kind != "op" or st.op is not POOL_RELU_CONV_GRADS or k in drop or k in replace:
            continue
        j = _next_layer(g, steps, k, st.outs[1], kinds, made, drop | set(replace))
        if j is None:
            continue
        r = steps[j]
        replace[k] = _joined(_GRAD_CHAINS, st, r, {
            "first": dict(st.attrs), "second": dict(r.attrs), "kinds": ("conv", kinds[r.op])})
        drop.add(j)
        count += 1
    return _rebuilt(steps, replace, drop), count


def _next_layer(g, steps, k, v, ops, made, taken):
    """The index of the step after ``k`` that next reads ``v``, where that step is one
    of ``ops`` with ``v`` as its first input and nowhere else, over the same batch,
    its other inputs made before ``k``, and no step between mutates anything: the
    next layer ``k``'s step can be joined with. None otherwise (or if in ``taken``)."""
    j = next((t for t in range(k + 1, len(steps)) if v in steps[t].reads()), None)
    if j is None or j in taken:
        return None
    r = steps[j]
    if not (r.kind == "op" and r.op in ops and r.ins[0] == v and v not in r.ins[1:]
            and g.shapes[r.outs[0]][0] == g.shapes[v][0]
            and all(made.get(i, -1) < k for i in r.ins[1:] if type(i) is int)
            and not any(steps[t].mutates() for t in range(k + 1, j))):
        return None
    return j


def _joined(chains, st, r, attrs):
    """Steps ``st`` and ``r`` as one step of ``chains``' op for their outputs: the
    inputs of both (``r``'s first is ``st``'s output), both workspaces in turn."""
    new = Step("op", chains[len(st.outs) + len(r.outs)], list(st.ins) + list(r.ins[1:]),
               dict(attrs, n1=len(st.ins), split=st.workspace))
    new.workspace = st.workspace + r.workspace
    new.outs = list(st.outs) + list(r.outs)
    return new


def _pool_relu_grad_step(g, steps, i, private, reader_of, made):
    """(j, the step) for ``relu_backward(max_pool2d_input_grad(gp, idx), y)``, the
    pooling gradient at ``steps[i]`` and the ReLU's at ``steps[j]``, or None. Where
    ``y`` is what a ``max_pool2d`` step pooled into ``(m, idx)`` (its steps visible)
    and nothing writes into ``m`` before ``j``, the mask is taken from ``m``: each
    position the scatter reaches is an argmax, whose ``y`` is the window's ``m``
    (the same values, the result bitwise eager's; the others hold 0 either way), so
    ``y`` itself need not be kept for the backward."""
    st = steps[i]
    if not (set(st.attrs) == {"input_shape", "overlap"} and len(st.outs) == 1 and
            all(type(v) is int for v in st.ins) and private(st.outs[0])):
        return None
    d0 = st.outs[0]
    j = reader_of[d0]
    r = steps[j]
    if not (_op(r, "relu_backward") and not r.attrs and len(r.ins) == 2 and
            r.ins[0] == d0 and type(r.ins[1]) is int and len(r.outs) == 1 and
            _plain(g, r.outs[0], 4, g.dtypes[d0]) and
            g.shapes[r.outs[0]] == g.shapes[d0] == g.shapes[r.ins[1]] and
            g.dtypes[r.ins[1]] == g.dtypes[d0] == g.dtypes[st.ins[0]] and
            not any(steps[t].mutates() for t in range(i + 1, j))):
        return None
    gp, idx = st.ins
    y = r.ins[1]
    attrs = dict(st.attrs)
    k = made.get(idx, -1)
    p = steps[k] if k >= 0 else None
    if p is not None and _op(p, "max_pool2d") and p.ins == [y] and len(p.outs) == 2 and \
            p.outs[1] == idx and _plain(g, p.outs[0], 4, g.dtypes[y]) and \
            not any(steps[t].into is not None and g.root(steps[t].into) == g.root(p.outs[0])
                    for t in range(k + 1, j)):
        y = p.outs[0]
        attrs["pooled"] = True
    new = Step("op", POOL_RELU_GRAD, [gp, idx, y], attrs)
    new.outs = list(r.outs)
    return j, new


def fuse_pool_relu_grads(g, steps, reads_all, start=0):
    """``relu_backward(max_pool2d_input_grad(gp, idx), y)`` of steps from ``start``
    on as one step, its mask from the pooled values where ``_pool_relu_grad_step``
    finds them: run on a joint forward+backward graph before it is split, the
    backward then reads the (smaller) pooled values, not the ReLU's result, and the
    forward need not save that. Returns (steps, the number fused)."""
    escapes, readers, aliased = _uses(g, steps, reads_all)
    reader_of = {}
    for k, st in enumerate(steps):
        for v in reads_all(st):
            reader_of.setdefault(v, k)

    def private(v):
        return _plain(g, v, 4) and v not in escapes and v not in aliased and \
            readers.get(v) == 1

    made = _producers(steps)
    drop, replace = set(), {}
    for i in range(start, len(steps)):
        if i in drop or not _op(steps[i], "max_pool2d_input_grad"):
            continue
        found = _pool_relu_grad_step(g, steps, i, private, reader_of, made)
        if found is None or found[0] in replace or not found[1].attrs.get("pooled"):
            continue
        j, new = found
        replace[j] = new
        drop.add(i)
    return _rebuilt(steps, replace, drop), len(replace)


def _join_layers(g, steps):
    """A ``conv2d+relu[+max_pool2d]`` step whose last result the next reader of it
    convolves in another such step (the next layer, with the same batch): one step
    at the first's place, one parallel region (each chunk of the batch runs both
    layers). Returns (steps, the number joined)."""
    made = _producers(steps)
    convs = (CONV2D_RELU, CONV2D_RELU_POOL)
    drop, replace, count = set(), {}, 0
    for k, st in enumerate(steps):
        if st.kind != "op" or st.op not in convs or k in drop:
            continue
        v = st.outs[0] if st.op is CONV2D_RELU else st.outs[1]
        j = _next_layer(g, steps, k, v, convs, made, drop)
        if j is None:
            continue
        r = steps[j]
        replace[k] = _joined(_CHAINS, st, r, {"first": st.attrs, "second": r.attrs})
        drop.add(j)
        count += 1
    return _rebuilt(steps, replace, drop), count


def _join_grads(g, steps):
    """A ``max_pool2d_input_grad+relu_backward`` step whose result ``d`` a conv's
    gradient step reads as its g next (``conv2d_input_grad+conv2d_weight_grad`` or
    ``conv2d_weight_grad``) and that gradient step as one step at the first's place
    (each chunk of the batch makes its rows of d, then the conv's gradients of them;
    d is still written). Returns (steps, the number joined)."""
    made = _producers(steps)
    drop, replace, count = set(), {}, 0
    for k, st in enumerate(steps):
        if st.kind != "op" or st.op is not POOL_RELU_GRAD or k in drop:
            continue
        d = st.outs[0]
        j = next((t for t in range(k + 1, len(steps)) if d in steps[t].reads()), None)
        if j is None or any(steps[t].mutates() for t in range(k + 1, j)):
            continue
        r = steps[j]
        gp, idx, y = st.ins
        base = dict(overlap=st.attrs["overlap"], grad_shape=st.attrs["input_shape"],
                    pooled=st.attrs.get("pooled", False))
        if r.kind == "op" and r.op is CONV2D_GRADS and r.ins[0] == d:
            w, x = r.ins[1], r.ins[2]
            new = Step("op", POOL_RELU_CONV_GRADS, [gp, idx, y, w, x], dict(r.attrs, **base))
        elif _op(r, "conv2d_weight_grad") and r.ins[1] == d and r.ins[0] != d and \
                type(r.ins[0]) is int:
            x = w = r.ins[0]
            new = Step("op", POOL_RELU_WEIGHT_GRAD, [gp, idx, y, x], dict(r.attrs, **base))
        else:
            continue
        if made.get(x, -1) >= k or made.get(w, -1) >= k:
            continue
        new.workspace = r.workspace
        new.outs = [d] + list(r.outs)
        replace[k] = new
        drop.add(j)
        count += 1
    return _rebuilt(steps, replace, drop), count


def _dim0(attrs):
    if set(attrs) - {"dim", "keepdim"} or attrs.get("keepdim", False):
        return False
    dim = attrs.get("dim")
    return dim == 0 or (isinstance(dim, (tuple, list)) and tuple(dim) == (0,))


# ---------------------------------------------------------------- split gradients
def _last_axis_slice(index, n):
    """(start, stop) of ``index`` if it is ``(..., slice)`` with step 1 over a last axis
    of ``n``, else None."""
    if type(index) is not tuple or len(index) != 2 or index[0] is not Ellipsis:
        return None
    sl = index[1]
    if type(sl) is not slice or sl.step not in (None, 1):
        return None
    a, b, _ = sl.indices(n)
    return (a, b) if a < b else None


def join_slice_grads(g, steps, reads_all):
    """The gradient of a value split along its last axis (``qkv[..., :d]``,
    ``qkv[..., d:2d]``...): the walker makes one zero-filled array per slice with the
    slice's gradient in it (``index_add_into``) and sums them (``np.add``). When the
    slices tile the axis exactly and nothing else reads those arrays, the sum is one
    ``cat`` of the slices' gradients along the axis (no zero fills, no sums: each
    element is the one gradient that reaches it, as in eager's sum with zeros, but
    for the sign of a zero). Returns (steps, the number joined)."""
    from ..ops.shape import CAT
    escapes, readers, aliased = _uses(g, steps, reads_all)
    made = _producers(steps)

    def private(v):  # read once (by the sum), not returned, not aliased
        return (type(v) is int and readers.get(v) == 1 and v not in escapes
                and v not in aliased and v not in g.alias)

    def is_add(st):
        return (st.kind == "ufunc" and st.op is np.add and not st.attrs and
                st.into is None and len(st.ins) == 2 and len(st.outs) == 1)

    drop, replace, count = set(), {}, 0
    for k, st in enumerate(steps):
        if not is_add(st) or k in drop:
            continue
        out = st.outs[0]
        if type(out) is not int or g.dtypes[out] not in _FLOATS:
            continue
        # the add tree under this sum: inner adds private, leaves index_add_into steps
        leaves, inner, stack, ok = [], [], list(st.ins), True
        while stack and ok:
            v = stack.pop()
            if not private(v) or v not in made:
                ok = False
                break
            j = made[v]
            s2 = steps[j]
            if is_add(s2):
                inner.append(j)
                stack.extend(s2.ins)
            elif _op(s2, "index_add_into") and len(s2.ins) == 1 and len(s2.outs) == 1:
                leaves.append(j)
            else:
                ok = False
        if not ok or len(leaves) < 2:
            continue
        shape = g.shapes[out]
        if not shape:
            continue
        n = shape[-1]
        parts = []
        for j in leaves:
            s2 = steps[j]
            src = s2.ins[0]
            span = _last_axis_slice(s2.attrs.get("index"), n)
            if (span is None or set(s2.attrs) != {"shape", "index"} or type(src) is not int
                    or tuple(s2.attrs["shape"]) != tuple(shape)
                    or g.dtypes[src] != g.dtypes[out] or g.shapes[s2.outs[0]] != shape
                    or tuple(g.shapes[src]) != tuple(shape[:-1]) + (span[1] - span[0],)):
                ok = False
                break
            parts.append((span, src))
        if not ok:
            continue
        parts.sort()
        edge = 0
        for (a, b), _ in parts:
            if a != edge:
                ok = False
                break
            edge = b
        if not ok or edge != n:
            continue
        new = Step("op", CAT, [src for _, src in parts], {"dim": len(shape) - 1})
        new.outs = [out]
        replace[k] = new
        drop.update(leaves)
        drop.update(inner)
        count += 1
    return _rebuilt(steps, replace, drop), count


def _producers(steps):
    """Each value's producing step: {value: index of the step that writes it}."""
    made = {}
    for k, st in enumerate(steps):
        for o in st.outs:
            if o is not None:
                made[o] = k
    return made


def _rebuilt(steps, replace, drop):
    """``steps`` with step k replaced by ``replace[k]`` and the steps in ``drop`` left
    out (``steps`` itself when there is nothing to change)."""
    if not replace and not drop:
        return steps
    return [replace.get(k, st) for k, st in enumerate(steps) if k not in drop]
