"""API.md "Operations": every listed name exists (as tg.NAME, and as a Tensor method
where PyTorch has one), dim/axis and keepdim/keepdims aliases, and results, result
types (tuples, named fields, int64 indices) and exception classes as PyTorch."""
import numpy as np
import pytest
from contract_compare import same

import tapegrad as tg

torch = pytest.importorskip("torch")

ELEMENTWISE = """add sub mul div true_divide floor_divide remainder pow neg abs sign exp exp2 log
log2 log10 log1p expm1 sqrt rsqrt square reciprocal sin cos tan arcsin arccos arctan arctan2
sinh cosh tanh sigmoid logsigmoid relu leaky_relu elu gelu silu softplus erf maximum minimum
clamp clip where logaddexp floor ceil round isnan isinf isfinite logical_and logical_or
logical_not""".split()
REDUCTIONS = """sum mean prod max min amax amin argmax argmin var std logsumexp norm cumsum
cumprod all any""".split()
SHAPE = """reshape view flatten squeeze unsqueeze expand broadcast_to transpose permute swapaxes
movedim flip roll repeat tile cat concatenate stack split chunk pad tril triu diag diagonal
gather scatter_add index_select take_along_dim masked_fill nonzero masked_select unique sort
argsort topk""".split()
LINALG = "matmul dot outer tensordot einsum trace".split()
FUNCTIONAL = """linear conv1d conv2d max_pool2d avg_pool2d adaptive_avg_pool2d softmax
log_softmax cross_entropy nll_loss mse_loss l1_loss binary_cross_entropy
binary_cross_entropy_with_logits layer_norm batch_norm dropout embedding
scaled_dot_product_attention one_hot interpolate conv_transpose2d group_norm unfold relu gelu
silu elu leaky_relu tanh sigmoid softplus logsigmoid""".split()


def _cases(**cases):
    return pytest.mark.parametrize("case", list(cases.values()), ids=list(cases))


@pytest.mark.parametrize("name", ELEMENTWISE + REDUCTIONS + SHAPE + LINALG)
def test_listed_op_exists_as_function_and_method(name):
    assert callable(getattr(tg, name))
    if hasattr(torch.Tensor, name):
        assert callable(getattr(tg.Tensor, name)), name


def test_linalg_and_functional_names():
    for name in "norm inv solve det slogdet cholesky".split():
        assert callable(getattr(tg.linalg, name))
    for name in FUNCTIONAL:
        assert callable(getattr(tg.nn.functional, name)), name


# ---------------------------------------------------------------- elementwise
E = [-2.5, -0.5, 0.0, 0.5, 1.5, 2.5]


@pytest.mark.parametrize("name", """sign exp exp2 log1p expm1 square sin cos tan arctan sinh
cosh tanh sigmoid erf floor ceil round isnan isinf isfinite logical_not abs neg relu""".split())
def test_unary_as_torch(name):
    same(lambda M: getattr(M, name)(M.tensor(E)), rtol=1e-5)
    same(lambda M: getattr(M, name)(M.tensor([-2, 0, 3])), rtol=1e-5)


@pytest.mark.parametrize("name", "log log2 log10 sqrt rsqrt reciprocal arcsin arccos".split())
def test_unary_domain_as_torch(name):
    same(lambda M: getattr(M, name)(M.tensor([0.25, 0.5, 1.0])), rtol=1e-5)
    same(lambda M: getattr(M, name)(M.tensor([1, 4])), rtol=1e-5)


def F(M):
    return M.nn.functional


