"""What the calibrate, ensemble and check jobs share: their settings, the inputs and the pre-flight
checks, where their boxes come from (the capture, or earlier boxes), the one clock of their stages and
the command line's process tuning."""

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "BoxSource": "capturing",
    "CheckDetections": "detections",
    "add_cpu": "clock",
    "begin": "clock",
    "output_folder": "clock",
    "reset": "clock",
    "stage": "clock",
    "start": "clock",
    "timings": "clock",
    "DetectionsRead": "detections_file",
    "Inputs": "inputs",
    "load_splits": "inputs",
    "job_inputs": "capturing",
    "fold_checkpoint": "model_process",
    "tuned_process": "process_tuning",
    "Settings": "settings",
    "opt": "settings",
}

__all__ = [
    "BoxSource",
    "CheckDetections",
    "DetectionsRead",
    "Inputs",
    "Settings",
    "add_cpu",
    "begin",
    "fold_checkpoint",
    "job_inputs",
    "load_splits",
    "opt",
    "output_folder",
    "reset",
    "stage",
    "start",
    "timings",
    "tuned_process",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)
