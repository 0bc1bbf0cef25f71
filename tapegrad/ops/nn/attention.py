"""scaled_dot_product_attention, a composite of matmul, softmax and dropout."""
import numpy as np

from ...devices import xp_of
from ..._util import op_error
from ..elementwise import where
from ..linalg import matmul
from ..shape import mT
from ._common import raw
from .regularization import dropout
from .activation import softmax


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``softmax(q k^T * scale + mask) v`` with PyTorch's mask rules: a bool mask
    keeps True positions, a float mask is added, ``is_causal`` keeps j <= i."""
    q = raw(query)
    # PyTorch: one floating dtype for all three (no promotion, no integer kernel)
    for name, t in (("key", key), ("value", value)):
        if raw(t).dtype != q.dtype:
            raise op_error("scaled_dot_product_attention",
                           f"expected query, key and value to have the same dtype, but got "
                           f"query {q.dtype} and {name} {raw(t).dtype}", RuntimeError)
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
        if raw(attn_mask).dtype == np.bool_:
            attn = where(attn_mask, attn, -np.inf)
        else:
            attn = attn + attn_mask
    attn = softmax(attn, dim=-1)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p, True)
    return matmul(attn, value)