@_cases(
    logsigmoid=lambda M: F(M).logsigmoid(M.tensor(E)),
    leaky_relu=lambda M: F(M).leaky_relu(M.tensor(E)),
    leaky_relu_slope=lambda M: F(M).leaky_relu(M.tensor(E), negative_slope=0.2),
    elu=lambda M: F(M).elu(M.tensor(E), alpha=0.5),
    gelu=lambda M: F(M).gelu(M.tensor(E)),
    gelu_tanh=lambda M: F(M).gelu(M.tensor(E), approximate="tanh"),
    gelu_bad_approximate=lambda M: F(M).gelu(M.tensor(E), approximate="foo"),
    silu=lambda M: F(M).silu(M.tensor(E)),
    softplus=lambda M: F(M).softplus(M.tensor(E), beta=2, threshold=1),
    relu_int=lambda M: M.relu(M.tensor([-1, 1])),
    sigmoid_int=lambda M: M.sigmoid(M.tensor([1])),
    round_half_even=lambda M: M.round(M.tensor([0.5, 1.5, 2.5])),
    round_decimals=lambda M: M.round(M.tensor([1.2345, 2.5]), decimals=2),
    clamp=lambda M: M.clamp(M.tensor(E), -1, 1),
    clamp_min=lambda M: M.clamp(M.tensor(E), min=0),
    clamp_max_method=lambda M: M.tensor(E).clamp(max=0),
    clamp_tensors=lambda M: M.clamp(M.tensor(E), M.zeros(6), M.ones(6)),
    clamp_int_float_bound=lambda M: M.clamp(M.tensor([1, 5]), 0, 2.5),
    clip=lambda M: M.clip(M.tensor(E), -1, 1),
    where=lambda M: M.where(M.tensor(E) > 0, M.tensor(E), M.zeros(6)),
    where_scalar=lambda M: M.where(M.tensor(E) > 0, M.tensor(E), 0.0),
    where_scalars=lambda M: M.where(M.tensor(E) > 0, 1, 0),
    where_one_arg=lambda M: M.where(M.tensor(E) > 0),
    where_float_condition=lambda M: M.where(M.tensor(E), M.tensor(E), M.tensor(E)),
    maximum_int_float=lambda M: M.maximum(M.tensor([1, 2]), M.tensor([1.5, 0.0])),
    logaddexp=lambda M: M.logaddexp(M.tensor(E), M.zeros(6)),
    arctan2_int=lambda M: M.arctan2(M.tensor([1]), M.tensor([2])),
    pow_scalar_base=lambda M: M.pow(2, M.tensor([2.0, 3.0])),
    remainder=lambda M: M.remainder(M.tensor([-3.0, 3.0]), 2),
    remainder_int=lambda M: M.remainder(M.tensor([-3, 3]), 2),
    floor_divide=lambda M: M.floor_divide(M.tensor([-3.0, 3.0]), 2),
    div_trunc=lambda M: M.div(M.tensor([-3.0, 3.0]), 2, rounding_mode="trunc"),
    div_floor_int=lambda M: M.div(M.tensor([-3, 3]), 2, rounding_mode="floor"),
    div_int=lambda M: M.div(M.tensor([-3, 3]), 2),
    true_divide_int=lambda M: M.true_divide(M.tensor([-3, 3]), 2),
    add_alpha=lambda M: M.add(M.tensor(E), M.tensor(E), alpha=2),
    logical_and_int=lambda M: M.logical_and(M.tensor([0, 2]), M.tensor([1, 1])),
    sign_bool=lambda M: M.sign(M.tensor([True, False])),
    bitwise_float=lambda M: M.tensor([1.0]) & M.tensor([1.0]),
)
def test_elementwise_as_torch(case):
    same(case, rtol=1e-5)


# ---------------------------------------------------------------- reductions
def X(M):
    return M.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])


def INT(M):
    return M.tensor([[1, 5, 3], [4, 2, 6]])


