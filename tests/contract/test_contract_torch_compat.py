"""API.md "PyTorch compatibility, continued", more of what PyTorch programs write: the
sparse COO arithmetic a graph network uses (`s @ v` with a vector, `tg.mv`, `s.t()`,
`s + s`, `s * k`, `-s`, `s / k`, with gradients to the values and the dense operand),
`tg.linalg.matrix_power`/`matrix_exp`, `tg.autograd.functional` with tuple inputs,
`create_graph` and `strict`, and the optimizers' PyTorch keywords (`foreach`, `fused`,
`capturable`, `differentiable`, `maximize`, Adam's, NAdam's and RAdam's
`decoupled_weight_decay`, NAdam's `momentum_decay`) — each compared with PyTorch."""
import inspect

import numpy as np
import pytest
from contract_compare import same

torch = pytest.importorskip("torch")


def _sp(lib, requires_grad=False):
    values = lib.tensor([3.0, 4.0, 5.0], requires_grad=requires_grad)
    return lib.sparse_coo_tensor(lib.tensor([[0, 1, 1], [2, 0, 2]]), values, (2, 3)), values


def _sp2(lib):
    return lib.sparse_coo_tensor(lib.tensor([[0, 1], [2, 1]]), lib.tensor([1.0, -2.0]), (2, 3))


SPARSE = {
    "s @ vector": lambda L: _sp(L)[0] @ L.tensor([1.0, 2.0, 3.0]),
    "mv": lambda L: L.mv(_sp(L)[0], L.tensor([1.0, 2.0, 3.0])),
    "s.mv": lambda L: _sp(L)[0].mv(L.tensor([1.0, 2.0, 3.0])),
    "matmul vector": lambda L: L.matmul(_sp(L)[0], L.tensor([1.0, 2.0, 3.0])),
    "s + s": lambda L: ((_sp(L)[0] + _sp2(L)).to_dense(), (_sp(L)[0] + _sp2(L)).is_sparse,
                        (_sp(L)[0] + _sp2(L)).coalesce().values()),
    "s - s": lambda L: (_sp(L)[0] - _sp2(L)).to_dense(),
    "s * k": lambda L: ((_sp(L)[0] * 2).to_dense(), (_sp(L)[0] * 2).is_sparse),
    "k * s": lambda L: (2.5 * _sp(L)[0]).to_dense(),
    "-s": lambda L: (-_sp(L)[0]).to_dense(),
    "s / k": lambda L: (_sp(L)[0] / 2).to_dense(),
    "s.t()": lambda L: (_sp(L)[0].t().to_dense(), _sp(L)[0].t().shape, _sp(L)[0].t().is_sparse),
    "s.t() @ v": lambda L: _sp(L)[0].t() @ L.tensor([1.0, 2.0]),
    "s + s of other sizes": lambda L: _sp(L)[0] + L.sparse_coo_tensor(
        L.tensor([[0], [0]]), L.tensor([1.0]), (3, 3)),
    "dense + s": lambda L: L.ones(2, 3) + _sp(L)[0],
}


@pytest.mark.parametrize("name", list(SPARSE))
def test_sparse_arithmetic_as_torch(name):
    same(SPARSE[name])


def _graph_step(lib):
    """A graph convolution's forward and backward: ``(-2 * A + A^T-ish sum) @ (X @ W)``."""
    a, vals = _sp(lib, requires_grad=True)
    x = lib.tensor(np.arange(6.0, dtype=np.float32).reshape(3, 2), requires_grad=True)
    w = lib.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    adj = (a + _sp2(lib)) * -2
    h = adj @ (x @ w)
    back = a.t() @ lib.tensor([1.0, -1.0])
    (h.tanh().sum() + (back * back).sum()).backward()
    return h, back, vals.grad, x.grad, w.grad


def test_sparse_gradients_as_torch():
    same(_graph_step, rtol=1e-5, atol=1e-6)


_A = np.array([[0.3, -0.2, 0.1], [0.5, 0.1, -0.4], [0.0, 0.2, 0.25]], dtype=np.float32)


@pytest.mark.parametrize("case", [
    lambda L: L.linalg.matrix_power(L.tensor(_A), 3),
    lambda L: L.linalg.matrix_power(L.tensor(_A), 0),
    lambda L: L.linalg.matrix_power(L.tensor(_A) + 2 * L.eye(3), -2),
    lambda L: L.linalg.matrix_exp(L.tensor(_A)),
    lambda L: L.linalg.matrix_power(L.ones(2, 3), 2),
], ids=["power3", "power0", "power-2", "exp", "not-square"])
def test_linalg_matrix_power_and_exp_as_torch(case):
    same(case, rtol=1e-5, atol=1e-5)


