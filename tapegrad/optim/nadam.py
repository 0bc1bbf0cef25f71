"""NAdam, PyTorch's single-tensor update step for step."""
import functools

from ..fusion.update import Update
from ..tensor import buffer
from . import _fused
from ._fused import check_adam_args, no_differentiable
from .optimizer import Optimizer

__all__ = ["NAdam"]


class NAdam(Optimizer):
    """``NAdam(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None, maximize=False,
    capturable=False, differentiable=False)``, as ``torch.optim.NAdam``::

        g = grad + weight_decay * p     (decoupled: p *= 1 - lr * weight_decay)
        mu_t = beta1 * (1 - 0.5 * 0.96**(t * momentum_decay)); prod *= mu_t
        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
        denom = sqrt(v / (1 - beta2**t)) + eps
        p -= lr * (1 - mu_t) / (1 - prod) * g / denom
        p -= lr * mu_{t+1} / (1 - prod * mu_{t+1}) * m / denom

    ``mu_product`` is kept in PyTorch's scalar-state dtype (float32 unless the default
    dtype is float64), so the step sizes round as PyTorch's do.
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
        check_adam_args(lr, betas, eps, weight_decay)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        no_differentiable("NAdam", differentiable)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach,
                                      capturable=capturable, differentiable=differentiable))

    def _update(self, p, g, group):
        x = buffer(p)
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        beta1, beta2 = group["betas"]
        md, decoupled = group["momentum_decay"], group["decoupled_weight_decay"]
        st = self.state.setdefault(p, {})
        m = self._buffer(p, "exp_avg")
        v = self._buffer(p, "exp_avg_sq")
        step = st["step"] = st.get("step", 0) + 1
        sdt = _fused.scalar_dtype()
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * md)))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * md)))
        prod = float(sdt(sdt(st.get("mu_product", 1.0)) * sdt(mu)))  # a scalar-dtype tensor
        st["mu_product"] = prod
        c_g = -lr * (1.0 - mu) / (1.0 - prod)
        c_m = (-lr * mu_next) / (1.0 - prod * mu_next)
        low, w1, omw1 = _fused.lerp_weights(1 - beta1, x.dtype)
        kern = _nadam_kernel(wd != 0 and not decoupled, wd != 0 and decoupled,
                             group["maximize"], low)
        _fused.run(kern, x, g, m, v, wd, 1 - lr * wd, w1, omw1, beta2, 1 - beta2,
                   1 - beta2 ** step, eps, c_g, c_m)


@functools.lru_cache(maxsize=None)
def _nadam_kernel(weight_decay, decoupled, maximize, lerp_low):
    body = [("d", "-g" if maximize else "g")]
    if weight_decay:
        body.append(("d", "d + wd * p"))
    if decoupled:
        body.append(("p", "p * decay"))
    body.append(("m", _fused.lerp_src("m", "d", lerp_low)))
    body.append(("v", "v * beta2 + c2 * d * d"))
    body.append(("denom", "sqrt(v / bc2) + eps"))
    body.append(("p", "p + c_g * d / denom"))
    body.append(("p", "p + c_m * m / denom"))
    return Update("nadam", body, ("p", "g", "m", "v"),
                  ("wd", "decay", "w1", "omw1", "beta2", "c2", "bc2", "eps", "c_g", "c_m"),
                  min_numel=0)
