"""One BLAS thread for the post-capture job.

Everything after the capture is vector arithmetic over the box table (dot products, bin sums,
small matrix products): memory-bound work that a second BLAS thread does not speed up. On a
machine whose cores are busy with other work, it slows it down badly instead: OpenBLAS's threads
wait for each other at every call, and a dot product of 80,000 values measured here took 2.3 ms
with numpy's default two threads against 0.018 ms with one (benchmarks/bench_scale.py).
:func:`single_blas_thread` sets the OpenBLAS that numpy loaded to one thread for a block and
puts the previous count back after it, through OpenBLAS's own ``set_num_threads`` entry point
(found in the process's loaded libraries; a numpy on another BLAS, or none found: nothing
changes). torch keeps its own threads: the capture is not affected.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
from pathlib import Path

__all__ = ["blas_threads", "single_blas_thread"]

log = logging.getLogger(__name__)

_SYMBOLS = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
            ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
            ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
            ("openblas_set_num_threads", "openblas_get_num_threads"))


@functools.cache
def _openblas() -> tuple | None:
    """``(set, get)`` of the OpenBLAS numpy loaded, or None."""
    import numpy  # noqa: F401  (loads its BLAS)

    try:
        paths = sorted({line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                        if "openblas" in line.lower() and line.split()[-1].startswith("/")})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _SYMBOLS:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                return setter, getter
    return None


def blas_threads() -> int | None:
    """The thread count of numpy's OpenBLAS (None: not found)."""
    fns = _openblas()
    return None if fns is None else int(fns[1]())


@contextlib.contextmanager
def single_blas_thread():
    """Run the block with numpy's OpenBLAS on one thread (see the module docstring)."""
    fns = _openblas()
    if fns is None:
        yield
        return
    setter, getter = fns
    before = int(getter())
    setter(1)
    try:
        yield
    finally:
        setter(before)
