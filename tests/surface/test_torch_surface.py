"""Coverage of PyTorch's everyday ``torch.*`` functions and Tensor methods
(``torch_surface.py``: the rule and the frozen lists).

A name counts when it exists in tapegrad AND its smoke call runs and agrees with
PyTorch's: every smoke is one expression evaluated twice, with ``L`` bound to
``tapegrad`` and to ``torch`` on the same NumPy samples, and the two results are
compared (shapes, dtypes, values; shapes and dtypes only for random draws). A method
without a smoke of its own takes its function's (``L.foo(x, a)`` -> ``x.foo(a)``), an
in-place method its out-of-place method's (on a clone), anything else is called
without arguments (or read, for an attribute). Run with ``-s`` to see the figures
and the missing names.
"""
import os
import sys
import tempfile
import warnings

import numpy as np
import pytest
import torch

import tapegrad as tg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_surface as surface  # noqa: E402

TARGET_FUNCTIONS = 0.85
TARGET_METHODS = 0.75


# ------------------------------------------------------------------ samples
def _samples():
    r = np.random.default_rng(7)
    a = r.uniform(0.1, 0.9, (4, 4))
    return {
        "x": r.uniform(0.1, 0.9, (3, 4)), "y": r.uniform(0.1, 0.9, (3, 4)),
        "v": r.uniform(0.1, 0.9, (4,)), "w": r.uniform(0.1, 0.9, (4,)),
        "v3": r.uniform(0.1, 0.9, (3,)), "z": r.uniform(0.1, 0.9, (3, 5)),
        "q": r.uniform(0.1, 0.9, (4, 5)),
        "m": a @ a.T + 4 * np.eye(4), "a3": r.uniform(0.1, 0.9, (2, 3, 4)),
        "b3": r.uniform(0.1, 0.9, (2, 4, 5)),
        "i": r.integers(0, 4, (3, 4)), "iv": np.array([0, 2]),
        "ip": np.argsort(r.uniform(size=(3, 4)), axis=1),
    }


_NP = _samples()


def _env(L):
    env = {k: L.tensor(v) for k, v in _NP.items()}
    env.update(L=L, a=_NP["x"].copy(), off=_grad_off, saveload=_saveload, hook=_hook,
               bw=_backward, set_dt=_set_dt, np=np)
    return env


def _grad_off(L, cm):
    with cm:
        return (L.ones(2, requires_grad=True) * 2).requires_grad


def _saveload(L, x):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.pt")
        L.save({"x": x}, path)
        return L.load(path)["x"]


def _hook(L, which):
    p = L.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    if which == "register_hook":
        p.register_hook(lambda g: seen.append(g * 1))
    elif which == "retain_grad":
        q = p * 3
        q.retain_grad()
        q.sum().backward()
        return q.grad
    else:
        p.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad * 1))
    (p * p).sum().backward()
    return seen[0]


def _backward(L):
    p = L.tensor([1.0, 2.0], requires_grad=True)
    (p * p).sum().backward()
    return p.grad


def _set_dt(L):
    old = L.get_default_dtype()
    L.set_default_dtype(L.float64)
    try:
        return L.tensor([1.0]).dtype
    finally:
        L.set_default_dtype(old)


