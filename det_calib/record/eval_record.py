"""The evaluation figures of a run's record: all-box :class:`Scores`, the :class:`OperatingFigures`
of a kept set, the classic :class:`TemperatureFit`, the fit's :class:`FitResult`, a head's
:class:`EvalResult` and :class:`ClassResult` (computed by :mod:`det_calib.evaluation.figures`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from det_calib.errors import InputError
from det_calib.record.checked_json import (
    CI,
    READERS,
    ci_field,
    key_path,
    leaf,
    leaf_dict,
    plain,
    read_flag,
    read_items,
    read_leaf_fields,
    read_number,
    read_object,
)
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
    "read_shifts",
    "temperature_ok",
]


def temperature_ok(t: float | None) -> bool:
    """A temperature a record may hold: a finite number above 0."""
    return t is not None and math.isfinite(t) and t > 0


@dataclass(frozen=True)
class Scores:
    """Calibration metrics of one set of scores (raw or calibrated) on the evaluation split.

    In the JSON each field ``m`` is the key ``m_before`` / ``m_after`` (``m_ci``:
    ``m_before_ci`` / ``m_after_ci``), a 95% image-bootstrap interval ``[low, high]``.
    """

    ece: float | None = leaf()
    ece_ci: CI = ci_field()
    ace: float | None = leaf()
    mce: float | None = leaf()
    nll: float | None = leaf()
    brier: float | None = leaf()
    dece: float | None = leaf()
    laece: float | None = leaf()
    laece_ci: CI = ci_field()
    laace: float | None = leaf()

    @staticmethod
    def key(name: str, tag: str) -> str:
        """JSON key of field ``name`` for ``tag`` (``before``/``after``): ``ece_before``, ``ece_before_ci``."""
        return f"{name[:-3]}_{tag}_ci" if name.endswith("_ci") else f"{name}_{tag}"

    def to_flat(self, tag: str) -> dict[str, Any]:
        return {
            self.key(f.name, tag): plain(getattr(self, f.name)) for f in dataclasses.fields(self)
        }

    @classmethod
    def from_flat(cls, d: dict[str, Any], tag: str, where: str) -> Scores:
        return cls(
            **{
                f.name: READERS[f.metadata["kind"]](d.get(k), key_path(where, k))
                for f in dataclasses.fields(cls)
                for k in [cls.key(f.name, tag)]
            }
        )


@dataclass(frozen=True)
class OperatingFigures:
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

    conf: float | None = leaf()
    boxes: int | None = leaf(kind=int)
    correct: int | None = leaf(kind=int)
    ece: float | None = leaf()
    ece_ci: CI = ci_field()
    laece0: float | None = leaf()
    laece0_ci: CI = ci_field()
    ece_floor: float | None = leaf()
    ece_floor_range: CI = ci_field()
    laece_floor: float | None = leaf()
    laece_floor_range: CI = ci_field()

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

    def to_dict(self) -> dict[str, Any]:
        return leaf_dict(self)

    @classmethod
    def from_dict(cls, d: Any, where: str) -> OperatingFigures:
        return cls(**read_leaf_fields(cls, read_object(d, where, optional=False), where))


@dataclass(frozen=True)
class TemperatureFit:
    """The temperature of a head fitted on every box of the fit split, whatever was deployed.

    Temperature scaling is the classic method and what users compare with, so every run fits
    it and reports it (``temperature_fit`` in ``calibration.json``): ``temperature`` (T),
    ``deployed`` (whether it is the head's calibrator), ``operating`` (its kept-set figures on
    the eval split, as ``operating_after``), ``nll`` (its all-box NLL on the eval split).
    """

    temperature: float
    deployed: bool = False
    operating: list[OperatingFigures] = field(default_factory=list)
    nll: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "deployed": self.deployed,
            "operating": [o.to_dict() for o in self.operating],
            "nll": plain(self.nll),
        }

    @classmethod
    def from_dict(cls, d: Any, where: str) -> TemperatureFit | None:
        d = read_object(d, where)
        if d is None:
            return None
        t = read_number(d.get("temperature"), key_path(where, "temperature"))
        if not temperature_ok(t):
            raise InputError(
                f"`{key_path(where, 'temperature')}` must be a positive number, "
                f"got {d.get('temperature')!r}"
            )
        return cls(
            temperature=float(t),
            deployed=bool(read_flag(d.get("deployed"), key_path(where, "deployed"))),
            operating=[
                OperatingFigures.from_dict(o, f"{key_path(where, 'operating')}[{i}]")
                for i, o in enumerate(read_items(d.get("operating"), key_path(where, "operating")))
            ],
            nll=read_number(d.get("nll"), key_path(where, "nll")),
        )


@dataclass(frozen=True)
class Thresholded:
    """ECE of the boxes kept at one conf threshold, raw and calibrated."""

    conf: float | None = leaf()
    boxes_before: int | None = leaf(kind=int)
    ece_before: float | None = leaf()
    boxes_after: int | None = leaf(kind=int)
    ece_after: float | None = leaf()


@dataclass(frozen=True)
class FitResult:
    """The temperature fit of one head, with the fit split's own (in-sample) figures."""

    split: str | None = leaf(kind=str)
    images: int | None = leaf(kind=int)
    boxes: int | None = leaf(kind=int)
    correct: int | None = leaf(kind=int)
    nll_before: float | None = leaf()
    nll_after: float | None = leaf()
    ece_before: float | None = leaf()
    ece_after: float | None = leaf()
    brier_before: float | None = leaf()
    brier_after: float | None = leaf()
    iterations: int | None = leaf(kind=int)