@pytest.mark.parametrize("name", "sum mean prod amax amin norm all any".split())
def test_reduction_dims_and_aliases(name):
    f = lambda M, *a, **k: getattr(M, name)(X(M), *a, **k)  # noqa: E731
    same(lambda M: f(M))
    same(lambda M: f(M, dim=1))
    same(lambda M: f(M, 1, keepdim=True))
    same(lambda M: f(M, dim=2))
    same(lambda M: getattr(M, name)(INT(M)))
    if name != "prod":
        same(lambda M: f(M, dim=(0, 1)))
    ours = getattr(tg, name)
    np.testing.assert_array_equal(ours(X(tg), axis=1, keepdims=True).numpy(),
                                  ours(X(tg), dim=1, keepdim=True).numpy())


@_cases(
    max_all=lambda M: M.max(X(M)),
    max_dim=lambda M: M.max(X(M), dim=1),
    max_dim_fields=lambda M: (M.max(X(M), 1).values, M.max(X(M), 1).indices),
    max_binary=lambda M: M.max(X(M), M.ones(2, 3) * 3),
    min_keepdim=lambda M: X(M).min(0, keepdim=True),
    argmax=lambda M: M.argmax(X(M)),
    argmax_dim=lambda M: M.argmax(X(M), dim=1),
    argmin_keepdim=lambda M: M.argmin(X(M), dim=1, keepdim=True),
    argmax_empty=lambda M: M.argmax(M.zeros(0)),
    max_empty=lambda M: M.max(M.zeros(0)),
    mean_int=lambda M: M.mean(INT(M)),
    mean_int_dtype=lambda M: M.mean(INT(M), dtype=M.float64),
    sum_int=lambda M: M.sum(INT(M)),
    sum_bool=lambda M: M.sum(M.tensor([True, True])),
    sum_int32=lambda M: M.sum(M.tensor([1, 2], dtype=M.int32)),
    prod_int32=lambda M: M.prod(M.tensor([1, 2], dtype=M.int32)),
    cumsum_int32=lambda M: M.cumsum(M.tensor([1, 2], dtype=M.int32), 0),
    cumsum_dim=lambda M: M.cumsum(X(M), dim=1),
    cumprod=lambda M: M.cumprod(X(M), 1),
    var=lambda M: M.var(X(M)),
    var_dim=lambda M: M.var(X(M), 1),
    var_unbiased=lambda M: M.var(X(M), 1, unbiased=False),
    var_correction=lambda M: M.var(X(M), dim=1, correction=0),
    var_int=lambda M: M.var(INT(M)),
    std=lambda M: M.std(X(M)),
    std_keepdim=lambda M: M.std(X(M), dim=0, keepdim=True),
    var_mean=lambda M: M.var_mean(X(M), 1),
    std_mean=lambda M: M.std_mean(X(M), 1),
    norm_p1=lambda M: M.norm(X(M), p=1),
    norm_inf_dim=lambda M: M.norm(X(M), p=float("inf"), dim=1),
    norm_int=lambda M: M.norm(INT(M)),
    logsumexp=lambda M: M.logsumexp(X(M), 1),
    logsumexp_keepdim=lambda M: M.logsumexp(X(M), dim=0, keepdim=True),
    logsumexp_int=lambda M: M.logsumexp(INT(M), 1),
    median=lambda M: M.median(X(M)),
    median_dim=lambda M: M.median(X(M), 1),
    all_float=lambda M: M.all(X(M)),
    any_dim=lambda M: M.any(X(M) > 4, dim=1),
    sum_empty=lambda M: M.sum(M.zeros(0)),
)
def test_reductions_as_torch(case):
    same(case, rtol=1e-5)


def test_mean_of_integers_raises_runtime_error_naming_the_op():
    with pytest.raises(RuntimeError, match="mean"):
        tg.tensor([1, 2]).mean()
    with pytest.raises(TypeError):  # the class this library raised before, kept
        tg.tensor([1, 2]).mean()


# ---------------------------------------------------------------- shape and indexing
def A(M):
    return M.arange(24.0).reshape(2, 3, 4)


