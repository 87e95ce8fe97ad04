"""`det-calib calibrate`'s job: per head, label → fit → choose → figures; the verification of the
calibrated checkpoint, the outputs and the summary. (A *run* is what it leaves: one calibration and its
folder, read back by :mod:`det_calib.record.run_folder`.)"""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "calibrate": "calibrate_job",
    "fit_head": "fitting",
    "calibrate_head": "head_steps",
    "evaluate": "head_steps",
    "write_run_outputs": "outputs",
}

__all__ = [
    "calibrate",
    "calibrate_head",
    "evaluate",
    "fit_head",
    "write_run_outputs",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)
