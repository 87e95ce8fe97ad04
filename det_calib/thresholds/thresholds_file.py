"""``thresholds.json``: its format, its checked reader and writer (:func:`read_thresholds`,
:func:`write_thresholds`), a head's ``{class: threshold}`` (:func:`class_thresholds`), the CLI's
summary (:func:`summary_lines`), and the document read as typed records (what the report and
``compare`` show of it).

:func:`~det_calib.thresholds.run_head.tune_run` writes the file; :meth:`ThresholdsFile.of` reads
the document (as :func:`read_thresholds` returns it) into
:class:`ThresholdsFile` -> :class:`HeadThresholds` -> :class:`CriterionThresholds` ->
:class:`ThresholdRow`, so the report reads fields, not keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from det_calib.codec import Record, decode, spec
from det_calib.errors import InputError
from det_calib.io import write_json
from det_calib.thresholds.criteria import CRITERIA, Criterion
from det_calib.validation import check_choice

__all__ = [
    "DEFAULT_TARGET_PRECISION",
    "FORMAT",
    "THRESHOLDS_FILE",
    "VERSION",
    "CriterionThresholds",
    "HeadThresholds",
    "RiskControl",
    "RiskRow",
    "SplitFigures",
    "ThresholdRow",
    "ThresholdsFile",
    "Validation",
    "class_thresholds",
    "read_thresholds",
    "summary_lines",
    "write_thresholds",
]

THRESHOLDS_FILE = "thresholds.json"
FORMAT = "det_calib.thresholds"
VERSION = 1
DEFAULT_TARGET_PRECISION = 0.9
"""Target precision of :func:`tune_run` and ``det-calib thresholds`` when none is given."""


@dataclass(frozen=True)
class SplitFigures(Record):
    """A threshold's figures on one split (missing values: None)."""

    precision: float | None = None
    recall: float | None = None
    kept: int | None = None
    coverage: float | None = None
    n_gt: int | None = None
    precision_per_image: float | None = None


@dataclass(frozen=True)
class ThresholdRow(Record):
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
        return _flag_reason(self.flag)


@dataclass(frozen=True)
class Validation(Record):
    """The target-precision thresholds checked on the eval split."""

    certified_classes: int
    classes_meeting_target: int
    classes_missing_target: list[str]
    expected_misses: float
    n_boot: int
    coverage_all_certified: float | None


@dataclass(frozen=True)
class CriterionThresholds(Record):
    """One criterion's thresholds of a head: the global one and one per class."""

    global_: ThresholdRow = spec(key="global")
    per_class: list[ThresholdRow]
    params: dict[str, Any] = field(default_factory=dict)
    validation: Validation | None = None

    def by_class(self) -> dict[int | None, ThresholdRow]:
        return {r.cls: r for r in self.per_class}

    def by_name(self) -> dict[str, ThresholdRow]:
        return {r.name: r for r in self.per_class}


@dataclass(frozen=True)
class RiskRow:
    """One risk-controlled threshold (``heads.<head>.risk_control``): a class's, or the global one."""

    name: str
    threshold: float
    certified: bool
    flag: str | None
    fallback: str | None
    plug_in_threshold: float | None
    cost: float | None
    eval_precision: float | None
    eval_recall_per_image: float | None
    eval_fp_per_image: float | None


@dataclass(frozen=True)
class RiskControl(Record):
    """A head's risk-controlled thresholds (:func:`~det_calib.thresholds.risk_run.control_run`), as the file
    holds them (``params``, ``global``, ``per_class``), and in words and rows (:attr:`asked`, :attr:`rows`)."""

    global_: dict[str, Any] = spec(key="global", required=True)
    params: dict[str, Any] = field(default_factory=dict)
    per_class: list[dict[str, Any]] = field(default_factory=list)

    @property
    def precision_unit(self) -> str:
        return str(self.params.get("precision_unit") or "pooled")

    @property
    def asked(self) -> str:
        p = self.params
        prec = (
            "mean per-image precision >="
            if self.precision_unit == "image"
            else "precision (pooled) >="
        )
        return ", ".join(
            f"{k} {v:g}"
            for k, v in (
                (prec, p.get("target_precision")),
                ("mean per-image recall >=", p.get("target_recall")),
                ("false positives per image <=", p.get("max_fp_per_image")),
            )
            if v is not None
        )

    @property
    def guarantee(self) -> str:
        return str(self.params.get("guarantee", "probability"))

    @property
    def delta(self) -> float:
        return float(self.params.get("delta", 0.1))

    @property
    def rows(self) -> list[RiskRow]:
        """The global row (``all classes (global)``), then one per class."""
        return [self._row(self.global_, "all classes (global)")] + [
            self._row(r) for r in self.per_class
        ]

    def _row(self, d: dict[str, Any], name: str | None = None) -> RiskRow:
        ev = d.get("eval") or {}
        prec = ev.get("precision_per_image" if self.precision_unit == "image" else "precision")
        return RiskRow(
            name or str(d.get("name", "")),
            float(d["threshold"]),
            bool(d["certified"]),
            d.get("flag"),
            d.get("fallback"),
            d.get("plug_in_threshold"),
            d.get("cost"),
            prec,
            ev.get("recall_per_image"),
            ev.get("fp_per_image"),
        )