@_cases(
    reshape=lambda M: A(M).reshape(-1, 4),
    reshape_tuple=lambda M: M.reshape(A(M), (4, 6)),
    reshape_bad=lambda M: A(M).reshape(5, 5),
    view=lambda M: A(M).view(6, 4),
    view_non_contiguous=lambda M: A(M).transpose(0, 2).view(-1),
    flatten=lambda M: M.flatten(A(M)),
    flatten_dims=lambda M: M.flatten(A(M), start_dim=0, end_dim=1),
    squeeze=lambda M: M.zeros(1, 3, 1).squeeze(),
    squeeze_dim=lambda M: M.zeros(1, 3, 1).squeeze(0),
    squeeze_non_one=lambda M: M.zeros(1, 3, 1).squeeze(1),
    squeeze_tuple=lambda M: M.zeros(1, 3, 1).squeeze((0, 2)),
    unsqueeze=lambda M: M.zeros(2, 3).unsqueeze(-1),
    unsqueeze_bad=lambda M: M.zeros(2, 3).unsqueeze(4),
    expand_keep=lambda M: M.zeros(3, 1).expand(-1, 4),
    expand_new=lambda M: M.zeros(3, 1).expand((2, 3, 4)),
    expand_bad=lambda M: M.zeros(3, 2).expand(3, 4),
    broadcast_to=lambda M: M.broadcast_to(M.zeros(3, 1), (3, 4)),
    transpose=lambda M: A(M).transpose(0, 2),
    t=lambda M: M.zeros(2, 3).t(),
    permute=lambda M: A(M).permute(2, 0, 1),
    permute_tuple=lambda M: A(M).permute((2, 0, 1)),
    permute_bad=lambda M: A(M).permute(0, 1),
    swapaxes=lambda M: M.swapaxes(A(M), 0, 1),
    movedim=lambda M: M.movedim(A(M), (0, 1), (2, 0)),
    flip=lambda M: M.flip(A(M), (0, 2)),
    roll=lambda M: M.roll(A(M), 1, 2),
    roll_flat=lambda M: M.roll(A(M), 1),
    roll_tuple=lambda M: M.roll(A(M), (1, 2), (0, 2)),
    repeat_tiles=lambda M: M.tensor([1, 2]).repeat(2, 2),
    repeat_tuple=lambda M: M.tensor([1, 2]).repeat((3,)),
    repeat_interleave=lambda M: M.repeat_interleave(M.tensor([1, 2]), 2),
    tile_fewer=lambda M: M.tile(A(M), (2,)),
    cat=lambda M: M.cat([M.zeros(2, 3), M.ones(1, 3)]),
    cat_dim=lambda M: M.cat((M.zeros(2, 3), M.ones(2, 1)), dim=1),
    cat_promotes=lambda M: M.cat([M.zeros(2), M.ones(2, dtype=M.int64)]),
    cat_bad=lambda M: M.cat([M.zeros(2, 3), M.ones(2, 4)]),
    cat_empty=lambda M: M.cat([]),
    concatenate=lambda M: M.concatenate([M.zeros(2, 3), M.ones(2, 3)], axis=1),
    stack=lambda M: M.stack([M.zeros(3), M.ones(3)], dim=1),
    stack_bad=lambda M: M.stack([M.zeros(3), M.ones(2)]),
    split=lambda M: M.split(M.arange(5), 2),
    split_sizes=lambda M: M.split(M.arange(5), [1, 4]),
    split_method=lambda M: M.arange(6).reshape(2, 3).split(1, dim=1),
    split_bad_sizes=lambda M: M.split(M.arange(5), [1, 3]),
    chunk=lambda M: M.chunk(M.arange(6), 4),
    unbind=lambda M: M.unbind(M.arange(6).reshape(2, 3), 1),
    pad=lambda M: F(M).pad(A(M), (1, 2)),
    pad_two_dims=lambda M: F(M).pad(A(M), (1, 2, 0, 1), value=-1.0),
    pad_reflect=lambda M: F(M).pad(A(M), (1, 1), mode="reflect"),
    pad_replicate=lambda M: F(M).pad(A(M), (1, 1), mode="replicate"),
    pad_circular=lambda M: F(M).pad(A(M), (1, 1), mode="circular"),
    pad_negative=lambda M: F(M).pad(A(M), (-1, 1)),
    pad_odd=lambda M: F(M).pad(A(M), (1,)),
    tril=lambda M: M.tril(M.ones(3, 3), -1),
    triu=lambda M: M.triu(M.ones(3, 3), diagonal=1),
    diag_vector=lambda M: M.diag(M.tensor([1, 2])),
    diag_matrix=lambda M: M.diag(M.arange(9).reshape(3, 3), 1),
    diagonal=lambda M: M.diagonal(A(M), offset=1, dim1=1, dim2=2),
    gather=lambda M: M.gather(M.arange(6.0).reshape(2, 3), 1, M.tensor([[0, 0], [2, 1]])),
    gather_out_of_range=lambda M: M.gather(M.arange(6.0).reshape(2, 3), 1,
                                           M.tensor([[0, 5], [2, 1]])),
    gather_float_index=lambda M: M.gather(M.arange(6.0).reshape(2, 3), 1,
                                          M.tensor([[0.0, 0.0]])),
    scatter_add=lambda M: M.scatter_add(M.zeros(2, 3), 1, M.tensor([[0, 0], [2, 1]]),
                                        M.ones(2, 2)),
    index_select=lambda M: M.index_select(A(M), 1, M.tensor([2, 0])),
    index_select_out_of_range=lambda M: M.index_select(A(M), 1, M.tensor([3])),
    take_along_dim=lambda M: M.take_along_dim(A(M), M.argmax(A(M), 2, keepdim=True), 2),
    take_along_dim_flat=lambda M: M.take_along_dim(A(M), M.tensor([0, 5])),
    masked_fill=lambda M: M.masked_fill(A(M), A(M) > 10, -1.0),
    masked_fill_float_mask=lambda M: A(M).masked_fill(A(M), 0),
    nonzero=lambda M: M.nonzero(M.tensor([[0, 1], [1, 1]])),
    nonzero_tuple=lambda M: M.nonzero(M.tensor([[0, 1], [1, 1]]), as_tuple=True),
    masked_select=lambda M: M.masked_select(A(M), A(M) > 20),
    unique=lambda M: M.unique(M.tensor([3, 1, 3, 2])),
    unique_inverse_counts=lambda M: M.unique(M.tensor([3, 1, 3, 2]), return_inverse=True,
                                             return_counts=True),
    unique_dim=lambda M: M.unique(M.tensor([[1, 2], [1, 2], [0, 1]]), dim=0),
    sort=lambda M: M.sort(M.tensor([3.0, 1.0, 2.0])),
    sort_descending=lambda M: M.sort(M.tensor([[3.0, 1.0, 2.0]]), dim=1, descending=True),
    sort_stable=lambda M: M.sort(M.tensor([1, 0, 1, 0]), stable=True),
    sort_fields=lambda M: (M.sort(M.tensor([3.0, 1.0])).values,
                           M.sort(M.tensor([3.0, 1.0])).indices),
    argsort=lambda M: M.argsort(M.tensor([3.0, 1.0, 2.0]), descending=True),
    topk=lambda M: M.topk(M.tensor([3.0, 1.0, 2.0, 5.0]), 2),
    topk_smallest=lambda M: M.topk(M.tensor([3.0, 1.0, 2.0, 5.0]), 2, largest=False),
    topk_too_many=lambda M: M.topk(M.tensor([3.0, 1.0]), 3),
)
def test_shape_and_indexing_as_torch(case):
    same(case)


