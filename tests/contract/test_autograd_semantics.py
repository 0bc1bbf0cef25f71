"""PyTorch's autograd semantics on everyday snippets, run in torch and tapegrad side
by side: version counters, index_put dtypes, grad mode decorators, hooks,
autograd.grad's options, module bookkeeping."""
import numpy as np
import pytest
import torch

import tapegrad as tg


def _same(run):
    """``run(lib)`` gives a list of plain values; both libraries give the same."""
    assert run(tg) == run(torch)


# ------------------------------------------------------------------ _version
def test_version_is_an_int_counting_in_place_writes():
    def run(m):
        r = []
        x = m.zeros(4)
        r.append(x._version)
        x.add_(1)
        r.append(x._version)
        x[0] = 5
        r.append(x._version)
        x += 1
        r.append(x._version)
        x.fill_(2)
        x.copy_(m.ones(4))
        r.append(x._version)
        r.append(m.ones(2).clone()._version)
        r.append(type(x._version).__name__)
        return r
    _same(run)


def test_version_is_shared_with_views_and_detach_not_data():
    def run(m):
        x = m.zeros(4)
        v = x[1:]
        v.mul_(2)
        r = [x._version, v._version]
        d = x.detach()
        d.zero_()
        r += [x._version, d._version]
        x.data.add_(1)  # .data has a counter of its own
        r.append(x._version)
        z = x.view(2, 2)
        z[0, 0] = 1
        r += [x._version, z._version]
        return r
    _same(run)


def test_version_counts_in_place_metadata_changes():
    def run(m):
        b = m.ones(2, 3)
        b.t_()
        r = [b._version]
        b.unsqueeze_(0)
        r.append(b._version)
        b.squeeze_(0)
        r.append(b._version)
        return r
    _same(run)


def test_version_under_no_grad_parameter_update():
    def run(m):
        w = m.ones(3, requires_grad=True)
        with m.no_grad():
            w -= 0.1
            w.mul_(2)
        return [w._version, w.requires_grad, w.is_leaf]
    _same(run)
