"""Adadelta, PyTorch's single-tensor update step for step."""
import functools

from ..devices import xp_of
from ..fusion.update import Update
from ..tensor import buffer
from .optimizer import Optimizer

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """``Adadelta(params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
    capturable=False, maximize=False, differentiable=False)``, as ``torch.optim.Adadelta``
    (``foreach``, ``capturable``: PyTorch's choice of kernels, one implementation here;
    ``differentiable=True`` raises ValueError)::

        g = grad + weight_decay * p                    (-grad first when maximize)
        v = rho * v + (1 - rho) * g * g
        delta = sqrt(u + eps) / sqrt(v + eps) * g
        u = rho * u + (1 - rho) * delta * delta
        p -= lr * delta

    One fused pass per parameter (``tapegrad.fusion.update``) for float32/float64 CPU
    parameters; others take the NumPy path below.
    """

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
                 capturable=False, maximize=False, differentiable=False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable:
            raise ValueError("Adadelta: differentiable=True is not supported (the update is "
                             "not recorded)")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize, capturable=capturable,
                                      foreach=foreach, differentiable=differentiable))

    def _update(self, p, g, group):
        x = buffer(p)
        xp = xp_of(x)
        lr, rho, eps, wd = group["lr"], group["rho"], group["eps"], group["weight_decay"]
        st = self.state.setdefault(p, {})
        st["step"] = st.get("step", 0) + 1
        v = self._buffer(p, "square_avg")
        u = self._buffer(p, "acc_delta")
        kern = _fused_adadelta(wd != 0, group["maximize"])
        if kern(x, g, v, u, wd, rho, 1 - rho, eps, -lr):
            return
        t, t2 = self._tmp(0, x), self._tmp(1, x)
        g = self._grad_with_decay(g, x, wd, group["maximize"], t, t2)
        v *= rho                            # square_avg.mul_(rho).addcmul_(g, g, 1 - rho)
        xp.multiply(g, 1 - rho, out=t2)
        t2 *= g
        v += t2
        d = self._tmp(2, x)
        xp.add(u, eps, out=d)               # delta = (u + eps).sqrt() / (v + eps).sqrt() * g
        xp.sqrt(d, out=d)
        xp.add(v, eps, out=t2)
        xp.sqrt(t2, out=t2)
        d /= t2
        d *= g
        u *= rho                            # acc_delta.mul_(rho).addcmul_(d, d, 1 - rho)
        xp.multiply(d, 1 - rho, out=t2)
        t2 *= d
        u += t2
        d *= -lr                            # p.add_(delta, alpha=-lr)
        x += d


@functools.lru_cache(maxsize=None)
def _fused_adadelta(weight_decay, maximize):
    body = [("d", "-g" if maximize else "g")]
    if weight_decay:
        body.append(("d", "d + wd * p"))
    body.append(("v", "v * rho + omr * d * d"))
    body.append(("delta", "sqrt(u + eps) / sqrt(v + eps) * d"))
    body.append(("u", "u * rho + omr * delta * delta"))
    body.append(("p", "p + neg_lr * delta"))
    return Update("adadelta", body, ("p", "g", "v", "u"), ("wd", "rho", "omr", "eps", "neg_lr"),
                  min_numel=1024)
