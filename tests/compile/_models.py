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


def cross_entropy_step(m, opt, x, y):
    """A training step to compile: the cross-entropy of ``m(x)`` against ``y``, its
    backward and ``opt.step()``; it returns the loss."""
    from tapegrad.nn import functional as F

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss
    return step
