"""RMSprop and Adagrad, PyTorch's single-tensor updates step for step."""
import functools

import numpy as np

from ..devices import xp_of
from ..fusion.update import Update
from ..tensor import buffer
from .optimizer import Optimizer

__all__ = ["RMSprop", "Adagrad"]


class RMSprop(Optimizer):
    """``RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
    centered=False, *, maximize=False)``, as ``torch.optim.RMSprop``::

        g = grad + weight_decay * p
        v = alpha * v + (1 - alpha) * g * g
        avg = sqrt(v - a * a) + eps   (centered: a = lerp(a, g, 1 - alpha)), else sqrt(v) + eps
        buf = momentum * buf + g / avg; p -= lr * buf     (momentum > 0)
        p -= lr * g / avg                                  (otherwise)

    One fused pass per parameter (``tapegrad.fusion.update``) for float32/float64 CPU
    parameters; others take the NumPy path below.
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        # (capturable, foreach: PyTorch's choice of kernels; one implementation here)
        if differentiable:
            raise ValueError("RMSprop: differentiable=True is not supported (the update is "
                             "not recorded)")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps,
                                      centered=centered, weight_decay=weight_decay,
                                      capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def _update(self, p, g, group):
        x = buffer(p)
        xp = xp_of(x)
        lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
        wd, momentum, centered = group["weight_decay"], group["momentum"], group["centered"]
        st = self.state.setdefault(p, {})
        st["step"] = st.get("step", 0) + 1
        v = self._buffer(p, "square_avg")
        buf = self._buffer(p, "momentum_buffer") if momentum > 0 else None
        a = self._buffer(p, "grad_avg") if centered else None
        w = 1 - alpha                       # grad_avg.lerp_(g, w), two-sided as PyTorch
        lerp_low = abs(w) < 0.5
        kern = _fused_rmsprop(wd != 0, group["maximize"], momentum > 0, centered, lerp_low)
        arrays = [x, g, v] + ([a] if centered else []) + ([buf] if buf is not None else [])
        omw = 1 - np.dtype(x.dtype).type(w)
        if kern(*arrays, wd, alpha, 1 - alpha, w, omw, eps, momentum, -lr):
            return
        t, t2 = self._tmp(0, x), self._tmp(1, x)
        g = self._grad_with_decay(g, x, wd, group["maximize"], t, t2)
        v *= alpha                          # square_avg.mul_(alpha).addcmul_(g, g, 1 - alpha)
        xp.multiply(g, 1 - alpha, out=t2)
        t2 *= g
        v += t2
        if centered:
            xp.subtract(g, a, out=t2)       # grad_avg.lerp_(g, w)
            if lerp_low:
                t2 *= w
                a += t2
            else:
                t2 *= omw
                xp.subtract(g, t2, out=a)
            xp.multiply(a, a, out=t2)       # avg = (v - a * a).sqrt() + eps
            xp.subtract(v, t2, out=t2)
            xp.sqrt(t2, out=t2)
        else:
            xp.sqrt(v, out=t2)
        t2 += eps
        xp.divide(g, t2, out=t2)
        if buf is not None:
            buf *= momentum                 # buf.mul_(momentum).addcdiv_(g, avg)
            buf += t2
            xp.multiply(buf, -lr, out=t2)
        else:
            t2 *= -lr
        x += t2


@functools.lru_cache(maxsize=None)
def _fused_rmsprop(weight_decay, maximize, momentum, centered, lerp_low):
    body = [("d", "-g" if maximize else "g")]
    if weight_decay:
        body.append(("d", "d + wd * p"))
    body.append(("v", "v * alpha + oma * d * d"))
    if centered:
        body.append(("a", "a + w * (d - a)" if lerp_low else "d - (d - a) * omw"))
        body.append(("avg", "sqrt(v - a * a) + eps"))
    else:
        body.append(("avg", "sqrt(v) + eps"))
    if momentum:
        body.append(("buf", "buf * momentum + d / avg"))
        body.append(("p", "p + neg_lr * buf"))
    else:
        body.append(("p", "p + neg_lr * (d / avg)"))
    arrays = ("p", "g", "v") + (("a",) if centered else ()) + (("buf",) if momentum else ())
    return Update("rmsprop", body, arrays,
                  ("wd", "alpha", "oma", "w", "omw", "eps", "momentum", "neg_lr"),
                  min_numel=1024)


class Adagrad(Optimizer):
    """``Adagrad(params, lr=1e-2, lr_decay=0, weight_decay=0,
    initial_accumulator_value=0, eps=1e-10, *, maximize=False)``, as
    ``torch.optim.Adagrad``::

        g = grad + weight_decay * p
        clr = lr / (1 + (step - 1) * lr_decay)
        s += g * g;  p -= clr * g / (sqrt(s) + eps)
    """

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0,
                 initial_accumulator_value=0, eps=1e-10, foreach=None, *, maximize=False,
                 differentiable=False, fused=None):
        # (foreach, fused: PyTorch's choice of kernels; one implementation here)
        if differentiable:
            raise ValueError("Adagrad: differentiable=True is not supported (the update is "
                             "not recorded)")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: "
                             f"{initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps,
                                      weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable, fused=fused))
        for group in self.param_groups:   # PyTorch creates the state at construction
            for p in group["params"]:
                self.state.setdefault(p, {})["step"] = 0
                self._buffer(p, "sum", group["initial_accumulator_value"])

    def _update(self, p, g, group):
        x = buffer(p)
        xp = xp_of(x)
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        st = self.state.setdefault(p, {})
        step = st["step"] = st.get("step", 0) + 1
        s = self._buffer(p, "sum", group["initial_accumulator_value"])
        clr = lr / (1 + (step - 1) * group["lr_decay"])
        kern = _fused_adagrad(wd != 0, group["maximize"])
        if kern(x, g, s, wd, eps, -clr):
            return
        t, t2 = self._tmp(0, x), self._tmp(1, x)
        g = self._grad_with_decay(g, x, wd, group["maximize"], t, t2)
        xp.multiply(g, g, out=t2)
        s += t2
        xp.sqrt(s, out=t2)
        t2 += eps
        xp.divide(g, t2, out=t2)
        t2 *= -clr
        x += t2


@functools.lru_cache(maxsize=None)
def _fused_adagrad(weight_decay, maximize):
    body = [("d", "-g" if maximize else "g")]
    if weight_decay:
        body.append(("d", "d + wd * p"))
    body.append(("s", "s + d * d"))
    body.append(("p", "p + neg_clr * (d / (sqrt(s) + eps))"))
    return Update("adagrad", body, ("p", "g", "s"), ("wd", "eps", "neg_clr"), min_numel=1024)