# ---------------------------------------------------------------- linear algebra
def SPD(M):
    return M.tensor([[4.0, 1.0], [1.0, 3.0]])


@_cases(
    matmul_batched=lambda M: M.matmul(M.ones(2, 2, 3), M.ones(3)),
    dot=lambda M: M.dot(M.tensor([1.0, 2.0]), M.tensor([3.0, 4.0])),
    dot_int=lambda M: M.dot(M.tensor([1, 2]), M.tensor([3, 4])),
    dot_matrix=lambda M: M.dot(M.ones(2, 2), M.ones(2)),
    dot_mixed=lambda M: M.dot(M.tensor([1, 2]), M.tensor([3.0, 4.0])),
    outer=lambda M: M.outer(M.tensor([1.0, 2.0]), M.tensor([3.0, 4.0, 5.0])),
    tensordot=lambda M: M.tensordot(A(M), M.ones(3, 4), dims=2),
    tensordot_lists=lambda M: M.tensordot(A(M), M.ones(4, 3), dims=([1, 2], [1, 0])),
    einsum=lambda M: M.einsum("ijk,kl->ijl", A(M), M.ones(4, 2)),
    einsum_list=lambda M: M.einsum("ij,jk", [M.ones(2, 3), M.ones(3, 2)]),
    trace=lambda M: M.trace(M.arange(9.0).reshape(3, 3)),
    trace_int=lambda M: M.trace(M.arange(9).reshape(3, 3)),
    inv=lambda M: M.linalg.inv(SPD(M)),
    det=lambda M: M.linalg.det(SPD(M)),
    cholesky=lambda M: M.linalg.cholesky(SPD(M)),
    slogdet=lambda M: M.linalg.slogdet(SPD(M)),
    slogdet_fields=lambda M: (M.linalg.slogdet(SPD(M)).sign,
                              M.linalg.slogdet(SPD(M)).logabsdet),
    solve=lambda M: M.linalg.solve(SPD(M), M.tensor([1.0, 2.0])),
    norm=lambda M: M.linalg.norm(SPD(M)),
    norm_vector=lambda M: M.linalg.norm(M.tensor([3.0, 4.0])),
    norm_dim=lambda M: M.linalg.norm(SPD(M), dim=1),
    norm_spectral=lambda M: M.linalg.norm(SPD(M), ord=2),
    norm_smallest_singular=lambda M: M.linalg.norm(SPD(M), ord=-2),
    norm_nuclear=lambda M: M.linalg.norm(SPD(M), ord="nuc"),
    matrix_norm_dims=lambda M: M.linalg.matrix_norm(A(M), ord="nuc", dim=(0, 2), keepdim=True),
    inv_singular=lambda M: M.linalg.inv(M.zeros(2, 2)),
    inv_not_square=lambda M: M.linalg.inv(M.zeros(2, 3)),
    inv_int=lambda M: M.linalg.inv(M.eye(2, dtype=M.int64)),
    cholesky_not_pd=lambda M: M.linalg.cholesky(M.tensor([[1.0, 2.0], [2.0, 1.0]])),
)
def test_linear_algebra_as_torch(case):
    same(case, rtol=1e-5)


