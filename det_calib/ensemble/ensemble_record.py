"""The ``ensemble`` section of an ensemble run's ``calibration.json`` (typed), registered as a section of
a run's record (:mod:`det_calib.record.run_sections`) with its part of the run's report
(:mod:`det_calib.ensemble.ensemble_report`).

``RunResult.sections["ensemble"]`` holds an :class:`EnsembleRecord`: the members (their files' fingerprints,
views, the head each ran), the fusion settings, and per ensemble head every member's figures
beside the ensemble's, how often the members agree, the cost per image, and the table of both
fusion orders under every score rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from det_calib.codec import Record, spec
from det_calib.record import Calibrator, OperatingFigures, RunResult, register_run_section

_RULE_WORDS: dict[str, str] = {  # the score rules of det_calib.ensemble.fusion, in words
    "avg": "mean of the boxes, an absent member counts 0",
    "present": "mean over the members present",
    "max": "maximum over the members",
    "agree": "mean of the boxes times the share of members that agree",
    "absent": "sum over boxes and absent members' weight",
    "best-avg": "each member's best box, averaged over the members, an absent member counts 0",
    "auto": "chosen per head on the fit split's folds",
}


def rule_words(rule: str) -> str:
    """A score rule in words (the rule's own name when unknown)."""
    return _RULE_WORDS[rule] if rule in _RULE_WORDS else rule


ORDERS = ("fuse-then-calibrate", "calibrate-then-fuse")
"""The two orders: fuse the raw member scores and calibrate the fused score; or calibrate each
member on its own, fuse the calibrated scores, and calibrate the fused score again (the
calibrator chosen for it may be ``none``: the fused calibrated scores as they come)."""
AUTO = "auto"
"""The setting of the order or the score rule that leaves it to the choice on the fit split's folds."""


@dataclass(frozen=True)
class MemberRecord(Record):
    """One member: ``spec`` (path, kind, flip, scale, head), its file's ``fingerprint``, its class
    names' agreement with the data (checked), the ``imgsz`` it ran at, and ``heads``: ensemble
    head -> the head it ran for it."""

    name: str
    path: str
    kind: str = "checkpoint"
    flip: bool = False
    scale: float = 1.0
    head: str | None = None
    fingerprint: str = ""
    imgsz: list[int] = field(default_factory=list)
    heads: dict[str, str] = field(default_factory=dict)

    def spec_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "flip": self.flip,
            "scale": self.scale,
            "head": self.head,
        }


@dataclass(frozen=True)
class FusionSettingsRecord(Record):
    """How the members were fused (see :mod:`det_calib.ensemble.fusion`). ``score`` and ``order``
    are the settings (``auto``: chosen per head, :meth:`EnsembleRecord.fusion_of`)."""

    method: str = spec(missing="wbf")
    iou: float
    score: str
    order: str
    skip: float = spec(missing=0.0)
    weights: list[float]
    max_det: int = spec(missing=300)


@dataclass(frozen=True)
class MemberFigures(Record):
    """One member (or the ensemble) on the eval split, on its own boxes: its calibrator, pycocotools
    mAP, kept-set ECE at each conf raw and calibrated (with intervals), and per class the kept-set
    ECE calibrated (class id -> ECE)."""

    name: str
    method: str
    map50_95: float | None
    map50: float | None
    operating_before: list[OperatingFigures]
    operating_after: list[OperatingFigures]
    temperature: float | None
    class_kept_ece: dict[int, float | None] = field(default_factory=dict)
    calibrator: Calibrator | None = None

    def kept_ece_of(self, cls: int) -> float | None:
        """The calibrated kept-set ECE of class ``cls`` (None: no kept box of it)."""
        return self.class_kept_ece[cls] if cls in self.class_kept_ece else None


@dataclass(frozen=True)
class FusionRow(Record):
    """One cell of the fusion table: an order and a score rule, on the eval split. ``kept_ece_fused``:
    the kept-set ECE of the fused score as it comes (for ``calibrate-then-fuse``, of the fused
    calibrated member scores); ``kept_ece_calibrated``: after the fused score's own calibrator
    (``method``), with its interval."""

    order: str
    score: str
    method: str
    map50_95: float | None
    map50: float | None
    kept_fused: int = spec(missing=0)
    kept_ece_fused: float | None
    kept_calibrated: int = spec(missing=0)
    kept_ece_calibrated: float | None
    kept_ece_calibrated_ci: tuple[float, float] | None = None  # its 95% interval
    temperature: float | None = None
    fit_map50_95: float | None = None
    cv_kept_ece: float | None = None
    cv_diff_se: float | None = None
    verdict: str = ""
    chosen: bool = False


@dataclass(frozen=True)
class EnsembleHead(Record):
    """One ensemble head: the members' figures and the ensemble's, agreement, the fusion table.

    ``agreement``: number of members present in a fused box -> how many fused boxes kept at the
    lowest conf (calibrated) have that many; ``member_calibrators``: the calibrator each member
    got on its own boxes (used by ``calibrate-then-fuse`` and the deployment); ``order`` and
    ``score``: the fusion this head runs (chosen on the fit split's folds where the settings say
    ``auto``; empty in runs written before the choice: the settings' own)."""

    members: list[MemberFigures]
    ensemble: MemberFigures
    agreement: dict[int, int]
    table: list[FusionRow]
    member_calibrators: list[Calibrator] = field(default_factory=list)
    order: str = ""
    score: str = ""


@dataclass(frozen=True)
class EnsembleRecord(Record):
    """The ``ensemble`` section: what the members were, how they were fused, what each gave.

    ``source``: how the members were chosen, in words (the no-argument command says whether it
    used the shipped seed members or the shipped model's test-time views); ``seconds_per_image``:
    capture per member and in all, and fusion, per image of both splits."""

    WHERE = "ensemble"

    members: list[MemberRecord]
    fusion: FusionSettingsRecord
    source: str = ""
    seconds_per_image: dict[str, float] = field(default_factory=dict)
    heads: dict[str, EnsembleHead] = field(default_factory=dict)

    def fusion_of(self, head: str) -> tuple[str, str]:
        """``(order, score rule)`` that ``head`` fuses with (its choice, else the settings')."""
        eh = self.heads.get(head)
        return (
            (eh.order or self.fusion.order, eh.score or self.fusion.score)
            if eh
            else (self.fusion.order, self.fusion.score)
        )

    def seconds(self, key: str) -> float:
        """``seconds_per_image[key]`` (``capture``, ``fusion``, ``member i``); nan when not recorded."""
        return self.seconds_per_image[key] if key in self.seconds_per_image else float("nan")


register_run_section("ensemble", EnsembleRecord, report="det_calib.ensemble.ensemble_report")


def ensemble_of(result: RunResult) -> EnsembleRecord | None:
    """The ``ensemble`` section of a run's record (None: not an ensemble run)."""
    return result.sections.get("ensemble")
