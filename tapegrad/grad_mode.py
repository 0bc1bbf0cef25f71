"""Grad mode for this thread: ``no_grad``, ``enable_grad``, ``set_grad_enabled``,
``is_grad_enabled``. The state itself is ``tape.state`` (the record layer); ops and
every layer above may import these without importing ``autodiff``."""
import functools
import inspect

from .tape import state as _state

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"]


class _GradMode:
    """Context manager and decorator that sets grad mode for this thread."""
    _flag = True

    def __init__(self, mode=None):
        self._mode = self._flag if mode is None else bool(mode)
        self._prev = []

    def __enter__(self):
        self._prev.append(_state.grad_enabled)
        _state.grad_enabled = self._mode
        return self

    def __exit__(self, *exc):
        _state.grad_enabled = self._prev.pop()
        return False

    def __call__(self, fn):
        mode = self._mode
        if inspect.isgeneratorfunction(fn):
            return _generator(fn, mode)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _GradMode(mode):
                return fn(*args, **kwargs)
        return wrapper

    def clone(self):
        return type(self)(self._mode)


def _generator(fn, mode):
    """A generator function decorated: each resumption of the generator runs under
    ``mode``, and the caller's mode is back at each ``yield`` (PyTorch's decorators on
    generator functions)."""
    @functools.wraps(fn)
    def generator(*args, **kwargs):
        gen = fn(*args, **kwargs)
        try:
            with _GradMode(mode):
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with _GradMode(mode):
                        gen.close()
                    raise
                except BaseException as e:
                    with _GradMode(mode):
                        response = gen.throw(e)
                else:
                    with _GradMode(mode):
                        response = gen.send(request)
        except StopIteration as e:
            return e.value
    return generator


class no_grad(_GradMode):
    """Disable recording in this thread (``with tg.no_grad():`` or ``@tg.no_grad()``)."""
    _flag = False

    def __init__(self, fn=None):
        super().__init__(False)
        self._fn = fn

    def __new__(cls, fn=None):
        self = super().__new__(cls)
        if callable(fn):  # used as a bare decorator: @tg.no_grad
            self.__init__()
            return self(fn)
        return self


class enable_grad(_GradMode):
    """Enable recording in this thread."""
    _flag = True

    def __init__(self, fn=None):
        super().__init__(True)

    def __new__(cls, fn=None):
        self = super().__new__(cls)
        if callable(fn):
            self.__init__()
            return self(fn)
        return self


class set_grad_enabled(_GradMode):
    """Set grad mode to ``mode``; works as a plain call, a context and a decorator."""

    def __init__(self, mode):
        super().__init__(bool(mode))
        self._prev.append(_state.grad_enabled)
        _state.grad_enabled = bool(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _state.grad_enabled = self._prev.pop()
        return False

    def __call__(self, fn):
        # as a decorator, the mode the constructor set applies inside fn only (PyTorch)
        _state.grad_enabled = self._prev.pop()
        return super().__call__(fn)


def is_grad_enabled():
    """Whether gradient recording is on in this thread, as ``torch.is_grad_enabled``."""
    return _state.grad_enabled
