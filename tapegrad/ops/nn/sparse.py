"""PyTorch's "sparse functions": embedding (rows picked by integer indices, with its
scatter-add gradient op), one_hot, and embedding_bag (a composite: embedding, then a
sum, mean or max per bag)."""
import numpy as np

from ..._util import op_error, value_range
from ...devices import add_at, xp_of
from ...dispatch import bind
from ...grad_mode import no_grad
from .. import _jvp, _vmap
from .._checks import any_value, host, int_value
from .._decl import Sample, TensorSpec, composite, rand, rand as _rand, register
from ..creation import _constant
from ..elementwise import where
from ..reduce import amax, sum as _sum
from ..shape import cat, unsqueeze


def _embedding_kernel(input, weight, *, padding_idx, mask_padding, out=None):
    span = value_range(input)  # the one data check, after the shape rule's
    if span is not None and (span[0] < 0 or span[1] >= weight.shape[0]):
        raise op_error("embedding", f"index out of range: indices span [{span[0]}, "
                                    f"{span[1]}] for {weight.shape[0]} embeddings", IndexError)
    if out is not None and (type(out) is not np.ndarray or out.dtype != weight.dtype
                            or np.may_share_memory(out, weight)):
        out[...] = _embedding_kernel(input, weight, padding_idx=padding_idx,
                                     mask_padding=mask_padding)
        return out
    if out is not None:  # range checked above: "wrap" takes straight into out
        xp_of(weight).take(weight, input, axis=0, out=out, mode="wrap")
    else:
        out = xp_of(weight).take(weight, input, axis=0)
    if mask_padding and padding_idx is not None:
        out[input == padding_idx] = 0
    return out


def _embedding_infer(input, weight, *, padding_idx, mask_padding):
    if np.dtype(input.dtype).kind not in "iu":
        raise op_error("embedding", f"expected integer indices (int64 or int32), got "
                                    f"{np.dtype(input.dtype)}", RuntimeError)
    if len(weight.shape) != 2:
        raise op_error("embedding", f"weight must be 2-D (num_embeddings, embedding_dim), got "
                                    f"{tuple(weight.shape)}", RuntimeError)
    return TensorSpec(tuple(input.shape) + (weight.shape[1],), weight.dtype)


def _embedding_vjp(ctx, g):
    idx = ctx.inputs[0]
    return None, bind(EMBEDDING_BACKWARD, g, idx, num_weights=ctx.shapes[1][0],
                      padding_idx=ctx.attrs["padding_idx"])


def _embedding_samples(dtype=np.float64):
    w = _rand((5, 3), dtype, seed=1)
    return [Sample((np.array([[0, 2, 2], [4, 1, 0]]), w),
                   dict(padding_idx=None, mask_padding=False)),
            # PyTorch's padding row gets no gradient although it is read: forward only
            Sample((np.array([3, 2, 3]), w), dict(padding_idx=2, mask_padding=False), grad=False),
            Sample((np.array(1), w), dict(padding_idx=None, mask_padding=False)),
            Sample((np.array([[1, 2]]), w), dict(padding_idx=2, mask_padding=True))]


def _torch_embedding(torch, input, weight, *, padding_idx, mask_padding):
    out = torch.nn.functional.embedding(input, weight, padding_idx)
    if mask_padding and padding_idx is not None:
        out = out * (input != padding_idx).unsqueeze(-1)
    return out


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_embedding(b, st):
    idx = b.input(st, 0, np.int64)
    y = b.node("Gather", [b.input(st, 1), idx], axis=0)
    p = st.attrs.get("padding_idx")
    if st.attrs.get("mask_padding") and p is not None:
        p = p % b.shape(st, 1)[0]
        hit = b.unsqueeze(b.node("Equal", [idx, b.const(np.asarray(p, np.int64))]), [-1])
        y = b.node("Where", [hit, b.const(np.zeros((), b.out_dtype(st))), y])
    b.node("Identity", [y], [b.output(st)])


def _onnx_embedding_backward(b, st):
    a = st.attrs
    g, idx = b.input(st, 0), b.input(st, 1, np.int64)
    D = b.shape(st, 0)[-1]
    zeros = b.const(np.zeros((a["num_weights"], D), b.out_dtype(st)))
    y = b.node("ScatterND", [zeros, b.unsqueeze(idx, [-1]), g], reduction="add")
    p = a.get("padding_idx")
    if p is not None:
        keep = np.ones((a["num_weights"], 1), b.out_dtype(st))
        keep[p] = 0
        y = b.node("Mul", [y, b.const(keep)])
    b.node("Identity", [y], [b.output(st)])


