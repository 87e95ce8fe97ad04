"""``det-calib check``: a run's calibration and detection quality on new data, verdicts and exit codes."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "CHANGED": "check_record",
    "DRIFTED": "check_record",
    "EXIT_CODES": "check_record",
    "MIN_IMAGES": "check_record",
    "SHIFTED": "check_record",
    "check_run": "run_check",
    "new_boxes": "run_check",
    "QUESTIONS": "verdicts",
    "labelled_checks": "verdicts",
    "shift_check": "verdicts",
}

__all__ = [
    "CHANGED",
    "DRIFTED",
    "EXIT_CODES",
    "MIN_IMAGES",
    "QUESTIONS",
    "SHIFTED",
    "check_run",
    "labelled_checks",
    "new_boxes",
    "shift_check",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)