# ------------------------------------------------------------------ smokes
# function smokes; absent: L.<name>(x)
FUNCTION_SMOKE = {
    "is_nonzero": "L.is_nonzero(L.tensor([1.5]))", "set_default_dtype": "set_dt(L)",
    "get_default_dtype": "L.get_default_dtype()",
    "set_printoptions": "(L.set_printoptions(precision=3), "
                        "L.set_printoptions(profile='default'))[1]",
    "tensor": "L.tensor([[1.0, 2.0]])", "asarray": "L.asarray(a)", "as_tensor": "L.as_tensor(a)",
    "from_numpy": "L.from_numpy(a.copy())", "from_dlpack": "L.from_dlpack(L.tensor(a))",
    "zeros": "L.zeros(2, 3)", "ones": "L.ones(2, 3)", "arange": "L.arange(0, 5, 2)",
    "range": "L.range(0, 4)", "linspace": "L.linspace(0, 1, 5)", "logspace": "L.logspace(0, 2, 3)",
    "eye": "L.eye(3)", "empty": "L.empty(2, 3).shape", "empty_like": "L.empty_like(x).shape",
    "full": "L.full((2, 3), 1.5)", "full_like": "L.full_like(x, 2.0)",
    "heaviside": "L.heaviside(x - 0.5, y)", "argwhere": "L.argwhere(x > 0.5)",
    "cat": "L.cat([x, y], 1)", "concat": "L.concat([x, y], 1)",
    "concatenate": "L.concatenate([x, y], 1)", "chunk": "L.chunk(x, 2, 1)",
    "dsplit": "L.dsplit(a3, 2)", "column_stack": "L.column_stack([v, w])",
    "dstack": "L.dstack([x, y])", "gather": "L.gather(x, 1, i)", "hsplit": "L.hsplit(x, 2)",
    "hstack": "L.hstack([x, y])", "index_add": "L.index_add(x, 0, iv, y[:2])",
    "index_copy": "L.index_copy(x, 0, iv, y[:2])",
    "index_reduce": "L.index_reduce(x, 0, iv, y[:2], 'prod')",
    "index_select": "L.index_select(x, 1, iv)", "masked_select": "L.masked_select(x, x > 0.5)",
    "movedim": "L.movedim(a3, 0, 2)", "moveaxis": "L.moveaxis(a3, 0, 2)",
    "narrow": "L.narrow(x, 1, 1, 2)", "narrow_copy": "L.narrow_copy(x, 1, 1, 2)",
    "nonzero": "L.nonzero(x > 0.5)", "permute": "L.permute(a3, (2, 0, 1))",
    "reshape": "L.reshape(x, (4, 3))", "row_stack": "L.row_stack([v, w])",
    "select": "L.select(x, 1, 2)", "scatter": "L.scatter(x, 1, ip, y)",
    "diagonal_scatter": "L.diagonal_scatter(m, v)",
    "select_scatter": "L.select_scatter(x, v3, 1, 0)",
    "slice_scatter": "L.slice_scatter(x, y[:, :2], 1, 0, 2)",
    "scatter_add": "L.scatter_add(x, 1, i, y)",
    "scatter_reduce": "L.scatter_reduce(x, 1, i, y, 'amax')",
    "segment_reduce": "L.segment_reduce(v, 'sum', lengths=L.tensor([1, 3]))",
    "split": "L.split(x, 2, 1)", "squeeze": "L.squeeze(x[:1])", "stack": "L.stack([x, y])",
    "swapaxes": "L.swapaxes(x, 0, 1)", "swapdims": "L.swapdims(x, 0, 1)",
    "take": "L.take(x, iv)", "take_along_dim": "L.take_along_dim(x, i, 1)",
    "tensor_split": "L.tensor_split(x, 3, 1)", "tile": "L.tile(x, (2, 1))",
    "transpose": "L.transpose(x, 0, 1)",
    "unravel_index": "L.unravel_index(L.tensor([5, 7]), (3, 4))",
    "unsqueeze": "L.unsqueeze(x, 0)", "vsplit": "L.vsplit(a3, 2)",
    "where": "L.where(x > 0.5, x, y)", "vstack": "L.vstack([x, y])", "vander": "L.vander(v)",
    "seed": "isinstance(L.seed(), int)", "manual_seed": "(L.manual_seed(3), 1)[1]",
    "initial_seed": "isinstance(L.initial_seed(), int)",
    "get_rng_state": "L.get_rng_state() is not None",
    "set_rng_state": "L.set_rng_state(L.get_rng_state())",
    "bernoulli": "L.bernoulli(x)", "multinomial": "L.multinomial(v, 2)",
    "normal": "L.normal(x, y)", "poisson": "L.poisson(x)", "rand": "L.rand(2, 3)",
    "randint": "L.randint(0, 5, (2, 3))", "randint_like": "L.randint_like(x, 5)",
    "randn": "L.randn(2, 3)", "randperm": "L.randperm(5)",
    "save": "saveload(L, x)", "load": "saveload(L, x)",
    "get_num_threads": "isinstance(L.get_num_threads(), int)",
    "set_num_threads": "L.set_num_threads(L.get_num_threads())",
    "get_num_interop_threads": "isinstance(L.get_num_interop_threads(), int)",
    "set_num_interop_threads": "callable(L.set_num_interop_threads)",
    "no_grad": "off(L, L.no_grad())", "enable_grad": "off(L, L.enable_grad())",
    "set_grad_enabled": "off(L, L.set_grad_enabled(False))",
    "is_grad_enabled": "L.is_grad_enabled()", "inference_mode": "off(L, L.inference_mode())",
    "is_inference_mode_enabled": "L.is_inference_mode_enabled()",
    "acosh": "L.acosh(x + 1)", "arccosh": "L.arccosh(x + 1)", "add": "L.add(x, y)",
    "addcdiv": "L.addcdiv(x, y, x + 1, value=0.5)", "addcmul": "L.addcmul(x, y, x, value=0.5)",
    "atan2": "L.atan2(x, y)", "arctan2": "L.arctan2(x, y)", "bitwise_not": "L.bitwise_not(i)",
    "bitwise_and": "L.bitwise_and(i, i + 1)", "bitwise_or": "L.bitwise_or(i, i + 1)",
    "bitwise_xor": "L.bitwise_xor(i, i + 1)",
    "bitwise_left_shift": "L.bitwise_left_shift(i, 2)",
    "bitwise_right_shift": "L.bitwise_right_shift(i, 1)", "clamp": "L.clamp(x, 0.3, 0.7)",
    "clip": "L.clip(x, 0.3, 0.7)", "copysign": "L.copysign(x, y - 0.5)",
    "div": "L.div(x, y)", "divide": "L.divide(x, y)", "float_power": "L.float_power(x, 2)",
    "floor_divide": "L.floor_divide(x, y)", "fmod": "L.fmod(x, y)", "frac": "L.frac(x * 3)",
    "gradient": "L.gradient(v)", "ldexp": "L.ldexp(x, i)", "lerp": "L.lerp(x, y, 0.3)",
    "logaddexp": "L.logaddexp(x, y)", "logaddexp2": "L.logaddexp2(x, y)",
    "logical_and": "L.logical_and(x > 0.5, y > 0.5)", "logical_not": "L.logical_not(x > 0.5)",
    "logical_or": "L.logical_or(x > 0.5, y > 0.5)",
    "logical_xor": "L.logical_xor(x > 0.5, y > 0.5)", "hypot": "L.hypot(x, y)",
    "igamma": "L.igamma(x, y)", "igammac": "L.igammac(x, y)", "mul": "L.mul(x, y)",
    "multiply": "L.multiply(x, y)", "mvlgamma": "L.mvlgamma(x + 2, 2)",
    "nan_to_num": "L.nan_to_num(L.log(x - 0.5))", "nextafter": "L.nextafter(x, y)",
    "polygamma": "L.polygamma(1, x)", "pow": "L.pow(x, 3)", "remainder": "L.remainder(x, y)",
    "sign": "L.sign(x - 0.5)", "sgn": "L.sgn(x - 0.5)", "signbit": "L.signbit(x - 0.5)",
    "softmax": "L.softmax(x, 1)", "sub": "L.sub(x, y)", "subtract": "L.subtract(x, y)",
    "true_divide": "L.true_divide(x, y)", "xlogy": "L.xlogy(x, y)",
    "amax": "L.amax(x, 1)", "amin": "L.amin(x, 1)", "all": "L.all(x > 0.2)",
    "any": "L.any(x > 0.8)", "dist": "L.dist(x, y)", "logsumexp": "L.logsumexp(x, 1)",
    "nanmean": "L.nanmean(L.log(x - 0.5))", "mode": "L.mode(i, 1)[0]",
    "unique": "L.unique(i)",
    "unique_consecutive": "L.unique_consecutive(L.tensor([1, 1, 2, 2, 3, 1]))",
    "count_nonzero": "L.count_nonzero(i)", "allclose": "L.allclose(x, y)",
    "eq": "L.eq(x, y)", "equal": "L.equal(x, x.clone())", "ge": "L.ge(x, y)",
    "greater_equal": "L.greater_equal(x, y)", "gt": "L.gt(x, y)", "greater": "L.greater(x, y)",
    "isclose": "L.isclose(x, y)", "isin": "L.isin(i, L.tensor([1, 2]))",
    "kthvalue": "L.kthvalue(x, 2, 1)", "le": "L.le(x, y)", "less_equal": "L.less_equal(x, y)",
    "lt": "L.lt(x, y)", "less": "L.less(x, y)", "maximum": "L.maximum(x, y)",
    "minimum": "L.minimum(x, y)", "fmax": "L.fmax(x, y)", "fmin": "L.fmin(x, y)",
    "ne": "L.ne(x, y)", "not_equal": "L.not_equal(x, y)", "topk": "L.topk(x, 2)",
    "atleast_1d": "L.atleast_1d(L.tensor(1.0))", "atleast_2d": "L.atleast_2d(v)",
    "atleast_3d": "L.atleast_3d(x)", "bincount": "L.bincount(i.flatten())",
    "block_diag": "L.block_diag(x, m)", "broadcast_tensors": "L.broadcast_tensors(x, v)",
    "broadcast_to": "L.broadcast_to(v, (3, 4))",
    "broadcast_shapes": "tuple(L.broadcast_shapes((3, 1), (1, 4)))",
    "bucketize": "L.bucketize(x, L.tensor([0.2, 0.5, 0.8], dtype=L.float64))",
    "cartesian_prod": "L.cartesian_prod(v, w)", "cdist": "L.cdist(x, y)",
    "combinations": "L.combinations(v)", "cross": "L.cross(x[:, :3], y[:, :3], dim=1)",
    "cummax": "L.cummax(x, 1)", "cummin": "L.cummin(x, 1)", "cumprod": "L.cumprod(x, 1)",
    "cumsum": "L.cumsum(x, 1)", "diagflat": "L.diagflat(v)",
    "einsum": "L.einsum('ij,kj->ik', x, y)", "flip": "L.flip(x, (0,))",
    "kron": "L.kron(x, y)", "gcd": "L.gcd(i, i + 2)", "histc": "L.histc(x, 4, 0, 1)",
    "histogram": "L.histogram(x, 4)", "histogramdd": "L.histogramdd(x, [2, 2, 2, 2])",
    "meshgrid": "L.meshgrid(v, w, indexing='ij')", "lcm": "L.lcm(i + 1, i + 2)",
    "logcumsumexp": "L.logcumsumexp(x, 1)", "renorm": "L.renorm(x, 2, 0, 1.0)",
    "repeat_interleave": "L.repeat_interleave(x, 2, 0)", "roll": "L.roll(x, 1, 1)",
    "searchsorted": "L.searchsorted(L.tensor([0.2, 0.5, 0.8], dtype=L.float64), x)",
    "tensordot": "L.tensordot(x, y.T, 1)", "unflatten": "L.unflatten(x, 1, (2, 2))",
    "addbmm": "L.addbmm(z, a3, b3)", "addmm": "L.addmm(z, x, q)",
    "addmv": "L.addmv(v3, x, v)", "addr": "L.addr(x, v3, v)",
    "baddbmm": "L.baddbmm(L.bmm(a3, b3), a3, b3)", "bmm": "L.bmm(a3, b3)",
    "chain_matmul": "L.chain_matmul(x, q, q.T)", "cholesky": "L.cholesky(m)",
    "cholesky_inverse": "L.cholesky_inverse(L.linalg.cholesky(m))",
    "cholesky_solve": "L.cholesky_solve(x.T, L.linalg.cholesky(m))", "dot": "L.dot(v, w)",
    "geqrf": "L.geqrf(m)", "ger": "L.ger(v, w)", "inner": "L.inner(x, y)",
    "inverse": "L.inverse(m)", "det": "L.det(m)", "logdet": "L.logdet(m)",
    "slogdet": "L.slogdet(m)", "lu": "L.lu(m)", "lu_solve": "L.lu_solve(x.T, *L.lu(m))",
    "lu_unpack": "L.lu_unpack(*L.lu(m))", "matmul": "L.matmul(x, q)",
    "matrix_power": "L.matrix_power(m, 3)", "matrix_exp": "L.matrix_exp(m * 0.1)",
    "mm": "L.mm(x, q)", "mv": "L.mv(x, v)", "orgqr": "L.orgqr(*L.geqrf(m))",
    "ormqr": "L.ormqr(*L.geqrf(m), x.T)", "outer": "L.outer(v, w)",
    "qr": "L.qr(m)", "svd": "L.svd(m)[1]", "svd_lowrank": "L.svd_lowrank(x, q=2)[1]",
    "pca_lowrank": "L.pca_lowrank(x, q=2)[1]", "lobpcg": "L.lobpcg(m, k=1)[0]",
    "triangular_solve": "L.triangular_solve(x.T, L.linalg.cholesky(m), upper=False)",
    "vdot": "L.vdot(v, w)", "result_type": "L.result_type(x, 1)",
    "can_cast": "L.can_cast(L.float64, L.int32)",
    "promote_types": "L.promote_types(L.float32, L.int64)", "vmap": "L.vmap(L.sum)(x)",
    "typename": "L.typename(x)",
}

