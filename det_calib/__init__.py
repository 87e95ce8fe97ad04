"""det_calib: make Ultralytics YOLO detectors tell the truth about their confidence.

The public API, step by step (each step is a plain function; :func:`calibrate` runs them all):

>>> import det_calib
>>> run = det_calib.calibrate(out="runs/demo")  # doctest: +SKIP

- :func:`capture` — boxes, confs and raw class logits through Ultralytics' own predictor
- :func:`match_table` / :func:`match_detections` — correct/incorrect by COCO-style matching
- :func:`fit_temperature` / :class:`TemperatureScaler` — the NLL-optimal temperature
- :mod:`det_calib.metrics` — ECE, ACE, MCE, NLL, Brier, D-ECE, LaECE, bootstrap intervals
- :func:`coco_map`, :func:`ultralytics_val` — mAP before and after
- :func:`threshold_shift` — how the set of boxes kept at conf 0.25 changes
- :func:`write_calibrated_checkpoint` — T folded into the head; loads without det_calib
- :mod:`det_calib.thresholds` — per-class conf thresholds (certified precision, max-F1, LRP);
  :func:`filter_results` applies them to plain Ultralytics ``Results``
- :mod:`det_calib.calibrators` — the calibrator contract (``LogitCalibrator``) and the registry of methods
- :func:`apply_calibrator` — any run's calibrator applied to Ultralytics results after the
  detector's own selection (post-hoc: the same boxes, rescored)
- :func:`attach` / :func:`detach` — a run's calibrator (any map, size-conditioned included)
  installed into a YOLO model's ``predict``, with each box's calibrated probability of every class
"""

from __future__ import annotations

__version__ = "0.1.0"

import os as _os
import time as _time

from det_calib.lazy import lazy_exports  # noqa: E402

_EXPORTS = {
    "TemperatureScaler": "calibrators.temperature",
    "equivalent_threshold": "calibrators.temperature",
    "fit_temperature": "calibrators.temperature",
    "capture": "capture.predictor",
    "load_data_yaml": "data.ground_truth",
    "load_split": "data.ground_truth",
    "write_calibrated_checkpoint": "deploy.fold",
    "attach": "deploy.hook",
    "detach": "deploy.hook",
    "apply_calibrator": "deploy.posthoc",
    "DegenerateFitError": "errors",
    "DetCalibError": "errors",
    "InputError": "errors",
    "threshold_shift": "evaluation.kept_set",
    "coco_map": "evaluation.map_check",
    "ultralytics_val": "evaluation.map_check",
    "match_detections": "matching.one_to_one",
    "match_table": "matching.one_to_one",
    "calibrate": "pipeline.calibrate_job",
    "filter_results": "thresholds.results_filter",
}

__all__ = [
    "__version__",
    "DegenerateFitError",
    "DetCalibError",
    "InputError",
    "TemperatureScaler",
    "apply_calibrator",
    "attach",
    "calibrate",
    "capture",
    "coco_map",
    "detach",
    "equivalent_threshold",
    "filter_results",
    "fit_temperature",
    "load_data_yaml",
    "load_split",
    "match_detections",
    "match_table",
    "threshold_shift",
    "ultralytics_val",
    "write_calibrated_checkpoint",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)


#: ``(perf_counter, process_time)`` when det_calib was first imported: the command line's clock dates
#: the interpreter's start from it (:func:`det_calib.job.clock.process_start`).
FIRST_IMPORT = (_time.perf_counter(), _time.process_time())

# Polars allocates through jemalloc, which by default keeps freed pages for about ten seconds: at
# COCO scale every temporary of reading, filtering and joining the box table then stays resident
# (reading the capture parts of a 5,000-image split left 0.4 GiB more, benchmarks/bench_scale.py).
# jemalloc reads its options once, when polars is first imported: set here, before anything of
# det_calib imports polars, unless the user set them.
_os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")
