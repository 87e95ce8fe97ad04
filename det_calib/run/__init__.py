"""The run: settings, preflight checks, reuse of earlier boxes, the job's steps and its outputs."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "CalibrationRun": "job",
    "calibrate": "job",
    "Settings": "settings",
    "summary_text": "summary",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
