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

#: ``(perf_counter, process_time)`` when det_calib was first imported: the command line's clock dates
#: the interpreter's start from it (:func:`det_calib.job.clock.process_start`).
FIRST_IMPORT = (_time.perf_counter(), _time.process_time())

# Polars allocates through jemalloc, which by default keeps freed pages for about ten seconds: at
# COCO scale every temporary of reading, filtering and joining the box table then stays resident
# (reading the capture parts of a 5,000-image split left 0.4 GiB more, benchmarks/bench_scale.py).
# jemalloc reads its options once, when polars is first imported: set here, before anything of
# det_calib imports polars, unless the user set them.
_os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")

from det_calib.calibrators.temperature import TemperatureScaler, equivalent_threshold, fit_temperature  # noqa: E402
from det_calib.errors import DegenerateFitError, DetCalibError, InputError  # noqa: E402
from det_calib.evaluation.kept_set import threshold_shift  # noqa: E402

__all__ = [
    "__version__",
    "DetCalibError",
    "InputError",
    "DegenerateFitError",
    "TemperatureScaler",
    "fit_temperature",
    "threshold_shift",
    "equivalent_threshold",
    "calibrate",
    "capture",
    "match_table",
    "match_detections",
    "coco_map",
    "ultralytics_val",
    "write_calibrated_checkpoint",
    "load_data_yaml",
    "load_split",
    "filter_results",
    "apply_calibrator",
    "attach",
    "detach",
]


def __getattr__(name: str):
    # heavy imports (ultralytics, torch) only when these are used
    if name == "calibrate":
        from det_calib.pipeline.calibrate_job import calibrate

        return calibrate
    if name == "capture":
        from det_calib.capture.predictor import capture

        return capture
    if name in ("match_table", "match_detections"):
        from det_calib.matching import one_to_one as matching

        return getattr(matching, name)
    if name in ("coco_map", "ultralytics_val"):
        from det_calib.evaluation import map_check as verify

        return getattr(verify, name)
    if name == "write_calibrated_checkpoint":
        from det_calib.deploy.fold import write_calibrated_checkpoint

        return write_calibrated_checkpoint
    if name == "filter_results":
        from det_calib.thresholds.per_class import filter_results

        return filter_results
    if name == "apply_calibrator":
        from det_calib.deploy.posthoc import apply_calibrator

        return apply_calibrator
    if name in ("attach", "detach"):
        from det_calib.deploy import hook

        return getattr(hook, name)
    if name in ("load_data_yaml", "load_split"):
        from det_calib.data import ground_truth as data

        return getattr(data, name)
    raise AttributeError(f"module 'det_calib' has no attribute {name!r}")
