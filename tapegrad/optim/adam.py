"""Adam and AdamW, PyTorch's single-tensor update step for step."""
import math

import numpy as np

from .optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """``Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    amsgrad=False, *, maximize=False)``, as ``torch.optim.Adam``::

        g = grad + weight_decay * p            (AdamW instead: p *= 1 - lr * weight_decay)
        m += (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
        v_hat = max(v_hat, v) if amsgrad else v
        p -= lr / (1 - beta1**t) * m / (sqrt(v_hat) / sqrt(1 - beta2**t) + eps)
    """
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, maximize=False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize))

    def _update(self, p, g, group):
        x = p._data
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        beta1, beta2 = group["betas"]
        st = self.state.setdefault(p, {})
        m = self._buffer(p, "exp_avg")
        v = self._buffer(p, "exp_avg_sq")
        step = st["step"] = st.get("step", 0) + 1
        t, t2 = self._tmp(0, x), self._tmp(1, x)
        if group["maximize"]:
            np.negative(g, out=t)
            g = t
        if wd != 0:
            if self._decoupled:
                x *= 1 - lr * wd
            else:
                np.multiply(x, wd, out=t2)
                np.add(g, t2, out=t)
                g = t
        np.subtract(g, m, out=t2)          # m.lerp_(g, 1 - beta1)
        t2 *= 1 - beta1
        m += t2
        v *= beta2                         # v.mul_(beta2).addcmul_(g, g, 1 - beta2)
        np.multiply(g, 1 - beta2, out=t2)
        t2 *= g
        v += t2
        step_size = lr / (1 - beta1 ** step)
        bc2_sqrt = math.sqrt(1 - beta2 ** step)
        if group["amsgrad"]:
            vmax = self._buffer(p, "max_exp_avg_sq")
            np.maximum(vmax, v, out=vmax)
            v = vmax
        np.sqrt(v, out=t)                  # denom = sqrt(v) / bc2_sqrt + eps
        t /= bc2_sqrt
        t += eps
        np.divide(m, t, out=t)             # p.addcdiv_(m, denom, value=-step_size)
        t *= -step_size
        x += t


class AdamW(Adam):
    """``AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
    amsgrad=False)``: Adam with decoupled weight decay, as ``torch.optim.AdamW``."""
    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)