@dataclass(frozen=True)
class BinGap:
    """One confidence bin of the calibrated kept set and its share of the kept-set ECE.

    ``lo``/``hi``: the bin's conf range; ``boxes`` in it; ``conf``: their mean calibrated conf;
    ``accuracy``: the fraction correct; ``share``: ``boxes / kept * |accuracy - conf|``, its term
    of the kept-set ECE (the terms add up to the ECE).
    """

    lo: float | None = leaf()
    hi: float | None = leaf()
    boxes: int | None = leaf(kind=int)
    conf: float | None = leaf()
    accuracy: float | None = leaf()
    share: float | None = leaf()


@dataclass(frozen=True)
class FloorGap:
    """Why the calibrated boxes kept at the lowest conf stay above their sampling floor's 95% range
    (:func:`det_calib.evaluation.floor_gap.floor_gap`; ``floor_gap`` in the JSON, only where they do).

    ``reason``: ``images`` (a few eval images, ``images`` by name, each far from calibrated, hold the gap:
    their ``image_boxes`` kept boxes of ``kept_boxes``, ``image_correct`` correct; without them the ECE is
    ``ece_without``, inside ``floor_without_range``), ``sampling`` (the chosen map's method fitted on the eval
    split itself, ``refit_method``, scores ``refit_ece``, inside its floor's range ``refit_floor_range``: the
    gap is the fit split's sampling noise) or ``score`` (that refit stays above it: no map of the score alone
    of that family reaches the floor).
    """

    reason: str | None = leaf(kind=str)
    images: str | None = leaf(kind=str)
    image_count: int | None = leaf(kind=int)
    image_boxes: int | None = leaf(kind=int)
    image_correct: int | None = leaf(kind=int)
    kept_boxes: int | None = leaf(kind=int)
    ece_without: float | None = leaf()
    floor_without_range: CI = ci_field()
    refit_method: str | None = leaf(kind=str)
    refit_ece: float | None = leaf()
    refit_floor_range: CI = ci_field()

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in leaf_dict(self).items() if v is not None}


