"""API.md "Tools" and the generator part of "PyTorch compatibility, continued":
tg.Generator and generator= on the random functions, tg.default_generator,
set_printoptions (tensors only, as PyTorch's), is_inference, gradcheck's signature,
SummaryWriter."""
import copy
import inspect
import struct

import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------- generators
def test_generator_api():
    assert inspect.signature(tg.Generator).parameters["device"].default == "cpu"
    g = tg.Generator()
    assert g.manual_seed(3) is g and g.initial_seed() == 3
    assert str(g.device) == "cpu"
    s = g.seed()
    assert isinstance(s, int) and g.initial_seed() == s
    g.manual_seed(1)
    state = g.get_state()
    assert isinstance(state, tg.Tensor) and state.dtype == tg.uint8
    a = tg.rand(4, generator=g)
    g.set_state(state)
    assert tg.rand(4, generator=g).tolist() == a.tolist()
    g2 = copy.deepcopy(g)
    assert tg.rand(3, generator=g).tolist() == tg.rand(3, generator=g2).tolist()
    with pytest.raises(TypeError):
        tg.Generator().manual_seed("x")


def test_default_generator_is_what_manual_seed_returns():
    g = tg.manual_seed(5)
    assert g is tg.default_generator and isinstance(g, tg.Generator)
    assert tg.initial_seed() == 5 == g.initial_seed()
    a = tg.rand(3)
    g.manual_seed(5)
    assert tg.rand(3).tolist() == a.tolist()
    st = tg.default_generator.get_state()
    b = tg.randn(2)
    tg.default_generator.set_state(st)
    assert tg.randn(2).tolist() == b.tolist()


def test_a_generator_leaves_the_global_stream_alone():
    tg.manual_seed(0)
    a = tg.rand(3)
    tg.manual_seed(0)
    tg.randn(5, generator=tg.Generator().manual_seed(9))
    assert tg.rand(3).tolist() == a.tolist()


RANDOM_CALLS = {
    "rand": lambda g: tg.rand(4, generator=g),
    "randn": lambda g: tg.randn(4, generator=g),
    "randint": lambda g: tg.randint(0, 1000, (4,), generator=g),
    "randperm": lambda g: tg.randperm(20, generator=g),
    "rand_like": lambda g: tg.rand_like(tg.ones(4), generator=g),
    "randn_like": lambda g: tg.randn_like(tg.ones(4), generator=g),
    "randint_like": lambda g: tg.randint_like(tg.ones(4), 1000, generator=g),
    "normal": lambda g: tg.normal(tg.zeros(4), tg.ones(4), generator=g),
    "bernoulli": lambda g: tg.bernoulli(tg.full((32,), 0.5), generator=g),
    "multinomial": lambda g: tg.multinomial(tg.ones(50), 5, generator=g),
    "poisson": lambda g: tg.poisson(tg.full((8,), 5.0), generator=g),
    "uniform_": lambda g: tg.empty(4).uniform_(generator=g),
    "normal_": lambda g: tg.empty(4).normal_(generator=g),
    "exponential_": lambda g: tg.empty(4).exponential_(generator=g),
    "random_": lambda g: tg.empty(4).random_(0, 1000, generator=g),
    "init.uniform_": lambda g: tg.nn.init.uniform_(tg.empty(4), generator=g),
    "init.normal_": lambda g: tg.nn.init.normal_(tg.empty(4), generator=g),
    "init.trunc_normal_": lambda g: tg.nn.init.trunc_normal_(tg.empty(4), generator=g),
    "init.xavier_uniform_": lambda g: tg.nn.init.xavier_uniform_(tg.empty(3, 3), generator=g),
    "init.kaiming_normal_": lambda g: tg.nn.init.kaiming_normal_(tg.empty(3, 3), generator=g),
    "init.orthogonal_": lambda g: tg.nn.init.orthogonal_(tg.empty(3, 3), generator=g),
    "init.sparse_": lambda g: tg.nn.init.sparse_(tg.empty(6, 3), 0.5, generator=g),
}


@pytest.mark.parametrize("name", sorted(RANDOM_CALLS))
def test_generator_keyword_on_random_functions(name):
    call = RANDOM_CALLS[name]
    a = call(tg.Generator().manual_seed(7)).tolist()
    assert call(tg.Generator().manual_seed(7)).tolist() == a
    assert call(tg.Generator().manual_seed(8)).tolist() != a


def test_init_orthogonal_sparse_eye_dirac():
    w = tg.nn.init.orthogonal_(tg.empty(3, 5), gain=2.0).numpy()
    np.testing.assert_allclose(w @ w.T, 4 * np.eye(3), atol=1e-5)
    s = tg.nn.init.sparse_(tg.empty(10, 4), 0.3).numpy()
    assert ((s == 0).sum(0) == 3).all()
    assert tg.nn.init.eye_(tg.empty(2, 3)).tolist() == torch.nn.init.eye_(
        torch.empty(2, 3)).tolist()
    for shape, groups in (((4, 2, 3), 1), ((4, 2, 3, 3), 2), ((2, 4, 3, 3, 3), 1)):
        np.testing.assert_array_equal(
            tg.nn.init.dirac_(tg.empty(*shape), groups).numpy(),
            torch.nn.init.dirac_(torch.empty(*shape), groups).numpy())
    with pytest.raises(ValueError):
        tg.nn.init.orthogonal_(tg.empty(3))



