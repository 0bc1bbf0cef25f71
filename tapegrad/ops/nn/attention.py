"""scaled_dot_product_attention, a composite of matmul, softmax and dropout;
multi_head_attention_forward (PyTorch's, step for step), a composite of linear, bmm,
softmax, dropout and scaled_dot_product_attention."""
import warnings

import numpy as np

from ... import dtypes as _dt
from ..._util import broadcast_shapes, op_error
from ...devices import xp_of
from ...dispatch import autocast_call
from ...dtypes import is_float as _isf
from ...ops_registry import get as get_op
from ...tensor import wrap
from .._checks import whole
from .._decl import Sample, TensorSpec, composite, rand
from ..creation import _constant
from ..elementwise import where
from ..linalg import matmul
from ..reduce import all as all_
from ..shape import mT, repeat_interleave
from ..ufuncs import isneginf
from ._common import np_dtype
from .activation import softmax
from .regularization import dropout


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``softmax(q k^T * scale + mask) v`` with PyTorch's mask rules: a bool mask
    keeps True positions, a float mask is added, ``is_causal`` keeps j <= i;
    ``enable_gqa``: key and value may have fewer heads (dim -3) than the query, each
    serving a group of query heads."""
    q = whole(query)  # its dtype and array module (inside vmap: the batch's)
    # PyTorch: one floating dtype for all three (no promotion, no integer kernel)
    for name, t in (("key", key), ("value", value)):
        if np_dtype(t) != q.dtype:
            raise op_error("scaled_dot_product_attention",
                           f"expected query, key and value to have the same dtype, but got "
                           f"query {q.dtype} and {name} {np_dtype(t)}", RuntimeError)
    if not _isf(q.dtype):
        raise op_error("scaled_dot_product_attention", f"expected floating point query, key "
                                                       f"and value, got {q.dtype}", RuntimeError)
    if len(query.shape) < 2 or query.shape[-1] != key.shape[-1] or \
            key.shape[-2] != value.shape[-2]:
        raise op_error("scaled_dot_product_attention",
                       f"query {tuple(query.shape)}, key {tuple(key.shape)} and value "
                       f"{tuple(value.shape)} need matching embedding dims (q, k) and "
                       f"sequence lengths (k, v)", RuntimeError)
    if not 0.0 <= dropout_p <= 1.0:  # PyTorch's RuntimeError (dropout's own is a ValueError)
        raise op_error("scaled_dot_product_attention", f"dropout_p must be between 0 and 1, "
                                                       f"got {dropout_p}", RuntimeError)
    if is_causal and attn_mask is not None:
        raise op_error("scaled_dot_product_attention", "pass either attn_mask or is_causal",
                       RuntimeError)
    if enable_gqa and len(query.shape) >= 3 and len(key.shape) >= 3 and \
            len(value.shape) >= 3:  # grouped-query attention: each key/value head serves
        #                             a group of query heads, repeated to match them
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hq % hk or hq % hv:
            raise op_error("scaled_dot_product_attention",
                           f"Number of heads in key and value must divide the number of "
                           f"heads in query (query {hq}, key {hk}, value {hv})", RuntimeError)
        if hk != hq:
            key = repeat_interleave(key, hq // hk, dim=-3)
        if hv != hq:
            value = repeat_interleave(value, hq // hv, dim=-3)
    if attn_mask is not None and np_dtype(attn_mask) not in (np.bool_, q.dtype):
        # PyTorch's rule: a bool mask, a float32 one (taken in the query's dtype), or one
        # of the query's dtype
        if np_dtype(attn_mask) != np.float32:
            raise op_error("scaled_dot_product_attention",
                           f"Expected attn_mask dtype to be bool or float or to match query "
                           f"dtype, but got attn_mask.dtype: {np_dtype(attn_mask)} and "
                           f"query.dtype: {q.dtype} instead.", RuntimeError)
        attn_mask = attn_mask.to(query.dtype)
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / float(np.sqrt(query.shape[-1])) if scale is None else float(scale)
    attn = matmul(query, mT(key)) * scale
    if is_causal:  # (a constant of the shapes: tg.compile's capture takes it as one)
        attn_mask = _constant(wrap(xp_of(q).tril(xp_of(q).ones((L, S), dtype=bool))))
    masked = None
    if attn_mask is not None:
        if np_dtype(attn_mask) == np.bool_:
            attn = where(attn_mask, attn, -np.inf)
        else:
            attn = attn + attn_mask
        # PyTorch's safe softmax: a query whose every key is masked attends to nothing
        # (zeros out, zero gradients), not NaN; its row is made finite before the
        # softmax so that no NaN reaches the gradient of the others either
        masked = all_(isneginf(attn), dim=-1, keepdim=True)
        attn = where(masked, 0.0, attn)
    attn = softmax(attn, dim=-1)
    if masked is not None:
        attn = where(masked, 0.0, attn)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p, True)
    return matmul(attn, value)


def _sdpa_infer(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                enable_gqa=False):
    name = "scaled_dot_product_attention"
    for what, t in (("key", k), ("value", v)):
        if np.dtype(t.dtype) != np.dtype(q.dtype):
            raise op_error(name, f"expected query, key and value to have the same dtype, but "
                                 f"got query {np.dtype(q.dtype)} and {what} {np.dtype(t.dtype)}",
                           RuntimeError)
    if not _isf(np.dtype(q.dtype)):
        raise op_error(name, f"expected floating point query, key and value, got "
                             f"{np.dtype(q.dtype)}", RuntimeError)
    qs, ks, vs = tuple(q.shape), tuple(k.shape), tuple(v.shape)
    if len(qs) < 2 or len(ks) < 2 or len(vs) < 2 or qs[-1] != ks[-1] or ks[-2] != vs[-2]:
        raise op_error(name, f"query {qs}, key {ks} and value {vs} need matching embedding "
                             f"dims (q, k) and sequence lengths (k, v)", RuntimeError)
    if not 0.0 <= dropout_p <= 1.0:
        raise op_error(name, f"dropout_p must be between 0 and 1, got {dropout_p}", RuntimeError)
    if is_causal and attn_mask is not None:
        raise op_error(name, "pass either attn_mask or is_causal", RuntimeError)
    batch = broadcast_shapes(name, qs[:-2], ks[:-2], vs[:-2])
    if attn_mask is not None:
        batch = broadcast_shapes(name, batch + (qs[-2], ks[-2]), tuple(attn_mask.shape))[:-2]
    return TensorSpec(batch + (qs[-2], vs[-1]), q.dtype)


def _sdpa_samples(dtype=np.float64):
    q, k, v = rand((2, 3, 4), dtype, seed=1), rand((2, 5, 4), dtype, seed=2), \
        rand((2, 5, 2), dtype, seed=3)
    return [Sample((q, k, v), {}),
            Sample((q, k, v), {"is_causal": True, "scale": 0.7}),
            Sample((q, k, v, rand((3, 5), dtype, seed=4)), {}),
            Sample((q, k, v, rand((3, 5), seed=5) > -1.0), {})]  # a bool mask, each row kept


composite(scaled_dot_product_attention, widen=True, autocast="lower", infer=_sdpa_infer,
          args=("query", "key", "value", "attn_mask"), optional=("attn_mask",),
          samples=_sdpa_samples,
          error_samples=lambda: [((rand((2, 3, 4)), rand((2, 5, 3)), rand((2, 5, 2))), {},
                                  RuntimeError),
                                 ((rand((3, 4)), rand((5, 4)), rand((5, 2))), {"dropout_p": 2.0},
                                  RuntimeError)],
          torch=lambda torch, q, k, v, attn_mask=None, **kw:
              torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, **kw))


# ---------------------------------------------------------------- multi_head_attention_forward
_MHA = "multi_head_attention_forward"


class MHAAssertionError(AssertionError, RuntimeError):
    """PyTorch's class for multi_head_attention_forward's checks (AssertionError),
    which is also a RuntimeError, the class tapegrad's errors come in."""


