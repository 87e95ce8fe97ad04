"""The run's record: the typed ``calibration.json`` (``run_result``; an ensemble run's ``ensemble``
section in ``ensemble_record``) and the one reader of a run folder (``run_folder``: its result,
boxes and calibrators)."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "RunResult": "run_result",
    "read_calibrators": "run_result",
    "CALIBRATION_FILE": "run_result",
    "Run": "run_folder",
    "load_run": "run_folder",
    "EnsembleRecord": "ensemble_record",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
