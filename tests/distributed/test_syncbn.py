"""tg.nn.SyncBatchNorm: under ``mpiexec -n 2 / 3`` against PyTorch's BatchNorm on the
concatenated batch (scripts/mpi_syncbn.py), a world of one rank, and in one process
without a process group (plain BatchNorm) and convert_sync_batchnorm."""
import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn as nn

from ._launch import run_ok

# the mpiexec jobs run one at a time, on one xdist worker (--dist loadgroup): two jobs
# of two or three ranks each at once on a small machine would stretch the fault tests'
# time limits
pytestmark = pytest.mark.xdist_group("mpiexec")


# three ranks in the exhaustive tier only (marked slow): about twice two's time here
@pytest.mark.parametrize("n", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_syncbn_matches_batchnorm_on_the_concatenated_batch(n):
    # outputs, running stats, input/weight/bias gradients (float64 and float32, 1-3 d,
    # a rank with no examples), second order, finite differences, eval, DDP steps
    run_ok("mpi_syncbn.py", n, timeout=180)


# a further world size, in the exhaustive tier: each rank of a job imports PyTorch (the
# oracle), about 5 s of CPU a job on a small machine
@pytest.mark.slow
def test_syncbn_world_of_one_rank_is_batchnorm():
    run_ok("mpi_syncbn.py", 1, timeout=60)


@pytest.mark.parametrize("shape, affine, track, momentum", [
    ((6, 3), True, True, 0.1), ((4, 3, 5), False, True, None), ((3, 3, 2, 2), True, False, 0.3),
])
def test_without_a_process_group_it_is_batchnorm(shape, affine, track, momentum):
    # PyTorch's SyncBatchNorm is plain batch norm too when torch.distributed is not
    # initialised: the oracle
    assert not tg.distributed.is_initialized()
    rng = np.random.default_rng(1)
    m = nn.SyncBatchNorm(3, momentum=momentum, affine=affine, track_running_stats=track)
    ref = torch.nn.SyncBatchNorm(3, momentum=momentum, affine=affine,
                                 track_running_stats=track)
    m, ref = m.double(), ref.double()
    for step in range(2):
        X, W = rng.standard_normal(shape), rng.standard_normal(shape)
        x, xr = tg.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
        y, yr = m(x), ref(xr)
        np.testing.assert_allclose(y.detach().numpy(), yr.detach().numpy(), atol=1e-12)
        (y * tg.tensor(W)).sum().backward()
        (yr * torch.tensor(W)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), atol=1e-12)
        if affine:
            np.testing.assert_allclose(m.weight.grad.numpy(), ref.weight.grad.numpy(),
                                       atol=1e-12)
        if track:
            np.testing.assert_allclose(m.running_var.numpy(), ref.running_var.numpy(),
                                       atol=1e-12)
    m.eval()
    ref.eval()
    X = rng.standard_normal(shape)
    np.testing.assert_allclose(m(tg.tensor(X)).detach().numpy(),
                               ref(torch.tensor(X)).detach().numpy(), atol=1e-12)


def test_gradcheck_without_a_process_group():
    x = tg.tensor(np.random.default_rng(2).standard_normal((5, 2, 3)), requires_grad=True)
    m = nn.SyncBatchNorm(2, track_running_stats=False).double()
    assert tg.testing.gradcheck(lambda x: m(x), (x,))


def _nets(lib):
    n = lib.nn
    return n.Sequential(n.Conv2d(2, 4, 3), n.BatchNorm2d(4), n.ReLU(),
                        n.Sequential(n.InstanceNorm2d(4, affine=True), n.BatchNorm2d(4)),
                        n.Flatten(), n.Linear(4 * 4, 6), n.BatchNorm1d(6, momentum=None),
                        n.BatchNorm1d(6, affine=False, track_running_stats=False))


def test_convert_sync_batchnorm_keeps_values_names_and_flags():
    tg.manual_seed(0)
    net = _nets(tg)
    with tg.no_grad():
        net[1].running_mean.copy_(tg.arange(4) * 0.5)
        net[1].num_batches_tracked.fill_(7)
    net[1].weight.requires_grad_(False)
    net[3][1].eval()
    before = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    params = dict(net.named_parameters())
    X = tg.tensor(np.random.default_rng(3).standard_normal((4, 2, 4, 4)), dtype=tg.float32)
    net.eval()
    out = net(X).detach().numpy()
    net.train()
    net[3][1].eval()

    conv = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    assert conv is net
    # the same layout as PyTorch's conversion of the same model
    tconv = torch.nn.SyncBatchNorm.convert_sync_batchnorm(_nets(torch))
    assert [(k, type(m).__name__) for k, m in conv.named_modules()] == \
        [(k, type(m).__name__) for k, m in tconv.named_modules()]
    assert list(conv.state_dict()) == list(tconv.state_dict())
    assert list(conv.state_dict()) == list(before)
    for k, v in conv.state_dict().items():
        np.testing.assert_array_equal(v.detach().numpy(), before[k])
    # the same Parameter objects (so requires_grad and optimizer state carry over)
    assert all(p is params[k] for k, p in conv.named_parameters())
    assert not conv[1].weight.requires_grad and conv[1].bias.requires_grad
    assert conv[1].training and not conv[3][1].training
    assert conv[6].momentum is None and conv[7].weight is None and conv[7].running_mean is None
    assert type(conv[3][0]) is nn.InstanceNorm2d    # not a batch norm in PyTorch either
    conv.eval()
    np.testing.assert_array_equal(conv(X).detach().numpy(), out)

    # a batch norm at the root is replaced and returned
    bn = nn.BatchNorm3d(2, eps=1e-3)
    sbn = nn.SyncBatchNorm.convert_sync_batchnorm(bn)
    assert type(sbn) is nn.SyncBatchNorm and sbn.eps == 1e-3 and sbn.weight is bn.weight
    assert sbn.running_var is bn.running_var


def test_errors_and_paths():
    m = nn.SyncBatchNorm(3)
    with pytest.raises(ValueError, match=r"expected at least 2D input \(got 1D input\)"):
        m(tg.ones(3))
    with pytest.raises(ValueError, match="expected 3 channels"):
        m(tg.ones(2, 4))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        m(tg.ones(1, 3))
    from tapegrad.nn.modules.batchnorm import SyncBatchNorm, _BatchNorm
    assert SyncBatchNorm is nn.SyncBatchNorm and isinstance(m, _BatchNorm)
    assert repr(m) == "SyncBatchNorm(3, eps=1e-05, momentum=0.1, affine=True, bias=True, " \
                      "track_running_stats=True)"
