"""The process's tuning: its garbage collector, its allocators and numpy's BLAS threads. The command
line owns its process and tunes it once, in :func:`tuned_process` (``cli.main``); a library call leaves
its caller's process as it is. Nothing here changes a number a command computes, only where its
memory lies and how long it takes.

- **Collector.** The young collection runs every 50,000 new container objects instead of every 700:
  the report's figures (each tens of thousands of matplotlib objects in reference cycles) then mostly
  die young instead of reaching the oldest generation, whose full collections walk every object the
  run holds (on the demo, 3 full collections instead of 11, about 0.9 s of CPU fewer). The modules,
  classes and functions imported before the run (torch, Ultralytics, polars, numpy: they live until
  the exit) are frozen out of its reach, and so is everything at the exit (:func:`_quick_exit`).
- **Allocator.** glibc's malloc keeps the memory a forward pass frees for the next one (large blocks
  up to 32 MiB from the heap, whose free top goes back to the system only above 256 MiB) instead of
  faulting it in afresh, zeroed, on the next image: a few seconds of system CPU per run on the demo.
  Between the stages of a command the heaps' free pages go back to the system (:func:`release`, which
  :func:`det_calib.job.clock.stage` calls): the memory a stage freed does not stay resident under the next.
  Blocks over 32 MiB (the highest threshold glibc takes) are still mapped afresh: at 50,000 images a
  split, where a column of a head's boxes is 80 MB, the system's CPU (faulting those pages in) is 120 s
  of the job's 427. Taking every block from the heap (``M_MMAP_MAX`` 0) was measured
  (benchmarks/bench_scale.py, the 50,000- and 5,000-image sets): 410 -> 363 s of CPU and a peak
  0.12 GiB higher at 50,000, but 32.8 -> 34.9 s at 5,000 (and slower in both of two paired runs of
  the command there), so it is not set.
- **BLAS threads.** numpy's OpenBLAS runs on one thread. Everything after the capture is vector
  arithmetic over the box table (dot products, bin sums, small products): memory-bound work that a
  second thread does not speed up and, on a machine whose cores are busy with other work, slows down
  badly (a dot product of 80,000 values measured here took 2.3 ms with numpy's default two threads
  against 0.018 ms with one, benchmarks/bench_scale.py). torch keeps its own threads: the capture is
  not affected.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["blas_threads", "release", "tuned_process"]


@contextlib.contextmanager
def tuned_process(*, owned: bool, preload: bool) -> Iterator[None]:
    """The command's process tuned for the command (see the module docstring) and spared the exit's
    collections, where the command owns its process (``owned``: the command line itself; a command
    called from Python, ``main([...])``, leaves its caller's process as it is). ``preload``: the
    command runs the detector, so torch and Ultralytics are imported now and frozen with the rest of
    the start-up."""
    if owned:
        _tune_process(preload=preload)
    try:
        yield
    finally:
        if owned:
            _quick_exit()


def _tune_process(*, preload: bool) -> None:
    """Tune the command line's process: the collector, the allocator, one BLAS thread."""
    _keep_freed_memory()
    gc.set_threshold(50_000, *gc.get_threshold()[1:])
    _set_blas_threads(1)
    if preload:
        import ultralytics  # noqa: F401
    gc.freeze()


def _quick_exit() -> None:
    """Spare the interpreter's final garbage collections over every object torch and Ultralytics made
    (seconds on a busy machine, after the work is done): they are frozen, so the exit skips them.
    Every output was written and closed already; nothing else changes."""
    gc.freeze()


def _keep_freed_memory() -> None:
    """glibc's malloc keeps large freed blocks for the next forward pass; nothing on other C libraries."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: its mallopt parameters  # noqa: B018
    except (OSError, AttributeError, TypeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 32 << 20)
    mallopt(m_trim_threshold, 256 << 20)


def release() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing),
    and Arrow's memory pool its unused memory.

    numpy allocates arrays of up to 32 MiB on the C heap once glibc has raised its mmap threshold
    (it does after the first large array is freed), and the heap keeps their pages when they are
    freed: the next stage of a run would start with the previous stage's temporaries still resident.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    pa = sys.modules.get("pyarrow")
    if pa is not None:  # Arrow's own pool (Parquet reads and writes) keeps freed pages as well
        pa.default_memory_pool().release_unused()


@functools.cache
def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    fn = getattr(libc, "malloc_trim", None)
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


_SYMBOLS = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)


@functools.cache
def _openblas() -> tuple | None:
    """``(set, get)`` of the OpenBLAS numpy loaded (found in the process's loaded libraries), or None."""
    import numpy  # noqa: F401  (loads its BLAS)

    try:
        paths = sorted(
            {
                line.split()[-1]
                for line in Path("/proc/self/maps").read_text().splitlines()
                if "openblas" in line.lower() and line.split()[-1].startswith("/")
            }
        )
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


def _set_blas_threads(n: int) -> int | None:
    """Run numpy's OpenBLAS on ``n`` threads; the count before (None: no OpenBLAS found, nothing changes)."""
    fns = _openblas()
    if fns is None:
        return None
    before = int(fns[1]())
    fns[0](int(n))
    return before
