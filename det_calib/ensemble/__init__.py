"""Ensembles of detectors, then calibration: the second half of the method, for detectors.

- :func:`ensemble` (``det-calib ensemble``): capture every member, fuse their boxes per image and
  class, calibrate the fused score as ``calibrate`` does, write the run folder
  (:mod:`det_calib.ensemble.ensemble_job`)
- :func:`weighted_boxes_fusion` — vectorised weighted boxes fusion, every score rule
  (:mod:`det_calib.ensemble.fusion`)
- :class:`MemberSpec`, :func:`member_specs` — checkpoints, snapshots, test-time views
  (:mod:`det_calib.ensemble.members`; :data:`~det_calib.ensemble.members.MEMBER_LOADERS` takes
  other runtimes by file suffix)
- :func:`load_ensemble` — an ensemble run that predicts on new images (Ultralytics ``Results``
  or JSON; :mod:`det_calib.ensemble.ensemble_model`)
- :func:`ensemble_temperature` — the classifier form: average the members' probabilities, then
  one temperature (:mod:`det_calib.ensemble.classifier`)
"""

from __future__ import annotations

from det_calib.lazy import lazy_exports

_EXPORTS = {
    "ensemble_temperature": "classifier",
    "ensemble": "ensemble_job",
    "load_ensemble": "ensemble_model",
    "weighted_boxes_fusion": "fusion",
    "FusionSettings": "fusion_settings",
}

__all__ = [
    "FusionSettings",
    "ensemble",
    "ensemble_temperature",
    "load_ensemble",
    "weighted_boxes_fusion",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)
