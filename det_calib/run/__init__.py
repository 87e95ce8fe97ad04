"""The run: settings, preflight checks, reuse of earlier boxes, the job's steps and its outputs."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "CalibrationRun": "job",
    "calibrate": "job",
    "Settings": "settings",
    "summary_text": "summary",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # the modules load on first use (some import torch or ultralytics)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
