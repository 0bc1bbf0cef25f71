"""The names PyTorch's ``torch.nn.modules.<family>`` has that tapegrad's does not: a
module ``__getattr__`` that says so."""


def absent(module_name, names):
    """A module-level ``__getattr__`` for ``module_name``: an AttributeError, naming
    PyTorch's class when ``names`` holds it."""
    def __getattr__(attr):
        raise AttributeError(f"module {module_name!r} has no attribute {attr!r}"
                             + (" (PyTorch has it; tapegrad does not yet)"
                                if attr in names else ""))
    return __getattr__