def _mha_fail(msg, cls=MHAAssertionError):
    """PyTorch's exception class for the check (mostly AssertionError), named."""
    raise op_error(_MHA, msg, cls)


def _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
    """Batched (3-D) or not (2-D), PyTorch's ``_mha_shape_check``."""
    qd, kd, vd = len(query.shape), len(key.shape), len(value.shape)
    if qd not in (2, 3):
        _mha_fail(f"query should be unbatched 2D or batched 3D tensor but received {qd}-D "
                  f"query tensor")
    what = "batched (3-D)" if qd == 3 else "unbatched (2-D)"
    if kd != qd or vd != qd:
        _mha_fail(f"For {what} `query`, expected `key` and `value` to be {qd}-D but found "
                  f"{kd}-D and {vd}-D tensors respectively")
    if key_padding_mask is not None and len(key_padding_mask.shape) != qd - 1:
        _mha_fail(f"For {what} `query`, expected `key_padding_mask` to be `None` or "
                  f"{qd - 1}-D but found {len(key_padding_mask.shape)}-D tensor instead")
    if attn_mask is not None:
        ad = len(attn_mask.shape)
        if ad not in (2, 3):
            _mha_fail(f"For {what} `query`, expected `attn_mask` to be `None`, 2-D or 3-D "
                      f"but found {ad}-D tensor instead")
        if qd == 2 and ad == 3:
            want = (num_heads, query.shape[0], key.shape[0])
            if tuple(attn_mask.shape) != want:
                _mha_fail(f"Expected `attn_mask` shape to be {want} but got "
                          f"{tuple(attn_mask.shape)}")
    return qd == 3


