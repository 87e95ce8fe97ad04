"""``thresholds.json`` read as typed records (what the report and ``compare`` show of it).

:func:`~det_calib.thresholds.per_class.tune_run` writes the file; :meth:`ThresholdsFile.of` reads
the document (as :func:`~det_calib.thresholds.per_class.read_thresholds` returns it) into
:class:`ThresholdsFile` -> :class:`HeadThresholds` -> :class:`CriterionThresholds` ->
:class:`ThresholdRow`, so the report reads fields, not keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CriterionThresholds", "HeadThresholds", "SplitFigures", "ThresholdRow", "ThresholdsFile", "Validation"]


def _obj(d: Any) -> Mapping[str, Any]:
    return d if isinstance(d, Mapping) else {}


@dataclass(frozen=True)
class SplitFigures:
    """A threshold's figures on one split (missing values: None)."""

    precision: float | None = None
    recall: float | None = None
    kept: int | None = None
    coverage: float | None = None
    n_gt: int | None = None

    @classmethod
    def of(cls, d: Any) -> SplitFigures | None:
        """None for an absent or empty entry."""
        if not d or not isinstance(d, Mapping):
            return None
        return cls(d.get("precision"), d.get("recall"), d.get("kept"), d.get("coverage"), d.get("n_gt"))


@dataclass(frozen=True)
class ThresholdRow:
    """One threshold of one criterion: a class's, or the global one (``cls`` None)."""

    threshold: float
    name: str = ""
    cls: int | None = None
    flag: str | None = None
    fallback: str | None = None
    certified: bool = True
    precision_lower: float | None = None
    fit: SplitFigures | None = None
    eval: SplitFigures | None = None

    @property
    def flag_words(self) -> str:
        return (self.flag or "").replace("_", " ")

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> ThresholdRow:
        return cls(threshold=d["threshold"], name=str(d.get("name", "")), cls=d.get("cls"), flag=d.get("flag"),
                   fallback=d.get("fallback"), certified=bool(d.get("certified", True)),
                   precision_lower=d.get("precision_lower"), fit=SplitFigures.of(d.get("fit")),
                   eval=SplitFigures.of(d.get("eval")))


@dataclass(frozen=True)
class Validation:
    """The target-precision thresholds checked on the eval split."""

    certified_classes: int
    classes_meeting_target: int
    classes_missing_target: list[str]
    expected_misses: float
    n_boot: int
    coverage_all_certified: float | None

    @classmethod
    def of(cls, d: Any) -> Validation | None:
        if not d or not isinstance(d, Mapping):
            return None
        return cls(d["certified_classes"], d["classes_meeting_target"], list(d["classes_missing_target"]),
                   float(d["expected_misses"]), d["n_boot"], d.get("coverage_all_certified"))


@dataclass(frozen=True)
class CriterionThresholds:
    """One criterion's thresholds of a head: the global one and one per class."""

    global_: ThresholdRow
    per_class: list[ThresholdRow]
    params: Mapping[str, Any] = field(default_factory=dict)
    validation: Validation | None = None

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> CriterionThresholds:
        return cls(ThresholdRow.of(d["global"]), [ThresholdRow.of(r) for r in d["per_class"]],
                   _obj(d.get("params")), Validation.of(d.get("validation")))

    def by_class(self) -> dict[int | None, ThresholdRow]:
        return {r.cls: r for r in self.per_class}

    def by_name(self) -> dict[str, ThresholdRow]:
        return {r.name: r for r in self.per_class}


@dataclass(frozen=True)
class HeadThresholds:
    """A head's thresholds: the score they apply to and every criterion's."""

    score_formula: str
    criteria: dict[str, CriterionThresholds]

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> HeadThresholds:
        return cls(str(_obj(d.get("score")).get("formula", "")),
                   {c: CriterionThresholds.of(v) for c, v in d["criteria"].items()})


@dataclass(frozen=True)
class ThresholdsFile:
    """A ``thresholds.json`` document."""

    heads: dict[str, HeadThresholds]
    fit_split: str | None = None
    eval_split: str | None = None

    @classmethod
    def of(cls, doc: Mapping[str, Any] | ThresholdsFile) -> ThresholdsFile:
        if isinstance(doc, ThresholdsFile):
            return doc
        splits = _obj(doc.get("splits"))
        return cls({h: HeadThresholds.of(v) for h, v in doc["heads"].items()}, splits.get("fit"), splits.get("eval"))
