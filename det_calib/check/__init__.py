"""``det-calib check``: a run's calibration and detection quality on new data, verdicts and exit codes."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "CheckResult": "check_record",
    "EXIT_CODES": "check_record",
    "check_run": "run_check",
}

__all__ = [
    "CheckResult",
    "EXIT_CODES",
    "check_run",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)
