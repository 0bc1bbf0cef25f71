"""tg.distributions against torch.distributions: values (log_prob, entropy, mean,
mode, variance, stddev, KL), gradients of first and second order (against PyTorch's
and central differences), reparameterised samples (gradients with the generator
reseeded: finite differences see the same draws; Gamma-family samples against SciPy's
quantile derivative, PyTorch's approximation and the gradient of the mean), sample
shapes and seeded sample moments, expand, argument validation (the same ValueErrors as
PyTorch), and kl_divergence's registry."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import distributions as D
from tapegrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
TD = torch.distributions
sp = pytest.importorskip("scipy.special")

RTOL, ATOL = 1e-7, 1e-9
R = np.random.default_rng(20260)


def _pos(*shape, lo=0.5, hi=2.5):
    return R.uniform(lo, hi, size=shape)


def _simplex(*shape):
    return R.dirichlet(np.ones(shape[-1]), size=shape[:-1])


def _spd(b, n):
    a = R.normal(size=(b, n, n))
    return a @ a.transpose(0, 2, 1) + n * np.eye(n)


# name: (constructor kwargs as NumPy arrays, a value in the support, the float params)
CASES = {
    "Normal": (dict(loc=R.normal(size=(2, 3)), scale=_pos(2, 3)), R.normal(size=(4, 2, 3))),
    "Uniform": (dict(low=-_pos(3), high=_pos(3)), R.uniform(-0.4, 0.4, size=(5, 3))),
    "Bernoulli": (dict(probs=R.uniform(0.1, 0.9, size=(3,))), np.array([0.0, 1.0, 1.0])),
    "Bernoulli-logits": (dict(logits=R.normal(size=(2, 3))), np.array([1.0, 0.0, 1.0])),
    "Categorical": (dict(probs=_simplex(3, 4)), np.array([[0, 3, 1], [2, 2, 0]])),
    "Categorical-logits": (dict(logits=R.normal(size=(3, 4))), np.array([3, 0, 1])),
    "OneHotCategorical": (dict(probs=_simplex(3, 4)), np.eye(4)[[0, 3, 1]]),
    "OneHotCategorical-logits": (dict(logits=R.normal(size=(2, 4))), np.eye(4)[[2, 1]]),
    "Gamma": (dict(concentration=_pos(3, lo=0.3), rate=_pos(3)), _pos(2, 3, lo=0.1, hi=4.0)),
    "Beta": (dict(concentration1=_pos(3, lo=0.3), concentration0=_pos(3, lo=0.3)),
             R.uniform(0.05, 0.95, size=(2, 3))),
    "Dirichlet": (dict(concentration=_pos(2, 4, lo=0.3)), _simplex(3, 2, 4)),
    "MultivariateNormal": (dict(loc=R.normal(size=(2, 3)), covariance_matrix=_spd(2, 3)),
                           R.normal(size=(4, 2, 3))),
    "MultivariateNormal-precision": (dict(loc=R.normal(size=(3,)), precision_matrix=_spd(2, 3)),
                                     R.normal(size=(2, 3))),
    "MultivariateNormal-tril": (dict(loc=R.normal(size=(2, 3)),
                                     scale_tril=np.linalg.cholesky(_spd(2, 3))),
                                R.normal(size=(2, 3))),
}
PARAMS = [pytest.param(k, id=k) for k in CASES]


def _cls(name):
    return name.split("-")[0]


def _build(lib, name, params, grad=False):
    L = tg if lib == "tg" else torch
    ts = {k: L.tensor(v, requires_grad=grad) for k, v in params.items()}
    return getattr(D if lib == "tg" else TD, _cls(name))(**ts), ts


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.detach().numpy()


def _close(a, b, what, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol, equal_nan=True,
                               err_msg=what)


# ---------------------------------------------------------------- values
@pytest.mark.parametrize("name", PARAMS)
def test_values_match_torch(name):
    params, value = CASES[name]
    d, _ = _build("tg", name, params)
    t, _ = _build("torch", name, params)
    assert d.batch_shape == tuple(t.batch_shape) and d.event_shape == tuple(t.event_shape)
    _close(d.log_prob(tg.tensor(value)), t.log_prob(torch.tensor(value)), f"{name} log_prob")
    _close(d.entropy(), t.entropy(), f"{name} entropy")
    for stat in ("mean", "variance", "stddev", "mode"):
        _close(getattr(d, stat), getattr(t, stat), f"{name} {stat}")
    if "MultivariateNormal" in name:
        for m in ("covariance_matrix", "precision_matrix", "scale_tril"):
            _close(getattr(d, m), getattr(t, m), f"{name} {m}")
    if name.startswith(("Bernoulli", "Categorical")):
        _close(d.probs, t.probs, f"{name} probs")
        _close(d.logits, t.logits, f"{name} logits")
    if d.has_enumerate_support:
        _close(d.enumerate_support(), t.enumerate_support(), f"{name} enumerate_support")
        _close(d.enumerate_support(False), t.enumerate_support(False), f"{name} unexpanded")
    if name in ("Normal", "Uniform"):
        v = value[0] if name == "Normal" else value
        _close(d.cdf(tg.tensor(v)), t.cdf(torch.tensor(v)), f"{name} cdf")


@pytest.mark.parametrize("name", PARAMS)
def test_expand(name):
    params, value = CASES[name]
    d, _ = _build("tg", name, params)
    t, _ = _build("torch", name, params)
    shape = (2,) + d.batch_shape
    while value.ndim > len(d.batch_shape) + len(d.event_shape):  # no sample dims
        value = value[0]
    e, te = d.expand(shape), t.expand(torch.Size(shape))
    assert e.batch_shape == shape and e.event_shape == d.event_shape
    assert type(e) is type(d) and e._validate_args == d._validate_args
    _close(e.log_prob(tg.tensor(value)), te.log_prob(torch.tensor(value)), f"{name} expanded")
    _close(e.entropy(), te.entropy(), f"{name} expanded entropy")
    assert tuple(e.sample((3,)).shape) == (3,) + shape + d.event_shape


# ---------------------------------------------------------------- gradients
def _float_params(params):
    return {k: v for k, v in params.items() if np.asarray(v).dtype.kind == "f"}


def _objective(d, value, lib):
    L = tg if lib == "tg" else torch
    v = L.tensor(value)
    # log_prob and entropy together, weighted so no term cancels another
    return (d.log_prob(v) * L.tensor(np.linspace(0.5, 1.5, int(np.prod(
        d.log_prob(v).shape))).reshape(tuple(d.log_prob(v).shape)))).sum() + 0.7 * d.entropy().sum()


@pytest.mark.parametrize("name", PARAMS)
def test_gradients_first_and_second_order_match_torch(name):
    params, value = CASES[name]
    d, ts = _build("tg", name, params, grad=True)
    t, tts = _build("torch", name, params, grad=True)
    keys = list(_float_params(params))
    g = tg.grad(_objective(d, value, "tg"), [ts[k] for k in keys], create_graph=True)
    tgr = torch.autograd.grad(_objective(t, value, "torch"), [tts[k] for k in keys],
                              create_graph=True)
    for k, a, b in zip(keys, g, tgr):
        _close(a, b, f"{name} d/d{k}", rtol=1e-6, atol=1e-8)
    # second order: the gradient of <grad, v> (a Hessian-vector product)
    vs = [R.normal(size=np.shape(params[k])) for k in keys]
    hv = tg.grad(sum((a * tg.tensor(v)).sum() for a, v in zip(g, vs)), [ts[k] for k in keys],
                 allow_unused=True)
    thv = torch.autograd.grad(sum((a * torch.tensor(v)).sum() for a, v in zip(tgr, vs)),
                              [tts[k] for k in keys], allow_unused=True)
    for k, a, b in zip(keys, hv, thv):
        if b is not None and k in ("covariance_matrix", "precision_matrix"):
            # a symmetric parameter: its gradient is defined up to an antisymmetric
            # part, which PyTorch's (Cholesky of the flipped precision) and ours split
            # differently at second order; the symmetric parts agree
            a = (a + a.mT) / 2
            b = (b + b.mT) / 2
        if b is None:
            assert a is None or np.allclose(_np(a), 0), f"{name} second order d/d{k}"
        else:
            _close(a, b, f"{name} second order d/d{k}", rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["Normal", "Gamma", "Beta", "Dirichlet", "Categorical-logits",
                                  "MultivariateNormal-tril"])
def test_gradients_match_finite_differences(name):
    params, value = CASES[name]
    keys = list(_float_params(params))

    def f(*xs):
        d = getattr(D, _cls(name))(**dict(zip(keys, xs)), validate_args=False)
        return _objective(d, value, "tg")
    xs = [tg.tensor(params[k], requires_grad=True) for k in keys]
    assert gradcheck(f, xs)
    assert gradgradcheck(f, xs)


# ---------------------------------------------------------------- KL
def _kl_cases():
    out = {}
    for name in ("Normal", "Uniform", "Bernoulli", "Categorical", "OneHotCategorical", "Gamma",
                 "Beta", "Dirichlet", "MultivariateNormal"):
        p = CASES[name][0]
        q = {k: (v * 1.3 if name != "Uniform" else v * 1.5) if k not in ("probs",)
             else _simplex(*v.shape) if name != "Bernoulli" else R.uniform(0.1, 0.9, v.shape)
             for k, v in p.items()}
        if name == "MultivariateNormal":
            q = dict(loc=R.normal(size=(3,)), scale_tril=np.linalg.cholesky(_spd(1, 3)[0]))
        out[name] = (p, q)
    out["Uniform-outside"] = (CASES["Uniform"][0],
                              {k: v * 0.5 for k, v in CASES["Uniform"][0].items()})
    out["Categorical-zeros"] = (dict(probs=np.array([[0.5, 0.5, 0.0], [0.2, 0.0, 0.8]])),
                                dict(probs=np.array([[0.3, 0.3, 0.4], [0.5, 0.5, 0.0]])))
    out["Bernoulli-edges"] = (dict(probs=np.array([0.0, 1.0, 0.3])),
                              dict(probs=np.array([0.5, 0.5, 0.0])))
    return out


KL = _kl_cases()


@pytest.mark.parametrize("name", list(KL))
def test_kl_matches_torch(name):
    p, q = KL[name]
    dp, pts = _build("tg", name, p, grad=True)
    dq, qts = _build("tg", name, q, grad=True)
    tp, tpts = _build("torch", name, p, grad=True)
    tq, tqts = _build("torch", name, q, grad=True)
    kl, tkl = D.kl_divergence(dp, dq), TD.kl_divergence(tp, tq)
    _close(kl, tkl, f"KL {name}")
    if not np.all(np.isfinite(_np(tkl))):
        return
    ins = list(pts.values()) + list(qts.values())
    tins = list(tpts.values()) + list(tqts.values())
    w = R.normal(size=tuple(kl.shape))
    g = tg.grad((kl * tg.tensor(w)).sum(), ins, allow_unused=True)
    tg_ = torch.autograd.grad((tkl * torch.tensor(w)).sum(), tins, allow_unused=True)
    for a, b in zip(g, tg_):
        if b is not None:
            _close(a, b, f"KL {name} gradient", rtol=1e-6, atol=1e-8)


def test_register_kl_picks_the_most_specific_pair_and_refuses_unknown_pairs():
    class MyNormal(D.Normal):
        pass

    p, q = MyNormal(tg.tensor(0.0), tg.tensor(1.0)), D.Normal(tg.tensor(1.0), tg.tensor(2.0))
    base = D.kl_divergence(p, q)

    @D.register_kl(MyNormal, D.Normal)
    def _mine(p, q):
        return tg.tensor(-1.0)
    try:
        assert float(D.kl_divergence(p, q)) == -1.0
        assert float(D.kl_divergence(q, q)) == 0.0  # Normal, Normal still the general one
    finally:
        from tapegrad.distributions import kl as _kl
        del _kl._KL_REGISTRY[MyNormal, D.Normal]
        _kl._KL_MEMOIZE.clear()
    assert float(D.kl_divergence(p, q)) == float(base)
    with pytest.raises(NotImplementedError):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Gamma(1.0, 1.0))
    with pytest.raises(TypeError):
        D.register_kl("Normal", D.Normal)


# ---------------------------------------------------------------- sampling
MOMENTS = {  # name: (params, draws)
    "Normal": (dict(loc=np.array([0.5, -2.0]), scale=np.array([0.3, 2.0])), 20000),
    "Uniform": (dict(low=np.array([-1.0, 2.0]), high=np.array([0.5, 7.0])), 20000),
    "Bernoulli": (dict(probs=np.array([0.1, 0.7])), 20000),
    "OneHotCategorical": (dict(probs=np.array([[0.2, 0.5, 0.3], [0.9, 0.05, 0.05]])), 20000),
    "Gamma": (dict(concentration=np.array([0.4, 3.0]), rate=np.array([2.0, 0.5])), 20000),
    "Beta": (dict(concentration1=np.array([0.5, 4.0]), concentration0=np.array([2.0, 1.5])), 20000),
    "Dirichlet": (dict(concentration=np.array([[0.5, 1.0, 3.0]])), 20000),
    "MultivariateNormal": (dict(loc=np.array([1.0, -1.0]),
                                covariance_matrix=np.array([[2.0, 0.6], [0.6, 0.5]])), 20000),
}


@pytest.mark.parametrize("name", list(MOMENTS))
def test_seeded_samples_have_the_distributions_moments(name):
    params, n = MOMENTS[name]
    d = getattr(D, name)(**{k: tg.tensor(v) for k, v in params.items()})
    tg.manual_seed(7)
    x = d.sample((n,))
    tg.manual_seed(7)
    again = d.sample((n,))
    np.testing.assert_array_equal(x.numpy(), again.numpy())  # the seed decides
    assert tuple(x.shape) == (n,) + d.batch_shape + d.event_shape
    assert not x.requires_grad
    a = x.numpy()
    mean, var = d.mean.numpy(), d.variance.numpy()
    se = np.sqrt(var / n)
    assert np.all(np.abs(a.mean(0) - mean) < 5 * se + 1e-12), (name, a.mean(0), mean)
    # the sample variance's standard error, through the fourth moment of the draws
    m4 = ((a - mean) ** 4).mean(0)
    se_var = np.sqrt(np.maximum(m4 - var ** 2, 0) / n)
    # (plus the bias of the 1/n variance: var / n, tripled)
    assert np.all(np.abs(a.var(0) - var) < 5 * se_var + 3 * var / n + 1e-12), (name, a.var(0), var)
    if name == "MultivariateNormal":
        c = np.cov(a.T)
        np.testing.assert_allclose(c, params["covariance_matrix"], atol=0.06)
    if name in ("Bernoulli", "OneHotCategorical"):
        assert set(np.unique(a)) <= {0.0, 1.0}
    if name in ("Dirichlet", "OneHotCategorical"):
        np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-12)


def test_categorical_sample_frequencies_and_shapes():
    probs = np.array([[0.1, 0.2, 0.7, 0.0], [0.25, 0.25, 0.25, 0.25]])
    d = D.Categorical(tg.tensor(probs))
    tg.manual_seed(3)
    x = d.sample((40000,))
    assert tuple(x.shape) == (40000, 2) and x.dtype == tg.int64
    freq = np.stack([np.bincount(x.numpy()[:, i], minlength=4) / 40000 for i in range(2)])
    se = np.sqrt(probs * (1 - probs) / 40000)
    assert np.all(np.abs(freq - probs) <= 5 * se + 1e-12), freq
    assert tuple(D.Categorical(logits=tg.zeros(5)).sample().shape) == ()
    assert tuple(D.Normal(0.0, 1.0).sample().shape) == ()
    assert tuple(D.Normal(0.0, 1.0).sample((2, 3)).shape) == (2, 3)


def _reseeded(name, keys, shape=(3,)):
    def f(*xs):
        tg.manual_seed(11)
        d = getattr(D, name)(**dict(zip(keys, xs)), validate_args=False)
        return d.rsample(shape)
    return f


@pytest.mark.parametrize("name", ["Normal", "Uniform", "MultivariateNormal",
                                  "MultivariateNormal-tril"])
def test_rsample_gradients_first_and_second_order(name):
    params = _float_params(CASES[name][0])
    keys = list(params)
    xs = [tg.tensor(params[k], requires_grad=True) for k in keys]
    f = _reseeded(_cls(name), keys)
    assert gradcheck(f, xs)
    if name != "Uniform":  # Uniform's rsample is linear in low/high: second order 0
        assert gradgradcheck(f, xs)
    # and the draw is a sample: loc + scale * eps with eps standard
    tg.manual_seed(11)
    x = getattr(D, _cls(name))(**{k: tg.tensor(v) for k, v in params.items()}).rsample((3,))
    assert x.requires_grad is False and tuple(x.shape)[0] == 3


def test_gamma_rsample_gradient_is_the_implicit_one():
    alpha = np.array([0.05, 0.3, 1.0, 2.5, 12.0, 150.0])
    a = tg.tensor(alpha, requires_grad=True)
    rate = tg.tensor(1.7, dtype=tg.float64, requires_grad=True)
    tg.manual_seed(5)
    x = D.Gamma(a, rate).rsample((400,))
    ga, gr = tg.grad(x.sum(), [a, rate])
    xs = x.detach().numpy() * 1.7  # standard Gamma draws
    # dx/dalpha at a fixed quantile, by SciPy's inverse regularised incomplete gamma
    u = sp.gammainc(alpha, xs)
    h = 1e-6 * alpha
    fd = (sp.gammaincinv(alpha + h, u) - sp.gammaincinv(alpha - h, u)) / (2 * h)
    ok = (u > 1e-300) & (u < 1 - 1e-12)
    mine = tg._standard_gamma_grad(tg.tensor(np.broadcast_to(alpha, xs.shape).copy()),
                                   tg.tensor(xs)).numpy()
    np.testing.assert_allclose(mine[ok], fd[ok], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(ga.numpy(), (mine / 1.7).sum(0), rtol=1e-10)
    np.testing.assert_allclose(float(gr), -(xs / 1.7 ** 2).sum(), rtol=1e-10)
    # PyTorch's rational approximation agrees to about 1e-3
    theirs = torch._standard_gamma_grad(torch.tensor(np.broadcast_to(alpha, xs.shape).copy()),
                                        torch.tensor(xs)).numpy()
    np.testing.assert_allclose(mine, theirs, rtol=5e-3, atol=1e-12)


def test_gamma_beta_dirichlet_rsample_gradients_are_unbiased():
    """The mean of the pathwise gradients is the gradient of the mean (seeded draws)."""
    n = 20000
    tg.manual_seed(9)
    c = tg.tensor([0.7, 2.0], requires_grad=True)
    r = tg.tensor([1.5, 0.5], requires_grad=True)
    gc, gr = tg.grad(D.Gamma(c, r).rsample((n,)).mean(0).sum(), [c, r])
    np.testing.assert_allclose(gc.numpy(), 1 / r.detach().numpy(), rtol=0.03)
    np.testing.assert_allclose(gr.numpy(), -(c / r ** 2).detach().numpy(), rtol=0.03)
    a = tg.tensor([0.6, 2.0, 3.0], requires_grad=True)
    (g,) = tg.grad(D.Dirichlet(a).rsample((n,))[:, 0].mean(), [a])
    s = 5.6  # d/da_j E[x_0] = (delta_0j s - a_0) / s^2
    np.testing.assert_allclose(g.numpy(), (np.array([s, 0, 0]) - 0.6) / s ** 2, atol=4e-3)
    c1 = tg.tensor(0.8, requires_grad=True)
    c0 = tg.tensor(2.5, requires_grad=True)
    g1, g0 = tg.grad(D.Beta(c1, c0).rsample((n,)).mean(), [c1, c0])
    np.testing.assert_allclose([float(g1), float(g0)], [2.5 / 3.3 ** 2, -0.8 / 3.3 ** 2], atol=4e-3)
    # no second derivative through an implicit Gamma gradient, as PyTorch
    (g,) = tg.grad(D.Gamma(c, r).rsample().sum(), [c], create_graph=True)
    with pytest.raises(RuntimeError, match="not implemented"):
        tg.grad(g.sum(), [c])


@pytest.mark.parametrize("name", ["Normal", "Uniform", "Gamma", "Beta", "Dirichlet",
                                  "MultivariateNormal"])
def test_rsample_records_and_sample_does_not(name):
    params = _float_params(CASES[name][0])
    ts = {k: tg.tensor(v, requires_grad=True) for k, v in params.items()}
    d = getattr(D, name)(**ts)
    assert d.has_rsample
    assert d.rsample((2,)).requires_grad and not d.sample((2,)).requires_grad
    assert tuple(d.rsample((2,)).shape) == (2,) + d.batch_shape + d.event_shape


# ---------------------------------------------------------------- validation
BAD_ARGS = [
    ("Normal", dict(loc=[0.0], scale=[-1.0])),
    ("Normal", dict(loc=[float("nan")], scale=[1.0])),
    ("Uniform", dict(low=[1.0], high=[0.0])),
    ("Bernoulli", dict(probs=[1.5])),
    ("Bernoulli", dict(probs=[0.5], logits=[0.0])),
    ("Bernoulli", dict()),
    ("Categorical", dict(probs=[0.5, -0.2, 0.7])),
    ("Categorical", dict(probs=[[0.5, 0.5]], logits=[[0.0, 0.0]])),
    ("OneHotCategorical", dict(probs=[-0.5, 1.5])),
    ("Gamma", dict(concentration=[0.0], rate=[1.0])),
    ("Gamma", dict(concentration=[1.0], rate=[-2.0])),
    ("Beta", dict(concentration1=[1.0], concentration0=[-1.0])),
    ("Dirichlet", dict(concentration=[1.0, -1.0])),
    ("MultivariateNormal", dict(loc=[0.0, 0.0], covariance_matrix=[[1.0, 2.0], [2.0, 1.0]])),
    ("MultivariateNormal", dict(loc=[0.0, 0.0], covariance_matrix=[[1.0, 0.5], [0.0, 1.0]])),
    ("MultivariateNormal", dict(loc=[0.0, 0.0], scale_tril=[[1.0, 0.5], [0.0, 1.0]])),
    ("MultivariateNormal", dict(loc=[0.0, 0.0], scale_tril=[[-1.0, 0.0], [0.0, 1.0]])),
    ("MultivariateNormal", dict(loc=[0.0, 0.0])),
]


def _args(lib, kw):
    L = tg if lib == "tg" else torch
    return {k: L.tensor(v, dtype=L.float64) for k, v in kw.items()}


@pytest.mark.parametrize("name,kw", BAD_ARGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD_ARGS)])
def test_bad_arguments_raise_value_error_as_torch(name, kw):
    with pytest.raises(ValueError):
        getattr(TD, name)(**_args("torch", kw))
    with pytest.raises(ValueError):
        getattr(D, name)(**_args("tg", kw))


BAD_VALUES = [
    ("Bernoulli", dict(probs=[0.3, 0.6]), [0.5, 1.0]),
    ("Categorical", dict(probs=[[0.3, 0.7]]), [2]),
    ("Categorical", dict(probs=[[0.3, 0.7]]), [-1]),
    ("Uniform", dict(low=[0.0], high=[1.0]), [1.5]),
    ("Gamma", dict(concentration=[1.0], rate=[1.0]), [-0.5]),
    ("Beta", dict(concentration1=[1.0], concentration0=[2.0]), [1.5]),
    ("Dirichlet", dict(concentration=[1.0, 2.0]), [0.3, 0.3]),
    ("OneHotCategorical", dict(probs=[0.3, 0.7]), [1.0, 1.0]),
    ("Normal", dict(loc=[0.0, 1.0], scale=[1.0, 1.0]), [[0.0, 1.0, 2.0]]),  # shape
    ("MultivariateNormal", dict(loc=[0.0, 0.0], covariance_matrix=[[1.0, 0.0], [0.0, 1.0]]),
     [0.0, 0.0, 0.0]),
]


@pytest.mark.parametrize("name,kw,value", BAD_VALUES,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_VALUES)])
def test_values_outside_the_support_raise_value_error_as_torch(name, kw, value):
    for lib, L, M in (("torch", torch, TD), ("tg", tg, D)):
        d = getattr(M, name)(**_args(lib, kw))
        v = L.tensor(value, dtype=L.int64 if name == "Categorical" else L.float64)
        with pytest.raises(ValueError):
            d.log_prob(v)
        if name in ("Normal", "MultivariateNormal", "Categorical"):
            continue  # a shape mismatch, or an index out of range (IndexError/RuntimeError)
        # without validation the value is evaluated
        getattr(M, name)(**_args(lib, kw), validate_args=False).log_prob(v)


def test_log_prob_needs_a_tensor_and_default_validation_is_settable():
    d = D.Normal(tg.tensor(0.0), tg.tensor(1.0))
    with pytest.raises(ValueError, match="must be a Tensor"):
        d.log_prob(0.5)
    assert D.Distribution._validate_args is True
    D.Distribution.set_default_validate_args(False)
    try:
        D.Normal(tg.tensor([0.0]), tg.tensor([-1.0]))  # not checked now
        with pytest.raises(ValueError):
            D.Normal(tg.tensor([0.0]), tg.tensor([-1.0]), validate_args=True)
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        D.Normal(tg.tensor([0.0]), tg.tensor([-1.0]))
    with pytest.raises(ValueError):
        D.Distribution.set_default_validate_args("yes")


def test_namespace_and_constraints():
    assert tg.distributions is D
    assert D.Normal.arg_constraints["scale"] is D.constraints.positive
    assert D.Categorical(tg.tensor([0.2, 0.8])).support.upper_bound == 1
    assert isinstance(D.Uniform(0.0, 1.0).support, type(D.constraints.interval(0.0, 1.0)))
    assert D.constraints.is_dependent(D.Uniform.support)
    assert D.Categorical.support.is_discrete and D.Dirichlet.support.event_dim == 1
    assert tuple(D.constraints.simplex.check(tg.tensor([[0.5, 0.5],
                                                        [0.5, 0.6]])).tolist()) == (True, False)
    d = D.Normal(tg.tensor([0.0, 1.0]), tg.tensor(1.0))
    assert d.batch_shape == (2,) and d.event_shape == ()
    assert "Normal" in repr(d)


def test_float32_parameters_give_float32_results():
    ones = tg.ones(2)
    for d in [D.Normal(tg.zeros(2), ones), D.Uniform(tg.zeros(2), ones), D.Gamma(ones, ones),
              D.Beta(ones, ones), D.Dirichlet(tg.ones(3)), D.Bernoulli(logits=tg.zeros(2)),
              D.Categorical(logits=tg.zeros(3)), D.OneHotCategorical(tg.ones(3) / 3),
              D.MultivariateNormal(tg.zeros(2), tg.eye(2))]:
        s = d.sample((2,))
        assert s.dtype == (tg.int64 if isinstance(d, D.Categorical) else tg.float32), d
        assert d.log_prob(s).dtype == tg.float32 and d.entropy().dtype == tg.float32, d
