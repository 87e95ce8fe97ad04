"""``det-calib check``: does a run's calibration, and the detector behind it, hold on new images?

With labelled images (``data``): the run's model captures them with the run's own capture
settings, the run's recorded calibrator is applied to the logits (for the maps a run deploys by
default, exactly what ``calibrated.pt`` outputs), boxes are matched with the run's IoU, and at
the run's lowest conf threshold two questions get a verdict each:

- **calibration**: calibration in the large of the kept boxes (:func:`~.drift_tests.calibration_in_the_large`),
  a Hosmer–Lemeshow test over equal-mass bins of them (:func:`det_calib.metrics.drift_tests.hosmer_lemeshow`) and
  the same calibration in the large per class with enough kept boxes; Bonferroni over the family.
  ``holds``, ``drifted``, or ``not enough boxes to tell`` (fewer than ``min_boxes`` kept).
- **detection quality**: precision and recall of the kept boxes against the run's eval split,
  each a two-ratio z-test with image-clustered variances (:func:`det_calib.metrics.drift_tests.ratio_test`).
  ``holds`` or ``changed``.

The kept-set ECE and LaECE_0 with their intervals and the ECE's sampling floor, mAP, and every
figure per class are reported beside the run's own eval figures.

With unlabelled images (``images``): the kept boxes' score distribution, boxes kept per image and
class mix against the run's eval split, by image-level permutation tests
(:func:`det_calib.metrics.drift_tests.shift_tests`). Without labels a shift of the output can be detected, not
a miscalibration.

:func:`check_run` does the job and writes ``check.json``, ``check.html``/``check.md`` and the
new boxes into one output folder, swapped in whole (:func:`det_calib.io.staged_output`).
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.errors import InputError
from det_calib.metrics import drift_tests as drift
from det_calib.record.run_result import (
    OperatingFigures,
    _items,
    _leaf,
    _leaf_dict,
    _leaf_fields,
    _number,
    _object,
    _text,
    package_version,
)
from det_calib.record.timings import Timings

log = logging.getLogger(__name__)

__all__ = ["CHECK_FILE", "CHECK_SCHEMA_VERSION", "EXIT_CODES", "CheckResult", "check_run", "default_out",
           "new_boxes"]

CHECK_SCHEMA_VERSION = 1
"""Version of the ``check.json`` layout."""
CHECK_FILE = "check.json"
BOXES_FILE = "boxes.parquet"

HOLDS, DRIFTED, TOO_FEW = "holds", "drifted", "not enough boxes to tell"
CHANGED = "changed"
NO_SHIFT, SHIFTED, TOO_FEW_IMAGES = "no shift detected", "shifted", "not enough images to tell"

EXIT_CODES: dict[int, str] = {
    0: "calibration holds and detection quality holds (with --images: no shift detected)",
    2: "bad input (one line on stderr)",
    3: "calibration drifted (detection quality holds)",
    4: "detection quality changed (calibration holds or cannot be told); with --images: the output shifted",
    5: "calibration drifted and detection quality changed",
    6: "not enough kept boxes to tell whether calibration holds (detection quality holds; with --images: "
       "too few images)",
}
"""Exit code -> meaning (``det-calib check --help`` and the README show this table)."""

MIN_IMAGES = 10
"""Fewer new images than this: the label-free tests say ``not enough images to tell``."""


# ------------------------------------------------------------------------------------ records
@dataclass(frozen=True)
class CalibrationTests:
    """The calibration tests of one head's boxes kept at ``conf`` (calibrated conf > ``conf``).

    ``observed`` correct against ``expected`` (the sum of calibrated confidences); ``z`` and
    ``p_value`` of calibration in the large (variance: the larger of ``sum p (1 - p)`` and the
    image-clustered one; ``design_effect`` their ratio); ``detectable_gap`` the gap between
    fraction correct and mean confidence these boxes can show at p = 0.05; ``hl_*`` the
    Hosmer–Lemeshow test over ``hl_groups`` equal-mass bins (null with fewer than 60 kept boxes);
    ``mean_conf_then``/``fraction_correct_then`` the same boxes' figures on the run's eval split.
    The verdict tests change against the run: ``gap``/``gap_then`` (fraction correct minus mean
    conf) with ``change_z``/``change_p`` (:func:`det_calib.metrics.drift_tests.citl_change`), and the two-sample
    binned test ``binned_change_*`` over ``binned_change_bins`` bins (:func:`~.drift_tests.binned_change`).
    """

    conf: float | None = _leaf()
    boxes: int | None = _leaf(kind=int)
    images: int | None = _leaf(kind=int)
    observed: int | None = _leaf(kind=int)
    expected: float | None = _leaf()
    mean_conf: float | None = _leaf()
    fraction_correct: float | None = _leaf()
    z: float | None = _leaf()
    p_value: float | None = _leaf()
    design_effect: float | None = _leaf()
    detectable_gap: float | None = _leaf()
    hl_groups: int | None = _leaf(kind=int)
    hl_statistic: float | None = _leaf()
    hl_p_value: float | None = _leaf()
    boxes_then: int | None = _leaf(kind=int)
    mean_conf_then: float | None = _leaf()
    fraction_correct_then: float | None = _leaf()
    z_then: float | None = _leaf()
    p_value_then: float | None = _leaf()
    gap_then: float | None = _leaf()
    gap: float | None = _leaf()
    change_z: float | None = _leaf()
    change_p: float | None = _leaf()
    binned_change_statistic: float | None = _leaf()
    binned_change_bins: int | None = _leaf(kind=int)
    binned_change_p: float | None = _leaf()
    tests: int | None = _leaf(kind=int)
    """Tests in the Bonferroni family of the verdict (the change in the large, the binned change,
    the change of each class tested)."""


@dataclass(frozen=True)
class DetectionTests:
    """Detection quality of one head at ``conf``, now against the run's eval split (``*_then``).

    Precision = correct kept boxes / kept boxes, recall = correct kept boxes / ground-truth boxes;
    ``*_z``/``*_p`` their two-ratio test (image-clustered variances); mAP with the calibrated scores
    by det_calib's COCO engine (pycocotools' figures; the run's: its eval ``map50_after``/``map50_95_after``).
    """

    conf: float | None = _leaf()
    images: int | None = _leaf(kind=int)
    images_then: int | None = _leaf(kind=int)
    kept: int | None = _leaf(kind=int)
    kept_then: int | None = _leaf(kind=int)
    n_gt: int | None = _leaf(kind=int)
    n_gt_then: int | None = _leaf(kind=int)
    precision: float | None = _leaf()
    precision_then: float | None = _leaf()
    precision_z: float | None = _leaf()
    precision_p: float | None = _leaf()
    recall: float | None = _leaf()
    recall_then: float | None = _leaf()
    recall_z: float | None = _leaf()
    recall_p: float | None = _leaf()
    kept_per_image: float | None = _leaf()
    kept_per_image_then: float | None = _leaf()
    map50: float | None = _leaf()
    map50_then: float | None = _leaf()
    map50_95: float | None = _leaf()
    map50_95_then: float | None = _leaf()


@dataclass(frozen=True)
class ClassCheck:
    """One class at the lowest conf threshold: kept boxes, calibration in the large now (``z``,
    ``p_value``) and its change against the run's eval split (``change_z``, ``change_p``; ``tested``
    when the class has at least ``min_boxes`` kept boxes on both; ``drifted`` when the change is
    below the Bonferroni level), kept-set ECE, precision and recall now and then."""

    cls: int | None = _leaf(kind=int)
    name: str | None = _leaf(kind=str)
    kept: int | None = _leaf(kind=int)
    observed: int | None = _leaf(kind=int)
    expected: float | None = _leaf()
    z: float | None = _leaf()
    p_value: float | None = _leaf()
    change_z: float | None = _leaf()
    change_p: float | None = _leaf()
    tested: bool | None = _leaf(kind=bool)
    drifted: bool | None = _leaf(kind=bool)
    kept_ece: float | None = _leaf()
    n_gt: int | None = _leaf(kind=int)
    precision: float | None = _leaf()
    recall: float | None = _leaf()
    kept_then: int | None = _leaf(kind=int)
    precision_then: float | None = _leaf()
    recall_then: float | None = _leaf()


@dataclass(frozen=True)
class HeadCheck:
    """One head on labelled new images: the tests, the kept-set figures now and then, verdicts."""

    head: str
    method: str
    split: str
    calibration: CalibrationTests
    detection: DetectionTests
    operating: list[OperatingFigures] = field(default_factory=list)
    operating_then: list[OperatingFigures] = field(default_factory=list)
    per_class: list[ClassCheck] = field(default_factory=list)
    calibration_verdict: str = HOLDS
    detection_verdict: str = HOLDS
    calibration_line: str = ""
    detection_line: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"head": self.head, "method": self.method, "split": self.split,
                "calibration": _leaf_dict(self.calibration), "detection": _leaf_dict(self.detection),
                "operating": [o.to_dict() for o in self.operating],
                "operating_then": [o.to_dict() for o in self.operating_then],
                "per_class": [_leaf_dict(c) for c in self.per_class],
                "calibration_verdict": self.calibration_verdict, "detection_verdict": self.detection_verdict,
                "calibration_line": self.calibration_line, "detection_line": self.detection_line}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> HeadCheck:
        d = _object(d, where, optional=False)
        return cls(
            head=_required_text(d, "head", where), method=_required_text(d, "method", where),
            split=_required_text(d, "split", where),
            calibration=_leaf_record(CalibrationTests, d.get("calibration"), f"{where}.calibration"),
            detection=_leaf_record(DetectionTests, d.get("detection"), f"{where}.detection"),
            operating=[OperatingFigures.from_dict(o, f"{where}.operating[{i}]")
                       for i, o in enumerate(_items(d.get("operating"), f"{where}.operating"))],
            operating_then=[OperatingFigures.from_dict(o, f"{where}.operating_then[{i}]")
                            for i, o in enumerate(_items(d.get("operating_then"), f"{where}.operating_then"))],
            per_class=[_leaf_record(ClassCheck, c, f"{where}.per_class[{i}]")
                       for i, c in enumerate(_items(d.get("per_class"), f"{where}.per_class"))],
            calibration_verdict=_verdict(d, "calibration_verdict", where, (HOLDS, DRIFTED, TOO_FEW)),
            detection_verdict=_verdict(d, "detection_verdict", where, (HOLDS, CHANGED)),
            calibration_line=_text(d.get("calibration_line"), f"{where}.calibration_line") or "",
            detection_line=_text(d.get("detection_line"), f"{where}.detection_line") or "",
        )


@dataclass(frozen=True)
class ShiftTests:
    """One head on unlabelled new images against the run's eval split (``*_then``), boxes kept at
    ``conf``: the KS distance of their calibrated confidences, boxes kept per image, class mix
    (chi-square), each with its image-level permutation p-value (``n_perm`` permutations)."""

    conf: float | None = _leaf()
    images: int | None = _leaf(kind=int)
    images_then: int | None = _leaf(kind=int)
    kept: int | None = _leaf(kind=int)
    kept_then: int | None = _leaf(kind=int)
    mean_conf: float | None = _leaf()
    mean_conf_then: float | None = _leaf()
    kept_per_image: float | None = _leaf()
    kept_per_image_then: float | None = _leaf()
    ks: float | None = _leaf()
    ks_p: float | None = _leaf()
    per_image_p: float | None = _leaf()
    class_chi2: float | None = _leaf()
    class_chi2_p: float | None = _leaf()
    n_perm: int | None = _leaf(kind=int)


@dataclass(frozen=True)
class HeadShift:
    """One head on unlabelled new images: the label-free tests, the class counts, a verdict."""

    head: str
    method: str
    tests: ShiftTests
    class_counts: list[int] = field(default_factory=list)
    class_counts_then: list[int] = field(default_factory=list)
    verdict: str = NO_SHIFT
    line: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"head": self.head, "method": self.method, "tests": _leaf_dict(self.tests),
                "class_counts": list(self.class_counts), "class_counts_then": list(self.class_counts_then),
                "verdict": self.verdict, "line": self.line}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> HeadShift:
        d = _object(d, where, optional=False)
        return cls(head=_required_text(d, "head", where), method=_required_text(d, "method", where),
                   tests=_leaf_record(ShiftTests, d.get("tests"), f"{where}.tests"),
                   class_counts=_counts(d.get("class_counts"), f"{where}.class_counts"),
                   class_counts_then=_counts(d.get("class_counts_then"), f"{where}.class_counts_then"),
                   verdict=_verdict(d, "verdict", where, (NO_SHIFT, SHIFTED, TOO_FEW_IMAGES)),
                   line=_text(d.get("line"), f"{where}.line") or "")


@dataclass
class CheckResult:
    """What ``det-calib check`` found (``check.json``).

    Attributes:
        kind: ``"labelled"`` (``--data``) or ``"unlabelled"`` (``--images``).
        run: The run folder checked; ``model`` the detector that captured the new images.
        data, split: The new images' data.yaml and split (labelled), or ``images`` their folder.
        reference_split: The run's eval split, the "then" of every comparison.
        conf: The operating threshold of the verdicts (the run's lowest ``conf_thresholds``).
        alpha: Family-wise level of each verdict's tests; ``min_boxes`` the kept boxes a
            calibration verdict needs.
        labelled / unlabelled: Head -> :class:`HeadCheck` / :class:`HeadShift`.
        calibration_verdict, detection_verdict, shift_verdict: Over the heads (the worst).
        exit_code: The command's exit code (see :data:`EXIT_CODES`).
        timings: Wall and CPU seconds per stage of the check (None in files written before).
    """

    kind: str
    run: str
    model: str
    reference_split: str
    conf: float
    alpha: float
    min_boxes: int
    heads: list[str]
    data: str | None = None
    split: str | None = None
    images: str | None = None
    labelled: dict[str, HeadCheck] = field(default_factory=dict)
    unlabelled: dict[str, HeadShift] = field(default_factory=dict)
    calibration_verdict: str | None = None
    detection_verdict: str | None = None
    shift_verdict: str | None = None
    exit_code: int = 0
    n_boot: int = 1000
    seed: int = 0
    det_calib_version: str = ""
    created: str | None = None
    schema_version: int = CHECK_SCHEMA_VERSION
    timings: Timings | None = None

    @property
    def exit_meaning(self) -> str:
        """What :attr:`exit_code` means (:data:`EXIT_CODES`)."""
        return EXIT_CODES[self.exit_code]

    def lines(self) -> list[str]:
        """The verdicts, one line per question and head."""
        out = []
        for h, c in self.labelled.items():
            out += [f"[{h}] {c.calibration_line}", f"[{h}] {c.detection_line}"]
        for h, s in self.unlabelled.items():
            out.append(f"[{h}] {s.line}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version, "det_calib_version": self.det_calib_version,
            "created": self.created, "kind": self.kind, "run": self.run, "model": self.model, "data": self.data,
            "split": self.split, "images": self.images, "reference_split": self.reference_split, "conf": self.conf,
            "alpha": self.alpha, "min_boxes": self.min_boxes, "n_boot": self.n_boot, "seed": self.seed,
            "heads": list(self.heads),
            "labelled": {h: c.to_dict() for h, c in self.labelled.items()},
            "unlabelled": {h: s.to_dict() for h, s in self.unlabelled.items()},
            "calibration_verdict": self.calibration_verdict, "detection_verdict": self.detection_verdict,
            "shift_verdict": self.shift_verdict, "exit_code": self.exit_code,
            **({"timings": self.timings.to_dict()} if self.timings is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: Any) -> CheckResult:
        """Check and read a ``check.json`` object.

        Raises:
            InputError: Another schema version, a missing or mistyped field (one line naming it).
        """
        d = _object(d, "", optional=False)
        if d.get("schema_version") != CHECK_SCHEMA_VERSION:
            raise InputError(f"check.json schema_version {d.get('schema_version')!r} is not supported (this det_calib "
                             f"reads {CHECK_SCHEMA_VERSION})")
        kind = _required_text(d, "kind", "")
        if kind not in ("labelled", "unlabelled"):
            raise InputError(f"`kind` must be labelled or unlabelled, got {kind!r}")
        heads = [str(h) for h in _items(d.get("heads"), "heads")]
        lab = _object(d.get("labelled"), "labelled") or {}
        unl = _object(d.get("unlabelled"), "unlabelled") or {}
        code = d.get("exit_code")
        if code not in EXIT_CODES:
            raise InputError(f"`exit_code` must be one of {sorted(EXIT_CODES)}, got {code!r}")
        conf, alpha = _number(d.get("conf"), "conf"), _number(d.get("alpha"), "alpha")
        if conf is None or alpha is None:
            raise InputError("`conf` and `alpha` must be numbers")
        return cls(
            kind=kind, run=_required_text(d, "run", ""), model=_required_text(d, "model", ""),
            reference_split=_required_text(d, "reference_split", ""), conf=conf, alpha=alpha,
            min_boxes=int(_number(d.get("min_boxes"), "min_boxes") or 0), heads=heads,
            data=_text(d.get("data"), "data"), split=_text(d.get("split"), "split"),
            images=_text(d.get("images"), "images"),
            labelled={h: HeadCheck.from_dict(v, f"labelled.{h}") for h, v in lab.items()},
            unlabelled={h: HeadShift.from_dict(v, f"unlabelled.{h}") for h, v in unl.items()},
            calibration_verdict=_text(d.get("calibration_verdict"), "calibration_verdict"),
            detection_verdict=_text(d.get("detection_verdict"), "detection_verdict"),
            shift_verdict=_text(d.get("shift_verdict"), "shift_verdict"), exit_code=int(code),
            n_boot=int(_number(d.get("n_boot"), "n_boot") or 0), seed=int(_number(d.get("seed"), "seed") or 0),
            det_calib_version=_text(d.get("det_calib_version"), "det_calib_version") or "",
            created=_text(d.get("created"), "created"),
            timings=Timings.from_dict(d.get("timings")),
        )

    def write(self, path: str | Path) -> Path:
        """Write ``check.json`` atomically (NaN as null)."""
        from det_calib.io import write_json

        return write_json(path, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> CheckResult:
        """Read and check a ``check.json`` (one-line :class:`InputError` naming the file)."""
        from det_calib.record.run_result import _read_json

        return _read_json(path, cls.from_dict)


def _required_text(d: dict[str, Any], key: str, where: str) -> str:
    w = f"{where}.{key}" if where else key
    v = _text(d.get(key), w)
    if v is None:
        raise InputError(f"`{w}` is missing")
    return v


def _verdict(d: dict[str, Any], key: str, where: str, allowed: tuple[str, ...]) -> str:
    v = _required_text(d, key, where)
    if v not in allowed:
        raise InputError(f"`{where}.{key}` must be one of {', '.join(allowed)}, got {v!r}")
    return v


def _leaf_record(cls: type, d: Any, where: str) -> Any:
    return cls(**_leaf_fields(cls, _object(d, where, optional=False), where))


def _counts(v: Any, where: str) -> list[int]:
    out = []
    for i, x in enumerate(_items(v, where)):
        n = _number(x, f"{where}[{i}]")
        if n is None or n < 0 or n != int(n):
            raise InputError(f"`{where}[{i}]` must be a count, got {x!r}")
        out.append(int(n))
    return out


# ------------------------------------------------------------------------------------ helpers
def _num(x: Any) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _p_text(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "< 1e-4" if p < 1e-4 else f"{p:.3g}"


def _kept(df: pl.DataFrame, conf: float) -> pl.DataFrame:
    """Usable boxes (not crowd-matched) whose deployed conf is above ``conf``."""
    b = df.filter(~pl.col("ignore")) if "ignore" in df.columns else df
    return b.filter(pl.col("calibrated") > conf)


def _per_image(df: pl.DataFrame, n_img: int, col: str | None = None) -> np.ndarray:
    """Per image 0..n_img-1: the number of rows (``col`` None) or the sum of ``col``."""
    img = df["image_id"].to_numpy().astype(np.int64)
    w = None if col is None else df[col].to_numpy().astype(np.float64)
    return np.bincount(img, weights=w, minlength=n_img)[:n_img].astype(np.float64)


# ----------------------------------------------------------------------------- labelled tests
def calibration_tests(p: np.ndarray, y: np.ndarray, img: np.ndarray, *, conf: float,
                      then_boxes: tuple[np.ndarray, np.ndarray, np.ndarray], n_classes_tested: int
                      ) -> CalibrationTests:
    """:class:`CalibrationTests` of the kept boxes (``p`` calibrated conf > ``conf``, their flags,
    images), against ``then_boxes`` (the same three of the run's eval split)."""
    c = drift.calibration_in_the_large(p, y, img)
    hl = drift.hosmer_lemeshow(p, y, img)
    then = drift.calibration_in_the_large(*then_boxes) if len(then_boxes[0]) else None
    ch = drift.citl_change(then_boxes, (p, y, img))
    bc = drift.binned_change(then_boxes, (p, y, img))
    return CalibrationTests(
        conf=conf, boxes=c.boxes, images=c.images, observed=c.observed, expected=c.expected,
        mean_conf=_num(c.mean_conf), fraction_correct=_num(c.fraction_correct), z=_num(c.z),
        p_value=_num(c.p_value), design_effect=_num(c.design_effect), detectable_gap=_num(c.detectable_gap),
        hl_groups=None if hl is None else hl.groups, hl_statistic=None if hl is None else hl.statistic,
        hl_p_value=None if hl is None else hl.p_value,
        boxes_then=None if then is None else then.boxes,
        mean_conf_then=None if then is None else _num(then.mean_conf),
        fraction_correct_then=None if then is None else _num(then.fraction_correct),
        z_then=None if then is None else _num(then.z), p_value_then=None if then is None else _num(then.p_value),
        gap_then=None if ch is None else ch.then, gap=None if ch is None else ch.now,
        change_z=None if ch is None else _num(ch.statistic), change_p=None if ch is None else _num(ch.p_value),
        binned_change_statistic=None if bc is None else bc.statistic, binned_change_bins=None if bc is None else bc.df,
        binned_change_p=None if bc is None else bc.p_value,
        tests=(ch is not None) + (bc is not None) + n_classes_tested,
    )


def calibration_verdict(t: CalibrationTests, per_class: list[ClassCheck], *, alpha: float, min_boxes: int
                        ) -> tuple[str, str]:
    """``(verdict, line)`` of the calibration question (Bonferroni over :attr:`CalibrationTests.tests`)."""
    head = (f"kept boxes at conf {t.conf:g}: {t.boxes}, {t.observed} correct vs {t.expected:.1f} expected "
            f"(mean conf {_f3(t.mean_conf)}, fraction correct {_f3(t.fraction_correct)}; z {_f2(t.z)}, "
            f"p {_p_text(t.p_value)}")
    head += f"; Hosmer-Lemeshow p {_p_text(t.hl_p_value)} over {t.hl_groups} bins)" if t.hl_groups else ")"
    head += (f"; against the run's eval split: gap (fraction correct - mean conf) {_f3(t.gap_then)} -> {_f3(t.gap)} "
             f"(change z {_f2(t.change_z)}, p {_p_text(t.change_p)}), binned change p {_p_text(t.binned_change_p)}")
    if (t.boxes or 0) < min_boxes:
        return TOO_FEW, f"calibration: {TOO_FEW} ({t.boxes} kept boxes, fewer than {min_boxes}); {head}"
    level = alpha / max(1, t.tests or 1)
    bad = [name for name, p in (("in the large", t.change_p), ("binned", t.binned_change_p)) if p is not None
           and p < level]
    bad += [f"class {c.name}" for c in per_class if c.drifted]
    if bad:
        return DRIFTED, f"calibration: {DRIFTED} ({', '.join(bad)} at family level {alpha:g}); {head}"
    return HOLDS, (f"calibration: {HOLDS} (no test below {alpha:g} / {t.tests}; a gap of ±{_f3(t.detectable_gap)} "
                   f"would show); {head}")


def _f3(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _f2(x: Any) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def detection_verdict(d: DetectionTests, *, alpha: float) -> tuple[str, str]:
    """``(verdict, line)`` of the detection-quality question (precision and recall, Bonferroni over 2)."""
    parts = []
    changed = []
    for name, then, now, z, p in (("recall", d.recall_then, d.recall, d.recall_z, d.recall_p),
                                  ("precision", d.precision_then, d.precision, d.precision_z, d.precision_p)):
        parts.append(f"{name} {_f3(then)} -> {_f3(now)} (z {_f2(z)}, p {_p_text(p)})")
        if p is not None and p < alpha / 2:
            changed.append(name)
    tail = (f"at conf {d.conf:g}: " + "; ".join(parts) + f"; kept per image {_f2(d.kept_per_image_then)} -> "
            f"{_f2(d.kept_per_image)}; mAP50 {_f3(d.map50_then)} -> {_f3(d.map50)}")
    if changed:
        return CHANGED, f"detection quality: {CHANGED} ({' and '.join(changed)} at family level {alpha:g}) {tail}"
    return HOLDS, f"detection quality: {HOLDS} {tail}"


def _ratio(then_num, then_den, now_num, now_den) -> tuple[float | None, float | None, float | None, float | None]:
    t = drift.ratio_test(then_num, then_den, now_num, now_den)
    return _num(t.then), _num(t.now), _num(t.z), _num(t.p_value)


def detection_tests(kept_now: pl.DataFrame, gt_now: np.ndarray, n_img: int, kept_then: pl.DataFrame,
                    gt_then: np.ndarray | None, n_gt_then: int, n_img_then: int, *, conf: float,
                    maps: dict[str, float | None]) -> DetectionTests:
    """:class:`DetectionTests` from the kept boxes of both sides and their ground truth per image
    (``gt_then`` None: the run's per-image ground truth is unknown; recall then is tested with
    its binomial variance, its total ``n_gt_then`` spread as one count per image)."""
    k1, c1 = _per_image(kept_now, n_img), _per_image(kept_now, n_img, "correct")
    k0, c0 = _per_image(kept_then, n_img_then), _per_image(kept_then, n_img_then, "correct")
    g0 = gt_then if gt_then is not None else np.full(n_img_then, n_gt_then / max(1, n_img_then))
    p0, p1, pz, pp = _ratio(c0, k0, c1, k1)
    r0, r1, rz, rp = _ratio(c0, g0, c1, gt_now)
    return DetectionTests(
        conf=conf, images=n_img, images_then=n_img_then, kept=int(k1.sum()), kept_then=int(k0.sum()),
        n_gt=int(gt_now.sum()), n_gt_then=int(n_gt_then), precision=p1, precision_then=p0, precision_z=pz,
        precision_p=pp, recall=r1, recall_then=r0, recall_z=rz, recall_p=rp,
        kept_per_image=float(k1.mean()) if n_img else None,
        kept_per_image_then=float(k0.mean()) if n_img_then else None, **maps,
    )


def class_checks(kept_now: pl.DataFrame, kept_then: pl.DataFrame, gt_cls_now: np.ndarray, gt_cls_then: list[int],
                 names: list[str], *, min_boxes: int, alpha: float, family: int, ece_bins: int) -> list[ClassCheck]:
    """Per class (with kept boxes or ground truth on either side): :class:`ClassCheck`; a class is
    ``drifted`` when the p-value of its change in calibration in the large is below ``alpha / family``."""
    from det_calib.metrics.calibration import ece

    out = []
    kc, kt = kept_now["cls"].to_numpy(), kept_then["cls"].to_numpy()
    p, y, img = (kept_now[c].to_numpy() for c in ("calibrated", "correct", "image_id"))
    pt, yt, it = (kept_then[c].to_numpy() for c in ("calibrated", "correct", "image_id"))
    for c, name in enumerate(names):
        m, mt = kc == c, kt == c
        n_gt = int((gt_cls_now == c).sum())
        g_then = gt_cls_then[c] if c < len(gt_cls_then) else 0
        if not (m.any() or mt.any() or n_gt or g_then):
            continue
        r = drift.calibration_in_the_large(p[m], y[m], img[m])
        ch = drift.citl_change((pt[mt], yt[mt], it[mt]), (p[m], y[m], img[m]))
        tested = int(m.sum()) >= min_boxes and int(mt.sum()) >= min_boxes and ch is not None
        out.append(ClassCheck(
            cls=c, name=name, kept=int(m.sum()), observed=r.observed, expected=float(r.expected), z=_num(r.z),
            p_value=_num(r.p_value), change_z=None if ch is None else _num(ch.statistic),
            change_p=None if ch is None else _num(ch.p_value), tested=tested,
            drifted=bool(tested and ch.p_value < alpha / max(1, family)),
            kept_ece=ece(p[m], y[m], n_bins=ece_bins) if m.any() else None, n_gt=n_gt,
            precision=float(y[m].mean()) if m.any() else None, recall=float(y[m].sum() / n_gt) if n_gt else None,
            kept_then=int(mt.sum()), precision_then=float(yt[mt].mean()) if mt.any() else None,
            recall_then=float(yt[mt].sum() / g_then) if g_then else None,
        ))
    return out


# -------------------------------------------------------------------------------------- the job
@dataclass
class _Job:
    """What every check needs: the run read back, its settings as capture/eval settings, the detector."""

    run: Any  # det_calib.record.run_folder.Run
    settings: Any  # det_calib.run.settings.Settings
    inputs: Any  # det_calib.run.inputs.Inputs
    calibrators: dict[str, Any]
    conf: float
    ensemble: Any = None  # det_calib.ensemble.ensemble_model.EnsembleModel of an ensemble run, else None

    @property
    def model_text(self) -> str:
        """The detector checked: its file, or the run's members for an ensemble."""
        return self.run.result.model if self.ensemble is not None else str(self.inputs.model.resolve())


def _job(run_dir: Path, *, model: str | Path | None, data: Dataset | None, heads: list[str] | None, limit: int | None,
         device: str | None, batch: int, boxes: str | Path | None, progress: bool, n_boot: int | None) -> _Job:
    from det_calib.capture.exported import is_export, load_export
    from det_calib.capture.predictor import available_heads, load_detector
    from det_calib.data.ground_truth import check_class_names
    from det_calib.record.run_folder import load_run
    from det_calib.record.run_result import calibrator_of
    from det_calib.run.inputs import Inputs
    from det_calib.run.settings import Settings

    if not (run_dir / "calibration.json").is_file() and run_dir.is_dir():
        raise InputError(f"{run_dir} is not a run folder of `det-calib calibrate` (no calibration.json)")
    run = load_run(run_dir)
    st = run.settings
    use = list(heads) if heads else list(run.heads)
    for h in use:
        if h not in run.heads:
            raise InputError(f"the run in {run_dir} has no `{h}` head (it has: {', '.join(run.heads)})")
        if run.head(h).calibrator is None:
            raise InputError(f"the run in {run_dir} has no calibrator for the {h} head: nothing to check")
        if run.head(h).eval is None or not st.eval_split:
            raise InputError(f"the run in {run_dir} has no eval figures for the {h} head to compare against")
    calibrators = {h: calibrator_of(run.head(h).calibrator) for h in use}
    head = use[0] if len(use) == 1 else "both"
    s = Settings.from_recorded(st, head=head, n_boot=n_boot or st.bootstrap.n_boot, limit=limit, device=device,
                               batch=batch, boxes=None if boxes is None else str(boxes), progress=progress,
                               coco_gt=None)
    if run.result.ensemble is not None:
        return _ensemble_job(run_dir, run, s, use, calibrators, model=model, data=data, boxes=boxes)
    model_path = Path(model) if model is not None else Path(run.result.model)
    if not model_path.exists():
        raise InputError(f"model not found: {model_path}" + ("" if model is not None else
                                                              " (the run's model; give another with `model`)"))
    exported = is_export(model_path)  # an ONNX / OpenVINO export: det_calib.capture.exported reads and runs it
    yolo = load_export(model_path) if exported else load_detector(model_path)
    names = [yolo.names[i] for i in sorted(yolo.names)]
    check_class_names(names, run.class_names, data_path=run_dir / "calibration.json")
    if data is not None:
        check_class_names(run.class_names, data.names, data_path=data.yaml_path)
    missing = [h for h in use if h not in (yolo.heads if exported else available_heads(yolo))]
    if missing:
        raise InputError(f"the model {model_path} has no `{missing[0]}` head")
    inputs = Inputs(model_path, data.yaml_path if data is not None else Path(), yolo, data, use,
                     st.imgsz or s.imgsz or 640)
    return _Job(run, s, inputs, calibrators, float(min(st.conf_thresholds)))


def _ensemble_job(run_dir: Path, run: Any, s: Any, use: list[str], calibrators: dict[str, Any], *,
                  model: str | Path | None, data: Dataset | None, boxes: str | Path | None) -> _Job:
    """The check of an ensemble run: its members opened as the run recorded them (each checked
    against its fingerprint), the new images fused as the run fused its own."""
    from det_calib.data.ground_truth import check_class_names
    from det_calib.ensemble.ensemble_job import capture_workers
    from det_calib.ensemble.ensemble_model import load_ensemble
    from det_calib.run.inputs import Inputs

    if model is not None:
        raise InputError(f"the run in {run_dir} is an ensemble: its members are its detector, so `model` cannot "
                         "replace them")
    if boxes is not None:
        raise InputError(f"the run in {run_dir} is an ensemble: `boxes` reuse is not supported for it (its members "
                         "are captured and fused)")
    if data is not None:
        check_class_names(run.class_names, data.names, data_path=data.yaml_path)
    ens = load_ensemble(run_dir, device=s.device, workers=capture_workers(s.device))
    first = Path(run.result.ensemble.members[0].path)
    inputs = Inputs(first, data.yaml_path if data is not None else Path(), None, data, use,
                    run.settings.imgsz or s.imgsz or 640)
    return _Job(run, s, inputs, calibrators, float(min(run.settings.conf_thresholds)), ens)


def _eval_split_gt(job: _Job) -> tuple[np.ndarray | None, str | None]:
    """Ground-truth boxes per image of the run's eval split (the run's images, in order), or None
    with the reason when the run's data cannot be read back as it was."""
    from det_calib.data.ground_truth import EVAL_HALF, half_split, load_data_yaml, load_split

    r = job.run.result
    ev = r.head(job.inputs.heads[0]).eval
    name = r.settings.eval_split
    try:
        if name.endswith(EVAL_HALF):  # one split halved by image (seeded): the same half again
            whole = load_split(load_data_yaml(r.data), name.removesuffix(EVAL_HALF))
            sp = half_split(whole, seed=r.settings.bootstrap.seed)[1]
        else:
            sp = load_split(load_data_yaml(r.data), name, limit=ev.images)
    except (InputError, OSError) as e:
        return None, f"the run's eval split cannot be read back ({e})"
    if len(sp.images) != ev.images or len(sp.gt.filter(~pl.col("crowd"))) != ev.n_gt:
        return None, "the run's eval split has changed since the run"
    g = sp.gt.filter(~pl.col("crowd"))
    return np.bincount(g["image_id"].to_numpy().astype(np.int64), minlength=len(sp.images)).astype(float), None


def _then_boxes(job: _Job, head: str) -> pl.DataFrame:
    b = job.run.boxes
    return b.filter((pl.col("head") == head) & (pl.col("split") == job.run.settings.eval_split))


def _labelled_head(job: _Job, head: str, boxes: pl.DataFrame, split: Any, gt_then: np.ndarray | None,
                   *, alpha: float, min_boxes: int) -> HeadCheck:
    from det_calib.evaluation.map_check import coco_maps
    from det_calib.run.fitting import OperatingEval

    s, conf, rec = job.settings, job.conf, job.run.head(head)
    op = OperatingEval(boxes, split.gt, conf=tuple(s.conf), ece_bins=s.ece_bins, laece_bins=s.laece_bins,
                       n_boot=s.n_boot, seed=s.seed)
    operating = op.operating(boxes.filter(~pl.col("ignore"))["calibrated"].to_numpy().astype(np.float64))
    kept, then = _kept(boxes, conf), _kept(_then_boxes(job, head), conf)
    gt = split.gt.filter(~pl.col("crowd"))
    n_img = len(split.images)
    names = list(job.run.class_names)
    ev = rec.eval
    gt_then_cls = (job.run.result.gt_counts or {}).get(job.run.settings.eval_split) or []
    kc, tc = kept["cls"].to_numpy(), then["cls"].to_numpy()
    per_class_n = [c for c in range(len(names)) if min((kc == c).sum(), (tc == c).sum()) >= min_boxes]
    then_arrays = tuple(then[c].to_numpy() for c in ("calibrated", "correct", "image_id"))
    cal = calibration_tests(*(kept[c].to_numpy() for c in ("calibrated", "correct", "image_id")), conf=conf,
                            then_boxes=then_arrays, n_classes_tested=len(per_class_n))
    per_class = class_checks(kept, then, gt["cls"].to_numpy(), gt_then_cls, names, min_boxes=min_boxes, alpha=alpha,
                             family=cal.tests or 1, ece_bins=s.ece_bins)
    m = coco_maps(boxes, split.gt, split.sizes, [boxes["calibrated"].to_numpy().astype(np.float64)],
                  max_dets=s.max_det, engine=s.map_engine)[0] if boxes.height else {"map50": 0.0, "map50_95": 0.0}
    det = detection_tests(kept, np.bincount(gt["image_id"].to_numpy().astype(np.int64), minlength=n_img)[:n_img]
                          .astype(float), n_img, then, gt_then, int(ev.n_gt or 0), int(ev.images or 0), conf=conf,
                          maps={"map50": m["map50"], "map50_then": ev.map50_after, "map50_95": m["map50_95"],
                                "map50_95_then": ev.map50_95_after})
    cv, cline = calibration_verdict(cal, per_class, alpha=alpha, min_boxes=min_boxes)
    dv, dline = detection_verdict(det, alpha=alpha)
    return HeadCheck(head=head, method=rec.calibrator.method, split=split.name, calibration=cal, detection=det,
                     operating=operating, operating_then=list(ev.operating_after), per_class=per_class,
                     calibration_verdict=cv, detection_verdict=dv, calibration_line=cline, detection_line=dline)


def _capture(job: _Job, split: Any) -> dict[str, pl.DataFrame]:
    """Head -> the raw capture of ``split`` (or the reused boxes), one pass serving every head."""
    from det_calib.run import clock
    from det_calib.run.job import capture_splits

    if job.ensemble is not None:
        from det_calib.ensemble.ensemble_model import capture_fused

        with clock.stage("capture"):
            return capture_fused(job.ensemble, split, job.settings, job.inputs.heads)
    if job.settings.boxes:
        from det_calib.run.reuse import reuse_boxes

        with clock.stage("capture"):
            captured = reuse_boxes(job.settings.boxes, job.inputs, [split], job.settings)[0]
    else:
        with clock.stage("capture"):
            captured = capture_splits(job.inputs, [split], job.settings)
    return {h: frames[0] for h, frames in captured.items()}


def _with_calibrated(job: _Job, head: str, raw: pl.DataFrame, gt: pl.DataFrame | None) -> pl.DataFrame:
    from det_calib.matching.one_to_one import match_boxes
    from det_calib.run.head_figures import with_calibrated

    s = job.settings
    b = match_boxes(raw, gt, iou=s.iou, loc_iou=s.loc_iou) if gt is not None else raw
    return with_calibrated(b, job.calibrators[head])


def _worst(values: list[str], order: tuple[str, ...]) -> str:
    return max(values, key=order.index)


def exit_code(calibration: str | None, detection: str | None, shift: str | None) -> int:
    """The command's exit code for the verdicts (see :data:`EXIT_CODES`).

    >>> exit_code(HOLDS, HOLDS, None), exit_code(DRIFTED, CHANGED, None), exit_code(None, None, SHIFTED)
    (0, 5, 4)
    """
    if shift is not None:
        return {NO_SHIFT: 0, SHIFTED: 4, TOO_FEW_IMAGES: 6}[shift]
    drifted, changed = calibration == DRIFTED, detection == CHANGED
    if drifted:
        return 5 if changed else 3
    if changed:
        return 4
    return 6 if calibration == TOO_FEW else 0


def _unlabelled_head(job: _Job, head: str, boxes: pl.DataFrame, n_img: int, *, alpha: float, n_perm: int,
                     min_boxes: int) -> HeadShift:
    conf, nc = job.conf, len(job.run.class_names)
    then_all = _then_boxes(job, head)
    n_then = int(job.run.head(head).eval.images or 0)
    now, then = _kept(boxes, conf), _kept(then_all, conf)
    arrays = [then[c].to_numpy() for c in ("calibrated", "image_id", "cls")]
    st = drift.shift_tests(*arrays, n_then, *(now[c].to_numpy() for c in ("calibrated", "image_id", "cls")), n_img,
                           n_classes=nc, n_perm=n_perm, seed=job.settings.seed)
    few = now.height < min_boxes or then.height < min_boxes
    t = ShiftTests(conf=conf, images=n_img, images_then=n_then, kept=now.height, kept_then=then.height,
                   mean_conf=_num(now["calibrated"].mean()) if now.height else None,
                   mean_conf_then=_num(then["calibrated"].mean()) if then.height else None,
                   kept_per_image=now.height / n_img, kept_per_image_then=then.height / max(1, n_then),
                   ks=None if few else st.ks, ks_p=None if few else st.ks_p, per_image_p=st.per_image_p,
                   class_chi2=None if few else st.class_chi2, class_chi2_p=None if few else st.class_chi2_p,
                   n_perm=n_perm)
    counts = np.bincount(now["cls"].to_numpy().astype(np.int64), minlength=nc)[:nc].tolist()
    counts_then = np.bincount(then["cls"].to_numpy().astype(np.int64), minlength=nc)[:nc].tolist()
    tests = [(name, p) for name, p in (("score distribution", t.ks_p), ("boxes kept per image", t.per_image_p),
                                       ("class mix", t.class_chi2_p)) if p is not None]
    level = alpha / max(1, len(tests))
    found = [name for name, p in tests if p < level]
    tail = (f"kept boxes at conf {conf:g}: {then.height} on {n_then} images -> {now.height} on {n_img}; kept per "
            f"image {_f2(t.kept_per_image_then)} -> {_f2(t.kept_per_image)} (p {_p_text(t.per_image_p)}); mean conf "
            f"{_f3(t.mean_conf_then)} -> {_f3(t.mean_conf)} (KS {_f3(t.ks)}, p {_p_text(t.ks_p)}); class mix "
            f"p {_p_text(t.class_chi2_p)}. Without labels this detects a shift of the detector's output, not a "
            "miscalibration")
    if found:
        verdict, line = SHIFTED, f"output: {SHIFTED} ({', '.join(found)} at family level {alpha:g}); {tail}"
    elif n_img < MIN_IMAGES:
        verdict, line = TOO_FEW_IMAGES, f"output: {TOO_FEW_IMAGES} ({n_img} images, fewer than {MIN_IMAGES}); {tail}"
    else:
        verdict, line = NO_SHIFT, f"output: {NO_SHIFT}; {tail}"
    return HeadShift(head=head, method=job.run.head(head).calibrator.method, tests=t, class_counts=counts,
                     class_counts_then=counts_then, verdict=verdict, line=line)


def _label(data: Path | None, split: str | None, images: Path | None) -> str:
    import re

    text = f"{data.stem}-{split}" if data is not None else f"images-{images.name or 'images'}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def default_out(run_dir: str | Path, *, data: str | Path | None = None, split: str | None = None,
                images: str | Path | None = None) -> Path:
    """The default output folder: ``RUN/check-<data stem>-<split>`` or ``RUN/check-images-<folder name>``.

    >>> default_out("runs/a", data="x/new.yaml", split="test").as_posix()
    'runs/a/check-new-test'
    """
    img = None if images is None else Path(images).resolve()
    return Path(run_dir) / f"check-{_label(None if data is None else Path(data), split, img)}"


def _choose_split(ds: Any, split: str | None) -> str:
    if split is not None:
        if split not in ds.splits:
            raise InputError(f"split `{split}` not in {ds.yaml_path} (splits: {sorted(ds.splits)})", param="split")
        return split
    for name in ("test", "val"):
        if name in ds.splits:
            return name
    if len(ds.splits) == 1:
        return next(iter(ds.splits))
    raise InputError(f"{ds.yaml_path} has several splits and no `test` or `val`: name one with `split`")


def _image_split(images: Path, limit: int | None) -> Any:
    from det_calib.data.ground_truth import GT_SCHEMA, Split, _image_suffixes, image_sizes

    if not images.is_dir():
        raise InputError(f"`images` {images} is not a folder")
    files = sorted(p for p in images.rglob("*") if p.suffix.lower() in _image_suffixes())
    if not files:
        raise InputError(f"no images in {images} (looked for {', '.join(sorted(_image_suffixes()))})")
    files = files[:limit] if limit else files
    files, sizes, corrupt = image_sizes(files)
    if not files:
        raise InputError(f"no readable images in {images} ({len(corrupt)} unreadable)")
    return Split(name="images", images=files, sizes=sizes, gt=pl.DataFrame(schema=GT_SCHEMA), corrupt=corrupt,
                 root=images)


Dataset = Any


def check_run(run_dir: str | Path, *, data: str | Path | None = None, split: str | None = None,
              images: str | Path | None = None, model: str | Path | None = None, boxes: str | Path | None = None,
              heads: list[str] | None = None, out: str | Path | None = None, limit: int | None = None,
              alpha: float = 0.05, min_boxes: int = 30, n_boot: int | None = None, n_perm: int = 999,
              device: str | None = None, batch: int = 1, progress: bool = True, report: bool = True
              ) -> tuple[CheckResult, Path]:
    """Check a run's calibration on new images; write ``check.json``, the report and the boxes.

    Args:
        run_dir: Output folder of ``det-calib calibrate``.
        data, split: Labelled new images: a data.yaml (its class names must be the run's) and a
            split in it (default ``test``, else ``val``, else its only split).
        images: Unlabelled new images: a folder (searched recursively). Exactly one of ``data``
            and ``images``.
        model: Capture with this detector instead of the run's (the run's calibrator is applied
            to its logits); its class names must be the run's.
        boxes: Reuse boxes captured earlier (a run folder or ``boxes.parquet``, or ``det-calib
            capture`` parts of the split) instead of capturing; checked against model, data and
            the run's capture settings.
        heads: Heads to check (default every head of the run).
        out: Output folder (default :func:`default_out`).
        limit: Only the first N images (sorted).
        alpha: Family-wise level of each verdict's tests.
        min_boxes: Kept boxes a calibration verdict (and a class's test, and the label-free score
            and class-mix tests) needs.
        n_boot: Bootstrap resamples of the kept-set intervals (default the run's).
        n_perm: Permutations of the label-free tests.
        device, batch, progress: As ``calibrate``.
        report: Also write ``check.html``/``check.md``.

    Returns:
        ``(result, out_dir)``.

    Raises:
        InputError: Not a run folder, no calibrator, other class names, no images, bad options.
    """
    from det_calib.io import check_output_dir
    from det_calib.run import clock
    from det_calib.run.job import startup_imports

    clock.begin()
    with clock.stage("data check"):
        _check_options(data, images, alpha=alpha, min_boxes=min_boxes, n_perm=n_perm, limit=limit)
        run_dir = Path(run_dir)
        ds, split = _labelled_data(data, split)
        out_dir = Path(out) if out is not None else default_out(run_dir, data=data, split=split, images=images)
        check_output_dir(out_dir)
    if not boxes:
        startup_imports()
    with clock.stage("model load"):  # the run's record, calibrators and detector
        job = _job(run_dir, model=model, data=ds, heads=heads, limit=limit, device=device, batch=batch, boxes=boxes,
                   progress=progress, n_boot=n_boot)
    result = _new_result(job, run_dir, labelled=ds is not None, alpha=alpha, min_boxes=int(min_boxes))
    with clock.stage("figures"):  # the tests; the capture inside charges its own stage
        tables = _check_tables(result, job, data, ds, split, images, limit, alpha=alpha, min_boxes=int(min_boxes),
                               n_perm=int(n_perm))
    result.exit_code = exit_code(result.calibration_verdict, result.detection_verdict, result.shift_verdict)
    with clock.stage("outputs"):
        _write_check(out_dir, result, tables, job, report=report)
    return result, out_dir


def _check_tables(result: CheckResult, job: _Job, data: Any, ds: Dataset | None, split: str | None, images: Any,
                  limit: int | None, *, alpha: float, min_boxes: int, n_perm: int) -> dict[str, pl.DataFrame]:
    """The labelled or the unlabelled check, into ``result``; the new boxes per head."""
    if ds is not None:
        result.data, result.split = str(Path(data).resolve()), split
        return _check_labelled(result, job, ds, split, limit, alpha=alpha, min_boxes=min_boxes)
    result.images = str(Path(images).resolve())
    return _check_unlabelled(result, job, Path(images), limit, alpha=alpha, min_boxes=min_boxes, n_perm=n_perm)


def _write_check(out_dir: Path, result: CheckResult, tables: dict[str, pl.DataFrame], job: _Job, *, report: bool
                 ) -> None:
    """``check.json``, the new boxes and (``report``) the page, swapped in whole."""
    from det_calib.data.box_table import write_boxes
    from det_calib.io import staged_output
    from det_calib.run import clock

    new_boxes = pl.concat(list(tables.values()), how="diagonal_relaxed")
    with staged_output(out_dir) as stage:
        result.write(stage / CHECK_FILE)
        write_boxes(new_boxes, stage / BOXES_FILE)
        if report:
            from det_calib.check.report_page import write_check_report

            with clock.stage("report"):
                write_check_report(stage, result, new_boxes, job.run)
        result.timings = clock.timings()  # the check's seconds, the report's included
        if result.timings is not None:
            result.write(stage / CHECK_FILE)


def _labelled_data(data: str | Path | None, split: str | None) -> tuple[Dataset | None, str | None]:
    """The labelled new images' data.yaml read and the split chosen in it; ``(None, None)`` without."""
    from det_calib.data.ground_truth import load_data_yaml

    if data is None:
        return None, None
    ds = load_data_yaml(data)
    return ds, _choose_split(ds, split)


def _new_result(job: _Job, run_dir: Path, *, labelled: bool, alpha: float, min_boxes: int) -> CheckResult:
    return CheckResult(kind="labelled" if labelled else "unlabelled", run=str(run_dir.resolve()),
                       model=job.model_text, reference_split=job.run.settings.eval_split,
                       conf=job.conf, alpha=alpha, min_boxes=min_boxes, heads=list(job.inputs.heads),
                       n_boot=job.settings.n_boot, seed=job.settings.seed, det_calib_version=package_version(),
                       created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))


def _check_options(data: Any, images: Any, *, alpha: float, min_boxes: int, n_perm: int, limit: int | None
                   ) -> None:
    if (data is None) == (images is None):
        raise InputError("give exactly one of `data` (labelled new images) and `images` (a folder of unlabelled ones)")
    if not 0 < alpha < 1:
        raise InputError(f"Expected `alpha` in (0, 1), but got {alpha}", param="alpha")
    for name, v in (("min_boxes", min_boxes), ("n_perm", n_perm)):
        if int(v) < 1:
            raise InputError(f"Expected `{name}` to be an integer larger than 0, but got {v}", param=name)
    if limit is not None and limit < 1:
        raise InputError(f"Expected `limit` to be an integer larger than 0, but got {limit}", param="limit")


def _check_labelled(result: CheckResult, job: _Job, ds: Any, split: str, limit: int | None, *, alpha: float,
                    min_boxes: int) -> dict[str, pl.DataFrame]:
    """Every head's labelled check into ``result`` (and its two verdicts); head -> the new boxes."""
    sp, tables = _labelled_boxes(job, ds, split, limit)
    gt_then, why = _eval_split_gt(job)
    if why:
        log.warning("%s: recall on it is tested with its binomial variance", why)
    for h, t in tables.items():
        result.labelled[h] = _labelled_head(job, h, t, sp, gt_then, alpha=alpha, min_boxes=min_boxes)
    result.calibration_verdict = _worst([c.calibration_verdict for c in result.labelled.values()],
                                        (HOLDS, TOO_FEW, DRIFTED))
    result.detection_verdict = _worst([c.detection_verdict for c in result.labelled.values()], (HOLDS, CHANGED))
    return tables


def _check_unlabelled(result: CheckResult, job: _Job, images: Path, limit: int | None, *, alpha: float,
                      min_boxes: int, n_perm: int) -> dict[str, pl.DataFrame]:
    """Every head's label-free check into ``result`` (and the shift verdict); head -> the new boxes."""
    sp = _image_split(images, limit)
    raw = _capture_unlabelled(job, sp)
    tables = {h: _with_calibrated(job, h, raw[h], None) for h in job.inputs.heads}
    for h, t in tables.items():
        result.unlabelled[h] = _unlabelled_head(job, h, t, len(sp.images), alpha=alpha, n_perm=n_perm,
                                                min_boxes=min_boxes)
    result.shift_verdict = _worst([u.verdict for u in result.unlabelled.values()], (NO_SHIFT, TOO_FEW_IMAGES, SHIFTED))
    return tables


def _labelled_boxes(job: _Job, ds: Any, split: str, limit: int | None) -> tuple[Any, dict[str, pl.DataFrame]]:
    from det_calib.data.ground_truth import load_split

    sp = load_split(ds, split, limit=limit)
    if sp.gt.filter(~pl.col("crowd")).height == 0:
        raise InputError(f"split `{split}` of {ds.yaml_path} has no ground-truth box: check it with `images` "
                         "(label-free) instead")
    raw = _capture(job, sp)
    return sp, {h: _with_calibrated(job, h, raw[h], sp.gt) for h in job.inputs.heads}


def new_boxes(run_dir: str | Path, data: str | Path, split: str | None = None, *, heads: list[str] | None = None,
              limit: int | None = None, device: str | None = None, batch: int = 1, progress: bool = False
              ) -> tuple[Any, Any, dict[str, pl.DataFrame]]:
    """The labelled new images of ``data`` captured as :func:`check_run` captures them.

    Returns:
        ``(run, split, boxes)``: the run read back (:class:`det_calib.record.run_folder.Run`), the
        :class:`~det_calib.data.ground_truth.Split`, and head -> matched boxes with the run's deployed conf in
        ``calibrated``.
    """
    from det_calib.data.ground_truth import load_data_yaml

    ds = load_data_yaml(data)
    job = _job(Path(run_dir), model=None, data=ds, heads=heads, limit=limit, device=device, batch=batch, boxes=None,
               progress=progress, n_boot=None)
    sp, tables = _labelled_boxes(job, ds, _choose_split(ds, split), limit)
    return job.run, sp, tables


def _capture_unlabelled(job: _Job, sp: Any) -> dict[str, pl.DataFrame]:
    if job.settings.boxes:
        raise InputError("`boxes` works with `data` (labelled images) only: the boxes are assigned by image name")
    return _capture(job, sp)