def test_singular_value_norms_differentiate_as_torch():
    a = np.random.default_rng(0).standard_normal((2, 3, 4))
    for ord in (2, -2, "nuc"):
        t = torch.tensor(a, requires_grad=True)
        x = tg.tensor(a, requires_grad=True)
        torch.linalg.matrix_norm(t, ord).sum().backward()
        tg.linalg.matrix_norm(x, ord).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-12)


QN = np.random.default_rng(0).standard_normal((3, 5, 4))
QN[1, 2, 0] = np.nan
QN[2, :, 3] = np.nan


@pytest.mark.parametrize("name", ["quantile", "nanquantile"])
@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantiles_as_torch(name, interpolation):
    for q in (0.3, [0.0, 0.5, 1.0]):
        for dim, keepdim in [(None, False), (None, True), (1, False), (-1, True)]:
            same(lambda M: getattr(M, name)(
                M.tensor(QN), M.tensor(q, dtype=M.float64) if isinstance(q, list) else q,
                dim=dim, keepdim=keepdim, interpolation=interpolation), rtol=1e-12)


def _quantile_grad(M):
    x = M.tensor(QN[0], requires_grad=True)
    x.quantile(M.tensor([0.25, 0.7], dtype=M.float64), dim=1).sum().backward()
    return x.grad


