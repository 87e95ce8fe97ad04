"""Memory: polars' allocator returns freed pages at once (imported first by the package).

Polars allocates through jemalloc, which by default keeps freed pages for about ten seconds
before handing them back. At COCO scale every temporary of reading, filtering and joining the box
table then stays resident: reading the capture parts of a 5,000-image split left 0.4 GiB more
resident than with the pages returned (``benchmarks/bench_scale.py``, the "read boxes" stage).
jemalloc reads its options once, when polars is first imported, from ``_RJEM_MALLOC_CONF``: this
sets it, unless the user did, so that it applies when det_calib is imported before polars (the
command line, and any script that imports det_calib first).
"""

from __future__ import annotations

import os

os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")


def release() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing),
    and Arrow's memory pool its unused memory.

    numpy allocates arrays of up to 32 MiB on the C heap once glibc has raised its mmap threshold
    (it does after the first large array is freed), and the heap keeps their pages when they are
    freed: the next stage of a run then starts with the previous stage's temporaries still
    resident. :func:`det_calib.stages.stage` calls this between stages.
    """
    import sys

    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    pa = sys.modules.get("pyarrow")
    if pa is not None:  # Arrow's own pool (Parquet reads and writes) keeps freed pages as well
        pa.default_memory_pool().release_unused()


_trim: list = []


def _malloc_trim():
    if not _trim:
        import ctypes
        import ctypes.util

        fn = None
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            fn = getattr(libc, "malloc_trim", None)
            if fn is not None:
                fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
        except OSError:
            fn = None
        _trim.append(fn)
    return _trim[0]