@dataclass(frozen=True)
class EvalResult:
    """One head on the evaluation split: counts, metrics raw and calibrated, mAP check."""

    split: str | None = leaf(kind=str)
    images: int | None = leaf(kind=int)
    boxes: int | None = leaf(kind=int)
    correct: int | None = leaf(kind=int)
    ignored: int | None = leaf(kind=int)
    n_gt: int | None = leaf(kind=int)
    corrupt_images: int | None = leaf(kind=int)
    before: Scores = field(default_factory=Scores)
    after: Scores = field(default_factory=Scores)
    thresholded: list[Thresholded] = field(default_factory=list)
    operating_before: list[OperatingFigures] = field(default_factory=list)
    operating_after: list[OperatingFigures] = field(default_factory=list)
    map50_95_before: float | None = leaf()
    map50_95_after: float | None = leaf()
    map50_before: float | None = leaf()
    map50_after: float | None = leaf()
    map_identical: bool | None = leaf(kind=bool)
    mask_map50_95_before: float | None = leaf()
    mask_map50_95_after: float | None = leaf()
    mask_map50_before: float | None = leaf()
    mask_map50_after: float | None = leaf()
    mask_map_identical: bool | None = leaf(kind=bool)
    """Mask mAP by pycocotools ``segm`` of a segment model's boxes, raw and calibrated scores (None: a
    detector, or box-only labels; the keys are written only where measured)."""
    pose_map50_95_before: float | None = leaf()
    pose_map50_95_after: float | None = leaf()
    pose_map50_before: float | None = leaf()
    pose_map50_after: float | None = leaf()
    pose_map_identical: bool | None = leaf(kind=bool)
    """Keypoint mAP by pycocotools ``keypoints`` (OKS) of a pose model's boxes, raw and calibrated scores (None:
    not a pose model, or a split without keypoints; the keys are written only where measured)."""
    map_engine: str | None = leaf(kind=str)
    """What scored the mAP figures: ``det_calib`` (:mod:`det_calib.evaluation.coco_engine`) or ``pycocotools``
    (None in runs written before the choice existed: pycocotools)."""
    kept_gaps: list[BinGap] = field(default_factory=list)
    """The bins of the calibrated boxes kept at the lowest conf threshold with the largest terms
    of their ECE, largest first (``kept_gaps_after`` in the JSON): where the error that is left lies."""
    floor_gap: FloorGap | None = None
    """Why the calibrated kept set stays above its floor's range (None: it does not, or runs before it)."""

    def scores(self, tag: str) -> Scores:
        return self.before if tag == "before" else self.after

    def to_dict(self) -> dict[str, Any]:
        leaf = leaf_dict(self)
        out = {
            k: leaf[k]
            for k in ("split", "images", "boxes", "correct", "ignored", "n_gt", "corrupt_images")
        }
        out.update(self.before.to_flat("before"))
        out.update(self.after.to_flat("after"))
        out["thresholded"] = [leaf_dict(t) for t in self.thresholded]
        if self.operating_before or self.operating_after:
            out["operating_before"] = [o.to_dict() for o in self.operating_before]
            out["operating_after"] = [o.to_dict() for o in self.operating_after]
        out.update(
            {
                k: leaf[k]
                for k in (
                    "map50_95_before",
                    "map50_95_after",
                    "map50_before",
                    "map50_after",
                    "map_identical",
                )
            }
        )
        if self.mask_map50_95_before is not None:
            out.update(
                {
                    k: leaf[k]
                    for k in (
                        "mask_map50_95_before",
                        "mask_map50_95_after",
                        "mask_map50_before",
                        "mask_map50_after",
                        "mask_map_identical",
                    )
                }
            )
        if self.pose_map50_95_before is not None:
            out.update(
                {
                    k: leaf[k]
                    for k in (
                        "pose_map50_95_before",
                        "pose_map50_95_after",
                        "pose_map50_before",
                        "pose_map50_after",
                        "pose_map_identical",
                    )
                }
            )
        if self.map_engine is not None:
            out["map_engine"] = self.map_engine
        if self.kept_gaps:
            out["kept_gaps_after"] = [leaf_dict(g) for g in self.kept_gaps]
        if self.floor_gap is not None:
            out["floor_gap"] = self.floor_gap.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> EvalResult:
        return cls(
            **read_leaf_fields(cls, d, where),
            before=Scores.from_flat(d, "before", where),
            after=Scores.from_flat(d, "after", where),
            thresholded=[
                Thresholded(**read_leaf_fields(Thresholded, read_object(t, w, optional=False), w))
                for i, t in enumerate(
                    read_items(d.get("thresholded"), key_path(where, "thresholded"))
                )
                for w in [f"{where}.thresholded[{i}]"]
            ],
            **{
                k: [
                    OperatingFigures.from_dict(o, f"{where}.{k}[{i}]")
                    for i, o in enumerate(read_items(d.get(k), key_path(where, k)))
                ]
                for k in ("operating_before", "operating_after")
            },
            kept_gaps=[
                BinGap(**read_leaf_fields(BinGap, read_object(g, w, optional=False), w))
                for i, g in enumerate(
                    read_items(d.get("kept_gaps_after"), key_path(where, "kept_gaps_after"))
                )
                for w in [f"{where}.kept_gaps_after[{i}]"]
            ],
            floor_gap=None
            if d.get("floor_gap") is None
            else FloorGap(
                **read_leaf_fields(
                    FloorGap,
                    read_object(d["floor_gap"], key_path(where, "floor_gap"), optional=False),
                    key_path(where, "floor_gap"),
                )
            ),
        )


def _read_shift(d: Any, where: str) -> ThresholdShift:
    d = read_object(d, where, optional=False)
    kinds = {
        "n_gt": int,
        "kept_before": int,
        "kept_after": int,
        "added": int,
        "added_correct": int,
        "removed": int,
        "removed_correct": int,
    }
    return ThresholdShift(
        **{
            f.name: READERS[kinds.get(f.name, float)](d.get(f.name), key_path(where, f.name))
            for f in dataclasses.fields(ThresholdShift)
        }
    )


def read_shifts(v: Any, where: str) -> list[ThresholdShift]:
    return [_read_shift(x, f"{where}[{i}]") for i, x in enumerate(read_items(v, where))]


@dataclass(frozen=True)
class ClassResult:
    """One class on the evaluation split (None metrics: the class has ground truth but no box)."""

    cls: int | None = leaf(kind=int)
    name: str | None = leaf(kind=str)
    boxes: int | None = leaf(kind=int)
    correct: int | None = leaf(kind=int)
    n_gt: int | None = leaf(kind=int)
    few_boxes: bool | None = leaf(kind=bool)
    ece_before: float | None = leaf()
    ece_before_ci: CI = ci_field()
    laece_before: float | None = leaf()
    ece_after: float | None = leaf()
    ece_after_ci: CI = ci_field()
    laece_after: float | None = leaf()
    kept_ece_before: float | None = leaf()
    kept_ece_after: float | None = leaf()
    threshold_shift: list[ThresholdShift] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**leaf_dict(self), "threshold_shift": [s.to_dict() for s in self.threshold_shift]}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> ClassResult:
        d = read_object(d, where, optional=False)
        return cls(
            **read_leaf_fields(cls, d, where),
            threshold_shift=read_shifts(
                d.get("threshold_shift"), key_path(where, "threshold_shift")
            ),
        )
