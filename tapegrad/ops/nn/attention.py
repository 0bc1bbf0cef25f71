"""scaled_dot_product_attention, a composite of matmul, softmax and dropout."""
import numpy as np

from ...devices import xp_of
from ..._util import op_error
from ..elementwise import where
from ..linalg import matmul
from ..shape import mT
from ._common import np_dtype, whole
from .regularization import dropout
from .activation import softmax
from ..._util import broadcast_shapes
from .._decl import composite, Sample, TensorSpec, rand


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``softmax(q k^T * scale + mask) v`` with PyTorch's mask rules: a bool mask
    keeps True positions, a float mask is added, ``is_causal`` keeps j <= i."""
    q = whole(query)  # its dtype and array module (inside vmap: the batch's)
    # PyTorch: one floating dtype for all three (no promotion, no integer kernel)
    for name, t in (("key", key), ("value", value)):
        if np_dtype(t) != q.dtype:
            raise op_error("scaled_dot_product_attention",
                           f"expected query, key and value to have the same dtype, but got "
                           f"query {q.dtype} and {name} {np_dtype(t)}", RuntimeError)
    if q.dtype.kind != "f":
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
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / float(np.sqrt(query.shape[-1])) if scale is None else float(scale)
    attn = matmul(query, mT(key)) * scale
    if is_causal:
        attn_mask = xp_of(q).tril(xp_of(q).ones((L, S), dtype=bool))
    if attn_mask is not None:
        if np_dtype(attn_mask) == np.bool_:
            attn = where(attn_mask, attn, -np.inf)
        else:
            attn = attn + attn_mask
    attn = softmax(attn, dim=-1)
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
    if np.dtype(q.dtype).kind != "f":
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


composite(scaled_dot_product_attention, infer=_sdpa_infer,
          args=("query", "key", "value", "attn_mask"), optional=("attn_mask",),
          samples=_sdpa_samples,
          error_samples=lambda: [((rand((2, 3, 4)), rand((2, 5, 3)), rand((2, 5, 2))), {},
                                  RuntimeError),
                                 ((rand((3, 4)), rand((5, 4)), rand((5, 2))), {"dropout_p": 2.0},
                                  RuntimeError)],
          torch=lambda torch, q, k, v, attn_mask=None, **kw:
              torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, **kw))
