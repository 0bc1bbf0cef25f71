"""MultivariateNormal, as PyTorch's: parameterised by exactly one of
``covariance_matrix``, ``precision_matrix`` and ``scale_tril``, computing with the
lower Cholesky factor ``L`` of the covariance (``tg.linalg.cholesky``; triangular
systems through ``tg.linalg.solve_triangular``, which reads and differentiates only
the lower triangle, as PyTorch's)."""
import math

import numpy as np

from .. import linalg as _linalg, ops as O
from . import constraints
from .distribution import Distribution
from .utils import broadcast_shape, lazy_property

__all__ = ["MultivariateNormal"]


def _batch_mv(bmat, bvec):
    return O.squeeze(O.matmul(bmat, O.unsqueeze(bvec, -1)), -1)


def _tri_solve(L, b):
    """``L^-1 b`` for lower-triangular ``L`` (..., n, n) and ``b`` (..., n, k),
    broadcasting the batch dims."""
    return _linalg.solve_triangular(L, b, upper=False)


def _batch_mahalanobis(L, x):
    """``x^T (L L^T)^-1 x`` over the batch: ``|L^-1 x|^2``. The dims of ``x`` in front
    of ``L``'s batch dims (samples, or batch dims ``L`` is shared over) become columns of
    one right-hand side per ``L``: one triangular solve with many columns rather than a
    solve per vector (as PyTorch's)."""
    n, lb = x.shape[-1], tuple(L.shape[:-2])
    xb = tuple(x.shape[:-1])
    k = len(xb) - len(lb)
    if k < 0 or xb[k:] != lb:  # L broadcasts against x some other way: one per vector
        y = O.squeeze(_tri_solve(L, O.unsqueeze(x, -1)), -1)
        return O.sum(y * y, dim=-1)
    lead = xb[:k]
    cols = int(np.prod(lead)) if lead else 1
    X = O.reshape(x, (cols,) + lb + (n,))
    X = O.permute(X, tuple(range(1, len(lb) + 1)) + (len(lb) + 1, 0))  # lb + (n, cols)
    Y = _tri_solve(L, X)
    m = O.sum(Y * Y, dim=-2)  # lb + (cols,)
    m = O.permute(m, (len(lb),) + tuple(range(len(lb))))
    return O.reshape(m, lead + lb)


class MultivariateNormal(Distribution):
    """A multivariate normal with mean ``loc`` (the last dim is the event)."""
    arg_constraints = {"loc": constraints.real_vector,
                       "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        if loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        if (covariance_matrix is not None) + (scale_tril is not None) + (
                precision_matrix is not None) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or "
                             "scale_tril may be specified.")
        given = next(m for m in (scale_tril, covariance_matrix, precision_matrix)
                     if m is not None)
        name = ("scale_tril" if scale_tril is not None else "covariance_matrix"
                if covariance_matrix is not None else "precision_matrix")
        if given.ndim < 2:
            raise ValueError(f"{name} matrix must be at least two-dimensional, with "
                             f"optional leading batch dimensions")
        batch_shape = broadcast_shape(given.shape[:-2], loc.shape[:-1])
        n = loc.shape[-1]
        full = batch_shape + (n, n)
        setattr(self, name, O.expand(given, full))
        self.loc = O.expand(loc, batch_shape + (n,))
        super().__init__(batch_shape, (n,), validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = _linalg.cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _linalg.cholesky(_linalg.inv(precision_matrix))

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(MultivariateNormal, _instance)
        batch_shape = tuple(batch_shape)
        loc_shape = batch_shape + self.event_shape
        cov_shape = batch_shape + self.event_shape + self.event_shape
        new.loc = O.expand(self.loc, loc_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, O.expand(self.__dict__[name], cov_shape))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @lazy_property
    def scale_tril(self):
        return O.expand(self._unbroadcasted_scale_tril,
                        self._batch_shape + self._event_shape + self._event_shape)

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return O.expand(O.matmul(L, O.transpose(L, -1, -2)),
                        self._batch_shape + self._event_shape + self._event_shape)

    @lazy_property
    def precision_matrix(self):
        L_inv = _linalg.inv(O.tril(self._unbroadcasted_scale_tril))
        return O.expand(O.matmul(O.transpose(L_inv, -1, -2), L_inv),
                        self._batch_shape + self._event_shape + self._event_shape)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        L = self._unbroadcasted_scale_tril
        return O.expand(O.sum(L * L, dim=-1), self._batch_shape + self._event_shape)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = O.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + _batch_mv(self._unbroadcasted_scale_tril, eps)

    def _half_log_det(self):
        diag = O.diagonal(self._unbroadcasted_scale_tril, dim1=-2, dim2=-1)
        return O.sum(O.log(diag), dim=-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = _batch_mahalanobis(self._unbroadcasted_scale_tril, diff)
        k = self._event_shape[0]
        return -0.5 * (k * math.log(2 * math.pi) + M) - self._half_log_det()

    def entropy(self):
        k = self._event_shape[0]
        H = 0.5 * k * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return H if not self._batch_shape else O.expand(H, self._batch_shape)
