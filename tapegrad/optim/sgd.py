"""Stochastic gradient descent, PyTorch's update step for step."""
import functools

import numpy as np

from ..devices import xp_of
from ..dispatch import observing
from ..fusion.update import Update
from ..tensor import buffer, mark_written
from .optimizer import Optimizer, required

__all__ = ["SGD"]


class SGD(Optimizer):
    """``SGD(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
    maximize=False)``, as ``torch.optim.SGD``::

        g = grad + weight_decay * p
        buf = g (first step), else momentum * buf + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf
        p -= lr * g

    Each parameter's step is one fused pass (``tapegrad.fusion.update``) for
    float32/float64 CPU parameters; small or non-contiguous ones (and CuPy arrays)
    take the NumPy path below.
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None):
        # (foreach, fused: PyTorch's choice of kernels; one implementation here)
        if differentiable:
            raise ValueError("SGD: differentiable=True is not supported (the update is "
                             "not recorded)")
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    def step(self, closure=None):
        """``Optimizer.step``, with each group's options read and its fused kernel
        chosen once for all its parameters (plain SGD: no state per parameter)."""
        if closure is not None or observing():
            return super().step(closure)
        for group in self.param_groups:
            if group["momentum"] != 0:  # (a momentum buffer per parameter)
                _step_each(self, group)
                continue
            wd = group["weight_decay"]
            kern = _fused(wd != 0, group["maximize"], False, group["nesterov"])
            neg_lr = -group["lr"]
            plain = wd == 0 and not group["maximize"]
            for p in group["params"]:
                g = p.grad
                if g is not None:
                    x, gd = buffer(p), buffer(g)
                    if not kern(x, gd, neg_lr, wd, 0.0, 1.0, 0):
                        if plain and x.size <= _SMALL and type(x) is np.ndarray and \
                                x.dtype in _FLOATS and gd.dtype == x.dtype:
                            x += gd * neg_lr  # p + (-lr * g) as _numpy_update, a small
                            #                   temporary instead of the scratch
                        else:
                            self._numpy_update(x, gd, group, None, False)
                    mark_written(p)
        return None

    def _update(self, p, g, group):
        x = buffer(p)
        lr, momentum, wd = group["lr"], group["momentum"], group["weight_decay"]
        buf, first = None, False
        if momentum != 0:
            st = self.state.setdefault(p, {})
            first = st.get("momentum_buffer") is None
            buf = self._buffer(p, "momentum_buffer")
        # one fused pass; on the first step buf is zeros and 0 * buf + 1 * d is d exactly
        kern = _fused(wd != 0, group["maximize"], momentum != 0, group["nesterov"])
        if buf is None:
            if kern(x, g, -lr, wd, 0.0, 1.0, momentum):
                return
        elif kern(x, g, buf, -lr, wd, 0.0 if first else momentum,
                  1.0 if first else 1 - group["dampening"], momentum):
            return
        self._numpy_update(x, g, group, buf, first)

    def _numpy_update(self, x, g, group, buf, first):
        """The update of buffer ``x`` with NumPy's (or CuPy's) ufuncs into scratch."""
        xp = xp_of(x)
        lr, momentum, wd = group["lr"], group["momentum"], group["weight_decay"]
        t = self._tmp(0, x)
        d = g
        if wd != 0:
            xp.multiply(x, wd, out=t)
            if group["maximize"]:
                xp.subtract(t, d, out=t)
            else:
                xp.add(d, t, out=t)
            d = t
        elif group["maximize"]:
            xp.negative(d, out=t)
            d = t
        if buf is not None:
            if first:
                xp.copyto(buf, d)
            else:
                buf *= momentum
                if group["dampening"] == 0:
                    buf += d
                else:
                    t2 = self._tmp(1, x)
                    xp.multiply(d, 1 - group["dampening"], out=t2)
                    buf += t2
            if group["nesterov"]:
                t2 = self._tmp(1, x)
                xp.multiply(buf, momentum, out=t2)
                xp.add(d, t2, out=t)
                d = t
            else:
                d = buf
        xp.multiply(d, -lr, out=t)
        xp.add(x, t, out=x)


_SMALL = 8192  # (elements: below the fused kernel's threshold)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _step_each(opt, group):
    for p in group["params"]:
        g = p.grad
        if g is not None:
            opt._update(p, buffer(g), group)
            mark_written(p)


@functools.lru_cache(maxsize=None)
def _fused(weight_decay, maximize, momentum, nesterov):
    """The fused SGD update for one combination of options (PyTorch's order of ops:
    ``d = grad + wd * p``; ``buf = momentum * buf + (1 - dampening) * d``;
    ``d = d + momentum * buf`` (nesterov) or ``buf``; ``p = p + (-lr) * d``)."""
    body = [("d", "-g" if maximize else "g")]
    if weight_decay:
        body.append(("d", "d + wd * p"))
    if momentum:
        body.append(("buf", "buf * mom + damp * d"))
        body.append(("d", "d + momentum * buf" if nesterov else "buf"))
    body.append(("p", "p + neg_lr * d"))
    arrays = ("p", "g", "buf") if momentum else ("p", "g")
    # measured crossover (serial kernel vs NumPy): ~8k elements for plain SGD (two
    # ufunc calls), ~1k with momentum or weight decay (four to six)
    return Update("sgd", body, arrays, ("neg_lr", "wd", "mom", "damp", "momentum"),
                  min_numel=1024 if momentum or weight_decay else 8192)