# method smokes that are not their function's (or that have no function)
METHOD_SMOKE = {
    "apply_": "x.clone().apply_(lambda e: e * 2)",
    "map_": "x.clone().map_(y, lambda a, b: a + b)",
    "map2_": "x.clone().map2_(y, y, lambda a, b, c: a + b * c)",
    "backward": "bw(L)", "bernoulli_": "x.clone().bernoulli_(0.5)",
    "clamp_max": "x.clamp_max(0.5)", "clamp_min": "x.clamp_min(0.5)",
    "copy_": "x.clone().copy_(y)", "cuda": "callable(x.cuda)", "data": "x.data",
    "detach_": "x.clone().detach_()", "expand": "x[:1].expand(3, 4)",
    "expand_as": "x[:1].expand_as(y)", "fill_": "x.clone().fill_(2.0)",
    "fill_diagonal_": "x.clone().fill_diagonal_(5.0)",
    "geometric_": "x.clone().geometric_(0.5)", "index_fill": "x.index_fill(1, iv, -1.0)",
    "index_put": "x.index_put((iv,), v)", "is_same_size": "x.is_same_size(y)",
    "item": "x[0, 0].item()", "layout": "str(x.layout)",
    "masked_fill": "x.masked_fill(x > 0.5, 0.0)",
    "masked_scatter": "x.masked_scatter(x > 0.5, y)", "new": "x.new(2, 3).shape",
    "new_empty": "x.new_empty(2, 3).shape", "new_full": "x.new_full((2, 3), 1.5)",
    "new_ones": "x.new_ones(2, 3)", "new_tensor": "x.new_tensor([1, 2])",
    "new_zeros": "x.new_zeros(2, 3)", "nonzero_static": "(x > 0.5).nonzero_static(size=20)",
    "put": "x.put(iv, v[:2])", "random_": "x.clone().random_(0, 5)",
    "register_hook": "hook(L, 'register_hook')", "retain_grad": "hook(L, 'retain_grad')",
    "register_post_accumulate_grad_hook": "hook(L, 'post')",
    "repeat": "x.repeat(2, 1)", "requires_grad_": "x.clone().requires_grad_().requires_grad",
    "reshape_as": "x.reshape_as(x.T)", "sum_to_size": "x.sum_to_size(1, 4)",
    "to": "x.to(L.float32)", "type": "x.type()", "type_as": "x.type_as(i)",
    "unfold": "x.unfold(1, 2, 1)", "unsafe_chunk": "x.unsafe_chunk(2, 1)",
    "unsafe_split": "x.unsafe_split(2, 1)",
    "unsafe_split_with_sizes": "x.unsafe_split_with_sizes([1, 3], 1)",
    "split_with_sizes": "x.split_with_sizes([1, 3], 1)", "view": "x.view(4, 3)",
    "view_as": "x.view_as(x.T)", "zero_": "x.clone().zero_()", "log_softmax": "x.log_softmax(1)",
    "prelu": "x.prelu(L.tensor([0.25], dtype=L.float64))", "index": "callable(x.index)",
    "slice_inverse": "x[:, :2].slice_inverse(x, 1, 0, 2)",
    "hardshrink": "(x - 0.5).hardshrink(0.2)", "where": "x.where(x > 0.5, y)",
    "orgqr": "L.geqrf(m)[0].orgqr(L.geqrf(m)[1])",
    "ormqr": "L.geqrf(m)[0].ormqr(L.geqrf(m)[1], x.T)", "polygamma": "x.polygamma(1)",
    "polygamma_": "x.clone().polygamma_(1)", "svd": "m.svd()[1]",
    "bfloat16": "x.bfloat16().float()",  # (uniform_ draws: not compared)
    "normal_": "x.clone().normal_()", "cauchy_": "x.clone().cauchy_()",
    "exponential_": "x.clone().exponential_()", "log_normal_": "x.clone().log_normal_()",
}

