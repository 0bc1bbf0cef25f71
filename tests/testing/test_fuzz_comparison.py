"""The differential fuzzer's comparison of two arrays (``fuzz._close``): equal
infinities and NaNs agree, anything else outside the tolerance differs, and an infinity
in one place does not widen the tolerance of the finite values beside it."""
import numpy as np

from tapegrad.testing import fuzz

TOL = (1e-7, 1e-7)


def test_equal_values_infinities_and_nans_agree():
    a = np.array([1.0, np.inf, -np.inf, np.nan])
    assert fuzz._close(a, a.copy(), TOL) is None


def test_opposite_infinities_differ():
    assert fuzz._close(np.array([np.inf]), np.array([-np.inf]), TOL) is not None


def test_infinity_against_a_number_differs():
    assert fuzz._close(np.array([np.inf, 1.0]), np.array([2.0, 1.0]), TOL) is not None
    assert fuzz._close(np.array([2.0, 1.0]), np.array([np.inf, 1.0]), TOL) is not None


def test_nan_against_a_number_differs():
    assert fuzz._close(np.array([np.nan]), np.array([0.0]), TOL) is not None


def test_finite_values_beside_an_infinity_keep_their_tolerance():
    got = np.array([np.inf, 1.0])
    assert fuzz._close(got, np.array([np.inf, 1.5]), TOL) is not None
    assert fuzz._close(got, np.array([np.inf, 1.0 + 1e-9]), TOL) is None
