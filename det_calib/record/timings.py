"""Where a command's time went: wall and CPU seconds (and peak memory) per stage, as ``calibration.json`` and
``check.json`` record them (``"timings"``) and the summary's timing line shows them.

The stages are exclusive (a stage inside another pauses the outer one) and cover the process from
its start to the moment the record was written: their wall seconds add up to ``wall``, with
``other`` holding what no stage claimed. :mod:`det_calib.job.clock` measures them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from det_calib.codec import Record, spec

__all__ = ["StageTime", "Timings"]

_STARTUP_STAGES = ("imports", "model load", "data check")
"""The stages of the fixed start-up (before the first image), shown together in the timing line."""

_ORDER = (
    *_STARTUP_STAGES,
    "capture",
    "fit and choice",
    "figures",
    "verification",
    "outputs",
    "report",
    "other",
)
"""The order of the timing line (a stage not named here comes before ``other``, in the order it ran)."""


def _seconds_ok(v: float) -> bool:
    return math.isfinite(v) and v >= 0


_SECONDS = (_seconds_ok, "a number of seconds >= 0")


@dataclass(frozen=True)
class StageTime(Record):
    """One stage: wall seconds, CPU seconds of the whole process (every thread) while it ran, and the
    process's peak resident memory in bytes while it ran (None: not measured, as in earlier records)."""

    wall: float = spec(check=_SECONDS, digits=3, required=True)
    cpu: float = spec(check=_SECONDS, digits=3, required=True)
    peak_rss: int | None = spec(
        None, omit="none", check=(lambda n: n >= 0, "a number of bytes >= 0")
    )


@dataclass(frozen=True)
class Timings(Record):
    """Wall and CPU seconds of a command, per stage, in the order the stages first ran.

    Attributes:
        wall: Seconds from the process's start (or the library call's) to the record.
        cpu: CPU seconds of the process (user + system, every thread) over the same span.
        stages: Stage name -> :class:`StageTime`; exclusive, so the walls add up to ``wall``.
        started: ``"process"`` when the span starts at the process's start (the command line: the
            interpreter and imports included), ``"call"`` when at the library call.
    """

    WHERE = "timings"

    wall: float = spec(check=_SECONDS, digits=3, required=True)
    cpu: float = spec(check=_SECONDS, digits=3, required=True)
    started: Literal["process", "call"] = "process"
    stages: dict[str, StageTime] = spec(default_factory=dict, required=True)

    def seconds(self, stage: str) -> float:
        """Wall seconds of ``stage`` (0 when it did not run)."""
        st = self.stages.get(stage)
        return st.wall if st is not None else 0.0

    @property
    def startup(self) -> float:
        """Wall seconds of the fixed start-up (:data:`STARTUP_STAGES`)."""
        return sum(self.seconds(s) for s in _STARTUP_STAGES)

    def line(self) -> str:
        """The timing line of a summary: every stage's wall seconds, adding up to the total. Formatted
        from the seconds as recorded (rounded to the millisecond), so the line written at the end of a
        run and the one rebuilt from its ``calibration.json`` are the same text."""
        recorded = Timings.from_dict(self.to_dict())
        assert recorded is not None
        return recorded.formatted()

    def formatted(self) -> str:
        """:meth:`line` of these seconds as they are."""
        parts = []
        if any(s in self.stages for s in _STARTUP_STAGES):
            inner = ", ".join(
                f"{s} {self.seconds(s):.1f}" for s in _STARTUP_STAGES if s in self.stages
            )
            parts.append(f"start-up {self.startup:.1f} ({inner})")
        rest = sorted(
            (n for n in self.stages if n not in _STARTUP_STAGES),
            key=lambda n: _ORDER.index(n) if n in _ORDER else _ORDER.index("other") - 0.5,
        )
        parts += [f"{name} {self.seconds(name):.1f}" for name in rest]
        since = "" if self.started == "process" else " since the call"
        return f"time: {self.wall:.1f} s wall{since}, {self.cpu:.1f} s CPU: " + ", ".join(parts)
