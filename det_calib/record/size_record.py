"""Reliability by box size in a run's record: :class:`SizeFigures`, one size bin of one head
(``by_size`` in ``calibration.json``), computed by :mod:`det_calib.evaluation.by_size`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from det_calib.record.checked_json import (
    CI,
    ci_field,
    leaf,
    leaf_dict,
    read_items,
    read_leaf_fields,
    read_object,
)

__all__ = ["SizeFigures", "read_size_figures"]


@dataclass(frozen=True)
class SizeFigures:
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

    scheme: str | None = leaf(kind=str)
    bin: str | None = leaf(kind=str)
    lo: float | None = leaf()
    hi: float | None = leaf()
    conf: float | None = leaf()
    boxes_before: int | None = leaf(kind=int)
    boxes_after: int | None = leaf(kind=int)
    ece_before: float | None = leaf()
    ece_before_ci: CI = ci_field()
    ece_after: float | None = leaf()
    ece_after_ci: CI = ci_field()
    laece0_before: float | None = leaf()
    laece0_before_ci: CI = ci_field()
    laece0_after: float | None = leaf()
    laece0_after_ci: CI = ci_field()

    def to_dict(self) -> dict[str, Any]:
        return leaf_dict(self)


def read_size_figures(v: Any, where: str) -> list[SizeFigures]:
    """The ``by_size`` list of one head (empty when absent: runs written before it existed)."""
    return [
        SizeFigures(**read_leaf_fields(SizeFigures, read_object(d, w, optional=False), w))
        for i, d in enumerate(read_items(v, where))
        for w in [f"{where}[{i}]"]
    ]