def _f2(a, b):
    return (a * b.sin()).sum() + (a ** 2).sum()


def _t(lib, v, rg=False):
    return lib.tensor(np.asarray(v, dtype=np.float32), requires_grad=rg)


AF = {
    "hvp tuple": lambda L: L.autograd.functional.hvp(
        _f2, (_t(L, [1.0, 2.0]), _t(L, [0.5, -1.0])), (_t(L, [1.0, 0.0]), _t(L, [0.0, 1.0]))),
    "vhp create_graph": lambda L: L.autograd.functional.vhp(
        _f2, (_t(L, [1.0, 2.0]), _t(L, [0.5, -1.0])), (_t(L, [1.0, 0.0]), _t(L, [0.0, 1.0])),
        create_graph=True)[1][0].requires_grad,
    "hessian tuple": lambda L: L.autograd.functional.hessian(
        _f2, (_t(L, [1.0, 2.0]), _t(L, [0.5, -1.0]))),
    "jacobian tuple out": lambda L: L.autograd.functional.jacobian(
        lambda a, b: (a * b, a.exp()), (_t(L, [1.0, 2.0]), _t(L, [0.5, -1.0]))),
    "jacobian strict, an input unused": lambda L: L.autograd.functional.jacobian(
        lambda a, b: a * 2, (_t(L, [1.0, 2.0]), _t(L, [0.5, -1.0])), strict=True),
    "jacobian, an input unused": lambda L: L.autograd.functional.jacobian(
        lambda a, b: a * 2, (_t(L, [1.0, 2.0]), _t(L, [0.5, -1.0]))),
    "vjp without v, non-scalar": lambda L: L.autograd.functional.vjp(
        lambda a: a ** 2, _t(L, [1.0, 2.0])),
    "jvp strict, output independent": lambda L: L.autograd.functional.jvp(
        lambda a: _t(L, [1.0, 2.0]), _t(L, [1.0, 2.0]), _t(L, [1.0, 1.0]), strict=True),
    "jacobian create_graph": lambda L: L.autograd.functional.jacobian(
        lambda a: a ** 3, _t(L, [1.0, 2.0]), create_graph=True).requires_grad,
    "hvp of a 0-d input": lambda L: L.autograd.functional.hvp(
        lambda a: (a ** 3).sum(), _t(L, 2.0), _t(L, 1.0)),
}


@pytest.mark.parametrize("name", list(AF))
def test_autograd_functional_as_torch(name):
    same(AF[name], rtol=1e-5, atol=1e-6)


_OPTIM_FLAGS = [
    ("SGD", dict(lr=0.1, momentum=0.9, foreach=True)),
    ("SGD", dict(lr=0.1, fused=True, differentiable=False)),
    ("Adam", dict(lr=0.1, weight_decay=0.1, decoupled_weight_decay=True)),
    ("Adam", dict(lr=0.1, foreach=False, capturable=False, fused=True)),
    ("AdamW", dict(lr=0.1, foreach=True, fused=None)),
    ("RMSprop", dict(lr=0.01, foreach=True, capturable=False)),
    ("Adagrad", dict(lr=0.1, foreach=None, fused=True)),
    ("Adadelta", dict(lr=0.5, weight_decay=0.1, foreach=True, capturable=False)),
    ("Adadelta", dict(lr=0.5, maximize=True)),
    ("Adamax", dict(lr=0.1, weight_decay=0.1, maximize=True, foreach=True, capturable=False)),
    ("NAdam", dict(lr=0.1, weight_decay=0.1, decoupled_weight_decay=True, momentum_decay=0.1,
                   foreach=True)),
    ("NAdam", dict(lr=0.1, weight_decay=0.1, momentum_decay=0.02, maximize=True,
                   capturable=False)),
    ("RAdam", dict(lr=0.1, weight_decay=0.1, decoupled_weight_decay=True, maximize=True,
                   foreach=False)),
    ("RAdam", dict(lr=0.1, weight_decay=0.1, betas=(0.9, 0.5), capturable=False)),
    ("ASGD", dict(lr=0.05, weight_decay=0.1, t0=1, maximize=True, foreach=True,
                  capturable=False)),
    ("Rprop", dict(lr=0.1, maximize=True, foreach=True, capturable=False)),
]


def _steps(lib, name, kw):
    w = lib.nn.Parameter(lib.tensor([[0.5, -1.0], [2.0, 0.3]], dtype=lib.float64))
    opt = getattr(lib.optim, name)([w], **kw)
    x = lib.tensor([[1.0, 2.0], [-1.0, 0.5]], dtype=lib.float64)
    sign = -1.0 if kw.get("maximize") else 1.0    # maximize: the same descent, negated
    for _ in range(3):
        opt.zero_grad()
        (sign * ((x @ w) ** 2).sum()).backward()
        opt.step()
    return w.detach()


