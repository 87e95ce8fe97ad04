"""The evaluation figures of a run's record: all-box :class:`Scores`, the :class:`OperatingFigures`
of a kept set, the classic :class:`TemperatureFit`, the fit's :class:`FitResult`, a head's
:class:`EvalResult` and :class:`ClassResult` (computed by :mod:`det_calib.evaluation.figures`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from det_calib.codec import Record, encode, spec
from det_calib.record.checked_json import CI
from det_calib.record.threshold_shift import ThresholdShift

__all__ = [
    "BinGap",
    "ClassResult",
    "EvalResult",
    "FitResult",
    "FloorGap",
    "OperatingFigures",
    "Scores",
    "TemperatureFit",
    "Thresholded",
    "temperature_ok",
]


def temperature_ok(t: float | None) -> bool:
    """A temperature a record may hold: a finite number above 0."""
    return t is not None and math.isfinite(t) and t > 0


@dataclass(frozen=True)
class Scores(Record):
    """Calibration metrics of one set of scores (raw or calibrated) on the evaluation split.

    In the JSON each field ``m`` is the key ``m_before`` / ``m_after`` (``m_ci``:
    ``m_before_ci`` / ``m_after_ci``), a 95% image-bootstrap interval ``[low, high]``.
    """

    ece: float | None = None
    ece_ci: CI = None
    ace: float | None = None
    mce: float | None = None
    nll: float | None = None
    brier: float | None = None
    dece: float | None = None
    laece: float | None = None
    laece_ci: CI = None
    laace: float | None = None

    @staticmethod
    def key(name: str, tag: str) -> str:
        """JSON key of field ``name`` for ``tag`` (``before``/``after``): ``ece_before``, ``ece_before_ci``."""
        return f"{name[:-3]}_{tag}_ci" if name.endswith("_ci") else f"{name}_{tag}"

    def to_flat(self, tag: str) -> dict[str, Any]:
        """The JSON keys of ``tag`` (as :class:`EvalResult` writes them) and their values."""
        return {self.key(k, tag): v for k, v in encode(self).items()}


@dataclass(frozen=True)
class OperatingFigures(Record):
    """Calibration of the boxes kept at one conf threshold (``conf > threshold``), one set of scores.

    ``ece``: ECE (equal-width bins) of the kept boxes against the matched flag; ``laece0``: LaECE_0
    with the reference toolkit's conventions (:func:`det_calib.metrics.operating_point.laece0`). Intervals: 95%
    bootstrap over images (:func:`det_calib.metrics.bootstrap_ci`): ``ece_ci`` bias-corrected
    percentile, ``laece0_ci`` normal (estimate -+ 1.96 SD; see :class:`det_calib.evaluation.operating.OperatingPoints`).
    ``ece_floor``: the sampling floor of ``ece``, the mean kept-set ECE a perfectly calibrated
    detector would score on the same kept boxes (labels drawn from their confidences,
    :func:`det_calib.metrics.operating_point.kept_ece_floor`); ``ece_floor_range`` its 95% range. An ``ece``
    inside that range is as low as this many boxes can show. ``laece_floor`` / ``laece_floor_range``: the
    same for ``laece0``, targets drawn with mean the box's conf (matched with probability conf / the mean
    IoU of the kept matched boxes, the IoU drawn from theirs:
    :func:`det_calib.metrics.operating_point.kept_laece_floor`); absent from runs written before them.
    """

    conf: float | None = None
    boxes: int | None = None
    correct: int | None = None
    ece: float | None = None
    ece_ci: CI = None
    laece0: float | None = None
    laece0_ci: CI = None
    ece_floor: float | None = None
    ece_floor_range: CI = None
    laece_floor: float | None = None
    laece_floor_range: CI = None

    @property
    def at_floor(self) -> bool | None:
        """Whether ``ece`` lies within the 95% range of a perfectly calibrated detector (None: unknown)."""
        if self.ece is None or self.ece_floor_range is None:
            return None
        return self.ece <= self.ece_floor_range[1]

    @property
    def laece_at_floor(self) -> bool | None:
        """Whether ``laece0`` lies within (or below) the 95% range of a detector whose conf is the expected
        IoU target of its box (None: unknown)."""
        if self.laece0 is None or self.laece_floor_range is None:
            return None
        return self.laece0 <= self.laece_floor_range[1]


@dataclass(frozen=True)
class TemperatureFit(Record):
    """The temperature of a head fitted on every box of the fit split, whatever was deployed.

    Temperature scaling is the classic method and what users compare with, so every run fits
    it and reports it (``temperature_fit`` in ``calibration.json``): ``temperature`` (T),
    ``deployed`` (whether it is the head's calibrator), ``operating`` (its kept-set figures on
    the eval split, as ``operating_after``), ``nll`` (its all-box NLL on the eval split).
    """

    temperature: float = spec(check=(temperature_ok, "a positive number"))
    deployed: bool = False
    operating: list[OperatingFigures] = field(default_factory=list)
    nll: float | None = None


@dataclass(frozen=True)
class Thresholded(Record):
    """ECE of the boxes kept at one conf threshold, raw and calibrated."""

    conf: float | None = None
    boxes_before: int | None = None
    ece_before: float | None = None
    boxes_after: int | None = None
    ece_after: float | None = None


@dataclass(frozen=True)
class FitResult(Record):
    """The temperature fit of one head, with the fit split's own (in-sample) figures."""

    split: str | None = None
    images: int | None = None
    boxes: int | None = None
    correct: int | None = None
    nll_before: float | None = None
    nll_after: float | None = None
    ece_before: float | None = None
    ece_after: float | None = None
    brier_before: float | None = None
    brier_after: float | None = None
    iterations: int | None = None