RANDOM = {"bernoulli", "multinomial", "normal", "poisson", "rand", "rand_like", "randint",
          "randint_like", "randn", "randn_like", "randperm", "bernoulli_", "cauchy_",
          "exponential_", "geometric_", "log_normal_", "normal_", "random_", "uniform_",
          "svd_lowrank", "pca_lowrank", "lobpcg", "new", "empty", "empty_like"}


def _split_first(args):
    """``"x + 1, y"`` -> ``("x + 1", " y")``: the first top-level argument."""
    depth = 0
    for k, ch in enumerate(args):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            return args[:k], args[k + 1:]
    return args, ""


def _as_method(name, fsmoke):
    """``L.foo(x, a)`` -> ``x.foo(a)``; None if the smoke is not that shape."""
    head = f"L.{name}("
    if not fsmoke.startswith(head) or not fsmoke.endswith(")"):
        return None
    first, rest = _split_first(fsmoke[len(head):-1])
    if first.startswith("[") or "=" in first:
        return None
    first = first.strip()
    recv = first if first.isidentifier() else f"({first})"
    return f"{recv}.{name}({rest.strip()})"


def method_smoke(name):
    if name in METHOD_SMOKE:
        return METHOD_SMOKE[name]
    if name.endswith("_") and not name.endswith("__"):
        base = method_smoke(name[:-1])
        if base and f".{name[:-1]}(" in base:
            recv, rest = base.split(f".{name[:-1]}(", 1)
            return f"{recv}.clone().{name}({rest}"
        return f"x.clone().{name}()"
    if name in FUNCTION_SMOKE:
        m = _as_method(name, FUNCTION_SMOKE[name])
        if m:
            return m
    attr = getattr(torch.Tensor, name, None)
    if callable(attr) and not isinstance(attr, type):
        return f"x.{name}()"
    return f"x.{name}"


