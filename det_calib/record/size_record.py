"""Reliability by box size in a run's record: :class:`SizeFigures`, one size bin of one head
(``by_size`` in ``calibration.json``), computed by :mod:`det_calib.evaluation.by_size`."""

from __future__ import annotations

from dataclasses import dataclass

from det_calib.codec import Record
from det_calib.record.checked_json import CI

__all__ = ["SizeFigures"]


@dataclass(frozen=True)
class SizeFigures(Record):
    """The eval split's boxes of one size bin (:data:`det_calib.metrics.size_bins.SIZE_BINS`) kept at
    the lowest conf threshold, raw (``_before``) and calibrated (``_after``).

    ``scheme`` (``coco``: area in pixels; ``relative``: area over image area), ``bin`` its name,
    ``lo``/``hi`` its bounds (``hi`` null: none). ``boxes_*``: kept boxes of the bin (a size map
    keeps other boxes than the raw scores at one threshold); ``ece_*``: their kept-set ECE
    (``ece_bins`` bins) with its bias-corrected bootstrap interval over the images that have boxes
    in the bin; ``laece0_*``: LaECE_0 of the bin's kept boxes (``laece_bins`` bins; each box keeps
    its match among every box) with the normal bootstrap interval over every image, as for the
    head's own figures (:class:`~det_calib.record.eval_record.OperatingFigures`).
    """

    scheme: str | None = None
    bin: str | None = None
    lo: float | None = None
    hi: float | None = None
    conf: float | None = None
    boxes_before: int | None = None
    boxes_after: int | None = None
    ece_before: float | None = None
    ece_before_ci: CI = None
    ece_after: float | None = None
    ece_after_ci: CI = None
    laece0_before: float | None = None
    laece0_before_ci: CI = None
    laece0_after: float | None = None
    laece0_after_ci: CI = None