def _onnx_one_hot(b, st):
    n = b.out_shape(st)[-1]
    idx = b.unsqueeze(b.input(st, 0, np.int64), [-1])
    eq = b.node("Equal", [idx, b.const(np.arange(n, dtype=np.int64))])
    b.cast(eq, b.out_dtype(st), [b.output(st)])


def _embedding_vmap(ctx, indices, weight):
    """Unbatched weights map over any index shape; batched ones gather per example."""
    if not ctx.batched[1]:
        return bind(ctx.op, indices, weight, **ctx.attrs)
    m = ctx.m
    B = ctx.size
    idx = indices if ctx.batched[0] else m.broadcast_to(m.unsqueeze(indices, 0),
                                                        (B,) + tuple(indices.shape))
    ishape = tuple(idx.shape)[1:]
    D = tuple(weight.shape)[-1]
    flat = m.reshape(idx, (B, -1, 1))
    flat = m.broadcast_to(flat, (B, tuple(flat.shape)[1], D))
    out = m.reshape(m.take_along_dim(weight, flat, dim=1), (B,) + ishape + (D,))
    pad = ctx.attrs.get("padding_idx")
    if ctx.attrs.get("mask_padding") and pad is not None:
        out = m.where(m.unsqueeze(m.eq(idx, pad), -1), 0.0, out)
    return out


EMBEDDING = register(name="embedding", vmap=_embedding_vmap, jvp=_jvp.linear,
                     kernel=_embedding_kernel, args=("input", "weight"),
                     infer=_embedding_infer, vjp=_embedding_vjp, saves=("input",),
                     samples=_embedding_samples, torch=_torch_embedding,
                     error_samples=lambda: [((np.array([0.5]), _rand((3, 2))),
                                             dict(padding_idx=None, mask_padding=False),
                                             RuntimeError),
                                            ((np.array([3]), _rand((3, 2))),
                                             dict(padding_idx=None, mask_padding=False),
                                             IndexError)], onnx=_onnx_embedding)


def _embedding_backward_kernel(g, input, *, num_weights, padding_idx, out=None):
    D = g.shape[-1]
    if out is None:
        out = xp_of(g).zeros((num_weights, D), dtype=g.dtype)
    elif xp_of(out).may_share_memory(out, g):
        out[...] = _embedding_backward_kernel(g, input, num_weights=num_weights,
                                              padding_idx=padding_idx)
        return out
    else:  # the rows' adds accumulate in out itself
        out[...] = 0
    add_at(out, input.reshape(-1), g.reshape(input.size, D))
    if padding_idx is not None:
        out[padding_idx] = 0
    return out


def _embedding_backward_infer(g, input, *, num_weights, padding_idx):
    if tuple(g.shape[:-1]) != tuple(input.shape):
        raise op_error("embedding_backward", f"g of shape {tuple(g.shape)} does not match "
                                             f"indices {tuple(input.shape)}", RuntimeError)
    return TensorSpec((num_weights, g.shape[-1]), g.dtype)


def _embedding_backward_reference(g, input, *, num_weights, padding_idx):
    """Oracle: each row of g added to the row its index names, one by one."""
    out = np.zeros((num_weights, g.shape[-1]), dtype=g.dtype)
    for pos, i in np.ndenumerate(input):
        if i != padding_idx:
            out[i] += g[pos]
    return out