def function_smoke(name):
    return FUNCTION_SMOKE.get(name, f"L.{name}(x)")


# ------------------------------------------------------------------ comparison
def _plain(r):
    """A result in terms both libraries share."""
    if hasattr(r, "detach") and hasattr(r, "shape"):
        return ("T", str(r.dtype).rsplit(".", 1)[-1], np.asarray(r.detach().cpu().numpy()))
    if isinstance(r, (tuple, list)):
        return [_plain(e) for e in r]
    if hasattr(r, "is_floating_point") and hasattr(r, "itemsize"):  # a dtype
        return ("dtype", str(r).rsplit(".", 1)[-1])
    if isinstance(r, (bool, np.bool_)):
        return bool(r)
    if isinstance(r, (int, float, np.number)):
        return float(r)
    if r is None or isinstance(r, str):
        return r
    if type(r).__name__.lower() == "device":
        return ("device", str(r.type))
    return ("object",)


def _same(a, b, values=True):
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(p, q, values) for p, q in zip(a, b))
    if isinstance(a, tuple) and isinstance(b, tuple) and a[:1] == b[:1] == ("T",):
        if a[1] != b[1] or a[2].shape != b[2].shape:
            return False
        if not values:
            return True
        if a[2].dtype.kind in "biu":
            return np.array_equal(a[2], b[2])
        return np.allclose(a[2], b[2], rtol=1e-6, atol=1e-9, equal_nan=True)
    if isinstance(a, float) and isinstance(b, float):
        return not values or np.isclose(a, b, rtol=1e-6, atol=1e-9)
    return a == b


