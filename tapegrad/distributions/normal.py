"""Normal and Uniform, as PyTorch's."""
import math
from numbers import Number

from .. import ops as O
from ..grad_mode import no_grad
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["Normal", "Uniform"]


def _draw(fn, shape, like):
    return fn(shape, dtype=like.dtype, device=like.device)


class Normal(Distribution):
    """The normal distribution with mean ``loc`` and standard deviation ``scale``."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        batch_shape = () if isinstance(loc, Number) and isinstance(scale, Number) \
            else tuple(self.loc.shape)
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Normal, _instance)
        batch_shape = tuple(batch_shape)
        new.loc = O.expand(self.loc, batch_shape)
        new.scale = O.expand(self.scale, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale ** 2

    def sample(self, sample_shape=()):
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = _draw(O.randn, shape, self.loc)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale ** 2
        log_scale = O.log(self.scale)
        return -((value - self.loc) ** 2) / (2 * var) - log_scale - math.log(math.sqrt(2 * math.pi))

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + O.erf((value - self.loc) / (self.scale * math.sqrt(2))))

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + O.log(self.scale)


class Uniform(Distribution):
    """The uniform distribution on the half-open interval ``[low, high)``."""
    arg_constraints = {"low": constraints.dependent(is_discrete=False, event_dim=0),
                       "high": constraints.dependent(is_discrete=False, event_dim=0)}
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = broadcast_all(low, high)
        batch_shape = () if isinstance(low, Number) and isinstance(high, Number) \
            else tuple(self.low.shape)
        super().__init__(batch_shape, validate_args=validate_args)
        if self._validate_args and not bool(O.all(self.low < self.high)):
            raise ValueError("Uniform is not defined when low>= high")

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Uniform, _instance)
        batch_shape = tuple(batch_shape)
        new.low = O.expand(self.low, batch_shape)
        new.high = O.expand(self.high, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self.low, self.high)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return self.high * float("nan")

    @property
    def stddev(self):
        return (self.high - self.low) / 12 ** 0.5

    @property
    def variance(self):
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        u = _draw(O.rand, shape, self.low)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        inside = (self.low <= value) & (self.high > value)
        return O.where(inside, -O.log(self.high - self.low), float("-inf"))

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return O.clamp((value - self.low) / (self.high - self.low), min=0, max=1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return O.log(self.high - self.low)
