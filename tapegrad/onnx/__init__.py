"""``tg.onnx``: a model's (or a function's) forward, captured once, as ONNX.

``export(model_or_fn, args, path, ...)`` captures the forward as ``tg.compile``
captures a program (``export.py``) and lowers each op step by its op's ONNX form,
``OpDef.onnx``: a lowering function declared with the op (``register(...,
onnx=...)``; an elementwise op without one is lowered from its scalar expression),
``DECOMPOSED`` for a composite (its ops are recorded instead), or the reason the op
cannot export (``support.py`` fills in the composites and the reasons at import).
``support()`` reports that form for every registry op (``support.py``). Needs the
``onnx`` extra (``pip install tapegrad[onnx]``).

>>> import tapegrad as tg, tapegrad.nn as nn
>>> model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
>>> tg.onnx.export(model, (tg.randn(2, 4),), "model.onnx",
...                input_names=["x"], output_names=["y"],
...                dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})  # doctest: +SKIP
"""
from .export import (
    MAX_OPSET,
    MIN_OPSET,
    OPSET,
    Builder,
    TrainingMode,
    UnsupportedOperatorError,
    export,
)
from .support import attach, support

__all__ = ["export", "support", "TrainingMode", "UnsupportedOperatorError", "Builder", "OPSET",
           "MIN_OPSET", "MAX_OPSET"]

attach()
