"""The ``ensemble`` section of an ensemble run's ``calibration.json`` (typed).

``RunResult.ensemble`` holds an :class:`EnsembleRecord`: the members (their files' fingerprints,
views, the head each ran), the fusion settings, and per ensemble head every member's figures
beside the ensemble's, how often the members agree, the cost per image, and the table of both
fusion orders under every score rule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from det_calib.errors import InputError
from det_calib.record.checked_json import CI, read_interval
from det_calib.record.eval_record import OperatingFigures
from det_calib.record.run_result import Calibrator, read_number

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


def _plain_record(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _plain_record(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_plain_record(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _plain_record(v) for k, v in obj.items()}
    return obj


@dataclass(frozen=True)
class MemberRecord:
    """One member: ``spec`` (path, kind, flip, scale, head), its file's ``fingerprint``, its class
    names' agreement with the data (checked), the ``imgsz`` it ran at, and ``heads``: ensemble
    head -> the head it ran for it."""

    name: str
    path: str
    kind: str
    flip: bool
    scale: float
    head: str | None
    fingerprint: str
    imgsz: list[int]
    heads: dict[str, str]

    def spec_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "flip": self.flip,
            "scale": self.scale,
            "head": self.head,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemberRecord:
        return cls(
            name=str(d["name"]),
            path=str(d["path"]),
            kind=str(d.get("kind", "checkpoint")),
            flip=bool(d.get("flip", False)),
            scale=float(d.get("scale", 1.0)),
            head=d.get("head"),
            fingerprint=str(d.get("fingerprint", "")),
            imgsz=[int(x) for x in d.get("imgsz") or []],
            heads={str(k): str(v) for k, v in (d.get("heads") or {}).items()},
        )


@dataclass(frozen=True)
class FusionSettingsRecord:
    """How the members were fused (see :mod:`det_calib.ensemble.fusion`). ``score`` and ``order``
    are the settings (``auto``: chosen per head, :meth:`EnsembleRecord.fusion_of`)."""

    method: str
    iou: float
    score: str
    order: str
    skip: float
    weights: list[float]
    max_det: int

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FusionSettingsRecord:
        return cls(
            method=str(d.get("method", "wbf")),
            iou=float(d["iou"]),
            score=str(d["score"]),
            order=str(d["order"]),
            skip=float(d.get("skip", 0.0)),
            weights=[float(w) for w in d.get("weights") or []],
            max_det=int(d.get("max_det", 300)),
        )


@dataclass(frozen=True)
class MemberFigures:
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

    def to_dict(self) -> dict[str, Any]:
        d = _plain_record(dataclasses.replace(self, calibrator=None))
        d["calibrator"] = None if self.calibrator is None else self.calibrator.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> MemberFigures:
        return cls(
            name=str(d["name"]),
            method=str(d["method"]),
            map50_95=read_number(d.get("map50_95"), where),
            map50=read_number(d.get("map50"), where),
            operating_before=[
                OperatingFigures.from_dict(o, where) for o in d.get("operating_before") or []
            ],
            operating_after=[
                OperatingFigures.from_dict(o, where) for o in d.get("operating_after") or []
            ],
            temperature=read_number(d.get("temperature"), where),
            class_kept_ece={
                int(k): read_number(v, where) for k, v in (d.get("class_kept_ece") or {}).items()
            },
            calibrator=None
            if d.get("calibrator") is None
            else Calibrator.from_dict(d["calibrator"], where),
        )


@dataclass(frozen=True)
class FusionRow:
    """One cell of the fusion table: an order and a score rule, on the eval split. ``kept_ece_fused``:
    the kept-set ECE of the fused score as it comes (for ``calibrate-then-fuse``, of the fused
    calibrated member scores); ``kept_ece_calibrated``: after the fused score's own calibrator
    (``method``), with its interval."""

    order: str
    score: str
    method: str
    map50_95: float | None
    map50: float | None
    kept_fused: int
    kept_ece_fused: float | None
    kept_calibrated: int
    kept_ece_calibrated: float | None
    kept_ece_calibrated_ci: CI = None
    temperature: float | None = None
    fit_map50_95: float | None = None
    cv_kept_ece: float | None = None
    cv_diff_se: float | None = None
    verdict: str = ""
    chosen: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> FusionRow:
        return cls(
            order=str(d["order"]),
            score=str(d["score"]),
            method=str(d["method"]),
            map50_95=read_number(d.get("map50_95"), where),
            map50=read_number(d.get("map50"), where),
            kept_fused=int(d.get("kept_fused", 0)),
            kept_ece_fused=read_number(d.get("kept_ece_fused"), where),
            kept_calibrated=int(d.get("kept_calibrated", 0)),
            kept_ece_calibrated=read_number(d.get("kept_ece_calibrated"), where),
            kept_ece_calibrated_ci=read_interval(d.get("kept_ece_calibrated_ci"), where),
            temperature=read_number(d.get("temperature"), where),
            fit_map50_95=read_number(d.get("fit_map50_95"), where),
            cv_kept_ece=read_number(d.get("cv_kept_ece"), where),
            cv_diff_se=read_number(d.get("cv_diff_se"), where),
            verdict=str(d.get("verdict") or ""),
            chosen=bool(d.get("chosen", False)),
        )


@dataclass(frozen=True)
class EnsembleHead:
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "members": [m.to_dict() for m in self.members],
            "ensemble": self.ensemble.to_dict(),
            "agreement": {str(k): v for k, v in self.agreement.items()},
            "table": _plain_record(self.table),
            "member_calibrators": [c.to_dict() for c in self.member_calibrators],
            "order": self.order,
            "score": self.score,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> EnsembleHead:
        return cls(
            members=[
                MemberFigures.from_dict(m, f"{where}.members") for m in d.get("members") or []
            ],
            ensemble=MemberFigures.from_dict(d["ensemble"], f"{where}.ensemble"),
            agreement={int(k): int(v) for k, v in (d.get("agreement") or {}).items()},
            table=[FusionRow.from_dict(r, f"{where}.table") for r in d.get("table") or []],
            member_calibrators=[
                Calibrator.from_dict(c, f"{where}.member_calibrators")
                for c in d.get("member_calibrators") or []
            ],
            order=str(d.get("order") or ""),
            score=str(d.get("score") or ""),
        )


@dataclass(frozen=True)
class EnsembleRecord:
    """The ``ensemble`` section: what the members were, how they were fused, what each gave.

    ``source``: how the members were chosen, in words (the no-argument command says whether it
    used the shipped seed members or the shipped model's test-time views); ``seconds_per_image``:
    capture per member and in all, and fusion, per image of both splits."""

    members: list[MemberRecord]
    fusion: FusionSettingsRecord
    heads: dict[str, EnsembleHead]
    source: str = ""
    seconds_per_image: dict[str, float] = field(default_factory=dict)

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "members": _plain_record(self.members),
            "fusion": _plain_record(self.fusion),
            "source": self.source,
            "seconds_per_image": dict(self.seconds_per_image),
            "heads": {h: e.to_dict() for h, e in self.heads.items()},
        }

    @classmethod
    def from_dict(cls, d: Any) -> EnsembleRecord:
        if not isinstance(d, dict):
            raise InputError(f"`ensemble` must be an object, got {type(d).__name__}")
        try:
            return cls(
                members=[MemberRecord.from_dict(m) for m in d.get("members") or []],
                fusion=FusionSettingsRecord.from_dict(d["fusion"]),
                heads={
                    h: EnsembleHead.from_dict(e, f"ensemble.heads.{h}")
                    for h, e in (d.get("heads") or {}).items()
                },
                source=str(d.get("source", "")),
                seconds_per_image={
                    str(k): float(v) for k, v in (d.get("seconds_per_image") or {}).items()
                },
            )
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"`ensemble` is malformed: {type(e).__name__} {e}") from None
