"""Adam and AdamW, PyTorch's single-tensor update step for step."""
import functools
import math

import numpy as np

from ..devices import xp_of
from ..fusion.update import Update
from ..tensor import buffer
from ._fused import check_adam_args
from .optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """``Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    amsgrad=False, *, maximize=False)``, as ``torch.optim.Adam``::

        g = grad + weight_decay * p            (AdamW instead: p *= 1 - lr * weight_decay)
        m += (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
        v_hat = max(v_hat, v) if amsgrad else v
        p -= lr / (1 - beta1**t) * m / (sqrt(v_hat) / sqrt(1 - beta2**t) + eps)

    Each parameter's step is one fused pass (``tapegrad.fusion.update``) for
    float32/float64 CPU parameters; small or non-contiguous ones (and CuPy arrays)
    take the NumPy path below.
    """
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        # (foreach, fused, capturable: PyTorch's choice of kernels; one implementation here)
        check_adam_args(lr, betas, eps, weight_decay)
        if differentiable:
            raise ValueError(f"{type(self).__name__}: differentiable=True is not supported "
                             f"(the update is not recorded)")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach,
                                      capturable=capturable, differentiable=differentiable,
                                      fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay
                                      or self._decoupled))  # (True: AdamW's update)

    def _update(self, p, g, group):
        x = buffer(p)
        xp = xp_of(x)
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        beta1, beta2 = group["betas"]
        st = self.state.setdefault(p, {})
        m = self._buffer(p, "exp_avg")
        v = self._buffer(p, "exp_avg_sq")
        vmax = self._buffer(p, "max_exp_avg_sq") if group["amsgrad"] else None
        step = st["step"] = st.get("step", 0) + 1
        step_size = lr / (1 - beta1 ** step)
        bc2_sqrt = math.sqrt(1 - beta2 ** step)
        w1 = 1 - beta1                     # m.lerp_(g, w1), PyTorch's two-sided formula
        dec = group.get("decoupled_weight_decay", self._decoupled)
        kern = _fused(wd != 0 and not dec, wd != 0 and dec,
                      group["maximize"], group["amsgrad"], abs(w1) < 0.5)
        scalars = (wd, 1 - lr * wd, w1, 1 - np.dtype(x.dtype).type(w1), beta2, 1 - beta2,
                   -step_size, bc2_sqrt, eps)
        if (kern(x, g, m, v, vmax, *scalars) if vmax is not None else
                kern(x, g, m, v, *scalars)):
            return
        t, t2 = self._tmp(0, x), self._tmp(1, x)
        if group["maximize"]:
            xp.negative(g, out=t)
            g = t
        if wd != 0:
            if dec:
                x *= 1 - lr * wd
            else:
                xp.multiply(x, wd, out=t2)
                xp.add(g, t2, out=t)
                g = t
        xp.subtract(g, m, out=t2)          # m.lerp_(g, w1)
        if abs(w1) < 0.5:
            t2 *= w1
            m += t2
        else:
            t2 *= scalars[3]
            xp.subtract(g, t2, out=m)
        v *= beta2                         # v.mul_(beta2).addcmul_(g, g, 1 - beta2)
        xp.multiply(g, 1 - beta2, out=t2)
        t2 *= g
        v += t2
        if vmax is not None:
            xp.maximum(vmax, v, out=vmax)
            v = vmax
        xp.sqrt(v, out=t)                  # denom = sqrt(v) / bc2_sqrt + eps
        t /= bc2_sqrt
        t += eps
        xp.divide(m, t, out=t)             # p.addcdiv_(m, denom, value=-step_size)
        t *= -step_size
        x += t


@functools.lru_cache(maxsize=None)
def _fused(weight_decay, decoupled, maximize, amsgrad, lerp_low):
    """The fused Adam/AdamW update for one combination of options, in PyTorch's
    order of operations (single-tensor path)."""
    body = [("d", "-g" if maximize else "g")]
    if weight_decay:
        body.append(("d", "d + wd * p"))
    if decoupled:
        body.append(("p", "p * decay"))
    body.append(("m", "m + w1 * (d - m)" if lerp_low else "d - (d - m) * omw1"))
    body.append(("v", "v * beta2 + c2 * d * d"))
    if amsgrad:
        body.append(("vmax", "maximum(vmax, v)"))
    body.append(("p", f"p + neg_step * (m / (sqrt({'vmax' if amsgrad else 'v'}) / bc2 + eps))"))
    arrays = ("p", "g", "m", "v", "vmax") if amsgrad else ("p", "g", "m", "v")
    return Update("adamw" if decoupled else "adam", body, arrays,
                  ("wd", "decay", "w1", "omw1", "beta2", "c2", "neg_step", "bc2", "eps"),
                  min_numel=0)   # faster than the ~12 ufunc calls of NumPy at any size


class AdamW(Adam):
    """``AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
    amsgrad=False)``: Adam with decoupled weight decay, as ``torch.optim.AdamW``."""
    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         foreach=foreach, capturable=capturable,
                         differentiable=differentiable, fused=fused)