@dataclass(frozen=True)
class HeadThresholds(Record):
    """A head's thresholds: the score they apply to and every criterion's."""

    score_formula: str = spec(missing="", key="score.formula")
    criteria: dict[str, CriterionThresholds]
    temperature: float | None = spec(None, key="score.temperature")
    """The temperature the thresholds were tuned with (None: another calibrator, or not recorded)."""
    risk_control: RiskControl | None = None
    """``det-calib thresholds --target-recall ...``'s thresholds, when the file has them."""


@dataclass(frozen=True)
class ThresholdsFile(Record):
    """A ``thresholds.json`` document."""

    heads: dict[str, HeadThresholds]
    fit_split: str | None = spec(None, key="splits.fit")
    eval_split: str | None = spec(None, key="splits.eval")

    @classmethod
    def of(cls, doc: Mapping[str, Any] | ThresholdsFile) -> ThresholdsFile:
        """The document (as :func:`read_thresholds` returns it) as records."""
        return doc if isinstance(doc, ThresholdsFile) else decode(cls, doc)


def read_thresholds(path: str | Path) -> dict[str, Any]:
    """Read and check a ``thresholds.json`` (format and version)."""
    path = Path(path)
    if path.is_dir():
        path = path / THRESHOLDS_FILE
    if not path.is_file():
        raise InputError(f"thresholds file not found: {path}")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {type(e).__name__}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"{path}: not a det_calib thresholds file (`format` must be {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise InputError(
            f"{path}: thresholds file version {doc.get('version')!r}; this det_calib reads version "
            f"{VERSION}"
        )
    if not isinstance(doc.get("heads"), dict):
        raise InputError(f"{path}: `heads` must be an object")
    return doc


def write_thresholds(path: str | Path, doc: Mapping[str, Any]) -> Path:
    """Write a thresholds document atomically (checks ``format`` and ``version`` first)."""

    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise InputError(f"Expected a thresholds document of format {FORMAT!r} version {VERSION}")
    return write_json(path, dict(doc))


def class_thresholds(
    doc: Mapping[str, Any] | str | Path,
    *,
    head: str = "nms",
    criterion: Criterion = "target_precision",
) -> dict[int, float]:
    """``{class id: threshold}`` of one head and criterion of a thresholds document (or file); criterion
    ``"risk_control"``: the risk-controlled thresholds (per class, else the global one for every class)."""
    if not isinstance(doc, Mapping):
        doc = read_thresholds(doc)
    check_choice(criterion, (*CRITERIA, "risk_control"), "criterion")
    heads = doc.get("heads", {})
    check_choice(head, sorted(heads), "head")
    if (
        criterion == "risk_control"
    ):  # det-calib thresholds --target-recall ... (risk_run.control_run)
        if "risk_control" not in heads[head]:
            raise InputError(
                f"head {head} has no risk-controlled thresholds (det-calib thresholds "
                "--target-recall)"
            )
        rc = heads[head]["risk_control"]
        return {int(r["cls"]): float(r["threshold"]) for r in rc["per_class"]} or {
            i: float(rc["global"]["threshold"]) for i in range(len(doc.get("class_names", [])))
        }
    rows = heads[head]["criteria"][criterion]["per_class"]
    return {int(r["cls"]): float(r["threshold"]) for r in rows}


