"""The vocabulary of a run's matching rule (``--match``) and its record, :class:`MatchingRule`.

Which rule a run uses is chosen by :func:`det_calib.matching.rule.choose_matching`; the record is
spelled here, below both the matching and the run's record (``calibration.json``'s ``matching``).

>>> MatchingRule("mask", "auto", "a segment model, every ground truth has a mask").words(0.5)
'mask IoU >= 0.5 (a segment model, every ground truth has a mask)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from det_calib.errors import InputError

__all__ = ["MATCH_CHOICES", "MatchBy", "MatchingRule"]

MatchBy = Literal["box", "mask"]
"""The overlap a run matches by."""
MATCH_CHOICES: tuple[str, ...] = ("auto", *get_args(MatchBy))
"""Values of ``--match``."""


@dataclass(frozen=True)
class MatchingRule:
    """The matching a run used, and why (``calibration.json``'s ``matching``).

    Attributes:
        by: ``"mask"`` (mask IoU, COCO ``segm``) or ``"box"`` (box IoU, COCO ``bbox``).
        option: What ``--match`` asked for (``auto``, ``mask``, ``box``).
        reason: Why, in a few words (``"a segment model on polygon labels"``).
    """

    by: MatchBy = "box"
    option: str = "auto"
    reason: str = ""

    def __post_init__(self) -> None:
        if self.by not in get_args(MatchBy):
            raise InputError(f"Expected matching `by` to be one of {get_args(MatchBy)}, but got {self.by!r}")

    @property
    def masks(self) -> bool:
        return self.by == "mask"

    def words(self, iou: float) -> str:
        """The rule in words: ``mask IoU >= 0.5 (a segment model, every ground truth has a mask)``."""
        return f"{self.by} IoU >= {iou:g}" + (f" ({self.reason})" if self.reason else "")

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "option": self.option, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> MatchingRule | None:
        """The rule of a ``calibration.json`` object's ``matching`` (None where the run recorded none:
        a detector's run, matched by box IoU)."""
        if d is None:
            return None
        for k in ("by", "option", "reason"):
            if not isinstance(d.get(k, ""), str):
                raise InputError(f"`matching.{k}` must be a string, got {type(d.get(k)).__name__}")
        return cls(by=d.get("by", "box"), option=d.get("option", "auto"), reason=d.get("reason", ""))