EMBEDDING_BACKWARD = register(
    name="embedding_backward", jvp=_jvp.linear, kernel=_embedding_backward_kernel,
    args=("g", "input"),
    infer=_embedding_backward_infer, saves=("input",),
    reference=_embedding_backward_reference,
    # the scatter-add's adjoint gathers, with the padding rows' reads masked to zero
    vjp=lambda ctx, gg: (bind(EMBEDDING, ctx.inputs[1], gg, padding_idx=ctx.attrs["padding_idx"],
                              mask_padding=True), None),
    samples=lambda dtype=np.float64: [
        Sample((_rand((2, 3, 4), dtype, seed=2), np.array([[0, 2, 2], [4, 1, 0]])),
               dict(num_weights=5, padding_idx=None)),
        Sample((_rand((3, 2), dtype, seed=3), np.array([1, 2, 1])),
               dict(num_weights=4, padding_idx=1))],
    error_samples=lambda: [((_rand((2, 3)), np.array([0, 1, 2])),
                            dict(num_weights=4, padding_idx=None), RuntimeError)],
                            onnx=_onnx_embedding_backward)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` picked by integer ``input``; the gradient scatter-adds into
    the rows (the ``padding_idx`` row gets none). ``max_norm``: first, each picked row
    whose ``norm_type``-norm exceeds it is scaled in place to ``max_norm / (norm +
    1e-7)`` times itself, as PyTorch's ``embedding_renorm_``."""
    if scale_grad_by_freq or sparse:
        raise op_error("embedding", "scale_grad_by_freq and sparse are not supported",
                       NotImplementedError)
    if padding_idx is not None:
        n = weight.shape[0]
        if isinstance(padding_idx, bool) or not isinstance(padding_idx, (int, np.integer)):
            raise op_error("embedding", f"padding_idx must be an int, got {padding_idx!r}",
                           TypeError)
        if not -n <= padding_idx < n:
            raise op_error("embedding", f"padding_idx {padding_idx} out of range for {n} "
                                        f"embeddings", ValueError)
        padding_idx = int(padding_idx) % n
    if max_norm is not None:
        renorm_rows_(weight, input, max_norm, norm_type)
    return bind(EMBEDDING, input, weight, padding_idx=padding_idx, mask_padding=False)


def renorm_rows_(weight, input, max_norm, norm_type=2.0):
    """PyTorch's ``embedding_renorm_``: each row of ``weight`` that ``input`` picks,
    whose ``norm_type``-norm exceeds ``max_norm``, scaled in place by ``max_norm /
    (norm + 1e-7)``; not recorded (as PyTorch's, under no_grad)."""
    from ..linalg import vector_norm
    with no_grad():
        idx = input.reshape(-1)
        rows = weight[idx]
        norms = vector_norm(rows, norm_type, dim=1, keepdim=True)
        weight.index_copy_(0, idx, where(norms > max_norm, rows * (max_norm / (norms + 1e-7)),
                                         rows))
    return weight


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _one_hot_kernel(input, *, num_classes, out=None):
    span = value_range(input)
    if span is not None and (span[0] < 0 or span[1] >= num_classes):
        raise RuntimeError(f"one_hot: class values must be in [0, {num_classes}), got "
                           f"[{span[0]}, {span[1]}]")
    xp = xp_of(input)
    if out is not None:
        if xp is np and type(out) is np.ndarray and out.flags.c_contiguous and out.size:
            # (np.equal into an int64 out casts through ~23 KB of iterator buffers)
            out[...] = 0
            flat = input.reshape(-1)
            out.reshape(flat.size, num_classes)[np.arange(flat.size), flat] = 1
        else:
            out[...] = (input[..., None] == xp.arange(num_classes))
        return out
    return (input[..., None] == xp.arange(num_classes)).astype(np.int64)


def _one_hot_infer(input, *, num_classes):
    if np.dtype(input.dtype).kind not in "iu":
        raise op_error("one_hot", f"is only applicable to index tensors, got "
                                  f"{np.dtype(input.dtype)}", RuntimeError)
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)):
        raise op_error("one_hot", f"num_classes must be an int, got {num_classes!r}", TypeError)
    if num_classes < 0 or (num_classes == 0 and _numel(input.shape) == 0):
        # PyTorch: -1 (infer) is the public function's; an empty input can't tell
        raise op_error("one_hot", f"num_classes must be positive (or -1 to infer it from "
                                  f"a non-empty input), got {num_classes} for input of shape "
                                  f"{tuple(input.shape)}", RuntimeError)
    return TensorSpec(tuple(input.shape) + (num_classes,), np.dtype(np.int64))


ONE_HOT = register(name="one_hot", vmap=_vmap.leading, kernel=_one_hot_kernel, infer=_one_hot_infer,
                   args=("input",),
                   differentiable=False,
                   samples=lambda dtype=np.float64: [
                       Sample((np.array([0, 2, 1]),), dict(num_classes=3), grad=False),
                       Sample((np.array([[1], [4]]),), dict(num_classes=6), grad=False),
                       Sample((np.zeros((0,), np.int64),), dict(num_classes=2), grad=False)],
                   torch=lambda torch, x, num_classes: torch.nn.functional.one_hot(x, num_classes),
                   error_samples=lambda: [((np.array([0.5]),), dict(num_classes=2), RuntimeError),
                                          ((np.array([3]),), dict(num_classes=2), RuntimeError),
                                          ((np.array([0]),), dict(num_classes=-2), RuntimeError),
                                          ((np.zeros(0, np.int64),), dict(num_classes=0),
                                           RuntimeError)], onnx=_onnx_one_hot)


def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding with a new last dim of ``num_classes`` (-1: max + 1)."""
    if num_classes == -1:
        dt = np.dtype(getattr(tensor.dtype, "np", tensor.dtype))
        if dt.kind not in "iu":
            raise op_error("one_hot", f"is only applicable to index tensors, got {dt}",
                           RuntimeError)
        if not tensor.shape or 0 not in tuple(tensor.shape):
            num_classes = int_value(tensor, lambda v: v.max()) + 1
        else:
            raise op_error("one_hot", "can not infer the number of classes from an empty "
                                      "tensor: pass num_classes", RuntimeError)
    return bind(ONE_HOT, tensor, num_classes=num_classes)


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """The sum, mean or max of each bag's embeddings: the rows of a 2-D ``input``, or
    the pieces of a 1-D ``input`` cut at ``offsets``; ``padding_idx`` entries are left
    out (an empty bag gives zeros); ``per_sample_weights`` scale the rows (sum only)."""
    name = "embedding_bag"
    if hasattr(weight, "is_floating_point") and not weight.is_floating_point():
        raise op_error(name, f"expected a floating point weight, got {weight.dtype}",
                       RuntimeError)
    if mode not in ("sum", "mean", "max"):
        raise op_error(name, f"mode has to be one of sum, mean or max, got {mode!r}", ValueError)
    if scale_grad_by_freq or sparse:
        raise op_error(name, "scale_grad_by_freq and sparse are not supported",
                       NotImplementedError)
    if max_norm is not None:
        renorm_rows_(weight, input, max_norm, norm_type)
    if per_sample_weights is not None:
        if mode != "sum":
            raise op_error(name, f"embedding_bag: per_sample_weights was not None. "
                                 f"per_sample_weights is only supported for mode='sum' (got "
                                 f"mode='{mode}'). Please open a feature request on GitHub.",
                           NotImplementedError)
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise op_error(name, f"embedding_bag: If per_sample_weights "
                                 f"({tuple(per_sample_weights.shape)}) is not None, then it "
                                 f"must have the same shape as the input "
                                 f"({tuple(input.shape)})", ValueError)
    if input.ndim == 2:
        if offsets is not None:
            raise op_error(name, "if input is 2D, then offsets has to be None, as input is "
                                 "treated is a mini-batch of fixed length sequences.",
                           ValueError)
        emb = embedding(input, weight)  # (B, L, D)
        keep = None if padding_idx is None else unsqueeze(input != padding_idx, -1)
        if per_sample_weights is not None:
            emb = emb * unsqueeze(per_sample_weights, -1)
        if mode == "max":
            if keep is not None:
                emb = where(keep, emb, float("-inf"))
            out = amax(emb, 1)
            return where(out == float("-inf"), 0.0, out) if keep is not None else out
        if keep is not None:
            emb = where(keep, emb, 0.0)
        total = _sum(emb, 1)
        if mode == "sum":
            return total
        n = input.shape[1] if keep is None else _sum(keep, 1)
        if keep is None:
            return total / n if n else total
        return total / where(n > 0, n, 1).to(total.dtype)
    if input.ndim != 1:
        raise op_error(name, f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                             f"{input.ndim}", ValueError)
    if offsets is None or offsets.ndim != 1:
        raise op_error(name, "offsets has to be a 1D Tensor when input is 1D", ValueError)
    if any_value(offsets, lambda v: v.reshape(-1)[:1] != 0, by_position=True):
        raise op_error(name, f"offsets[0] has to be 0, i.e., the first sequence in the "
                             f"mini-batch has to start from position 0. However, got "
                             f"{int(host(offsets).reshape(-1)[0])}", RuntimeError)
    # bag b holds positions starts[b] <= k < ends[b]: a (B, n) membership mask, with ops
    # (so it runs under vmap and compiled, and on torch.Tensors)
    n = input.shape[0]
    tail = _constant(offsets.new_tensor(np.array([n], np.int64)))
    starts = offsets[:-1] if include_last_offset else offsets
    ends = offsets[1:] if include_last_offset else cat([offsets[1:], tail])
    pos = unsqueeze(_constant(offsets.new_tensor(np.arange(n, dtype=np.int64))), 0)
    member = (pos >= unsqueeze(starts, 1)) & (pos < unsqueeze(ends, 1))
    if padding_idx is not None:
        member = member & unsqueeze(input != padding_idx, 0)
    emb = embedding(input, weight)  # (n, D)
    if per_sample_weights is not None:
        emb = emb * unsqueeze(per_sample_weights, -1)
    if mode == "max":
        out = amax(where(unsqueeze(member, -1), unsqueeze(emb, 0), float("-inf")), 1)
        return where(out == float("-inf"), 0.0, out)
    # a masked sum (not member @ emb: a 0 weight times a NaN/inf row of another bag
    # would spread it)
    total = _sum(where(unsqueeze(member, -1), unsqueeze(emb, 0), 0.0), 1)
    if mode == "sum":
        return total
    count = _sum(member, 1)
    return total / unsqueeze(where(count > 0, count, 1), 1).to(total.dtype)


def _bag_infer(x, w, offsets=None, *a, include_last_offset=False, **k):
    B = x.shape[0] if len(x.shape) == 2 else offsets.shape[0] - int(include_last_offset)
    return TensorSpec((B, w.shape[1]), w.dtype)


composite(embedding_bag, infer=_bag_infer, args=("input", "weight", "offsets",
                                                 "per_sample_weights"),
          by_name=True, optional=("offsets", "per_sample_weights"),
          samples=lambda dtype=np.float64: [
              Sample((np.array([[1, 2, 4], [4, 3, 9]]), rand((10, 3), dtype), None, None), {}),
              Sample((np.array([[1, 2, 4], [4, 3, 9]]), rand((10, 3), dtype), None, None),
                     {"mode": "sum", "padding_idx": 4}),
              Sample((np.array([1, 2, 4, 5, 4, 3, 2, 9]), rand((10, 3), dtype),
                      np.array([0, 3, 3, 6]), None), {"mode": "max"}),
              Sample((np.array([1, 2, 4, 5, 4, 3, 2, 9]), rand((10, 3), dtype),
                      np.array([0, 4]), rand((8,), dtype, seed=3)), {"mode": "sum"}),
              Sample((np.array([1, 2, 4, 5, 4, 3, 2, 9]), rand((10, 3), dtype),
                      np.array([0, 2, 5, 8]), None), {"include_last_offset": True})],
          error_samples=lambda: [((np.array([[1, 2]]), rand((10, 3)), None, None),
                                  {"mode": "median"}, ValueError)],
          torch=lambda torch, x, w, off, psw, **kw: _torch_bag(torch, x, w, off, psw, **kw))


def _torch_bag(torch, x, w, off, psw, mode="mean", padding_idx=None,
               include_last_offset=False):
    """embedding_bag as a formula of PyTorch's ops (its embedding_bag has no forward
    mode), checked against torch.nn.functional.embedding_bag."""
    def det(v):
        return None if v is None else v.detach()
    ref = torch.nn.functional.embedding_bag(det(x), det(w), det(off), mode=mode,
                                            per_sample_weights=det(psw), padding_idx=padding_idx,
                                            include_last_offset=include_last_offset)
    if x.ndim == 2:
        n = x.shape[1]
        flat = x.reshape(-1)
        off = torch.arange(0, flat.shape[0], n)
        x, include_last_offset = flat, False
        psw = None if psw is None else psw.reshape(-1)
    n = x.shape[0]
    starts = off[:-1] if include_last_offset else off
    ends = off[1:] if include_last_offset else torch.cat([off[1:], torch.tensor([n])])
    pos = torch.arange(n)[None]
    member = (pos >= starts[:, None]) & (pos < ends[:, None])
    if padding_idx is not None:
        member = member & (x != padding_idx)[None]
    emb = w[x]
    if psw is not None:
        emb = emb * psw[:, None]
    if mode == "max":
        out = torch.where(member[:, :, None], emb[None], torch.tensor(float("-inf"),
                                                                      dtype=w.dtype)).amax(1)
        y = torch.where(out == float("-inf"), torch.zeros_like(out), out)
    else:
        y = member.to(emb.dtype) @ emb
        if mode == "mean":
            y = y / member.sum(1).clamp(min=1)[:, None].to(y.dtype)
    assert torch.allclose(y.detach(), ref), (y, ref)
    return y
