"""``det-calib check``: a run's calibration and detection quality on new data, verdicts and exit codes."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "CheckResult": "run_check",
    "EXIT_CODES": "run_check",
    "check_run": "run_check",
    "new_boxes": "run_check",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # the modules load on first use (some import torch or ultralytics)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