@_cases(
    gradient=_quantile_grad,
    integer_input=lambda M: M.quantile(M.tensor([1, 2]), 0.5),
    q_out_of_range=lambda M: M.quantile(M.tensor(QN), 1.5),
    q_matrix=lambda M: M.quantile(M.tensor(QN), M.tensor([[0.5]], dtype=M.float64)),
    q_other_dtype=lambda M: M.quantile(M.tensor(QN), M.tensor([0.5])),
    bad_interpolation=lambda M: M.quantile(M.tensor(QN), 0.5, interpolation="cubic"),
    empty=lambda M: M.quantile(M.zeros(0), 0.5),
    zero_d=lambda M: M.quantile(M.tensor(3.0), M.tensor([0.2, 0.5]), keepdim=True),
    infinities=lambda M: M.nanquantile(M.tensor([[np.nan, -np.inf, 1.0, 2.0]]), 0.25, dim=1),
)
def test_quantile_edges_as_torch(case):
    same(case)


IDX = tg.tensor([[0], [1], [2]])


@pytest.mark.parametrize("name,args", [
    ("softmax", ()), ("log_softmax", ()), ("sort", ()), ("argsort", ()), ("topk", (2,)),
    ("split", (2,)), ("chunk", (2,)), ("unsqueeze", ()), ("median", ()), ("diff", ()),
    ("count_nonzero", ()), ("nansum", ()), ("cumsum", ()), ("quantile", (0.5,)),
    ("take_along_dim", (IDX,))])
def test_axis_is_an_alias_of_dim(name, args):
    x = tg.arange(12.0).reshape(3, 4)
    f = getattr(tg, name)
    want, got, method = f(x, *args, dim=1), f(x, *args, axis=1), getattr(x, name)(*args, axis=1)
    for r in (got, method):
        for w, g in zip(want if isinstance(want, tuple) else (want,),
                        r if isinstance(r, tuple) else (r,)):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    with pytest.raises(TypeError):
        f(x, *args, dim=1, axis=1)


def test_axis_alias_where_dim_comes_before_the_index():
    x = tg.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(tg.gather(x, axis=1, index=IDX).numpy(),
                                  tg.gather(x, 1, IDX).numpy())
    np.testing.assert_array_equal(tg.index_select(x, axis=1, index=tg.tensor([0, 2])).numpy(),
                                  tg.index_select(x, 1, tg.tensor([0, 2])).numpy())
    assert tg.squeeze(x[None], axis=0).shape == (3, 4)


def test_keepdims_is_an_alias_of_keepdim():
    x = tg.arange(12.0).reshape(3, 4)
    for name in ["median", "nansum", "logsumexp", "quantile"]:
        a = (0.5,) if name == "quantile" else ()
        want = getattr(tg, name)(x, *a, dim=1, keepdim=True)
        got = getattr(tg, name)(x, *a, axis=1, keepdims=True)
        w = want[0] if isinstance(want, tuple) else want
        g = got[0] if isinstance(got, tuple) else got
        assert g.shape == w.shape == (3, 1)
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert x.median(1, keepdims=True).values.shape == (3, 1)


@pytest.mark.parametrize("shape,dim", [((0,), None), ((0, 3), 1), ((0, 3), 0), ((2, 0), 1)])
def test_mean_of_empty_is_nan_without_warnings(shape, dim):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same(lambda M: M.zeros(*shape).mean(dim) if dim is not None else M.zeros(*shape).mean())