@pytest.mark.parametrize("name, kw", _OPTIM_FLAGS,
                         ids=[f"{n}-{'-'.join(k)}" for n, k in _OPTIM_FLAGS])
def test_optimizer_keywords_as_torch(name, kw):
    import tapegrad as tg
    ours = inspect.signature(getattr(tg.optim, name)).parameters
    theirs = inspect.signature(getattr(torch.optim, name)).parameters
    assert list(ours) == list(theirs)
    assert all(ours[k].default == theirs[k].default and ours[k].kind == theirs[k].kind
               for k in theirs if k != "params")
    same(lambda L: _steps(L, name, kw), rtol=1e-7, atol=1e-9)


_NORMS = [
    lambda L: L.nn.BatchNorm2d(3),
    lambda L: L.nn.BatchNorm1d(3, bias=False),
    lambda L: L.nn.BatchNorm1d(3, affine=False),
    lambda L: L.nn.InstanceNorm2d(3),
    lambda L: L.nn.InstanceNorm1d(3, affine=True, bias=False),
    lambda L: L.nn.SyncBatchNorm(3, bias=False),
    lambda L: L.nn.LayerNorm(3),
    lambda L: L.nn.LayerNorm(3, bias=False),
    lambda L: L.nn.GroupNorm(1, 3),
    lambda L: L.nn.GroupNorm(1, 3, affine=False),
    lambda L: L.nn.TransformerEncoderLayer(8, 2, 16),
]


@pytest.mark.parametrize("make", _NORMS, ids=range(len(_NORMS)))
def test_norm_layers_bias_keyword_and_repr_as_torch(make):
    import tapegrad as tg
    assert repr(make(tg)) == repr(make(torch))
    assert list(make(tg).state_dict()) == list(make(torch).state_dict())


def _bn_without_bias(lib):
    m = lib.nn.BatchNorm1d(3, bias=False)
    x = lib.tensor(np.random.RandomState(0).randn(4, 3, 5).astype(np.float32))
    y = m(x)
    (y * lib.tensor(np.arange(60.0, dtype=np.float32).reshape(4, 3, 5))).sum().backward()
    return y, m.weight.grad, m.bias, m.running_mean


def test_batch_norm_without_bias_as_torch():
    same(_bn_without_bias, rtol=1e-5, atol=1e-5)


_OPTIMIZERS = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam",
               "RAdam", "ASGD", "Rprop", "LBFGS"]


@pytest.mark.parametrize("name", _OPTIMIZERS)
def test_optimizer_param_groups_and_repr_as_torch(name):
    def groups(lib):
        opt = getattr(lib.optim, name)([lib.nn.Parameter(lib.ones(2))], lr=0.1)
        g = opt.state_dict()["param_groups"][0]
        return list(g), {k: v for k, v in g.items() if k != "params"}, \
            repr(opt).replace(lib.__name__, "lib")
    same(groups)


@pytest.mark.parametrize("name", [n for n in _OPTIMIZERS if n != "LBFGS"])
def test_optimizer_differentiable_refused(name):
    import tapegrad as tg
    with pytest.raises(ValueError, match=f"{name}: differentiable=True"):
        getattr(tg.optim, name)([tg.nn.Parameter(tg.ones(2))], lr=0.1, differentiable=True)


@pytest.mark.parametrize("values", [[-0.0, 1.0], [-0.0, 1.5], [0.0, -0.0],
                                    [[0.0, -0.0], [1.0, 22.0]], [float("nan"), -0.0, 3.0],
                                    [-0.0, 1e10]])
def test_negative_zero_prints_as_torch(values):
    import tapegrad as tg
    assert repr(tg.tensor(values)).replace("tapegrad", "torch") == repr(torch.tensor(values))


