"""``det-calib check``: a run's calibration and detection quality on new data, verdicts and exit codes."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "CHANGED": "check_record",
    "DRIFTED": "check_record",
    "EXIT_CODES": "check_record",
    "SHIFTED": "check_record",
    "is_classify_run": "classify_check",
    "run_check_cli": "classify_check",
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
    "QUESTIONS",
    "SHIFTED",
    "check_run",
    "is_classify_run",
    "labelled_checks",
    "new_boxes",
    "run_check_cli",
    "shift_check",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)
