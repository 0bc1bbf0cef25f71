"""RAdam, PyTorch's single-tensor update step for step."""
import functools
import math

from ..fusion.update import Update
from ..tensor import buffer
from . import _fused
from ._fused import check_adam_args, no_differentiable
from .optimizer import Optimizer

__all__ = ["RAdam"]


class RAdam(Optimizer):
    """``RAdam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
    differentiable=False)``, as ``torch.optim.RAdam``::

        g = grad + weight_decay * p     (decoupled: p *= 1 - lr * weight_decay)
        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
        rho_inf = 2 / (1 - beta2) - 1;  rho_t = rho_inf - 2 t beta2**t / (1 - beta2**t)
        rho_t > 5:  p -= m / (1 - beta1**t) * lr * sqrt(1 - beta2**t) / (sqrt(v) + eps) * rect
        otherwise:  p -= m / (1 - beta1**t) * lr
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
        check_adam_args(lr, betas, eps, weight_decay)
        no_differentiable("RAdam", differentiable)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize,
                                      foreach=foreach, capturable=capturable,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      differentiable=differentiable))

    def _update(self, p, g, group):
        x = buffer(p)
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        beta1, beta2 = group["betas"]
        decoupled = group["decoupled_weight_decay"]
        st = self.state.setdefault(p, {})
        m = self._buffer(p, "exp_avg")
        v = self._buffer(p, "exp_avg_sq")
        step = st["step"] = st.get("step", 0) + 1
        bc1, bc2 = 1 - beta1 ** step, 1 - beta2 ** step
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bc2
        rectify = rho_t > 5.0
        rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf
                         / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) if rectify else 1.0
        low, w1, omw1 = _fused.lerp_weights(1 - beta1, x.dtype)
        kern = _radam_kernel(wd != 0 and not decoupled, wd != 0 and decoupled,
                             group["maximize"], low, rectify)
        _fused.run(kern, x, g, m, v, wd, 1 - lr * wd, w1, omw1, beta2, 1 - beta2, bc1, lr,
                   bc2 ** 0.5, eps, rect)


@functools.lru_cache(maxsize=None)
def _radam_kernel(weight_decay, decoupled, maximize, lerp_low, rectify):
    body = [("d", "-g" if maximize else "g")]
    if weight_decay:
        body.append(("d", "d + wd * p"))
    if decoupled:
        body.append(("p", "p * decay"))
    body.append(("m", _fused.lerp_src("m", "d", lerp_low)))
    body.append(("v", "v * beta2 + c2 * d * d"))
    if rectify:
        body.append(("p", "p - m / bc1 * lr * (bc2_sqrt / (sqrt(v) + eps)) * rect"))
    else:
        body.append(("p", "p - m / bc1 * lr"))
    return Update("radam", body, ("p", "g", "m", "v"),
                  ("wd", "decay", "w1", "omw1", "beta2", "c2", "bc1", "lr", "bc2_sqrt", "eps",
                   "rect"), min_numel=0)

