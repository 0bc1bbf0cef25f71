"""``tg.amp.GradScaler``: loss scaling for float16 training, as ``torch.amp.GradScaler``.

The loss is multiplied by a scale before ``backward`` so small float16 gradients do
not flush to zero; ``unscale_`` divides the gradients back (in place) and notes any
Inf or NaN among them; ``step`` runs the optimizer only when none was found; and
``update`` halves the scale after such a step (``backoff_factor``) or doubles it
after ``growth_interval`` clean steps in a row (``growth_factor``). The scale is a
float32 0-d tensor and the growth tracker an int32 one, updated with PyTorch's
arithmetic, so both follow ``torch.amp.GradScaler``'s values exactly. All of it runs in
ops while ``tg.compile`` captures (an observer is set), reading no value into Python
but ``step``'s skip decision, so a training step compiled whole with its scaler
inside replays; eagerly, on the buffers (fewer dispatches).
"""
import enum
import warnings
from collections import abc

import numpy as np

from .. import dtypes as _dt
from ..devices import xp_of
from ..dtypes import bfloat16, float16, float32
from ..grad_mode import no_grad
from ..ops import isfinite, tensor as _tensor, where, zeros
from ..tape import state as _state
from ..tensor import Tensor, buffer, mark_written, wrap

__all__ = ["GradScaler", "OptState"]