def _run(expr, L):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            return eval(expr, _env(L))  # noqa: S307 (the list's own expressions)


def check(kind, name):
    """'ok', 'missing', or 'broken: why' for one listed name."""
    where = tg if kind == "function" else tg.Tensor
    if not hasattr(where, name):
        return "missing"
    expr = function_smoke(name) if kind == "function" else method_smoke(name)
    want = _plain(_run(expr, torch))
    try:
        got = _plain(_run(expr, tg))
    except Exception as e:  # noqa: BLE001 (the report says what broke)
        return f"broken: {expr}: {type(e).__name__}: {str(e)[:120]}"
    if not _same(got, want, values=name.rstrip("_") not in RANDOM and name not in RANDOM):
        return f"broken: {expr}: differs from PyTorch"
    return "ok"


def _report(kind, res, target):
    ok = [n for n, s in res.items() if s == "ok"]
    frac = len(ok) / len(res)
    print(f"\n{kind}s: {len(ok)}/{len(res)} = {frac:.1%} (target {target:.0%})")
    print("  missing:", " ".join(n for n, s in res.items() if s == "missing"))
    for n, s in res.items():
        if s.startswith("broken"):
            print(f"  {n}: {s}")
    return frac


# ------------------------------------------------------------------ tests
def test_methods_list_is_the_rule_applied_to_this_pytorch():
    if not torch.__version__.startswith(surface.TORCH_VERSION):
        pytest.skip(f"METHODS was derived under PyTorch {surface.TORCH_VERSION}")
    assert surface.METHODS == surface.derive_methods()


