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

from det_calib.ensemble.classifier import EnsembleTemperature, ensemble_temperature
from det_calib.ensemble.fusion import SCORE_RULES, Fused, weighted_boxes_fusion
from det_calib.ensemble.members import MemberSpec, member_specs

__all__ = ["ensemble", "FusionSettings", "EnsembleRun", "weighted_boxes_fusion", "Fused", "SCORE_RULES",
           "MemberSpec", "member_specs", "load_ensemble", "EnsembleModel", "ensemble_temperature",
           "EnsembleTemperature"]


def __getattr__(name: str):
    # the job and the deployment import the pipeline and Ultralytics: only when used
    if name in ("ensemble", "FusionSettings", "EnsembleRun"):
        from det_calib.ensemble import ensemble_job

        return getattr(ensemble_job, name)
    if name in ("load_ensemble", "EnsembleModel"):
        from det_calib.ensemble import ensemble_model

        return getattr(ensemble_model, name)
    raise AttributeError(f"module 'det_calib.ensemble' has no attribute {name!r}")
