"""Adamax, PyTorch's single-tensor update step for step."""
import functools

from ..fusion.update import Update
from ..tensor import buffer
from . import _fused
from ._fused import check_adam_args, no_differentiable
from .optimizer import Optimizer

__all__ = ["Adamax"]


class Adamax(Optimizer):
    """``Adamax(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    foreach=None, *, maximize=False, differentiable=False, capturable=False)``, as
    ``torch.optim.Adamax``::

        g = grad + weight_decay * p                    (-grad first when maximize)
        m = lerp(m, g, 1 - beta1);  u = max(beta2 * u, |g| + eps)
        p -= lr / (1 - beta1**t) * m / u

    One fused pass per parameter (``tapegrad.fusion.update``); the same statements
    run with NumPy/CuPy ufuncs where the kernel cannot.
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        check_adam_args(lr, betas, eps, weight_decay)
        no_differentiable("Adamax", differentiable)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def _update(self, p, g, group):
        x = buffer(p)
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        beta1, beta2 = group["betas"]
        st = self.state.setdefault(p, {})
        m = self._buffer(p, "exp_avg")
        u = self._buffer(p, "exp_inf")
        step = st["step"] = st.get("step", 0) + 1
        clr = lr / (1 - beta1 ** step)
        low, w1, omw1 = _fused.lerp_weights(1 - beta1, x.dtype)
        kern = _kernel(wd != 0, group["maximize"], low)
        _fused.run(kern, x, g, m, u, wd, w1, omw1, beta2, eps, -clr)


@functools.lru_cache(maxsize=None)
def _kernel(weight_decay, maximize, lerp_low):
    body = [("d", "-g" if maximize else "g")]
    if weight_decay:
        body.append(("d", "d + wd * p"))
    body.append(("m", _fused.lerp_src("m", "d", lerp_low)))
    body.append(("u", "maximum(u * beta2, abs(d) + eps)"))
    body.append(("p", "p + neg_clr * m / u"))
    return Update("adamax", body, ("p", "g", "m", "u"),
                  ("wd", "w1", "omw1", "beta2", "eps", "neg_clr"), min_numel=0)