def _canonical_mask(mask, name, dtype, other=None, other_name=""):
    """A bool mask as an additive float mask (-inf where True), a float mask as is;
    PyTorch's deprecation warning when ``other`` (a mask) has another dtype."""
    from .. import creation as C
    if mask is None:
        return None
    dt = np_dtype(mask)
    if dt != np.bool_ and not _isf(dt):
        _mha_fail(f"only bool and floating types of {name} are supported")
    if other is not None and np_dtype(other) != dt:
        warnings.warn(f"Support for mismatched {name} and {other_name} is deprecated. Use "
                      f"same type for both instead.", stacklevel=4)
    if dt == np.bool_:  # with ops alone (no factory), so tg.compile replays it
        return C.cast(where(mask, float("-inf"), 0.0), _dt.from_np(dtype))
    return mask


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """PyTorch's ``F.multi_head_attention_forward``, step for step: the in-projections
    (packed ``in_proj_weight`` or ``use_separate_proj_weight``), ``bias_k``/``bias_v``,
    ``add_zero_attn``, ``static_k``/``static_v``, the key-padding and attention masks
    (bool: True is masked out; float: added), dropout on the weights when ``training``,
    the out-projection. Sequence-first shapes: query ``(L, N, E)`` or ``(L, E)``.
    Returns ``(attn_output, attn_weights)``, the weights averaged over heads when
    ``average_attn_weights``, ``None`` unless ``need_weights``. Built from ops, so it
    differentiates at every order, in forward mode and under vmap."""
    from .. import linalg as L2, reduce as R, shape as SH
    from .affine import linear
    from .regularization import dropout

    is_batched = _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not is_batched:
        query, key, value = (SH.unsqueeze(t, 1) for t in (query, key, value))
        if key_padding_mask is not None:
            key_padding_mask = SH.unsqueeze(key_padding_mask, 0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    dt = np_dtype(query)
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", dt, attn_mask,
                                       "attn_mask")
    if is_causal and attn_mask is None:
        _mha_fail("Need attn_mask if specifying the is_causal hint. You may use the "
                  "Transformer module method `generate_square_subsequent_mask` to create "
                  "this mask.", RuntimeError)
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None   # sdpa's own causal mask
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", dt)
        if key_padding_mask is not None:
            is_causal = False
    if embed_dim != embed_dim_to_check:
        _mha_fail(f"was expecting embedding dimension of {embed_dim_to_check}, but got "
                  f"{embed_dim}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) or \
            num_heads < 1:
        _mha_fail(f"num_heads must be a positive int, got {num_heads!r}")
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        _mha_fail(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if tuple(key.shape[:2]) != tuple(value.shape[:2]):
            _mha_fail(f"key's sequence and batch dims {tuple(key.shape[:2])} do not match "
                      f"value's {tuple(value.shape[:2])}")
    elif tuple(key.shape) != tuple(value.shape):
        _mha_fail(f"key shape {tuple(key.shape)} does not match value shape "
                  f"{tuple(value.shape)}")

    # in-projection
    E = embed_dim
    if in_proj_bias is None:
        b_q = b_k = b_v = None
    else:
        b_q, b_k, b_v = in_proj_bias[:E], in_proj_bias[E:2 * E], in_proj_bias[2 * E:]
    if not use_separate_proj_weight:
        if in_proj_weight is None:
            _mha_fail("use_separate_proj_weight is False but in_proj_weight is None")
        w_q, w_k, w_v = in_proj_weight[:E], in_proj_weight[E:2 * E], in_proj_weight[2 * E:]
    else:
        for nm, w in (("q", q_proj_weight), ("k", k_proj_weight), ("v", v_proj_weight)):
            if w is None:
                _mha_fail(f"use_separate_proj_weight is True but {nm}_proj_weight is None")
        w_q, w_k, w_v = q_proj_weight, k_proj_weight, v_proj_weight
        Ek, Ev = key.shape[-1], value.shape[-1]
        for what, w, want in (("query", w_q, (E, E)), ("key", w_k, (E, Ek)),
                              ("value", w_v, (E, Ev))):
            if tuple(w.shape) != want:
                _mha_fail(f"expecting {what} weights shape of {want}, but got "
                          f"{tuple(w.shape)}")
        for what, b in (("query", b_q), ("key", b_k), ("value", b_v)):
            if b is not None and tuple(b.shape) != (E,):
                _mha_fail(f"expecting {what} bias shape of {(E,)}, but got {tuple(b.shape)}")
    q, k, v = linear(query, w_q, b_q), linear(key, w_k, b_k), linear(value, w_v, b_v)

    if attn_mask is not None:
        if len(attn_mask.shape) == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                _mha_fail(f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, but "
                          f"should be {(tgt_len, src_len)}.", RuntimeError)
            attn_mask = SH.unsqueeze(attn_mask, 0)
        elif tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
            _mha_fail(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but should "
                      f"be {(bsz * num_heads, tgt_len, src_len)}.", RuntimeError)

    if bias_k is not None and bias_v is not None:
        if static_k is not None:
            _mha_fail("bias cannot be added to static key.")
        if static_v is not None:
            _mha_fail("bias cannot be added to static value.")
        k = SH.cat([k, SH.repeat(bias_k, 1, bsz, 1)])
        v = SH.cat([v, SH.repeat(bias_v, 1, bsz, 1)])
        if attn_mask is not None:
            attn_mask = SH.pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = SH.pad(key_padding_mask, (0, 1))
    elif bias_k is not None:
        _mha_fail("bias_k is set but bias_v is None")
    elif bias_v is not None:
        _mha_fail("bias_v is set but bias_k is None")

    q = SH.transpose(SH.reshape(q, (tgt_len, bsz * num_heads, head_dim)), 0, 1)
    for nm, st in (("k", static_k), ("v", static_v)):
        if st is not None:
            if st.shape[0] != bsz * num_heads:
                _mha_fail(f"expecting static_{nm}.size(0) of {bsz * num_heads}, but got "
                          f"{st.shape[0]}")
            if st.shape[2] != head_dim:
                _mha_fail(f"expecting static_{nm}.size(2) of {head_dim}, but got "
                          f"{st.shape[2]}")
    if static_k is None:
        k = SH.transpose(SH.reshape(k, (k.shape[0], bsz * num_heads, head_dim)), 0, 1)
    else:
        k = static_k
    if static_v is None:
        v = SH.transpose(SH.reshape(v, (v.shape[0], bsz * num_heads, head_dim)), 0, 1)
    else:
        v = static_v

    if add_zero_attn:
        k = SH.pad(k, (0, 0, 0, 1))   # a zero key and value at the end (dim 1)
        v = SH.pad(v, (0, 0, 0, 1))
        if attn_mask is not None:
            attn_mask = SH.pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = SH.pad(key_padding_mask, (0, 1))

    src_len = k.shape[1]
    if key_padding_mask is not None:
        if key_padding_mask.shape[0] != bsz:
            _mha_fail(f"Expected key_padded_mask.shape[0] to be {bsz}, but got "
                      f"{key_padding_mask.shape[0]}")
        if key_padding_mask.shape[1] != src_len:
            _mha_fail(f"Expected key_padded_mask.shape[1] to be {src_len}, but got "
                      f"{key_padding_mask.shape[1]}")
        key_padding_mask = SH.reshape(SH.expand(SH.reshape(key_padding_mask,
                                                           (bsz, 1, 1, src_len)),
                                                -1, num_heads, -1, -1),
                                      (bsz * num_heads, 1, src_len))
        attn_mask = key_padding_mask if attn_mask is None else attn_mask + key_padding_mask
    if not training:
        dropout_p = 0.0

    if need_weights:
        if is_causal and attn_mask is None:
            _mha_fail("FIXME: is_causal not implemented for need_weights")
        q_scaled = q * float(np.sqrt(1.0 / float(q.shape[-1])))
        kt = SH.transpose(k, -2, -1)
        if attn_mask is not None:
            # baddbmm's autocast policy (a float mask to the autocast dtype), as
            # PyTorch's dispatch gives it; the direct call would skip it
            w = autocast_call(get_op("baddbmm"), L2.baddbmm, (attn_mask, q_scaled, kt), {})
        else:
            w = L2.bmm(q_scaled, kt)
        w = softmax(w, dim=-1)
        if dropout_p > 0.0:
            w = dropout(w, p=dropout_p)
        out = L2.bmm(w, v)
        out = SH.reshape(SH.transpose(out, 0, 1), (tgt_len * bsz, embed_dim))
        out = linear(out, out_proj_weight, out_proj_bias)
        out = SH.reshape(out, (tgt_len, bsz, out.shape[1]))
        w = SH.reshape(w, (bsz, num_heads, tgt_len, src_len))
        if average_attn_weights:
            w = R.mean(w, dim=1)
        if not is_batched:
            out, w = SH.squeeze(out, 1), SH.squeeze(w, 0)
        return out, w
    if attn_mask is not None:
        if attn_mask.shape[0] == 1 and len(attn_mask.shape) == 3:
            attn_mask = SH.unsqueeze(attn_mask, 0)
        else:
            attn_mask = SH.reshape(attn_mask, (bsz, num_heads, -1, src_len))
    q = SH.reshape(q, (bsz, num_heads, tgt_len, head_dim))
    k = SH.reshape(k, (bsz, num_heads, src_len, head_dim))
    v = SH.reshape(v, (bsz, num_heads, src_len, head_dim))
    out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    out = SH.reshape(SH.permute(out, (2, 0, 1, 3)), (bsz * tgt_len, embed_dim))
    out = linear(out, out_proj_weight, out_proj_bias)
    out = SH.reshape(out, (tgt_len, bsz, out.shape[1]))
    if not is_batched:
        out = SH.squeeze(out, 1)
    return out, None


_MHA_ARGS = ("query", "key", "value", "in_proj_weight", "in_proj_bias", "bias_k", "bias_v",
             "out_proj_weight", "out_proj_bias", "key_padding_mask", "attn_mask",
             "q_proj_weight", "k_proj_weight", "v_proj_weight", "static_k", "static_v")


def _mha_infer(query, key, value, in_proj_weight=None, in_proj_bias=None, bias_k=None,
               bias_v=None, out_proj_weight=None, out_proj_bias=None, key_padding_mask=None,
               attn_mask=None, q_proj_weight=None, k_proj_weight=None, v_proj_weight=None,
               static_k=None, static_v=None, *, embed_dim_to_check, num_heads,
               add_zero_attn=False, dropout_p=0.0, training=True, need_weights=True,
               use_separate_proj_weight=False, average_attn_weights=True, is_causal=False):
    is_batched = _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    qs = tuple(query.shape)
    L, N, E = (qs if is_batched else (qs[0], 1, qs[1]))
    if E != embed_dim_to_check:
        _mha_fail(f"was expecting embedding dimension of {embed_dim_to_check}, but got {E}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) or \
            num_heads < 1:
        _mha_fail(f"num_heads must be a positive int, got {num_heads!r}")
    if E % num_heads:
        _mha_fail(f"embed_dim {E} not divisible by num_heads {num_heads}")
    S = key.shape[0] if static_k is None else static_k.shape[1]
    S += int(bias_k is not None) + int(bool(add_zero_attn))
    Eo = out_proj_weight.shape[0]
    dt = np.dtype(query.dtype)
    out = TensorSpec((L, N, Eo) if is_batched else (L, Eo), dt)
    if not need_weights:
        return out, None
    ws = (N, L, S) if average_attn_weights else (N, num_heads, L, S)
    return out, TensorSpec(ws if is_batched else ws[1:], dt)


def _mha_call(q, k, v, ipw, ipb, bk, bv, opw, opb, kpm=None, am=None, qpw=None, kpw=None,
              vpw=None, sk=None, sv=None, *, F, **kw):
    e, h = kw.pop("embed_dim_to_check"), kw.pop("num_heads")
    return F(q, k, v, e, h, ipw, ipb, bk, bv, kw.pop("add_zero_attn", False),
             kw.pop("dropout_p", 0.0), opw, opb, key_padding_mask=kpm, attn_mask=am,
             q_proj_weight=qpw, k_proj_weight=kpw, v_proj_weight=vpw, static_k=sk,
             static_v=sv, **kw)


def _mha_samples(dtype=np.float64):
    E, H, L, S, N = 4, 2, 3, 5, 2

    def r(shape, seed, lo=-1.0, hi=1.0):
        return rand(shape, dtype, lo, hi, seed=seed)
    q, k, v = r((L, N, E), 1), r((S, N, E), 2), r((S, N, E), 3)
    ipw, ipb, opw, opb = r((3 * E, E), 4), r((3 * E,), 5), r((E, E), 6), r((E,), 7)
    base = {"embed_dim_to_check": E, "num_heads": H, "add_zero_attn": False, "dropout_p": 0.0}
    kpm = np.zeros((N, S), bool)
    kpm[0, -1] = kpm[1, 1] = True
    causal = np.triu(np.ones((L, S), bool), 1)
    no = (None,) * 7
    return [
        Sample((q, k, v, ipw, ipb, None, None, opw, opb), dict(base)),
        Sample((q, k, v, ipw, None, r((1, 1, E), 8), r((1, 1, E), 9), opw, None, kpm,
                r((L, S), 10)), dict(base, average_attn_weights=False)),
        Sample((q[:, 0], k[:, 0], v[:, 0], ipw, ipb, None, None, opw, opb, kpm[0], causal),
               dict(base, add_zero_attn=True, is_causal=True)),
        # in_proj_weight is ignored with separate weights (given: bind requires it)
        Sample((q, k[:, :, :3], v[:, :, :2], ipw, ipb, None, None, opw, opb, None,
                r((N * H, L, S), 11), r((E, E), 12), r((E, 3), 13), r((E, 2), 14)),
               dict(base, use_separate_proj_weight=True)),
        Sample((q, k, v, ipw, ipb, None, None, opw, opb) + no[:2] + no[:3]
               + (r((N * H, S + 1, E // H), 15), r((N * H, S + 1, E // H), 16)),
               dict(base, training=False, dropout_p=0.5)),
    ]


def _mha_errors():
    E = 4
    q3, w, b = rand((3, 2, E)), rand((3 * E, E)), rand((3 * E,))
    ow, ob = rand((E, E)), rand((E,))
    base = {"embed_dim_to_check": E, "num_heads": 2, "add_zero_attn": False, "dropout_p": 0.0}
    return [((rand((3, 2, 2, E)), q3, q3, w, b, None, None, ow, ob), base, AssertionError),
            ((q3, q3, q3, w, b, None, None, ow, ob), dict(base, num_heads=3), AssertionError),
            ((q3, q3, q3, w, b, None, None, ow, ob), dict(base, embed_dim_to_check=6),
             AssertionError),
            ((q3, q3, q3, w, b, None, None, ow, ob, None, rand((3, 4))), base, RuntimeError),
            ((q3, q3, q3, w, b, None, None, ow, ob), dict(base, is_causal=True), RuntimeError)]


composite(multi_head_attention_forward, widen=True, infer=_mha_infer, args=_MHA_ARGS, by_name=True,
          optional=_MHA_ARGS[4:7] + _MHA_ARGS[8:], nout=2, samples=_mha_samples,
          error_samples=_mha_errors,
          torch=lambda torch, *a, **k: _mha_call(
              *a, F=torch.nn.functional.multi_head_attention_forward, **k))
