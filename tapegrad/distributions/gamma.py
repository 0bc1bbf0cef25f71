"""Gamma, Dirichlet and Beta, as PyTorch's. ``rsample`` is differentiable by implicit
reparameterisation: a standard Gamma draw ``x`` moves with its concentration at a fixed
quantile, ``dx/dalpha = -(dP/dalpha) / p`` (``tg._standard_gamma``, exact to float64
rounding; PyTorch's is a rational approximation within about 1e-3 of it). A Dirichlet
sample is a vector of Gamma draws over their sum, and a Beta sample the first
coordinate of a two-component Dirichlet; their pathwise gradients follow from the Gamma
ones (PyTorch differentiates its Dirichlet sample through a Beta-CDF formula instead,
another unbiased pathwise gradient: the two agree in expectation, not per sample). A
second derivative through these samples raises RuntimeError, as in PyTorch."""
from numbers import Number

from .. import dtypes as _dt, ops as O
from ..nn import functional as _F
from ..ops.special import digamma, lgamma, standard_gamma
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all, finfo, xlogy

__all__ = ["Gamma", "Dirichlet", "Beta"]


def _floor_tiny(x):
    """``x`` with values below the dtype's smallest normal raised to it, its gradient
    unchanged (PyTorch clamps the detached sample in place)."""
    d = x.detach()
    return x + (O.clamp(d, min=finfo(x.dtype).tiny) - d)


class Gamma(Distribution):
    """The Gamma distribution with shape ``concentration`` and ``rate``."""
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        batch_shape = () if isinstance(concentration, Number) and isinstance(rate, Number) \
            else tuple(self.concentration.shape)
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Gamma, _instance)
        batch_shape = tuple(batch_shape)
        new.concentration = O.expand(self.concentration, batch_shape)
        new.rate = O.expand(self.rate, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return O.clamp((self.concentration - 1) / self.rate, min=0)

    @property
    def variance(self):
        return self.concentration / self.rate ** 2

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        value = standard_gamma(O.expand(self.concentration, shape)) / O.expand(self.rate, shape)
        return _floor_tiny(value)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        c, r = self.concentration, self.rate
        return xlogy(c, r) + xlogy(c - 1, value) - r * value - lgamma(c)

    def entropy(self):
        c = self.concentration
        return c - O.log(self.rate) + lgamma(c) + (1.0 - c) * digamma(c)


class Dirichlet(Distribution):
    """The Dirichlet distribution with ``concentration`` (the last dim is the event)."""
    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if concentration.ndim < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        shape = tuple(concentration.shape)
        super().__init__(shape[:-1], shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Dirichlet, _instance)
        batch_shape = tuple(batch_shape)
        new.concentration = O.expand(self.concentration, batch_shape + self.event_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        g = _floor_tiny(standard_gamma(O.expand(self.concentration, shape)))
        x = g / O.sum(g, dim=-1, keepdim=True)
        eps = finfo(x.dtype)
        d = x.detach()
        return x + (O.clamp(d, min=eps.tiny, max=1 - eps.eps) - d)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        c = self.concentration
        return (O.sum(xlogy(c - 1.0, value), dim=-1) + lgamma(O.sum(c, dim=-1))
                - O.sum(lgamma(c), dim=-1))

    @property
    def mean(self):
        return self.concentration / O.sum(self.concentration, dim=-1, keepdim=True)

    @property
    def mode(self):
        c = self.concentration
        mode = O.clamp(c - 1, min=0.0)
        total = O.sum(mode, dim=-1, keepdim=True)
        mode = mode / O.where(total == 0, 1.0, total)
        # every concentration below 1: the density is unbounded at every vertex; as
        # PyTorch (the argmax of its all-NaN ratio), the first vertex
        below = O.all(c < 1, dim=-1, keepdim=True)
        first = O.zeros(tuple(c.shape[:-1]), dtype=_dt.int64, device=c.device)
        vertex = _F.one_hot(first, num_classes=c.shape[-1]).to(c.dtype)
        return O.where(below, vertex, mode)

    @property
    def variance(self):
        c = self.concentration
        con0 = O.sum(c, dim=-1, keepdim=True)
        return c * (con0 - c) / (con0 ** 2 * (con0 + 1))

    def entropy(self):
        c = self.concentration
        k = c.shape[-1]
        a0 = O.sum(c, dim=-1)
        return (O.sum(lgamma(c), dim=-1) - lgamma(a0) - (k - a0) * digamma(a0)
                - O.sum((c - 1.0) * digamma(c), dim=-1))


class Beta(Distribution):
    """The Beta distribution with ``concentration1`` (alpha) and ``concentration0``
    (beta)."""
    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        c1, c0 = broadcast_all(concentration1, concentration0)
        self._dirichlet = Dirichlet(O.stack([c1, c0], dim=-1), validate_args=validate_args)
        super().__init__(self._dirichlet._batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Beta, _instance)
        batch_shape = tuple(batch_shape)
        new._dirichlet = self._dirichlet.expand(batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def concentration1(self):
        return self._dirichlet.concentration[..., 0]

    @property
    def concentration0(self):
        return self._dirichlet.concentration[..., 1]

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total ** 2 * (total + 1))

    def rsample(self, sample_shape=()):
        return self._dirichlet.rsample(sample_shape)[..., 0]

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        heads_tails = O.stack([value, 1.0 - value], dim=-1)
        return self._dirichlet.log_prob(heads_tails)

    def entropy(self):
        return self._dirichlet.entropy()

    def __repr__(self):
        return (f"Beta(concentration1: {tuple(self.concentration1.shape) or self.concentration1}, "
                f"concentration0: {tuple(self.concentration0.shape) or self.concentration0})")
