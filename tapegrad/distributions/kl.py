"""``kl_divergence(p, q)`` and ``register_kl``, as PyTorch's: the implementation
registered for the most specific pair of classes (by method resolution order) wins;
a pair nothing covers raises NotImplementedError."""
import warnings

from .. import ops as O
from ..ops.special import digamma, lgamma
from .categorical import Bernoulli, Categorical, OneHotCategorical
from .gamma import Beta, Dirichlet, Gamma
from .multivariate_normal import MultivariateNormal, _batch_mahalanobis, _tri_solve
from .normal import Normal, Uniform
from .utils import broadcast_shape

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY = {}
_KL_MEMOIZE = {}


def register_kl(type_p, type_q):
    """Decorator: ``@register_kl(Normal, Normal) def kl(p, q): ...``."""
    if not (isinstance(type_p, type) and isinstance(type_q, type)):
        raise TypeError(f"Expected type_p and type_q to be Distribution subclasses but got "
                        f"{type_p} and {type_q}")

    def decorator(fn):
        _KL_REGISTRY[type_p, type_q] = fn
        _KL_MEMOIZE.clear()
        return fn
    return decorator


def _dispatch_kl(type_p, type_q):
    matches = [(p, q) for p, q in _KL_REGISTRY
               if issubclass(type_p, p) and issubclass(type_q, q)]
    if not matches:
        return NotImplemented

    def rank(pair):
        return type_p.__mro__.index(pair[0]), type_q.__mro__.index(pair[1])
    left = min(matches, key=rank)
    right = min(matches, key=lambda pq: rank(pq)[::-1])
    if _KL_REGISTRY[left] is not _KL_REGISTRY[right]:
        warnings.warn(f"Ambiguous kl_divergence({type_p.__name__}, {type_q.__name__}). "
                      f"Please register_kl({left[0].__name__}, {right[1].__name__})",
                      RuntimeWarning)
    return _KL_REGISTRY[left]


def kl_divergence(p, q):
    """``KL(p || q)``, one value per batch element."""
    key = (type(p), type(q))
    fn = _KL_MEMOIZE.get(key)
    if fn is None:
        fn = _KL_MEMOIZE[key] = _dispatch_kl(*key)
    if fn is NotImplemented:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type "
                                  f"{p.__class__.__name__} and q type {q.__class__.__name__}")
    return fn(p, q)


_INF = float("inf")


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale) ** 2
    t1 = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * (var_ratio + t1 - 1 - O.log(var_ratio))


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    shape = broadcast_shape(t.shape, q.probs.shape, p.probs.shape)
    t = O.expand(t, shape)
    t = O.where(O.expand(q.probs == 0, shape), _INF, t)
    t = O.where(O.expand(p.probs == 0, shape), 0.0, t)
    return O.sum(t, dim=-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehotcategorical_onehotcategorical(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    sp = O.softplus
    t1 = p.probs * (sp(-q.logits) - sp(-p.logits))
    t1 = O.where(q.probs == 0, _INF, t1)
    t1 = O.where(p.probs == 0, 0.0, t1)
    t2 = (1 - p.probs) * (sp(q.logits) - sp(p.logits))
    t2 = O.where(q.probs == 1, _INF, t2)
    t2 = O.where(p.probs == 1, 0.0, t2)
    return t1 + t2


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = O.log((q.high - q.low) / (p.high - p.low))
    return O.where((q.low > p.low) | (q.high < p.high), _INF, result)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_multivariatenormal_multivariatenormal(p, q):
    if p.event_shape != q.event_shape:
        raise ValueError("KL-divergence between two Multivariate Normals with different "
                         "event shapes cannot be computed")
    Lp, Lq = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    half_term1 = (O.sum(O.log(O.diagonal(Lq, dim1=-2, dim2=-1)), dim=-1)
                  - O.sum(O.log(O.diagonal(Lp, dim1=-2, dim2=-1)), dim=-1))
    n = p.event_shape[0]
    X = _tri_solve(Lq, O.tril(Lp))
    term2 = O.sum(O.sum(X * X, dim=-1), dim=-1)
    term3 = _batch_mahalanobis(Lq, q.loc - p.loc)
    return half_term1 + 0.5 * (term2 + term3 - n)


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    a1, b1, a2, b2 = p.concentration1, p.concentration0, q.concentration1, q.concentration0
    sum_p, sum_q = a1 + b1, a2 + b2
    t1 = lgamma(a2) + lgamma(b2) + lgamma(sum_p)
    t2 = lgamma(a1) + lgamma(b1) + lgamma(sum_q)
    t3 = (a1 - a2) * digamma(a1)
    t4 = (b1 - b2) * digamma(b1)
    t5 = (sum_q - sum_p) * digamma(sum_p)
    return t1 - t2 + t3 + t4 + t5


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    t1 = q.concentration * O.log(p.rate / q.rate)
    t2 = lgamma(q.concentration) - lgamma(p.concentration)
    t3 = (p.concentration - q.concentration) * digamma(p.concentration)
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    cp, cq = p.concentration, q.concentration
    sum_p, sum_q = O.sum(cp, dim=-1), O.sum(cq, dim=-1)
    t1 = lgamma(sum_p) - lgamma(sum_q)
    t2 = O.sum(lgamma(cp) - lgamma(cq), dim=-1)
    t3 = cp - cq
    t4 = digamma(cp) - O.unsqueeze(digamma(sum_p), -1)
    return t1 - t2 + O.sum(t3 * t4, dim=-1)

