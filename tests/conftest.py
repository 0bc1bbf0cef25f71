"""Shared test setup: import tapegrad from this checkout, and leave no global state
(default dtype, grad mode, anomaly mode, open tapes) behind a test."""
import os
import re
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tapegrad as tg  # noqa: E402
from tapegrad import tape as _tape  # noqa: E402


@pytest.fixture(autouse=True)
def _clean_global_state():
    dtype = tg.get_default_dtype()
    yield
    st = _tape.state
    leaked = (st.grad_enabled is not True, bool(st.tapes), st.anomaly is not False,
              tg.get_default_dtype() is not dtype, bool(st.observers))
    # restore first so one leaking test does not fail all the following ones
    st.grad_enabled = True
    del st.tapes[:]
    st.anomaly = False
    st.observers = ()
    tg.set_default_dtype(dtype)
    if any(leaked):
        pytest.fail("the test left global tapegrad state changed "
                    f"(grad mode, open tapes, anomaly, default dtype, observers): {leaked}")


@pytest.fixture
def fresh_name(request):
    """A registry name for an op the test declares, unregistered after it."""
    name = "test_" + re.sub(r"\W", "_", request.node.nodeid)
    yield name
    tg.ops_registry.unregister(name)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def torch_or_skip():
    return pytest.importorskip("torch")
