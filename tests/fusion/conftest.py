"""Fusion tests share compiled kernels: keep shapes and expressions few."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import fusion


@pytest.fixture
def compiled():
    """Run expression ops through Numba even for tiny tensors."""
    old = fusion.config.min_numel
    fusion.config.min_numel = 0
    yield
    fusion.config.min_numel = old


def gradgradcheck(fn, inputs, **kw):
    """Second-order check: gradcheck of ``(inputs, v) -> vjp(fn)(v)``."""
    rng = np.random.default_rng(1)
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    vs = [tg.tensor(rng.standard_normal(o.shape), requires_grad=True) for o in outs]

    def vjp_fn(*args):
        ins, v = args[:len(inputs)], args[len(inputs):]
        with tg.enable_grad():
            os_ = fn(*ins)
            os_ = os_ if isinstance(os_, tuple) else (os_,)
            gs = tg.grad(list(os_), list(ins), grad_outputs=list(v), create_graph=True,
                         allow_unused=True)
        return tuple(g for g in gs if g is not None)
    return tg.testing.gradcheck(vjp_fn, tuple(inputs) + tuple(vs), **kw)
