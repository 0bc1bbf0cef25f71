"""Shared test setup: import tapegrad from this checkout, and leave no global state
(default dtype, grad mode, anomaly mode, open tapes) behind a test."""
import gc
import os
import re
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Bytecode caches on, for this process (pytest's rewritten test modules, tapegrad's
# modules) and for the processes the tests start (xdist workers, the mpiexec ranks,
# the demos), even where PYTHONDONTWRITEBYTECODE is set: each of those processes
# imports tapegrad, and compiling its sources costs about 0.5 s of CPU every time.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# tapegrad itself is imported by pytest_configure, in each process that runs tests (not
# in pytest-xdist's controller, which only hands tests out: importing it there is about
# a second of CPU before the workers start)
tg = _tape = _sample_decl = None

try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # the test extra is not installed: the hypothesis tests skip
    _hypothesis_settings = None
if _hypothesis_settings is not None:
    # Examples per property for the tests that leave the count to the profile: a quick
    # sweep in the main run, ten times as many in the exhaustive tier (.ci/run:
    # `-m "slow or hypothesis" --hypothesis-profile=thorough`). No deadline: a loaded
    # machine, or xdist workers sharing cores, is not a failure.
    _hypothesis_settings.register_profile("tapegrad", max_examples=50, deadline=None)
    _hypothesis_settings.register_profile("thorough", max_examples=500, deadline=None)
    _hypothesis_settings.load_profile("tapegrad")


def pytest_configure(config):
    global tg, _tape, _sample_decl
    if os.environ.get("PYTEST_XDIST_WORKER") is None and not config.getvalue("collectonly") \
            and getattr(config.option, "dist", "no") != "no" and getattr(config.option, "tx", None):
        return  # xdist's controller: the workers import it
    import tapegrad
    from tapegrad import tape
    from tapegrad.ops import _decl
    tg, _tape, _sample_decl = tapegrad, tape, _decl
    if os.environ.get("PYTEST_XDIST_WORKER") is not None:
        _send_fewer_reports(config)


def _send_fewer_reports(config):
    """In an xdist worker: the reports of passed setup and teardown phases that carry
    nothing to show (no captured output, no properties, shorter than ``--durations-min``)
    stay in the worker. Every test's call report, and every report of a failure, an
    error or a skip, goes to the controller as before; without these the controller
    prints the same (it shows such a report nowhere), while each of them cost a
    serialisation, a message and a hook call on both sides (two of the six messages of
    every one of the ~19k tests). Not with --junitxml or a report log, which record the
    setup and teardown of each test."""
    if getattr(config.option, "xmlpath", None) or getattr(config.option, "report_log", None):
        return
    interactor = next((p for p in config.pluginmanager.get_plugins()
                       if type(p).__name__ == "WorkerInteractor"), None)
    send = getattr(interactor, "sendevent", None)
    if send is None:
        return
    shortest = config.getoption("durations_min", None)
    if shortest is None:  # (--durations' own default)
        shortest = 0.005 if config.getoption("verbose", 0) < 2 else 0.0

    def sendevent(name, **kwargs):
        data = kwargs.get("data") if name == "testreport" else None
        if (data is not None and data.get("when") in ("setup", "teardown")
                and data.get("outcome") == "passed" and not data.get("sections")
                and not data.get("longrepr") and not data.get("user_properties")
                and data.get("duration", shortest) < shortest):
            return
        send(name, **kwargs)
    interactor.sendevent = sendevent


def pytest_collectstart(collector):
    # No cyclic garbage collection while the ~38k test items are built (in each process
    # that collects: xdist's workers, not its controller): each full collection would
    # walk every object made so far. pytest_collection_finish turns it back on.
    if isinstance(collector, pytest.Session):
        gc.disable()


@pytest.hookimpl(wrapper=True)
def pytest_generate_tests(metafunc):
    """Under README's ``-m "not slow"``, the ``slow`` cases of a parametrization are left
    out before their test items are built, rather than built and then deselected: about
    half of the ~38k items are the exhaustive tier's, and each item costs every xdist
    worker its construction, its id sent to the controller and the ``-m`` match (seconds
    of each worker's CPU). A parametrization all of whose cases are slow is kept whole
    (``-m`` deselects its items as before), so no empty-set skip appears."""
    if _leaves_out_slow(metafunc.config):
        for node in metafunc.definition.listchain():
            node.own_markers[:] = [_without_slow(m) if m.name == "parametrize" else m
                                   for m in node.own_markers]
    return (yield)


def _leaves_out_slow(config):
    return " ".join(str(config.option.markexpr or "").split()) == "not slow"


def _is_slow(value):
    return isinstance(value, pytest.ParameterSet) and any(
        getattr(m, "name", None) == "slow" for m in value.marks)


def _without_slow(mark):
    """``mark`` (a ``parametrize`` mark) without its ``slow`` cases (a list of ``ids``
    filtered with them); ``mark`` itself when it has none, or nothing else."""
    args, kwargs = list(mark.args), dict(mark.kwargs)
    if len(args) >= 2:
        given = args[1]
        values = args[1] = list(given)
    elif "argvalues" in kwargs:
        given = kwargs["argvalues"]
        values = kwargs["argvalues"] = list(given)
    else:
        return mark
    keep = [not _is_slow(v) for v in values]
    if all(keep) or not any(keep):
        # (a generator of values, read once here, is passed on as its list)
        return mark if isinstance(given, (list, tuple)) else \
            pytest.mark.parametrize(*args, **kwargs).mark
    values[:] = [v for v, k in zip(values, keep) if k]
    ids = args[3] if len(args) >= 4 else kwargs.get("ids")
    if isinstance(ids, (list, tuple)):
        ids = [i for i, k in zip(ids, keep) if k]
        if len(args) >= 4:
            args[3] = ids
        else:
            kwargs["ids"] = ids
    return pytest.mark.parametrize(*args, **kwargs).mark


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    # The collection's objects (test items, the registry samples drawn for them, the
    # imported modules) live until the process ends: frozen, the garbage collector no
    # longer walks them in each full collection during the run (over the main suite's
    # ~19k tests, seconds of CPU).
    gc.freeze()
    gc.enable()
    # A full collection still walks everything made since (kernels compiled, samples
    # drawn, PyTorch's and JAX's caches): about 0.1 s each (tests/ops and tests/interop
    # under -n 2: 22 in each worker, 1.9 s of its CPU; 11 and 1.1 s with this). The
    # young generations, where a test's cycles die, are collected as often as before;
    # the oldest ten times less often (explicit gc.collect() calls still run).
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old * 10)
    # Under pytest-xdist (README's `-n auto`), BLAS on one thread in each worker: the
    # workers already occupy every core, and the threads of a multi-threaded GEMM
    # (NumPy's and SciPy's OpenBLAS, PyTorch's pool) spin-wait for cores the other
    # workers hold (a small GEMM then takes milliseconds instead of microseconds).
    # After the collection, when the test modules have loaded them; tapegrad's own
    # chunked loops keep their threads.
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    try:
        import threadpoolctl
    except ImportError:
        return
    threadpoolctl.threadpool_limits(1, user_api="blas")