def test_init_deprecated_names_warn_and_initialise():
    """PyTorch's spellings without the underscore: a FutureWarning with PyTorch's
    message, then the same fill as the in-place initialiser."""
    names = [n for n in dir(torch.nn.init) if not n.startswith("_") and n + "_" in
             dir(torch.nn.init) and callable(getattr(torch.nn.init, n))]
    assert names
    for name in names:
        assert callable(getattr(tg.nn.init, name)), name
    with pytest.warns(FutureWarning, match="nn.init.eye_"):
        w = tg.nn.init.eye(tg.empty(2, 3))
    assert w.tolist() == torch.nn.init.eye_(torch.empty(2, 3)).tolist()
    with pytest.warns(FutureWarning, match="nn.init.constant_"):
        assert tg.nn.init.constant(tg.empty(2), 0.5).tolist() == [0.5, 0.5]

# ---------------------------------------------------------------- printing
def test_set_printoptions_signature():
    params = inspect.signature(tg.set_printoptions).parameters
    assert list(params) == ["precision", "threshold", "edgeitems", "linewidth", "profile",
                            "sci_mode"]
    assert all(p.default is None for p in params.values())


@pytest.mark.parametrize("options", [
    {"precision": 2}, {"sci_mode": True}, {"sci_mode": False, "precision": 6},
    {"profile": "short"}, {"profile": "full"}, {"linewidth": 20},
    {"threshold": 5, "edgeitems": 1}, {"threshold": 5, "edgeitems": 0}, {"linewidth": 50},
    {"profile": "full", "linewidth": 40},
])
def test_set_printoptions_as_torch_and_numpy_untouched(options):
    before = np.get_printoptions()
    rs = np.random.RandomState(0)
    data = [[[1.123456789, 2.5e-3, 100.0], [3.0, 4.0, 5.0]], list(range(20)),
            np.linspace(0, 1, 12).reshape(3, 4).tolist(), [1e-8, 1.0, 1e8], 3.5,
            rs.randn(50, 50).tolist(), rs.randn(4, 5, 6, 7).tolist(), rs.randn(3000).tolist(),
            (rs.rand(30, 40) > 0.5).tolist()]
    try:
        tg.set_printoptions(**options)
        torch.set_printoptions(**options)
        assert np.get_printoptions() == before
        for d in data:
            want = repr(torch.tensor(d))
            assert repr(tg.tensor(d)).replace("tapegrad", "torch") == want
    finally:
        tg.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_repr_suffixes_and_empty_shapes_as_torch(dtype):
    rs = np.random.RandomState(0)
    arrays = [rs.randn(50, 50), rs.randn(3000), rs.randn(3, 1000), rs.randn(2, 3, 4) * 1e5,
              np.array([1e-5, 1.0]), np.array([1e10, 1.0]), np.zeros((0, 3)), np.zeros(0),
              np.zeros((2, 0, 1))]
    for a in arrays:
        for grad in (False, True):
            t = tg.tensor(a, dtype=getattr(tg, dtype))
            p = torch.tensor(a, dtype=getattr(torch, dtype))
            if grad:
                t, p = t.requires_grad_() * 2, p.requires_grad_() * 2
            assert repr(t).replace("tapegrad", "torch") == repr(p)


def test_is_inference():
    with tg.inference_mode():
        y = tg.ones(2) * 2
    assert y.is_inference() and not tg.ones(1).is_inference()
    assert tg.inference_mode()(lambda: tg.ones(1) * 1)().is_inference()


# ---------------------------------------------------------------- testing helpers
def test_gradcheck_signatures():
    params = inspect.signature(tg.testing.gradcheck).parameters
    assert list(params)[:2] == ["fn", "inputs"]
    assert (params["eps"].default, params["atol"].default, params["rtol"].default) == (
        1e-6, 1e-5, 1e-3)
    assert "gradgradcheck" in dir(tg.testing) and "assert_close" in dir(tg.testing)
    x = tg.randn(3, dtype=tg.float64, requires_grad=True)
    assert tg.testing.gradcheck(lambda a: (a * a).sin(), (x,))
    assert tg.testing.gradgradcheck(lambda a: (a * a).sin(), (x,))


# ---------------------------------------------------------------- SummaryWriter
def test_summary_writer(tmp_path):
    pytest.importorskip("tensorboardX")
    from tapegrad.utils.tensorboard import SummaryWriter
    assert inspect.signature(SummaryWriter).parameters["log_dir"].default is None
    with SummaryWriter(log_dir=str(tmp_path)) as w:
        w.add_scalar("loss", tg.tensor(0.5), 1)
        w.add_scalar("loss", 0.25, global_step=2)
        w.add_scalars("run", {"a": tg.tensor(1.0), "b": 2.0}, 1)
        w.add_histogram("h", tg.randn(100), 1)
        w.add_image("img", tg.rand(3, 8, 8), 1)
        w.add_text("t", "hello", 1)
        w.flush()
    files = sorted(p for p in tmp_path.rglob("events.out.tfevents.*"))
    assert files
    from tensorboardX.proto import event_pb2
    scalars = []
    with open(files[0], "rb") as f:
        while True:
            head = f.read(12)
            if len(head) < 12:
                break
            n = struct.unpack("<Q", head[:8])[0]
            ev = event_pb2.Event()
            ev.ParseFromString(f.read(n))
            f.read(4)
            scalars += [(ev.step, v.tag, v.simple_value) for v in ev.summary.value
                        if v.tag == "loss"]
    assert scalars == [(1, "loss", 0.5), (2, "loss", 0.25)]
