"""Helpers shared by the optimizers built on one fused update per parameter.

``run(kern, *arrays, *scalars)`` runs the compiled kernel of a ``fusion.update.Update``
in place and, where it cannot run (Numba off or missing, a CuPy or float16 array, a
non-contiguous parameter), evaluates the same statements with the array's own ufuncs
(NumPy or CuPy) and writes the results back: one definition of each update, two ways
to run it.
"""
import numpy as np

from .. import dtypes
from ..devices import xp_of
from ..fusion.op import evaluate

__all__ = ["run", "scalar_dtype", "lerp_weights", "lerp_src", "check_adam_args",
           "no_differentiable"]


def run(kern, *args):
    if kern(*args):
        return
    na = len(kern.arrays)
    arrs = args[:na]
    dt = arrs[0].dtype
    vals = dict(zip(kern.in_nodes, arrs))
    vals.update((n, dt.type(s)) for n, s in zip(kern.scalar_nodes, args[na:]))
    for k, r in zip(kern.targets, evaluate(kern.out_nodes, vals, dt, xp_of(arrs[0]))):
        arrs[k][...] = r


def scalar_dtype():
    """The dtype PyTorch keeps per-parameter scalar state in (``step``, NAdam's
    ``mu_product``, ASGD's ``eta``/``mu``): float64 when the default dtype is float64,
    else float32 (``torch.optim.optimizer._get_scalar_dtype``)."""
    return np.float64 if dtypes.get_default_dtype() == dtypes.float64 else np.float32


def lerp_weights(w, dtype):
    """``(lerp_low, w, 1 - w)`` for ``m.lerp_(g, w)`` as PyTorch computes it on the CPU:
    ``m + w * (g - m)`` when ``|w| < 0.5``, else ``g - (g - m) * (1 - w)``, with
    ``1 - w`` taken in the array's dtype."""
    return abs(w) < 0.5, w, 1 - np.dtype(dtype).type(w)


def lerp_src(target, src, lerp_low):
    """The update statement for ``target.lerp_(src, w1)``."""
    return (f"{target} + w1 * ({src} - {target})" if lerp_low
            else f"{src} - ({src} - {target}) * omw1")


def check_adam_args(lr, betas, eps, weight_decay):
    """The arguments of Adam and its variants, checked as PyTorch does."""
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


def no_differentiable(name, differentiable):
    """Refuse ``differentiable=True``: our updates are not recorded."""
    if differentiable:
        raise ValueError(f"{name}: differentiable=True is not supported (the update is "
                         f"not recorded)")
