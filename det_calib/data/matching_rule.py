"""The vocabulary of a run's matching rule (``--match``) and its record, :class:`MatchingRule`.

Which rule a run uses is chosen by :func:`det_calib.tasks.match_rule.choose_matching`; the record is
spelled here, below both the matching and the run's record (``calibration.json``'s ``matching``).

>>> MatchingRule("mask", "auto", "a segment model, every ground truth has a mask").words(0.5)
'mask IoU >= 0.5 (a segment model, every ground truth has a mask)'
>>> MatchingRule("rotated", "auto", "an OBB model").words(0.5)
'rotated IoU (ProbIoU) >= 0.5 (an OBB model)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from det_calib.codec import Record, spec
from det_calib.errors import InputError

__all__ = ["MATCH_CHOICES", "MEASURE_WORDS", "MatchBy", "MatchingRule"]

MatchBy = Literal["box", "mask", "oks", "rotated"]
"""The overlap a run matches by: box IoU, mask IoU (segment), OKS (pose), rotated IoU (OBB: ProbIoU)."""
MATCH_CHOICES: tuple[str, ...] = ("auto", *get_args(MatchBy))
"""Values of ``--match``."""
MEASURE_WORDS: dict[str, str] = {
    "box": "box IoU",
    "mask": "mask IoU",
    "oks": "OKS",
    "rotated": "rotated IoU (ProbIoU)",
}
"""What each rule compares, in words."""


@dataclass(frozen=True)
class MatchingRule(Record):
    """The matching a run used, and why (``calibration.json``'s ``matching``).

    Attributes:
        by: ``"box"`` (box IoU, COCO ``bbox``), ``"mask"`` (mask IoU, COCO ``segm``), ``"oks"`` (object
            keypoint similarity, COCO ``keypoints``) or ``"rotated"`` (ProbIoU, Ultralytics' OBB validator).
        option: What ``--match`` asked for (``auto``, ``box``, ``mask``, ``oks``, ``rotated``).
        reason: Why, in a few words (``"a segment model on polygon labels"``).
        sigmas: The per-keypoint OKS sigmas (``by="oks"`` only; None otherwise).
    """

    WHERE = "matching"

    by: MatchBy = "box"
    option: str = "auto"
    reason: str = ""
    sigmas: tuple[float, ...] | None = spec(
        None, omit="none", check=(lambda v: all(s > 0 for s in v), "a list of positive numbers")
    )

    def __post_init__(self) -> None:
        if self.by not in get_args(MatchBy):
            raise InputError(
                f"Expected matching `by` to be one of {get_args(MatchBy)}, but got {self.by!r}"
            )
        if self.sigmas is not None and self.by != "oks":
            raise InputError(f"matching `sigmas` are OKS sigmas: given for matching by {self.by!r}")

    @property
    def measure(self) -> str:
        """What the rule compares, in words (``box IoU``, ``mask IoU``, ``OKS``, ``rotated IoU (ProbIoU)``)."""
        return MEASURE_WORDS[self.by]

    def words(self, iou: float) -> str:
        """The rule in words: ``mask IoU >= 0.5 (a segment model, every ground truth has a mask)``."""
        return f"{self.measure} >= {iou:g}" + (f" ({self.reason})" if self.reason else "")
