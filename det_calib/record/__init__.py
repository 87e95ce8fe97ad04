"""The run's record: the typed ``calibration.json`` (``run_result``; an ensemble run's ``ensemble``
section in ``ensemble_record``) and the one reader of a run folder (``run_folder``: its result,
boxes and calibrators)."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "RunResult": "run_result",
    "read_calibrators": "run_result",
    "CALIBRATION_FILE": "run_result",
    "Run": "run_folder",
    "load_run": "run_folder",
    "EnsembleRecord": "ensemble_record",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # the modules load on first use (some import torch or ultralytics)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