def summary_lines(doc: Mapping[str, Any], *, head: str = "nms") -> list[str]:
    """A text table of one head's thresholds (what the CLI prints), every column and flag in words."""

    def f(x: Any) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    crit = doc["heads"][head]["criteria"]
    tp = crit["target_precision"]
    prm = tp["params"]
    fit_split = doc.get("splits", {}).get("fit")
    ev_split = doc.get("splits", {}).get("eval")
    per_image = prm["unit"] == "image"
    p_key = "precision_per_image" if per_image else "precision"
    target = float(prm["target_precision"])
    lines = [
        f"head {head}: thresholds on the calibrated conf, chosen on {fit_split}, checked on "
        f"{ev_split}",
        (
            f"certified: the mean precision of the images that keep a box is at least {target:g} "
            f"on new images, with probability at least {1 - float(prm['delta']):g} over the fit "
            f"images (delta {prm['delta']:g})"
            if per_image
            else f"certified: the pooled precision of the boxes is at least {target:g} with "
            f"probability at least {1 - float(prm['delta']):g} (delta {prm['delta']:g}) if boxes "
            "were independent draws: no guarantee over images"
        ),
        f"{'':<16} {'certified':>9}  {'precision/image' if per_image else 'precision':^15}"
        + (f"  {'pooled P':>8}" if per_image else "")
        + f"  {'recall':>7}  {'':>8}  {'max-F1':>9}  {'LRP':>9}",
        f"{'class':<16} {'threshold':>9}  {fit_split or 'fit':>7} {ev_split or 'eval':>7}"
        + (f"  {ev_split or 'eval':>8}" if per_image else "")
        + f"  {ev_split or 'eval':>7}  {'coverage':>8}  {'threshold':>9}  {'threshold':>9}  note",
    ]
    rows = [("(global)", tp["global"], crit["max_f1"]["global"], crit["lrp"]["global"])]
    f1 = {r["cls"]: r for r in crit["max_f1"]["per_class"]}
    lrp = {r["cls"]: r for r in crit["lrp"]["per_class"]}
    rows += [(r["name"], r, f1[r["cls"]], lrp[r["cls"]]) for r in tp["per_class"]]
    for name, r, a, b in rows:
        ev = r.get("eval") or {}
        lines.append(
            f"{name[:16]:<16} {r['threshold']:>9.3f}  {f(r['fit'].get(p_key)):>7} "
            f"{f(ev.get(p_key)):>7}"
            + (f"  {f(ev.get('precision')):>8}" if per_image else "")
            + f"  {f(ev.get('recall')):>7}  {f(ev.get('coverage')):>8}  {a['threshold']:>9.3f}  "
            f"{b['threshold']:>9.3f}  {not_certified(r, per_image)}".rstrip()
        )
    val = tp.get("validation")
    if val:
        n = val["certified_classes"]
        g = (tp["global"].get("eval") or {}).get("coverage")
        lines.append(
            f"on {ev_split}: "
            + (
                f"{val['classes_meeting_target']} of {n} classes certified on their own reach "
                f"{target:g} (about {val['expected_misses']:.1f} misses expected from delta"
                + (
                    f"; missing: {', '.join(val['classes_missing_target'])})"
                    if val["classes_missing_target"]
                    else ")"
                )
                if n
                else "no class is certified on its own"
            )
            + (
                f"; the global threshold reaches {target:g} in {g:.1%} of {val['n_boot']} "
                f"image-bootstrap resamples of {ev_split} (its coverage)"
                if g is not None and tp["global"].get("certified")
                else ""
            )
        )
    lines.append(
        "coverage: the share of image-bootstrap resamples of the eval split whose precision at the "
        "threshold reaches the target; max-F1 and LRP: the thresholds that maximise F1 and "
        "minimise the LRP error on the fit split (no guarantee)"
    )
    return lines


def _flag_reason(flag: str | None, per_image: bool | None = None) -> str:
    """Why a threshold is not certified, in words (``per_image``: the image-level test's unit; None:
    either)."""
    if not flag:
        return ""
    few = {True: "too few images keep a box", False: "too few boxes", None: "too few boxes"}
    return {
        "too_few_boxes": f"{few[per_image]} to certify",
        "too_few_images": "too few images to certify",
        "target_not_reached": "its bound on the fit split does not reach the target",
    }.get(flag, flag.replace("_", " "))


def not_certified(r: Mapping[str, Any], per_image: bool | None = None) -> str:
    """The note of a threshold that is not certified (a row of the per-class tuning or of risk
    control): why, and what it falls back to; "" for a certified one."""
    if not r.get("flag"):
        return ""
    then = "uses the global threshold" if r.get("fallback") == "global" else "keeps no box"
    return f"not certified ({_flag_reason(r['flag'], per_image)}): {then}"