OUT_CASES = {  # name -> the arguments, as a function of the library
    "add": lambda L: (L.tensor([[1.0, 2.0], [3.0, 4.0]]), L.tensor([0.5, -1.0])),
    "sub": lambda L: (L.tensor([[1.0, 2.0], [3.0, 4.0]]), L.tensor([0.5, -1.0])),
    "div": lambda L: (L.tensor([[1.0, 2.0], [3.0, 4.0]]), L.tensor([0.5, -1.0])),
    "mm": lambda L: (L.tensor([[1.0, 2.0], [3.0, 4.0]]), L.tensor([[0.5], [-1.0]])),
    "bmm": lambda L: (L.ones(2, 2, 3), L.ones(2, 3, 2)),
    "dot": lambda L: (L.tensor([1.0, 2.0]), L.tensor([3.0, 4.0])),
    "outer": lambda L: (L.tensor([1.0, 2.0]), L.tensor([3.0, 4.0, 5.0])),
    "exp": lambda L: (L.tensor([0.0, 1.0]),),
    "tanh": lambda L: (L.tensor([0.0, 1.0]),),
    "maximum": lambda L: (L.tensor([0.0, 3.0]), L.tensor([1.0, 2.0])),
    "eq": lambda L: (L.tensor([0.0, 3.0]), L.tensor([0.0, 2.0])),
    "tril": lambda L: (L.ones(3, 3),),
    "where": lambda L: (L.tensor([True, False]), L.tensor([1.0, 2.0]), L.tensor([3.0, 4.0])),
    # (cat and stack took an out= and ignored it; these had none)
    "cat": lambda L: ([L.ones(2, 2), L.zeros(1, 2)],),
    "stack": lambda L: ([L.ones(2), L.zeros(2)],),
    "abs": lambda L: (L.tensor([-1.5, 2.0]),),
    "acos": lambda L: (L.tensor([-0.5, 0.25]),),
    "atan2": lambda L: (L.tensor([-0.5, 0.25]), L.tensor([1.0, -2.0])),
    "mean": lambda L: (L.tensor([[1.0, 2.0], [3.0, 5.0]]), 1),
    "norm": lambda L: (L.tensor([3.0, 4.0]),),
    "square": lambda L: (L.tensor([-3.0, 4.0]),),
    "logical_xor": lambda L: (L.tensor([True, False]), L.tensor([True, True])),
}


@pytest.mark.parametrize("name", sorted(OUT_CASES))
def test_out_keyword_as_torch(name):
    import tapegrad as tg
    res = []
    for L in (tg, torch):
        args = OUT_CASES[name](L)
        want = getattr(L, name)(*args)
        out = L.empty(0, dtype=want.dtype)  # (resized to the result's shape)
        got = getattr(L, name)(*args, out=out)
        assert got is out
        res.append((np.array(out.tolist(), dtype=float), tuple(out.shape),
                    str(out.dtype).split(".")[-1]))
    np.testing.assert_allclose(res[0][0], res[1][0], rtol=1e-6)
    assert res[0][1:] == res[1][1:]


def test_out_keyword_refuses_recording_as_torch():
    import tapegrad as tg
    for L in (tg, torch):
        a = L.ones(2, 2, requires_grad=True)
        with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
            L.add(a, a, out=L.empty(2, 2))
        with L.no_grad():
            assert L.mm(a, a, out=L.empty(2, 2)).tolist() == [[2.0, 2.0], [2.0, 2.0]]


@pytest.mark.parametrize("name", ["zeros", "ones", "empty"])
def test_factory_out_keyword_as_torch(name):
    # the factories took an out= and ignored it: out kept its shape and values
    import tapegrad as tg
    res = []
    for L in (tg, torch):
        out = L.full((1,), 7, dtype=L.int64)
        got = getattr(L, name)(2, 3, out=out)  # (out's dtype)
        assert got is out
        res.append((tuple(out.shape), str(out.dtype).split(".")[-1],
                    out.tolist() if name != "empty" else None))
    assert res[0] == res[1]


def test_every_out_parameter_is_used():
    # a public function that names an out= parameter writes its result there
    import ast
    import inspect
    import textwrap

    import tapegrad as tg
    unused = []
    for name in dir(tg):
        f = getattr(tg, name)
        f = getattr(f, "__wrapped__", f)
        try:
            if "out" not in inspect.signature(f).parameters:
                continue
            tree = ast.parse(textwrap.dedent(inspect.getsource(f)))
        except (TypeError, ValueError, OSError):
            continue
        if not any(isinstance(n, ast.Name) and n.id == "out" and isinstance(n.ctx, ast.Load)
                   for n in ast.walk(tree)):
            unused.append(name)
    assert not unused, f"out= accepted and ignored by {unused}"


def test_out_keyword_resizing_a_non_empty_out_warns_as_torch():
    import warnings

    import tapegrad as tg
    for L in (tg, torch):
        with pytest.warns(UserWarning, match=r"resized since it had shape \[2\]"):
            out = L.add(L.ones(3), 1, out=L.zeros(2))
        assert out.tolist() == [2.0, 2.0, 2.0]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            L.add(L.ones(3), 1, out=L.empty(0))  # (an empty one is resized quietly)
            L.cat([L.ones(2), L.ones(1)], out=L.empty(0))
