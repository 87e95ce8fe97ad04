"""The kept-set change at one conf threshold, as the run records it (:class:`ThresholdShift`;
computed by :func:`det_calib.evaluation.kept_set.threshold_shift`)."""

from __future__ import annotations

from dataclasses import dataclass

from det_calib.codec import Record


@dataclass(frozen=True)
class ThresholdShift(Record):
    """Kept-set change at one conf threshold.

    Attributes:
        conf: The threshold t (the same number applied before and after calibration).
        equivalent_conf: Calibrated threshold that keeps exactly the raw set: ``sigmoid(logit(t)/T)``
            for a temperature, the calibrated conf of raw ``t`` for any map strictly increasing there
            (None for a per-class map over all classes).
        n_gt: Ground-truth boxes (recall denominator).
        kept_before, kept_after: Boxes with raw / calibrated conf > t.
        added, added_correct: Boxes kept only after calibration, and how many of them are correct.
        removed, removed_correct: Boxes kept only before calibration, and how many are correct.
        precision_before, precision_after, recall_before, recall_after: Of the kept sets
            (precision is nan for an empty set, recall nan when n_gt is 0; read back as None).
    """

    conf: float
    equivalent_conf: float | None
    n_gt: int
    kept_before: int
    kept_after: int
    added: int
    added_correct: int
    removed: int
    removed_correct: int
    precision_before: float | None
    precision_after: float | None
    recall_before: float | None
    recall_after: float | None
