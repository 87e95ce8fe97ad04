"""The one timing API of a command: wall seconds, CPU seconds and peak memory per stage, exclusive,
from the process's start.

``with clock.stage("capture"):`` (or ``@clock.stage("capture")`` on a step function) charges the
block's wall and CPU seconds to ``capture`` and takes its peak resident memory; a stage entered inside
another pauses the outer one, so every second goes to exactly one stage, and what no stage claims
goes to ``other``. Stages mark the steps of a command only (load, capture, fit, figures, outputs,
report, verification): a step's own parts are not timed. At each boundary the heaps' free pages go
back to the system (:func:`det_calib.job.process_tuning.release`), and on Linux the kernel's high-water mark
of resident memory is reset (``/proc/self/clear_refs``), so a stage's peak is its own.

:func:`start` sets the origin: the command line passes the process's start (so the interpreter's
start-up and the imports before ``main`` count, as a user's ``time`` would); a library call that
finds the clock idle starts it at the call. :func:`timings` reads the clock as a
:class:`det_calib.record.timings.Timings` (the record of ``calibration.json``). CPU is the whole
process's (every thread), read with :func:`time.process_time` (and, for the span before ``main``,
the process's own CPU seconds so far); a stage that runs in a child process beside the others adds
the child's CPU seconds to its own and to the total (:func:`add_cpu`).
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

from det_calib.io import staged_output
from det_calib.job.process_tuning import release
from det_calib.record.timings import StageTime, Timings

__all__ = [
    "add_cpu",
    "begin",
    "output_folder",
    "overall_peak",
    "peak_rss",
    "reset",
    "stage",
    "start",
    "timings",
]

_STATUS = Path("/proc/self/status")
_CLEAR = Path("/proc/self/clear_refs")

_OTHER = "other"


class _Clock:
    def __init__(self) -> None:
        self.origin: tuple[float, float] | None = None  # (perf_counter, process_time) at the origin
        self.kind = "process"
        self.walls: dict[str, float] = {}
        self.cpus: dict[str, float] = {}
        self.stack: list[str] = []
        self.mark = (0.0, 0.0)
        self.claimed = False
        self.extra_cpu = 0.0  # CPU seconds of child processes, charged with add_cpu
        self.peaks: dict[str, int] = {}

    def charge(self, now: tuple[float, float]) -> None:
        """Charge the time since the last mark, and the peak memory, to the current stage (``other``
        outside every stage); the high-water mark starts afresh."""
        name = self.stack[-1] if self.stack else _OTHER
        self.walls[name] = self.walls.get(name, 0.0) + now[0] - self.mark[0]
        self.cpus[name] = self.cpus.get(name, 0.0) + now[1] - self.mark[1]
        self.peaks[name] = max(self.peaks.get(name, 0), _reset_peak())
        self.mark = now


_clock = _Clock()


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def peak_rss() -> int:
    """The process's peak resident memory in bytes (since the last boundary, on Linux)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


_overall = [0]


def _reset_peak() -> int:
    """The peak since the last reset, and the high-water mark reset (Linux; elsewhere the peak so far)."""
    peak = peak_rss()
    _overall[0] = max(_overall[0], peak)  # the reset also resets getrusage's ru_maxrss
    with contextlib.suppress(OSError):
        _CLEAR.write_text("5")
    return peak


def overall_peak() -> int:
    """The process's peak resident memory in bytes over its whole life, across the resets."""
    return max(_overall[0], peak_rss())


def _process_start(first_import: tuple[float, float] | None = None) -> tuple[float, float] | None:
    """Seconds since the interpreter started (wall, CPU), or None where the system does not say (Linux
    only: ``/proc/self/stat``).

    ``/proc/self/stat`` dates the process's fork, and a shell that ends on a command runs it in its own
    process (``bash -c 'pip install ... && det-calib calibrate'`` execs det-calib in the shell's
    process): that start would count pip's minutes. ``first_import``: ``(perf_counter, process_time)``
    when det_calib was first imported (:data:`det_calib.FIRST_IMPORT`, which the command line passes);
    the interpreter started at most that moment less the CPU seconds spent by then, which the start-up
    spends nearly all of (the shell's own CPU before the exec is milliseconds; its children's is not
    counted). The later of the two starts is used."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        started = int(fields[19]) / ticks  # field 22 of stat: start time after boot (of the fork)
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    since_fork = max(uptime - started, 0.0)
    if first_import is None:
        return since_fork, time.process_time()
    return min(
        since_fork, time.perf_counter() - first_import[0] + first_import[1]
    ), time.process_time()


def start(
    *,
    since_process: bool = False,
    first_stage: str = "imports",
    first_import: tuple[float, float] | None = None,
) -> None:
    """Start the clock now (forgetting an earlier run's stages). With ``since_process``, the origin is
    the process's start (the interpreter's, given ``first_import``: see :func:`process_start`) and the
    seconds up to now are charged to ``first_stage``."""
    reset()
    now = _now()
    before = _process_start(first_import) if since_process else None
    if before is None:
        _clock.origin, _clock.kind = now, "call"
    else:
        _clock.origin, _clock.kind = (now[0] - before[0], 0.0), "process"
        _clock.walls[first_stage], _clock.cpus[first_stage] = before[0], before[1]
    _clock.mark = now


def _started() -> bool:
    """Whether the clock is running."""
    return _clock.origin is not None


def begin() -> None:
    """Where a job starts: it takes the clock the command line started for it, or (a library call,
    or a second job in the same process) starts the clock now."""
    if _clock.origin is None or _clock.claimed:
        start()
    _clock.claimed = True


def reset() -> None:
    """Stop the clock and forget its stages."""
    _clock.__init__()


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Charge the block's seconds and peak memory to ``name`` (the enclosing stage pauses meanwhile),
    the previous stage's freed memory handed back first; a decorator too. Nothing is charged when the
    clock is not running."""
    if _clock.origin is None:
        release()
        yield
        return
    _clock.charge(_now())
    _clock.stack.append(name)
    try:
        release()  # the previous stage's freed temporaries leave the process, on this stage's time
        yield
    finally:
        _clock.charge(_now())
        _clock.stack.pop()


@contextlib.contextmanager
def output_folder(out: Path) -> Iterator[Path]:
    """A command's ``outputs`` stage: its output folder staged and swapped in whole when the block ends
    (:func:`det_calib.io.staged_output`), the staging folder yielded. ``calibrate``, ``ensemble`` and
    ``check`` write through it."""
    with stage("outputs"), staged_output(out) as folder:
        yield folder


def add_cpu(name: str, seconds: float) -> None:
    """Charge ``seconds`` of CPU spent outside this process (a child process that ran a stage beside
    the others) to ``name`` and to the total; nothing when the clock is not running."""
    if _clock.origin is None:
        return
    _clock.walls.setdefault(name, 0.0)
    _clock.cpus[name] = _clock.cpus.get(name, 0.0) + seconds
    _clock.extra_cpu += seconds


def timings() -> Timings | None:
    """The clock read now: every stage so far, ``other`` last; None when it is not running."""
    if _clock.origin is None:
        return None
    now = _now()
    _clock.charge(now)
    names = [n for n in _clock.walls if n != _OTHER] + ([_OTHER] if _OTHER in _clock.walls else [])
    return Timings(
        wall=now[0] - _clock.origin[0],
        cpu=now[1] - _clock.origin[1] + _clock.extra_cpu,
        stages={n: StageTime(_clock.walls[n], _clock.cpus[n], _clock.peaks.get(n)) for n in names},
        started=_clock.kind,
    )