@dataclass(frozen=True)
class BinGap(Record):
    """One confidence bin of the calibrated kept set and its share of the kept-set ECE.

    ``lo``/``hi``: the bin's conf range; ``boxes`` in it; ``conf``: their mean calibrated conf;
    ``accuracy``: the fraction correct; ``share``: ``boxes / kept * |accuracy - conf|``, its term
    of the kept-set ECE (the terms add up to the ECE).
    """

    lo: float | None = None
    hi: float | None = None
    boxes: int | None = None
    conf: float | None = None
    accuracy: float | None = None
    share: float | None = None


def _opt() -> Any:
    """A field written only where it is not None."""
    return spec(None, omit="none")


@dataclass(frozen=True)
class FloorGap(Record):
    """Why the calibrated boxes kept at the lowest conf stay above their sampling floor's 95% range
    (:func:`det_calib.evaluation.floor_gap.floor_gap`; ``floor_gap`` in the JSON, only where they do).

    ``reason``: ``images`` (a few eval images, ``images`` by name, each far from calibrated, hold the gap:
    their ``image_boxes`` kept boxes of ``kept_boxes``, ``image_correct`` correct; without them the ECE is
    ``ece_without``, inside ``floor_without_range``), ``sampling`` (the chosen map's method fitted on the eval
    split itself, ``refit_method``, scores ``refit_ece``, inside its floor's range ``refit_floor_range``: the
    gap is the fit split's sampling noise) or ``score`` (that refit stays above it: no map of the score alone
    of that family reaches the floor).
    """

    reason: str | None = _opt()
    images: str | None = _opt()
    image_count: int | None = _opt()
    image_boxes: int | None = _opt()
    image_correct: int | None = _opt()
    kept_boxes: int | None = _opt()
    ece_without: float | None = _opt()
    floor_without_range: CI = _opt()
    refit_method: str | None = _opt()
    refit_ece: float | None = _opt()
    refit_floor_range: CI = _opt()


def _no_operating(r: EvalResult) -> bool:
    return not (r.operating_before or r.operating_after)


def _no_mask(r: EvalResult) -> bool:
    return r.mask_map50_95_before is None


def _no_pose(r: EvalResult) -> bool:
    return r.pose_map50_95_before is None


@dataclass(frozen=True)
class EvalResult(Record):
    """One head on the evaluation split: counts, metrics raw and calibrated, mAP check."""

    split: str | None = None
    images: int | None = None
    boxes: int | None = None
    correct: int | None = None
    ignored: int | None = None
    n_gt: int | None = None
    corrupt_images: int | None = None
    before: Scores = spec(default_factory=Scores, flat=lambda name: Scores.key(name, "before"))
    after: Scores = spec(default_factory=Scores, flat=lambda name: Scores.key(name, "after"))
    thresholded: list[Thresholded] = field(default_factory=list)
    operating_before: list[OperatingFigures] = spec(default_factory=list, omit=_no_operating)
    operating_after: list[OperatingFigures] = spec(default_factory=list, omit=_no_operating)
    map50_95_before: float | None = None
    map50_95_after: float | None = None
    map50_before: float | None = None
    map50_after: float | None = None
    map_identical: bool | None = None
    mask_map50_95_before: float | None = spec(None, omit=_no_mask)
    mask_map50_95_after: float | None = spec(None, omit=_no_mask)
    mask_map50_before: float | None = spec(None, omit=_no_mask)
    mask_map50_after: float | None = spec(None, omit=_no_mask)
    mask_map_identical: bool | None = spec(None, omit=_no_mask)
    """Mask mAP by pycocotools ``segm`` of a segment model's boxes, raw and calibrated scores (None: a
    detector, or box-only labels; the keys are written only where measured)."""
    pose_map50_95_before: float | None = spec(None, omit=_no_pose)
    pose_map50_95_after: float | None = spec(None, omit=_no_pose)
    pose_map50_before: float | None = spec(None, omit=_no_pose)
    pose_map50_after: float | None = spec(None, omit=_no_pose)
    pose_map_identical: bool | None = spec(None, omit=_no_pose)
    """Keypoint mAP by pycocotools ``keypoints`` (OKS) of a pose model's boxes, raw and calibrated scores (None:
    not a pose model, or a split without keypoints; the keys are written only where measured)."""
    map_engine: str | None = spec(None, omit="none")
    """What scored the mAP figures: ``det_calib`` (:mod:`det_calib.evaluation.coco_engine`) or ``pycocotools``
    (None in runs written before the choice existed: pycocotools)."""
    kept_gaps: list[BinGap] = spec(default_factory=list, key="kept_gaps_after", omit="empty")
    """The bins of the calibrated boxes kept at the lowest conf threshold with the largest terms
    of their ECE, largest first (``kept_gaps_after`` in the JSON): where the error that is left lies."""
    floor_gap: FloorGap | None = spec(None, omit="none")
    """Why the calibrated kept set stays above its floor's range (None: it does not, or runs before it)."""

    def scores(self, tag: str) -> Scores:
        return self.before if tag == "before" else self.after


@dataclass(frozen=True)
class ClassResult(Record):
    """One class on the evaluation split (None metrics: the class has ground truth but no box)."""

    cls: int | None = None
    name: str | None = None
    boxes: int | None = None
    correct: int | None = None
    n_gt: int | None = None
    few_boxes: bool | None = None
    ece_before: float | None = None
    ece_before_ci: CI = None
    laece_before: float | None = None
    ece_after: float | None = None
    ece_after_ci: CI = None
    laece_after: float | None = None
    kept_ece_before: float | None = None
    kept_ece_after: float | None = None
    threshold_shift: list[ThresholdShift] = field(default_factory=list)
