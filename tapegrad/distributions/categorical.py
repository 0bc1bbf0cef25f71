"""Bernoulli, Categorical and OneHotCategorical, as PyTorch's: each takes exactly one
of ``probs`` and ``logits`` and derives the other lazily."""
from numbers import Number

from .. import dtypes as _dt, ops as O
from ..grad_mode import no_grad
from ..nn import functional as _F
from ..tensor import Tensor
from . import constraints
from .distribution import Distribution
from .utils import (
    broadcast_all,
    broadcast_shape,
    finfo,
    lazy_property,
    logits_to_probs,
    probs_to_logits,
)

__all__ = ["Bernoulli", "Categorical", "OneHotCategorical"]


def _one_of(probs, logits):
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")


class Bernoulli(Distribution):
    """A Bernoulli distribution: 1 with probability ``probs`` (or ``sigmoid(logits)``)."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True
    _mean_carrier_measure = 0

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        is_scalar = isinstance(probs if probs is not None else logits, Number)
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
            self._param = self.probs
        else:
            (self.logits,) = broadcast_all(logits)
            self._param = self.logits
        batch_shape = () if is_scalar else tuple(self._param.shape)
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Bernoulli, _instance)
        batch_shape = tuple(batch_shape)
        if "probs" in self.__dict__:
            new.probs = O.expand(self.probs, batch_shape)
            new._param = new.probs
        if "logits" in self.__dict__:
            new.logits = O.expand(self.logits, batch_shape)
            new._param = new.logits
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return O.where(self.probs == 0.5, float("nan"), mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return tuple(self._param.shape)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with no_grad():
            p = O.expand(self.probs, shape)
            u = O.rand(shape, dtype=p.dtype, device=p.device)
            return (u < p).to(p.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -_F.binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        return _F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand=True):
        values = O.arange(2, dtype=self._param.dtype, device=self._param.device)
        values = O.reshape(values, (-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = O.expand(values, (-1,) + self._batch_shape)
        return values


class Categorical(Distribution):
    """A categorical distribution over ``0 .. K-1`` (``K = probs.shape[-1]``), batched
    over the leading dims of ``probs`` (or ``logits``, normalised)."""
    arg_constraints = {"probs": constraints.simplex,
                       "logits": constraints.independent(constraints.real, 1)}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        if probs is not None:
            if not isinstance(probs, Tensor) or probs.ndim < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / O.sum(probs, dim=-1, keepdim=True)
            self._param = self.probs
        else:
            if not isinstance(logits, Tensor) or logits.ndim < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - O.logsumexp(logits, dim=-1, keepdim=True)
            self._param = self.logits
        self._num_events = self._param.shape[-1]
        batch_shape = tuple(self._param.shape[:-1])
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Categorical, _instance)
        batch_shape = tuple(batch_shape)
        param_shape = batch_shape + (self._num_events,)
        if "probs" in self.__dict__:
            new.probs = O.expand(self.probs, param_shape)
            new._param = new.probs
        if "logits" in self.__dict__:
            new.logits = O.expand(self.logits, param_shape)
            new._param = new.logits
        new._num_events = self._num_events
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits)

    @property
    def param_shape(self):
        return tuple(self._param.shape)

    @property
    def mean(self):
        return O.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype,
                      device=self.probs.device)

    @property
    def mode(self):
        return O.argmax(self.probs, dim=-1)

    @property
    def variance(self):
        return O.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype,
                      device=self.probs.device)

    def sample(self, sample_shape=()):
        """By inverting the CDF: the number of cumulative probabilities below a
        uniform draw (one draw per sample and batch element)."""
        shape = self._extended_shape(sample_shape)
        with no_grad():
            probs = self.probs
            cdf = O.cumsum(probs, dim=-1)
            u = O.rand(shape + (1,), dtype=probs.dtype, device=probs.device)
            u = u * O.narrow(cdf, -1, self._num_events - 1, 1)  # cdf's total may be 1 - eps
            idx = O.sum((cdf <= u).to(_dt.int64), dim=-1)
            return O.clamp(idx, max=self._num_events - 1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = O.unsqueeze(value.long(), -1)
        shape = broadcast_shape(value.shape, self.logits.shape)
        value = O.expand(value, shape[:-1] + (1,))
        log_pmf = O.expand(self.logits, shape)
        return O.squeeze(O.gather(log_pmf, -1, value), -1)

    def entropy(self):
        min_real = finfo(self.logits.dtype).min
        logits = O.clamp(self.logits, min=min_real)
        return -O.sum(logits * self.probs, dim=-1)

    def enumerate_support(self, expand=True):
        values = O.arange(self._num_events, dtype=_dt.int64, device=self._param.device)
        values = O.reshape(values, (-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = O.expand(values, (-1,) + self._batch_shape)
        return values


class OneHotCategorical(Distribution):
    """A categorical distribution whose samples are one-hot vectors of size ``K``."""
    arg_constraints = {"probs": constraints.simplex,
                       "logits": constraints.independent(constraints.real, 1)}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits)
        batch_shape = self._categorical.batch_shape
        event_shape = tuple(self._categorical.param_shape[-1:])
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(OneHotCategorical, _instance)
        batch_shape = tuple(batch_shape)
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def _param(self):
        return self._categorical._param

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def mean(self):
        return self._categorical.probs

    @property
    def mode(self):
        probs = self._categorical.probs
        mode = O.argmax(probs, dim=-1)
        return _F.one_hot(mode, num_classes=probs.shape[-1]).to(probs.dtype)

    @property
    def variance(self):
        p = self._categorical.probs
        return p * (1 - p)

    @property
    def param_shape(self):
        return self._categorical.param_shape

    def sample(self, sample_shape=()):
        probs = self._categorical.probs
        num_events = self._categorical._num_events
        indices = self._categorical.sample(sample_shape)
        return _F.one_hot(indices, num_classes=num_events).to(probs.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        indices = O.argmax(value, dim=-1)
        return self._categorical.log_prob(indices)

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand=True):
        n = self.event_shape[0]
        values = O.eye(n, dtype=self._param.dtype, device=self._param.device)
        values = O.reshape(values, (n,) + (1,) * len(self.batch_shape) + (n,))
        if expand:
            values = O.expand(values, (n,) + self.batch_shape + (n,))
        return values
