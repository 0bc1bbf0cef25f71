"""``torch.backends.cudnn``'s attributes, for programs that set them: tapegrad does not
use cuDNN, so ``benchmark``/``deterministic``/``enabled`` are recorded and change
nothing, and ``is_available()`` is False."""
benchmark = False
deterministic = False
enabled = True
allow_tf32 = True


def is_available():
    return False


def version():
    return None
