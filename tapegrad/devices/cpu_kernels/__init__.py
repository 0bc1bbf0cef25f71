"""Compiled CPU kernels of the nn ops: Numba loops and generated, unrolled source,
run over row blocks on the CPU threads.

They take NumPy arrays and geometry integers only; the op declarations (shape
rules, errors, adjoints) and the device-generic array code stay in
``tapegrad/ops/nn/``, which calls in here for NumPy inputs. Like the rest of
``devices``, nothing here compiles at import: each kernel compiles on first use
(and is cached on disk by Numba).
"""
