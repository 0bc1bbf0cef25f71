"""What the compiled-module tests share: two models built from one seed (the compiled
one and its eager reference) and the comparison of their values."""
import numpy as np

import tapegrad as tg


def pair(make):
    """Two models ``make()`` builds from the same seed: equal parameters."""
    tg.manual_seed(0)
    a = make()
    tg.manual_seed(0)
    b = make()
    return a, b


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)