def test_no_excluded_name_is_counted():
    for n in surface.FUNCTIONS + surface.METHODS:
        assert surface.excluded(n) is None and not n.startswith("_")


@pytest.mark.parametrize("kind", ["function", "method"])
def test_every_smoke_runs_in_pytorch(kind):
    names = surface.FUNCTIONS if kind == "function" else surface.METHODS
    bad = []
    for n in names:
        expr = function_smoke(n) if kind == "function" else method_smoke(n)
        try:
            _run(expr, torch)
        except Exception as e:  # noqa: BLE001
            bad.append(f"{n}: {expr}: {type(e).__name__}: {e}")
    assert not bad, "\n".join(bad)


def test_function_coverage():
    frac = _report("function", surface_of("function"), TARGET_FUNCTIONS)
    assert frac >= TARGET_FUNCTIONS


def test_method_coverage():
    frac = _report("method", surface_of("method"), TARGET_METHODS)
    assert frac >= TARGET_METHODS


def surface_of(kind):
    names = surface.FUNCTIONS if kind == "function" else surface.METHODS
    return {n: check(kind, n) for n in names}


def test_a_wrong_result_is_not_counted(monkeypatch):
    """The smoke compares with PyTorch: a function that answers wrongly is 'broken'."""
    monkeypatch.setattr(tg, "exp", lambda x: x)
    assert check("function", "exp").startswith("broken")
    assert check("function", "sin") == "ok"


if __name__ == "__main__":
    for k, t in (("function", TARGET_FUNCTIONS), ("method", TARGET_METHODS)):
        _report(k, surface_of(k), t)
