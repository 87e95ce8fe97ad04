"""Seconds and peak memory of the stages of a run, logged and kept for benchmarks.

``with stage("mAP check"):`` logs, at debug level on ``det_calib.job.stages``, the seconds the block
took and the process's peak resident memory during it, and adds both to the records that
:func:`records` returns (a stage entered several times, once per head, adds up its seconds and
keeps its highest peak). On Linux the peak is the block's own: the kernel's high-water mark is
reset when an outermost block starts (``/proc/self/clear_refs``); elsewhere it is the process's peak so far.
Every stage also starts by handing the C heap's free pages back (:func:`release`):
the memory the previous stage freed does not stay resident under the next one.
``benchmarks/bench_scale.py`` prints them.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["StageRecord", "overall_peak", "peak_rss", "records", "release", "reset", "stage"]

log = logging.getLogger(__name__)

_STATUS = Path("/proc/self/status")
_CLEAR = Path("/proc/self/clear_refs")


@dataclass
class StageRecord:
    """One stage: total seconds over its entries, the highest peak RSS (bytes), how often it ran."""

    name: str
    seconds: float = 0.0
    peak_rss: int = 0
    calls: int = 0


_records: dict[str, StageRecord] = {}


def peak_rss() -> int:
    """The process's peak resident memory in bytes (since the last reset, on Linux)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def release() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing),
    and Arrow's memory pool its unused memory.

    numpy allocates arrays of up to 32 MiB on the C heap once glibc has raised its mmap threshold
    (it does after the first large array is freed), and the heap keeps their pages when they are
    freed: the next stage of a run then starts with the previous stage's temporaries still
    resident. :func:`stage` calls this between stages.
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


_overall = [0]


def _reset_peak() -> None:
    _overall[0] = max(_overall[0], peak_rss())  # the reset also resets getrusage's ru_maxrss
    with contextlib.suppress(OSError):
        _CLEAR.write_text("5")


def overall_peak() -> int:
    """The process's peak resident memory in bytes over its whole life, across the resets."""
    return max(_overall[0], peak_rss())


def records() -> list[StageRecord]:
    """The stages recorded since the last :func:`reset`, in the order they first ran."""
    return list(_records.values())


def reset() -> None:
    """Forget the records (a benchmark calls this before a run)."""
    _records.clear()


_depth = [0]


@contextlib.contextmanager
def stage(name: str):
    """Time a block and take its peak memory (see the module docstring). A stage inside another
    one does not reset the high-water mark: its peak is that of the enclosing stage so far."""
    release()  # the previous stage's freed temporaries leave the process before this one starts
    if _depth[0] == 0:
        _reset_peak()
    _depth[0] += 1
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _depth[0] -= 1
        dt = time.perf_counter() - t0
        peak = peak_rss()
        rec = _records.setdefault(name, StageRecord(name))
        rec.seconds += dt
        rec.peak_rss = max(rec.peak_rss, peak)
        rec.calls += 1
        log.debug("stage %s: %.2f s, peak RSS %.2f GiB", name, dt, peak / 2**30)
