"""ASGD and Rprop, PyTorch's single-tensor updates step for step."""
import functools

from ..fusion.update import Update
from ..tensor import buffer
from . import _fused
from ._fused import no_differentiable
from .optimizer import Optimizer

__all__ = ["ASGD", "Rprop"]


class ASGD(Optimizer):
    """``ASGD(params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None,
    maximize=False, differentiable=False, capturable=False)``, averaged SGD as
    ``torch.optim.ASGD``::

        g = grad + weight_decay * p                    (-grad first when maximize)
        p = p * (1 - lambd * eta) - eta * g
        ax = p if mu == 1 else ax + (p - ax) * mu
        eta = lr / (1 + lambd * lr * t)**alpha;  mu = 1 / max(1, t - t0)

    ``eta`` and ``mu`` are kept in PyTorch's scalar-state dtype (float32 unless the
    default dtype is float64), so they round as PyTorch's do.
    """

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach=None, maximize=False, differentiable=False, capturable=False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        no_differentiable("ASGD", differentiable)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def _update(self, p, g, group):
        x = buffer(p)
        lr, lambd, wd = group["lr"], group["lambd"], group["weight_decay"]
        sdt = _fused.scalar_dtype()
        st = self.state.setdefault(p, {})
        if "eta" not in st:
            st["eta"], st["mu"] = float(sdt(lr)), 1.0
        ax = self._buffer(p, "ax")
        step = st["step"] = st.get("step", 0) + 1
        eta, mu = st["eta"], st["mu"]
        kern = _asgd_kernel(wd != 0, group["maximize"], mu != 1)
        _fused.run(kern, x, g, ax, wd, 1 - lambd * eta, -eta, mu)
        st["eta"] = float(sdt(lr / ((1 + lambd * lr * step) ** group["alpha"])))
        st["mu"] = float(sdt(1 / max(1, step - group["t0"])))


@functools.lru_cache(maxsize=None)
def _asgd_kernel(weight_decay, maximize, average):
    body = [("d", "-g" if maximize else "g")]
    if weight_decay:
        body.append(("d", "d + wd * p"))
    body.append(("p", "p * decay"))
    body.append(("p", "p + neg_eta * d"))
    body.append(("ax", "ax + (p - ax) * mu" if average else "p"))
    return Update("asgd", body, ("p", "g", "ax"), ("wd", "decay", "neg_eta", "mu"),
                  min_numel=0)


class Rprop(Optimizer):
    """``Rprop(params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False,
    foreach=None, maximize=False, differentiable=False)``, resilient backpropagation as
    ``torch.optim.Rprop``::

        s = sign(grad * prev)                          (-grad first when maximize)
        step_size = clamp(step_size * (etaplus if s > 0 else etaminus if s < 0 else 1),
                          *step_sizes)
        grad = 0 where s < 0;  p -= sign(grad) * step_size;  prev = grad
    """

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        no_differentiable("Rprop", differentiable)
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes),
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable, capturable=capturable))

    def _update(self, p, g, group):
        x = buffer(p)
        st = self.state.setdefault(p, {})
        prev = self._buffer(p, "prev")
        size = self._buffer(p, "step_size", group["lr"])
        st["step"] = st.get("step", 0) + 1
        etaminus, etaplus = group["etas"]
        lo, hi = group["step_sizes"]
        _fused.run(_rprop_kernel(group["maximize"]), x, g, prev, size, etaminus, etaplus,
                   lo, hi)


@functools.lru_cache(maxsize=None)
def _rprop_kernel(maximize):
    body = [("d", "-g" if maximize else "g"),
            ("s", "sign(d * prev)"),
            ("size", "minimum(maximum(size * (etaplus if s > 0 else (etaminus if s < 0 "
                     "else 1.0)), lo), hi)"),
            ("d", "0.0 if s < 0 else d"),
            ("p", "p - sign(d) * size"),
            ("prev", "d")]
    return Update("rprop", body, ("p", "g", "prev", "size"),
                  ("etaminus", "etaplus", "lo", "hi"), min_numel=0)