def _grads(optimizer):
    """The gradients of ``optimizer``'s parameters (refusing float16 ones)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            if g.dtype == float16:
                raise ValueError("Attempting to unscale FP16 gradients.")
            yield g


class OptState(enum.Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_state():
    return {"stage": OptState.READY, "found_inf": None}


class GradScaler:
    """Loss scaling with ``torch.amp.GradScaler``'s state transitions::

        scaler = tg.amp.GradScaler()
        for x, y in data:
            opt.zero_grad()
            with tg.autocast("cpu", dtype=tg.float16):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)      # skipped when a gradient has an Inf or NaN
            scaler.update()
    """

    def __init__(self, device="cpu", init_scale=2.0 ** 16, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, enabled=True):
        self._device = str(device)
        self._enabled = bool(enabled)
        if self._enabled and self._device.startswith("cuda"):
            from .. import cuda
            if not cuda.is_available():
                warnings.warn("tg.amp.GradScaler is enabled, but CUDA is not available.  "
                              "Disabling.", UserWarning, stacklevel=2)
                self._enabled = False
        if self._enabled:
            if not growth_factor > 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if not backoff_factor < 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
        self._init_scale = init_scale
        self._scale = None  # a float32 0-d tensor, made on first use
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._init_growth_tracker = 0
        self._growth_tracker = None  # an int32 0-d tensor
        self._per_optimizer_states = {}
        if self._enabled and self._device == "cpu":  # (made now: the first scale() may
            self._premade = self._made()            # run inside a tg.compile capture)

    # ------------------------------------------------------------------ scaling
    def _made(self):
        # (from NumPy, not by a factory op: under tg.compile a factory's result would be
        # a constant of the program, and these are state it updates)
        return (wrap(np.full((), self._init_scale, np.float32)),
                wrap(np.full((), self._init_growth_tracker, np.int32)))

    def _lazy_init(self, device):
        made = self.__dict__.pop("_premade", None)
        if made is None:
            made = self._made()
            if str(device) != "cpu":
                made = tuple(t.to(device) for t in made)
        self._scale, self._growth_tracker = made

    def _check_scale_growth_tracker(self, funcname):
        fix = ("This may indicate your script did not use scaler.scale(loss or outputs) "
               "earlier in the iteration.")
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  " + fix)
        if self._growth_tracker is None:
            raise AssertionError(f"Attempted {funcname} but _growth_tracker is None.  " + fix)

    def scale(self, outputs):
        """``outputs`` (a tensor, or nested lists/tuples/iterables of them) times the
        scale; unchanged when disabled."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            if self._scale is None:
                self._lazy_init(outputs.device)
            return outputs * self._scale.to(outputs.device)

        def apply(val):
            if isinstance(val, Tensor):
                if self._scale is None:
                    self._lazy_init(val.device)
                return val * self._scale.to(val.device)
            if isinstance(val, abc.Iterable):
                it = map(apply, val)
                if isinstance(val, (list, tuple)):
                    return type(val)(it)
                return it
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")
        return apply(outputs)

    def _state(self, optimizer):
        st = self._per_optimizer_states.get(id(optimizer))
        if st is None:
            st = self._per_optimizer_states[id(optimizer)] = _refresh_state()
        return st

    def unscale_(self, optimizer):
        """Divide ``optimizer``'s gradients by the scale, in place, and note whether any
        holds an Inf or NaN. At most once per optimizer between ``update()`` calls."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        st = self._state(optimizer)
        if st["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if st["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        if not any(True for _ in _grads(optimizer)):  # (no gradient: no check recorded;
            st["found_inf"] = None                     # step() then refuses, as PyTorch)
        elif _state.observers:  # (a tg.compile capture: in ops, no value read)
            st["found_inf"] = self._unscale_in_ops(optimizer)
        else:
            st["found_inf"] = _tensor(1.0 if self._unscale_now(optimizer) else 0.0,
                                      dtype=float32)
        st["stage"] = OptState.UNSCALED

    def _unscale_now(self, optimizer):
        """Eagerly, on the buffers: whether a gradient held an Inf or NaN."""
        # PyTorch: the reciprocal in float64, then rounded to float32
        inv = np.float32(1.0 / np.float64(self._scale.item()))
        found = False
        for g in _grads(optimizer):
            data = buffer(g)
            xp = xp_of(data)
            if not bool(xp.isfinite(data).all()):
                found = True
            if data.dtype is _dt.BF16:  # in float32, rounded once
                data[...] = (data.astype(np.float32) * inv).astype(_dt.BF16)
            else:  # float32, or float64 times the float32 reciprocal
                xp.multiply(data, data.dtype.type(inv), out=data)
            mark_written(g)
        return found

    def _unscale_in_ops(self, optimizer):
        """The same in ops, reading no value (a compiled step replays it): the found
        Inf/NaN as a float32 0-d tensor."""
        found = None
        with no_grad():
            inv = (1.0 / self._scale.double()).float()
            for g in _grads(optimizer):
                bad = ~isfinite(g).all()
                found = bad if found is None else found | bad
                if g.dtype == bfloat16:  # in float32, rounded once
                    g.copy_(g.float() * inv)
                else:
                    g.mul_(inv.to(g.dtype))
            if found is None:
                return zeros((), dtype=float32, device=self._scale.device)
            return found.float()

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step()`` after ``unscale_`` (if not done yet), unless a gradient
        holds an Inf or NaN; returns what the step returned (None when skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        self._check_scale_growth_tracker("step")
        st = self._state(optimizer)
        if st["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if st["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if st["found_inf"] is None:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        retval = None
        if not st["found_inf"].item():
            retval = optimizer.step(*args, **kwargs)
        st["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale=None):
        """Back off after a skipped step, grow after ``growth_interval`` clean ones; or
        set the scale to ``new_scale`` (a float or a one-element tensor)."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("update")
        if new_scale is not None:
            if isinstance(new_scale, float):
                self._set_scale(new_scale)
            else:
                reason = ("new_scale should be a float or a 1-element tapegrad.Tensor with "
                          "requires_grad=False.")
                if not isinstance(new_scale, Tensor) or new_scale.numel() != 1 or \
                        new_scale.requires_grad:
                    raise AssertionError(reason)
                self._set_scale(new_scale.item())
        else:
            found = [st["found_inf"] for st in self._per_optimizer_states.values()
                     if st["found_inf"] is not None]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            if _state.observers:  # (a tg.compile capture: in ops, no value read)
                self._update_in_ops(found)
            else:
                self._update_now(found)
        self._per_optimizer_states = {}

    def _update_now(self, found):
        """PyTorch's ``_amp_update_scale_`` in float32, on the values."""
        found_inf = sum(f.item() for f in found)
        scale = np.float32(self._scale.item())
        tracker = int(self._growth_tracker.item())
        if found_inf:
            scale = np.float32(scale * np.float32(self._backoff_factor))
            tracker = 0
        else:
            successful = tracker + 1
            if successful == self._growth_interval:
                with np.errstate(over="ignore"):
                    grown = np.float32(scale * np.float32(self._growth_factor))
                if np.isfinite(grown):
                    scale = grown
                tracker = 0
            else:
                tracker = successful
        self._set_scale(float(scale))
        self._set_tracker(tracker)

    def _update_in_ops(self, found):
        """The same in float32 ops, reading no value (a compiled step replays it)."""
        with no_grad():
            found_inf = found[0]
            for f in found[1:]:
                found_inf = found_inf + f
            inf = found_inf > 0
            scale, tracker = self._scale, self._growth_tracker
            successful = tracker + 1
            grow = successful == self._growth_interval
            grown = scale * self._growth_factor
            grown = where(isfinite(grown), grown, scale)
            new_scale = where(inf, scale * self._backoff_factor, where(grow, grown, scale))
            new_tracker = where(inf | grow, tracker * 0, successful)
            scale.copy_(new_scale)
            tracker.copy_(new_tracker)

    def _set_scale(self, value):
        data = buffer(self._scale)
        data[...] = value
        mark_written(self._scale)

    def _set_tracker(self, value):
        data = buffer(self._growth_tracker)
        data[...] = value
        mark_written(self._growth_tracker)

    # ------------------------------------------------------------------ state
    def get_scale(self):
        """The current scale as a Python float (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return float(self._init_scale) if self._scale is None else self._scale.item()

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = new_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = new_factor

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = new_interval

    def _get_growth_tracker(self):
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None \
            else int(self._growth_tracker.item())

    def is_enabled(self):
        return self._enabled

    def state_dict(self):
        """``scale``, ``growth_factor``, ``backoff_factor``, ``growth_interval`` and
        ``_growth_tracker`` ({} when disabled), as PyTorch's."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        if self._scale is not None:
            self._set_scale(self._init_scale)
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._growth_tracker is not None:
            self._set_tracker(self._init_growth_tracker)
        if "_premade" in self.__dict__:
            self._premade = self._made()

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_per_optimizer_states"] = {}
        return state
