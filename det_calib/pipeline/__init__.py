"""`det-calib calibrate`'s job: per head, label → fit → choose → figures; the verification of the
calibrated checkpoint, the outputs and the summary. (A *run* is what it leaves: one calibration and its
folder, read back by :mod:`det_calib.record.run_folder`.)"""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "CalibrationRun": "calibrate_job",
    "calibrate": "calibrate_job",
    "summary_text": "summary",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