# Modules of many short tests, run after all the others (in this order). Under xdist the
# workers take the queue's tests a few at a time, so a long test near the queue's end
# runs alone while the other worker has nothing left; ending on thousands of tests of
# milliseconds each lets the two workers finish together.
RUN_LAST = ("tests/core/test_bad_input.py", "tests/test_layering.py",
            "tests/ops/test_registry.py")


def _run_last_rank(item, ranks={}):
    path = str(item.path)
    rank = ranks.get(path)
    if rank is None:
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        rank = ranks[path] = RUN_LAST.index(rel) + 1 if rel in RUN_LAST else 0
    return rank


@pytest.hookimpl(trylast=True)  # after xdist's own, and after -m/-k deselected
def pytest_collection_modifyitems(config, items):
    """The run's order (RUN_LAST), and ``xdist_group`` under pytest 9: xdist (3.8)
    appends ``@group`` to ``item._nodeid``, which pytest 9 no longer reads (a node's id
    is its ``NodeId``), so the workers reported ungrouped ids and every group's tests
    were spread over the workers. The suffix goes onto the id's string instead, as
    xdist means it to."""
    items.sort(key=_run_last_rank)  # stable: the collection's order otherwise
    if os.environ.get("PYTEST_XDIST_WORKER") is None or not config.getvalue("loadgroup"):
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        node_id = getattr(item, "_id", None)
        if names and "@" not in item.nodeid and hasattr(node_id, "_str_cache"):
            object.__setattr__(node_id, "_str_cache", f"{item.nodeid}@{'_'.join(names)}")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """README's ``--dist loadgroup``: xdist's scheduler with the controller's per-test
    bookkeeping in constant time. xdist's own looks each test id up in the collection
    by a linear search when it sends it, and counts a worker's pending tests over every
    unit the worker was given whenever a test finishes; each test without an
    ``xdist_group`` is a unit of its own, so both grow with the square of the ~17k
    tests (tens of seconds of the controller's CPU, taken from the two workers')."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Scheduling(LoadGroupScheduling):
        def __init__(self, config, log=None):
            super().__init__(config, log)
            self._positions = {}  # node: {test id: its index in the node's collection}
            self._pending = {}  # node: tests sent and not finished

        def _assign_work_unit(self, node):
            scope, work_unit = self.workqueue.popitem(last=False)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            positions = self._positions.get(node)
            if positions is None:
                positions = self._positions[node] = {
                    nodeid: k for k, nodeid in enumerate(self.registered_collections[node])}
            todo = [positions[nodeid] for nodeid, done in work_unit.items() if not done]
            self._pending[node] = self._pending.get(node, 0) + len(todo)
            node.send_runtest_some(todo)

        def mark_test_complete(self, node, item_index, duration=0):
            self._pending[node] -= 1
            super().mark_test_complete(node, item_index, duration)

        def _reschedule(self, node):
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending.get(node, 0) <= 2:  # xdist's heuristic: keep two queued
                self._assign_work_unit(node)

    scheduling = Scheduling(config, log)
    if not all(hasattr(scheduling, a) for a in ("workqueue", "assigned_work",
                                                "registered_collections")):
        return None  # another xdist's internals: its own scheduler
    return scheduling


@pytest.fixture(autouse=True)
def _clean_global_state():
    # every test starts from one generator state, whichever tests ran before it on its
    # xdist worker (a random draw's float32 rounding must not depend on the test order)
    tg.manual_seed(0)
    if "torch" in sys.modules:
        # the CPU generator only (torch.manual_seed also queues a seed for every lazily
        # initialised accelerator, capturing a traceback each time: ~0.5 ms a test)
        sys.modules["torch"].default_generator.manual_seed(0)
    # the registry samples' generator too: a sample drawn inside a test gets the same
    # values on every run, whichever samples its worker drew before
    _sample_decl._rng = np.random.default_rng(0)
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


@pytest.fixture(params=["fused", "numpy"])
def update_path(request, monkeypatch):
    """Run an optimizer test on the fused (Numba) update kernels and on the NumPy path:
    the test parameters are small, so both are forced through ``fusion.update.config``."""
    from tapegrad.fusion import update as fused_update
    if request.param == "fused":
        pytest.importorskip("numba")
        monkeypatch.setattr(fused_update.config, "min_numel", 0)
    else:
        monkeypatch.setattr(fused_update.config, "use_numba", False)
    return request.param


def torch_or_skip():
    return pytest.importorskip("torch")
