"""Constraints on distribution parameters and supports, as ``torch.distributions.
constraints``: each has ``check(value)`` -> a bool Tensor (one entry per batch element,
the event dims reduced by ``event_dim``), ``is_discrete`` and ``event_dim``."""
import numpy as np

from .. import ops as O
from ..tensor import Tensor

__all__ = ["Constraint", "boolean", "dependent", "dependent_property", "greater_than",
           "greater_than_eq", "half_open_interval", "independent", "integer_interval",
           "interval", "less_than", "lower_cholesky", "lower_triangular", "nonnegative",
           "nonnegative_integer", "one_hot", "positive", "positive_definite",
           "positive_integer", "real", "real_vector", "simplex", "unit_interval",
           "is_dependent"]


def _t(value):
    return value if isinstance(value, Tensor) else O.tensor(value)


class Constraint:
    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError

    def __repr__(self):
        return self.__class__.__name__[1:] + "()"


class _Dependent(Constraint):
    """A placeholder for a constraint that depends on other parameters (checked by the
    distribution itself)."""

    def __init__(self, *, is_discrete=False, event_dim=0):
        self._is_discrete, self._event_dim = is_discrete, event_dim

    @property
    def is_discrete(self):
        return self._is_discrete

    @property
    def event_dim(self):
        return self._event_dim

    def __call__(self, *, is_discrete=None, event_dim=None):
        return _Dependent(is_discrete=self._is_discrete if is_discrete is None else is_discrete,
                          event_dim=self._event_dim if event_dim is None else event_dim)

    def check(self, value):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint):
    return isinstance(constraint, _Dependent)


class _DependentProperty(property, _Dependent):
    """A property whose value is a constraint built from the distribution's parameters
    (``Uniform.support``); on the class it is a dependent constraint."""

    def __init__(self, fn=None, *, is_discrete=False, event_dim=0):
        property.__init__(self, fn)
        _Dependent.__init__(self, is_discrete=is_discrete, event_dim=event_dim)

    def __call__(self, fn):
        return _DependentProperty(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


class _Independent(Constraint):
    def __init__(self, base, reinterpreted_batch_ndims):
        self.base_constraint, self.reinterpreted_batch_ndims = base, reinterpreted_batch_ndims

    @property
    def is_discrete(self):
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def check(self, value):
        result = self.base_constraint.check(value)
        n = self.reinterpreted_batch_ndims
        if result.ndim < n:
            raise ValueError(f"Expected value.dim() >= {n} but got {result.ndim}")
        for _ in range(n):
            result = O.all(result, dim=-1)
        return result

    def __repr__(self):
        return f"Independent({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def check(self, value):
        is_boolean = O.all((value == 0) | (value == 1), dim=-1)
        is_normalized = O.sum(value, dim=-1) == 1
        return is_boolean & is_normalized


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return ((O.remainder(value, 1) == 0) & (self.lower_bound <= value)
                & (value <= self.upper_bound))

    def __repr__(self):
        return f"IntegerInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerGreaterThan(Constraint):
    is_discrete = True

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return (O.remainder(value, 1) == 0) & (value >= self.lower_bound)

    def __repr__(self):
        return f"IntegerGreaterThan(lower_bound={self.lower_bound})"


class _Real(Constraint):
    def check(self, value):
        return value == value  # False only for NaN


class _GreaterThan(Constraint):
    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return self.lower_bound < value

    def __repr__(self):
        return f"GreaterThan(lower_bound={self.lower_bound})"


class _GreaterThanEq(_GreaterThan):
    def check(self, value):
        return self.lower_bound <= value

    def __repr__(self):
        return f"GreaterThanEq(lower_bound={self.lower_bound})"


class _LessThan(Constraint):
    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self):
        return f"LessThan(upper_bound={self.upper_bound})"


class _Interval(Constraint):
    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self):
        return f"Interval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _HalfOpenInterval(_Interval):
    def check(self, value):
        return (self.lower_bound <= value) & (value < self.upper_bound)

    def __repr__(self):
        return f"HalfOpenInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        return O.all(value >= 0, dim=-1) & (O.abs(O.sum(value, dim=-1) - 1) < 1e-6)


def _host(value):
    return _t(value).detach().cpu().numpy()


class _LowerTriangular(Constraint):
    event_dim = 2

    def check(self, value):
        return O.all(O.all(O.tril(value) == value, dim=-1), dim=-1)


class _LowerCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        lower = O.all(O.all(O.tril(value) == value, dim=-1), dim=-1)
        positive = O.all(O.diagonal(value, dim1=-2, dim2=-1) > 0, dim=-1)
        return lower & positive


class _PositiveDefinite(Constraint):
    """Symmetric (within 1e-6) with positive eigenvalues (checked on the host)."""
    event_dim = 2

    def check(self, value):
        a = _host(value)
        if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
            return O.tensor(np.zeros(a.shape[:-2], bool))
        sym = np.all(np.abs(a - np.swapaxes(a, -1, -2)) <= 1e-6, axis=(-1, -2))
        with np.errstate(all="ignore"):
            half = (a + np.swapaxes(a, -1, -2)) / 2
            finite = np.all(np.isfinite(half), axis=(-1, -2))
            half = np.where(finite[..., None, None], half, np.eye(a.shape[-1]))
            pos = np.all(np.linalg.eigvalsh(half) > 0, axis=-1)
        return O.tensor(sym & pos & finite, device=value.device)


dependent = _Dependent()
dependent_property = _DependentProperty
independent = _Independent
boolean = _Boolean()
one_hot = _OneHot()
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
integer_interval = _IntegerInterval
real = _Real()
real_vector = independent(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
less_than = _LessThan
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
lower_triangular = _LowerTriangular()
lower_cholesky = _LowerCholesky()
positive_definite = _PositiveDefinite()
