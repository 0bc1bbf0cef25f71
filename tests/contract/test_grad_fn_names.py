"""``grad_fn.name()`` and the tensor repr's ``grad_fn=<...>`` name the node PyTorch
records for the same call (``MmBackward0`` for a 2-D ``@``, ``SliceBackward0`` for
``x[1:3]``...), checked against the installed torch."""
import numpy as np
import pytest
import torch

import tapegrad as tg

F = "nn.functional"


def _fn(m, path):
    for part in path.split("."):
        m = getattr(m, part)
    return m


# (id, function of (namespace, a 3x3, b 3x3, v 3, B 2x3x3)); every input requires grad
CASES = [
    ("add", lambda m, a, b, v, B: a + b), ("sub", lambda m, a, b, v, B: a - b),
    ("rsub", lambda m, a, b, v, B: 1 - a), ("mul", lambda m, a, b, v, B: a * b),
    ("div", lambda m, a, b, v, B: a / b), ("neg", lambda m, a, b, v, B: -a),
    ("pow_scalar", lambda m, a, b, v, B: a ** 3), ("square_op", lambda m, a, b, v, B: a ** 2),
    ("pow_tensor", lambda m, a, b, v, B: a.abs() ** b), ("rpow", lambda m, a, b, v, B: 2 ** a),
    ("square", lambda m, a, b, v, B: a.square()),
    ("exp", lambda m, a, b, v, B: a.exp()), ("log1p", lambda m, a, b, v, B: a.abs().log1p()),
    ("tanh", lambda m, a, b, v, B: a.tanh()), ("sigmoid", lambda m, a, b, v, B: a.sigmoid()),
    ("relu", lambda m, a, b, v, B: m.relu(a)),
    ("gelu", lambda m, a, b, v, B: _fn(m, F).gelu(a)),
    ("gelu_tanh", lambda m, a, b, v, B: _fn(m, F).gelu(a, approximate="tanh")),
    ("silu", lambda m, a, b, v, B: _fn(m, F).silu(a)),
    ("logsigmoid", lambda m, a, b, v, B: _fn(m, F).logsigmoid(a)),
    ("softmax", lambda m, a, b, v, B: a.softmax(-1)),
    ("log_softmax", lambda m, a, b, v, B: a.log_softmax(-1)),
    ("atan2", lambda m, a, b, v, B: m.atan2(a, b)),
    ("fmod_scalar", lambda m, a, b, v, B: m.fmod(a, 2.0)),
    ("fmod_tensor", lambda m, a, b, v, B: m.fmod(a, b)),
    ("remainder", lambda m, a, b, v, B: a % b), ("remainder_scalar", lambda m, a, b, v, B: a % 2),
    ("clamp", lambda m, a, b, v, B: a.clamp(0, 1)),
    ("clamp_min", lambda m, a, b, v, B: a.clamp(min=0)),
    ("clamp_tensor", lambda m, a, b, v, B: a.clamp(b, b + 1)),
    ("torch_clamp_min", lambda m, a, b, v, B: m.clamp_min(a, 0.0)),
    ("sum", lambda m, a, b, v, B: a.sum()), ("sum_dim", lambda m, a, b, v, B: a.sum(0)),
    ("mean", lambda m, a, b, v, B: a.mean()), ("mean_dim", lambda m, a, b, v, B: a.mean(1)),
    ("max", lambda m, a, b, v, B: a.max()), ("min", lambda m, a, b, v, B: a.min()),
    ("max_dim", lambda m, a, b, v, B: a.max(0)[0]), ("amax", lambda m, a, b, v, B: a.amax(0)),
    ("norm", lambda m, a, b, v, B: a.norm()), ("norm_dim", lambda m, a, b, v, B: a.norm(dim=0)),
    ("var", lambda m, a, b, v, B: a.var()), ("cumsum", lambda m, a, b, v, B: a.cumsum(0)),
    ("mm", lambda m, a, b, v, B: a @ b), ("mv", lambda m, a, b, v, B: a @ v),
    ("vm", lambda m, a, b, v, B: v @ a), ("dot", lambda m, a, b, v, B: v @ v),
    ("batched", lambda m, a, b, v, B: B @ B), ("batch_mat", lambda m, a, b, v, B: B @ a),
    ("mat_batch", lambda m, a, b, v, B: a @ B), ("vec_batch", lambda m, a, b, v, B: v @ B),
    ("mm_fn", lambda m, a, b, v, B: m.mm(a, b)), ("bmm", lambda m, a, b, v, B: m.bmm(B, B)),
    ("outer", lambda m, a, b, v, B: m.outer(v, v)),
    ("linear", lambda m, a, b, v, B: _fn(m, F).linear(a, b)),
    ("linear_bias", lambda m, a, b, v, B: _fn(m, F).linear(a, b, v)),
    ("linear_1d", lambda m, a, b, v, B: _fn(m, F).linear(v, b)),
    ("linear_3d", lambda m, a, b, v, B: _fn(m, F).linear(B, b)),
    ("linear_3d_bias", lambda m, a, b, v, B: _fn(m, F).linear(B, b, v)),
    ("view", lambda m, a, b, v, B: a.view(9)), ("reshape", lambda m, a, b, v, B: a.reshape(9)),
    ("reshape_copy", lambda m, a, b, v, B: a.t().reshape(9)),
    ("flatten", lambda m, a, b, v, B: a.flatten()), ("view_as", lambda m, a, b, v, B: a.view_as(b)),
    ("slice", lambda m, a, b, v, B: a[1:3]),
    ("select", lambda m, a, b, v, B: a[0]),
    ("slice_dim1", lambda m, a, b, v, B: a[:, 1:]),
    ("select_then_slice", lambda m, a, b, v, B: a[0, 1:]),
    ("slice_then_select", lambda m, a, b, v, B: a[1:, 0]),
    ("full_slice", lambda m, a, b, v, B: a[:]),
    ("full_slices", lambda m, a, b, v, B: a[:, :]), ("ellipsis", lambda m, a, b, v, B: a[...]),
    ("none", lambda m, a, b, v, B: a[None]),
    ("ellipsis_select", lambda m, a, b, v, B: a[..., 0]),
    ("select_none", lambda m, a, b, v, B: a[0, None]), ("step", lambda m, a, b, v, B: a[::2]),
    ("index", lambda m, a, b, v, B: a[m.tensor([0, 2])]),
    ("index_list", lambda m, a, b, v, B: a[[0, 1]]),
    ("mask", lambda m, a, b, v, B: a[a > 0]), ("narrow", lambda m, a, b, v, B: a.narrow(0, 0, 1)),
    ("cat", lambda m, a, b, v, B: m.cat([a, b])), ("stack", lambda m, a, b, v, B: m.stack([a, b])),
    ("split", lambda m, a, b, v, B: a.split(1)[0]),
    ("split_sizes", lambda m, a, b, v, B: a.split([1, 2])[1]),
    ("chunk", lambda m, a, b, v, B: a.chunk(3)[0]), ("unbind", lambda m, a, b, v, B: a.unbind()[0]),
    ("transpose", lambda m, a, b, v, B: a.transpose(0, 1)), ("t", lambda m, a, b, v, B: a.t()),
    ("T", lambda m, a, b, v, B: a.T), ("mT", lambda m, a, b, v, B: B.mT),
    ("permute", lambda m, a, b, v, B: B.permute(1, 0, 2)),
    ("swapaxes", lambda m, a, b, v, B: a.swapaxes(0, 1)),
    ("movedim", lambda m, a, b, v, B: B.movedim(0, 2)),
    ("expand", lambda m, a, b, v, B: v.expand(2, 3)),
    ("expand_as", lambda m, a, b, v, B: v.expand_as(a)),
    ("broadcast_to", lambda m, a, b, v, B: m.broadcast_to(v, (2, 3))),
    ("unsqueeze", lambda m, a, b, v, B: a.unsqueeze(0)),
    ("squeeze", lambda m, a, b, v, B: a.unsqueeze(0).squeeze()),
    ("squeeze_dim", lambda m, a, b, v, B: a.unsqueeze(0).squeeze(0)),
    ("squeeze_dims", lambda m, a, b, v, B: a.unsqueeze(0).squeeze((0, 1))),
    ("clone", lambda m, a, b, v, B: a.clone()), ("double", lambda m, a, b, v, B: a.double()),
    ("to_dtype", lambda m, a, b, v, B: a.to(m.float64)), ("half", lambda m, a, b, v, B: a.half()),
    ("where", lambda m, a, b, v, B: m.where(a > 0, a, b)),
    ("maximum", lambda m, a, b, v, B: m.maximum(a, b)),
    ("gather", lambda m, a, b, v, B: a.gather(0, m.zeros(3, 3, dtype=m.int64))),
    ("flip", lambda m, a, b, v, B: a.flip(0)), ("roll", lambda m, a, b, v, B: a.roll(1)),
    ("repeat", lambda m, a, b, v, B: a.repeat(2, 1)), ("tril", lambda m, a, b, v, B: a.tril()),
    ("pad", lambda m, a, b, v, B: _fn(m, F).pad(a, (1, 1))),
    ("pad_reflect", lambda m, a, b, v, B: _fn(m, F).pad(B, (1, 1), mode="reflect")),
    ("pad_replicate", lambda m, a, b, v, B: _fn(m, F).pad(B, (1, 1), mode="replicate")),
    ("masked_fill", lambda m, a, b, v, B: a.masked_fill(a > 0, 0.0)),
    ("index_select", lambda m, a, b, v, B: a.index_select(0, m.tensor([0]))),
    ("sort", lambda m, a, b, v, B: a.sort()[0]), ("topk", lambda m, a, b, v, B: a.topk(2)[0]),
    ("cross_entropy", lambda m, a, b, v, B: _fn(m, F).cross_entropy(a, m.tensor([0, 1, 2]))),
    ("asin", lambda m, a, b, v, B: (a * 0.1).asin()), ("atan", lambda m, a, b, v, B: a.atan()),
    ("prod_dim", lambda m, a, b, v, B: a.prod(0)), ("prod", lambda m, a, b, v, B: a.prod()),
    ("take_along_dim", lambda m, a, b, v, B: m.take_along_dim(a, m.zeros(1, 3, dtype=m.int64), 0)),
    ("inv", lambda m, a, b, v, B: m.linalg.inv(a)),
    ("interpolate", lambda m, a, b, v, B: _fn(m, F).interpolate(B[None], scale_factor=2)),
    ("interpolate_bilinear",
     lambda m, a, b, v, B: _fn(m, F).interpolate(B[None], scale_factor=2, mode="bilinear")),
    ("unfold", lambda m, a, b, v, B: _fn(m, F).unfold(B[None], 2)),
    ("group_norm", lambda m, a, b, v, B: _fn(m, F).group_norm(B[None], 2)),
    ("layer_norm", lambda m, a, b, v, B: _fn(m, F).layer_norm(a, (3,))),
    ("layer_norm_affine", lambda m, a, b, v, B: _fn(m, F).layer_norm(a, (3,), v, v)),
    ("mse_loss", lambda m, a, b, v, B: _fn(m, F).mse_loss(a, b)),
    ("mse_loss_none", lambda m, a, b, v, B: _fn(m, F).mse_loss(a, b, reduction="none")),
    ("l1_loss", lambda m, a, b, v, B: _fn(m, F).l1_loss(a, b)),
    ("bce", lambda m, a, b, v, B: _fn(m, F).binary_cross_entropy(a.sigmoid(), b.sigmoid())),
    ("bce_logits", lambda m, a, b, v, B:
     _fn(m, F).binary_cross_entropy_with_logits(a, b.sigmoid(), reduction="sum")),
]


def _inputs(m):
    g = np.random.default_rng(0)
    arrs = [g.standard_normal(s).astype(np.float32) for s in ((3, 3), (3, 3), (3,), (2, 3, 3))]
    return [m.tensor(x, requires_grad=True) for x in arrs]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_grad_fn_name_matches_torch(case):
    _, f = case
    expected = type(f(torch, *_inputs(torch)).grad_fn).__name__
    out = f(tg, *_inputs(tg))
    assert out.grad_fn.name() == expected
    assert f"grad_fn=<{expected}>" in repr(out)
    assert repr(out.grad_fn).startswith(f"<{expected} object at")


def test_no_node_when_nothing_is_computed():
    """A call that gives its input back does not rename the input's node."""
    x = tg.randn(3, 3, requires_grad=True)
    y = x * 2
    assert tg.broadcast_to(y, (3, 3)).grad_fn.name() == "MulBackward0"
    assert y.grad_fn.name() == "MulBackward0"
