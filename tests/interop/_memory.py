"""What the memory tests of the kernels' ``out=`` and the callers' allocators share."""
import tracemalloc


def peak(fn):
    """The peak of NumPy's (Python's) traced allocations while ``fn()`` runs, bytes."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
