"""The run's record: the typed ``calibration.json`` (``run_result``; a command's own sections, such as an
ensemble run's ``ensemble``, registered by the folder that owns them: ``run_sections``) and the one reader
of a run folder (``run_folder``: its result, boxes and calibrators)."""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "Calibrator": "calibrator_record",
    "CandidateRecord": "calibrator_record",
    "calibrator_of": "calibrator_record",
    "read_json_file": "checked_json",
    "BinGap": "eval_record",
    "ClassResult": "eval_record",
    "EvalResult": "eval_record",
    "FitResult": "eval_record",
    "FloorGap": "eval_record",
    "OperatingFigures": "eval_record",
    "Scores": "eval_record",
    "TemperatureFit": "eval_record",
    "Thresholded": "eval_record",
    "BOXES_FILE": "run_folder",
    "HeadBoxes": "run_folder",
    "Run": "run_folder",
    "load_run": "run_folder",
    "Bootstrap": "run_result",
    "CALIBRATION_FILE": "run_result",
    "DetectionChange": "run_result",
    "HeadResult": "run_result",
    "RecordedSettings": "run_result",
    "RunResult": "run_result",
    "ValCheck": "run_result",
    "ValMap": "run_result",
    "package_version": "run_result",
    "read_calibrators": "run_result",
    "register_run_section": "run_sections",
    "SizeFigures": "size_record",
    "ThresholdShift": "threshold_shift",
    "StageTime": "timings",
    "Timings": "timings",
}

__all__ = [
    "BOXES_FILE",
    "BinGap",
    "Bootstrap",
    "CALIBRATION_FILE",
    "Calibrator",
    "CandidateRecord",
    "ClassResult",
    "DetectionChange",
    "EvalResult",
    "FitResult",
    "FloorGap",
    "HeadBoxes",
    "HeadResult",
    "OperatingFigures",
    "RecordedSettings",
    "Run",
    "RunResult",
    "Scores",
    "SizeFigures",
    "StageTime",
    "TemperatureFit",
    "ThresholdShift",
    "Thresholded",
    "Timings",
    "ValCheck",
    "ValMap",
    "calibrator_of",
    "load_run",
    "package_version",
    "read_calibrators",
    "read_json_file",
    "register_run_section",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)
