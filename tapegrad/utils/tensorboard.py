"""``tg.utils.tensorboard``: PyTorch's ``SummaryWriter``, on ``tensorboardX``
(``pip install tapegrad[tensorboard]``), taking tensors where PyTorch's does.

>>> from tapegrad.utils.tensorboard import SummaryWriter      # doctest: +SKIP
>>> with SummaryWriter("runs/exp") as w:                      # doctest: +SKIP
...     w.add_scalar("loss", loss, step)

The event files are TensorBoard's format: ``tensorboard --logdir runs`` shows them.
"""
import functools

from ..dispatch import notify
from ..tensor import Tensor

__all__ = ["SummaryWriter"]


def _numpy(x):
    """Tensors (anywhere in dicts, lists and tuples) as NumPy arrays."""
    if isinstance(x, Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, dict):
        return {k: _numpy(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and any(isinstance(v, (Tensor, dict, list, tuple))
                                            for v in x):
        return type(x)(_numpy(v) for v in x)
    return x


class SummaryWriter:
    """Writes TensorBoard event files under ``log_dir`` (default
    ``runs/<date>_<host><comment>``), as ``torch.utils.tensorboard.SummaryWriter``:
    ``add_scalar``, ``add_scalars``, ``add_histogram``, ``add_image``, ``add_images``,
    ``add_text``, ``add_figure``, ``add_embedding``, ``add_pr_curve``, ``add_hparams``,
    ... each taking tensors (or NumPy arrays, or numbers); ``flush``, ``close``; also a
    context manager."""

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10,
                 flush_secs=120, filename_suffix=""):
        try:
            import tensorboardX
        except ImportError:
            raise ImportError("tg.utils.tensorboard.SummaryWriter writes through tensorboardX, "
                              "which is not installed: pip install tapegrad[tensorboard] (or "
                              "pip install tensorboardX)") from None
        self._writer = tensorboardX.SummaryWriter(
            logdir=log_dir, comment=comment, purge_step=purge_step, max_queue=max_queue,
            flush_secs=flush_secs, filename_suffix=filename_suffix)

    @property
    def log_dir(self):
        return self._writer.logdir

    def get_logdir(self):
        return self._writer.logdir

    def __getattr__(self, name):
        attr = getattr(self.__dict__["_writer"], name)
        if not (name.startswith("add_") and callable(attr)):
            return attr

        @functools.wraps(attr)
        def method(*args, **kwargs):
            # (inside tg.compile: a replay would not write, so that call runs eagerly)
            notify("fail", f"it writes to a TensorBoard SummaryWriter ({name}), which a "
                           f"replay would not repeat")
            return attr(*[_numpy(a) for a in args], **{k: _numpy(v) for k, v in kwargs.items()})
        return method

    def flush(self):
        self._writer.flush()

    def close(self):
        self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
