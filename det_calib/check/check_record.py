"""``check.json`` as typed records: the tests and verdicts of one head (:class:`HeadCheck`,
labelled images; :class:`HeadShift`, unlabelled), and the whole check (:class:`CheckResult`),
with their checked reader; the verdict words and exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from det_calib.capture.detections_file import DetectionsRead
from det_calib.data.matching_rule import MatchingRule
from det_calib.errors import InputError
from det_calib.io import write_json
from det_calib.record.checked_json import (
    leaf,
    leaf_dict,
    read_items,
    read_leaf_fields,
    read_number,
    read_object,
    read_text,
)
from det_calib.record.eval_record import OperatingFigures
from det_calib.record.run_result import read_json_file
from det_calib.record.size_record import SizeFigures, read_size_figures
from det_calib.record.timings import Timings

__all__ = [
    "BOXES_FILE",
    "CHANGED",
    "CHECK_FILE",
    "DRIFTED",
    "EXIT_CODES",
    "HOLDS",
    "MIN_IMAGES",
    "NO_SHIFT",
    "SHIFTED",
    "TOO_FEW",
    "TOO_FEW_IMAGES",
    "CalibrationTests",
    "CheckResult",
    "ClassCheck",
    "CrowdedImage",
    "DetectionTests",
    "HeadCheck",
    "HeadShift",
    "ShiftTests",
]

_CHECK_SCHEMA_VERSION = 1
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


@dataclass(frozen=True)
class CalibrationTests:
    """The calibration tests of one head's boxes kept at ``conf`` (calibrated conf > ``conf``).

    ``observed`` correct against ``expected`` (the sum of calibrated confidences); ``z`` and
    ``p_value`` of calibration in the large (variance: the larger of ``sum p (1 - p)`` and the
    image-clustered one; ``design_effect`` their ratio), of every kept box; ``detectable_gap`` the
    gap between fraction correct and mean confidence that the kept boxes outside the crowded
    images can show at p = 0.05 (before ``crowded_*`` were recorded: of every kept box); ``hl_*`` the
    Hosmer–Lemeshow test over ``hl_groups`` equal-mass bins (null with fewer than 60 kept boxes);
    ``mean_conf_then``/``fraction_correct_then`` the same boxes' figures on the run's eval split.
    The verdict tests change against the run: ``gap``/``gap_then`` (fraction correct minus mean
    conf) with ``change_z``/``change_p`` (:func:`det_calib.metrics.drift_tests.citl_change`), and the two-sample
    binned test ``binned_change_*`` over ``binned_change_bins`` bins (:func:`~.drift_tests.binned_change`),
    both outside the crowded images of either side (the images holding many boxes each, whose
    squared residuals would set the clustered variance alone); ``crowded_rate_p`` tests whether
    their share of the images changed.
    """

    conf: float | None = leaf()
    boxes: int | None = leaf(kind=int)
    images: int | None = leaf(kind=int)
    observed: int | None = leaf(kind=int)
    expected: float | None = leaf()
    mean_conf: float | None = leaf()
    fraction_correct: float | None = leaf()
    z: float | None = leaf()
    p_value: float | None = leaf()
    design_effect: float | None = leaf()
    detectable_gap: float | None = leaf()
    hl_groups: int | None = leaf(kind=int)
    hl_statistic: float | None = leaf()
    hl_p_value: float | None = leaf()
    boxes_then: int | None = leaf(kind=int)
    mean_conf_then: float | None = leaf()
    fraction_correct_then: float | None = leaf()
    z_then: float | None = leaf()
    p_value_then: float | None = leaf()
    gap_then: float | None = leaf()
    gap: float | None = leaf()
    change_z: float | None = leaf()
    change_p: float | None = leaf()
    binned_change_statistic: float | None = leaf()
    binned_change_bins: int | None = leaf(kind=int)
    binned_change_p: float | None = leaf()
    tests: int | None = leaf(kind=int)
    """Tests in the Bonferroni family of the verdict (the change in the large, the binned change,
    the change of each class tested, the change in the rate of crowded images)."""
    crowded_images: int | None = leaf(kind=int)
    """Crowded images of the new kept boxes (:func:`~det_calib.metrics.drift_tests.crowded_images`); the
    change tests (``gap``, ``change_*``, ``binned_change_*``, per class) run without them on both sides."""
    crowded_boxes: int | None = leaf(kind=int)
    crowded_observed: int | None = leaf(kind=int)
    crowded_expected: float | None = leaf()
    crowded_variance_share: float | None = leaf()
    """Their share of the image-clustered variance of the new kept boxes' observed - expected."""
    crowded_images_then: int | None = leaf(kind=int)
    crowded_boxes_then: int | None = leaf(kind=int)
    crowded_observed_then: int | None = leaf(kind=int)
    crowded_expected_then: float | None = leaf()
    crowded_rate_p: float | None = leaf()
    """Two-sided p-value of the change in the share of crowded images (exact conditional test,
    :func:`~det_calib.metrics.drift_tests.count_change`); in the verdict's family when either side has one."""
    images_then: int | None = leaf(kind=int)
    images_new: int | None = leaf(kind=int)
    """Images of the run's eval split and of the new split (with or without a kept box)."""
    rest_boxes: int | None = leaf(kind=int)
    rest_observed: int | None = leaf(kind=int)
    rest_expected: float | None = leaf()
    rest_z: float | None = leaf()
    rest_p_value: float | None = leaf()
    """Calibration in the large of the new kept boxes outside the crowded images."""


@dataclass(frozen=True)
class CrowdedImage:
    """A crowded image of the new kept boxes, named in the verdict line and on the page: its kept
    boxes (and their share of all kept boxes), correct against expected, and its share of the
    image-clustered variance of the kept boxes' observed - expected."""

    image: str | None = leaf(kind=str)
    boxes: int | None = leaf(kind=int)
    box_share: float | None = leaf()
    observed: int | None = leaf(kind=int)
    expected: float | None = leaf()
    variance_share: float | None = leaf()


@dataclass(frozen=True)
class DetectionTests:
    """Detection quality of one head at ``conf``, now against the run's eval split (``*_then``).

    Precision = correct kept boxes / kept boxes, recall = correct kept boxes / ground-truth boxes;
    ``*_z``/``*_p`` their two-ratio test (image-clustered variances; precision's outside the crowded
    images where either side has one, ``precision_rest*``); mAP with the calibrated scores
    by det_calib's COCO engine (pycocotools' figures; the run's: its eval ``map50_after``/``map50_95_after``).
    """

    conf: float | None = leaf()
    images: int | None = leaf(kind=int)
    images_then: int | None = leaf(kind=int)
    kept: int | None = leaf(kind=int)
    kept_then: int | None = leaf(kind=int)
    n_gt: int | None = leaf(kind=int)
    n_gt_then: int | None = leaf(kind=int)
    precision: float | None = leaf()
    precision_then: float | None = leaf()
    precision_z: float | None = leaf()
    precision_p: float | None = leaf()
    recall: float | None = leaf()
    recall_then: float | None = leaf()
    recall_z: float | None = leaf()
    recall_p: float | None = leaf()
    kept_per_image: float | None = leaf()
    kept_per_image_then: float | None = leaf()
    map50: float | None = leaf()
    map50_then: float | None = leaf()
    map50_95: float | None = leaf()
    map50_95_then: float | None = leaf()
    precision_rest: float | None = leaf()
    precision_rest_then: float | None = leaf()
    """Precision of the kept boxes outside the crowded images, now and then (null where neither side
    has one); where given, ``precision_z``/``precision_p`` test these."""


@dataclass(frozen=True)
class ClassCheck:
    """One class at the lowest conf threshold: kept boxes, calibration in the large now (``z``,
    ``p_value``) and its change against the run's eval split (``change_z``, ``change_p``; ``tested``
    when the class has at least ``min_boxes`` kept boxes on both; ``drifted`` when the change is
    below the Bonferroni level), kept-set ECE, precision and recall now and then."""

    cls: int | None = leaf(kind=int)
    name: str | None = leaf(kind=str)
    kept: int | None = leaf(kind=int)
    observed: int | None = leaf(kind=int)
    expected: float | None = leaf()
    z: float | None = leaf()
    p_value: float | None = leaf()
    change_z: float | None = leaf()
    change_p: float | None = leaf()
    tested: bool | None = leaf(kind=bool)
    drifted: bool | None = leaf(kind=bool)
    kept_ece: float | None = leaf()
    n_gt: int | None = leaf(kind=int)
    precision: float | None = leaf()
    recall: float | None = leaf()
    kept_then: int | None = leaf(kind=int)
    precision_then: float | None = leaf()
    recall_then: float | None = leaf()


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
    by_size: list[SizeFigures] = field(default_factory=list)
    """Reliability by box size on the new images (``by_size`` in the JSON, written when computed)."""
    crowded: list[CrowdedImage] = field(default_factory=list)
    """The crowded images of the new kept boxes, most boxes first (``crowded`` in the JSON, written when any)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "head": self.head,
            "method": self.method,
            "split": self.split,
            "calibration": leaf_dict(self.calibration),
            "detection": leaf_dict(self.detection),
            "operating": [o.to_dict() for o in self.operating],
            "operating_then": [o.to_dict() for o in self.operating_then],
            "per_class": [leaf_dict(c) for c in self.per_class],
            "calibration_verdict": self.calibration_verdict,
            "detection_verdict": self.detection_verdict,
            "calibration_line": self.calibration_line,
            "detection_line": self.detection_line,
            **({"by_size": [f.to_dict() for f in self.by_size]} if self.by_size else {}),
            **({"crowded": [leaf_dict(x) for x in self.crowded]} if self.crowded else {}),
        }

    @classmethod
    def from_dict(cls, d: Any, where: str) -> HeadCheck:
        d = read_object(d, where, optional=False)
        return cls(
            head=_required_text(d, "head", where),
            method=_required_text(d, "method", where),
            split=_required_text(d, "split", where),
            calibration=_read_leaf_record(
                CalibrationTests, d.get("calibration"), f"{where}.calibration"
            ),
            detection=_read_leaf_record(DetectionTests, d.get("detection"), f"{where}.detection"),
            operating=[
                OperatingFigures.from_dict(o, f"{where}.operating[{i}]")
                for i, o in enumerate(read_items(d.get("operating"), f"{where}.operating"))
            ],
            operating_then=[
                OperatingFigures.from_dict(o, f"{where}.operating_then[{i}]")
                for i, o in enumerate(
                    read_items(d.get("operating_then"), f"{where}.operating_then")
                )
            ],
            per_class=[
                _read_leaf_record(ClassCheck, c, f"{where}.per_class[{i}]")
                for i, c in enumerate(read_items(d.get("per_class"), f"{where}.per_class"))
            ],
            calibration_verdict=_read_verdict(
                d, "calibration_verdict", where, (HOLDS, DRIFTED, TOO_FEW)
            ),
            detection_verdict=_read_verdict(d, "detection_verdict", where, (HOLDS, CHANGED)),
            calibration_line=read_text(d.get("calibration_line"), f"{where}.calibration_line")
            or "",
            detection_line=read_text(d.get("detection_line"), f"{where}.detection_line") or "",
            by_size=read_size_figures(d.get("by_size"), f"{where}.by_size"),
            crowded=[
                _read_leaf_record(CrowdedImage, x, f"{where}.crowded[{i}]")
                for i, x in enumerate(read_items(d.get("crowded"), f"{where}.crowded"))
            ],
        )


@dataclass(frozen=True)
class ShiftTests:
    """One head on unlabelled new images against the run's eval split (``*_then``), boxes kept at
    ``conf``: the KS distance of their calibrated confidences, boxes kept per image, class mix
    (chi-square), each with its image-level permutation p-value (``n_perm`` permutations)."""

    conf: float | None = leaf()
    images: int | None = leaf(kind=int)
    images_then: int | None = leaf(kind=int)
    kept: int | None = leaf(kind=int)
    kept_then: int | None = leaf(kind=int)
    mean_conf: float | None = leaf()
    mean_conf_then: float | None = leaf()
    kept_per_image: float | None = leaf()
    kept_per_image_then: float | None = leaf()
    ks: float | None = leaf()
    ks_p: float | None = leaf()
    per_image_p: float | None = leaf()
    class_chi2: float | None = leaf()
    class_chi2_p: float | None = leaf()
    n_perm: int | None = leaf(kind=int)


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
        return {
            "head": self.head,
            "method": self.method,
            "tests": leaf_dict(self.tests),
            "class_counts": list(self.class_counts),
            "class_counts_then": list(self.class_counts_then),
            "verdict": self.verdict,
            "line": self.line,
        }

    @classmethod
    def from_dict(cls, d: Any, where: str) -> HeadShift:
        d = read_object(d, where, optional=False)
        return cls(
            head=_required_text(d, "head", where),
            method=_required_text(d, "method", where),
            tests=_read_leaf_record(ShiftTests, d.get("tests"), f"{where}.tests"),
            class_counts=_read_counts(d.get("class_counts"), f"{where}.class_counts"),
            class_counts_then=_read_counts(
                d.get("class_counts_then"), f"{where}.class_counts_then"
            ),
            verdict=_read_verdict(d, "verdict", where, (NO_SHIFT, SHIFTED, TOO_FEW_IMAGES)),
            line=read_text(d.get("line"), f"{where}.line") or "",
        )


@dataclass
class CheckResult:
    """What ``det-calib check`` found (``check.json``).

    Attributes:
        kind: ``"labelled"`` (``--data``) or ``"unlabelled"`` (``--images``).
        run: The run folder checked; ``model`` the detector that captured the new images.
        data, split: The new images' data.yaml and split (labelled), or ``images`` their folder.
        reference_split: The run's eval split, the "then" of every comparison.
        conf: The operating threshold of the verdicts (the run's lowest ``conf_thresholds``).
        alpha: Family-wise level of the check (labelled: halved between its two verdicts, each a
            Bonferroni family at ``alpha / 2``; unlabelled: its one verdict); ``min_boxes`` the kept boxes a
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
    schema_version: int = _CHECK_SCHEMA_VERSION
    timings: Timings | None = None
    matching: MatchingRule | None = None
    """A labelled check of a segment model's run: the run's matching rule, which labelled the new boxes too."""
    detections: dict[str, Any] | None = None
    """``check --detections``: what was read of the file (:class:`~det_calib.capture.detections_file.DetectionsRead`'s
    fields); None where a model captured the new images."""

    @property
    def exit_meaning(self) -> str:
        """What :attr:`exit_code` means (:data:`EXIT_CODES`)."""
        return EXIT_CODES[self.exit_code]

    def lines(self) -> list[str]:
        """The verdicts, one line per question and head."""
        out = []
        if self.detections is not None:
            out.append(
                DetectionsRead(**self.detections).summary_lines(
                    self.heads[0], scope="the checked images"
                )[0]
            )
        for h, c in self.labelled.items():
            out += [
                f"[{h}] {c.calibration_line}",
                *(f"[{h}] {x}" for x in _kept_set_lines(c)),
                f"[{h}] {c.detection_line}",
            ]
        for h, s in self.unlabelled.items():
            out.append(f"[{h}] {s.line}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "det_calib_version": self.det_calib_version,
            "created": self.created,
            "kind": self.kind,
            "run": self.run,
            "model": self.model,
            "data": self.data,
            "split": self.split,
            "images": self.images,
            "reference_split": self.reference_split,
            "conf": self.conf,
            "alpha": self.alpha,
            "min_boxes": self.min_boxes,
            "n_boot": self.n_boot,
            "seed": self.seed,
            "heads": list(self.heads),
            "labelled": {h: c.to_dict() for h, c in self.labelled.items()},
            "unlabelled": {h: s.to_dict() for h, s in self.unlabelled.items()},
            "calibration_verdict": self.calibration_verdict,
            "detection_verdict": self.detection_verdict,
            "shift_verdict": self.shift_verdict,
            "exit_code": self.exit_code,
            **({"timings": self.timings.to_dict()} if self.timings is not None else {}),
            **({"matching": self.matching.to_dict()} if self.matching is not None else {}),
            **({"detections": dict(self.detections)} if self.detections is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: Any) -> CheckResult:
        """Check and read a ``check.json`` object.

        Raises:
            InputError: Another schema version, a missing or mistyped field (one line naming it).
        """
        d = read_object(d, "", optional=False)
        if d.get("schema_version") != _CHECK_SCHEMA_VERSION:
            raise InputError(
                f"check.json schema_version {d.get('schema_version')!r} is not supported (this "
                "det_calib "
                f"reads {_CHECK_SCHEMA_VERSION})"
            )
        kind = _required_text(d, "kind", "")
        if kind not in ("labelled", "unlabelled"):
            raise InputError(f"`kind` must be labelled or unlabelled, got {kind!r}")
        heads = [str(h) for h in read_items(d.get("heads"), "heads")]
        lab = read_object(d.get("labelled"), "labelled") or {}
        unl = read_object(d.get("unlabelled"), "unlabelled") or {}
        code = d.get("exit_code")
        if code not in EXIT_CODES:
            raise InputError(f"`exit_code` must be one of {sorted(EXIT_CODES)}, got {code!r}")
        conf, alpha = read_number(d.get("conf"), "conf"), read_number(d.get("alpha"), "alpha")
        if conf is None or alpha is None:
            raise InputError("`conf` and `alpha` must be numbers")
        return cls(
            kind=kind,
            run=_required_text(d, "run", ""),
            model=_required_text(d, "model", ""),
            reference_split=_required_text(d, "reference_split", ""),
            conf=conf,
            alpha=alpha,
            min_boxes=int(read_number(d.get("min_boxes"), "min_boxes") or 0),
            heads=heads,
            data=read_text(d.get("data"), "data"),
            split=read_text(d.get("split"), "split"),
            images=read_text(d.get("images"), "images"),
            labelled={h: HeadCheck.from_dict(v, f"labelled.{h}") for h, v in lab.items()},
            unlabelled={h: HeadShift.from_dict(v, f"unlabelled.{h}") for h, v in unl.items()},
            calibration_verdict=read_text(d.get("calibration_verdict"), "calibration_verdict"),
            detection_verdict=read_text(d.get("detection_verdict"), "detection_verdict"),
            shift_verdict=read_text(d.get("shift_verdict"), "shift_verdict"),
            exit_code=int(code),
            n_boot=int(read_number(d.get("n_boot"), "n_boot") or 0),
            seed=int(read_number(d.get("seed"), "seed") or 0),
            det_calib_version=read_text(d.get("det_calib_version"), "det_calib_version") or "",
            created=read_text(d.get("created"), "created"),
            timings=Timings.from_dict(d.get("timings")),
            matching=MatchingRule.from_dict(read_object(d.get("matching"), "matching")),
            detections=read_object(d.get("detections"), "detections"),
        )

    def write(self, path: str | Path) -> Path:
        """Write ``check.json`` atomically (NaN as null)."""

        return write_json(path, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> CheckResult:
        """Read and check a ``check.json`` (one-line :class:`InputError` naming the file)."""

        return read_json_file(path, cls.from_dict)


def _fig(v: float | None, ci: Any) -> str:
    if v is None:
        return "n/a"
    return f"{v:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")


def _kept_set_lines(c: HeadCheck) -> list[str]:
    """Both targets' kept-set figures of a labelled head, then (the run's eval split) and now, at each
    conf: ECE (the matched flag) and LaECE_0 (the IoU of the match), calibrated, with their intervals."""
    then = {o.conf: o for o in c.operating_then}
    out = []
    for o in c.operating:
        t = then.get(o.conf)
        out.append(
            f"boxes kept at conf {o.conf:g} (calibrated): ECE "
            f"{_fig(t.ece, t.ece_ci) if t else 'n/a'} then -> "
            f"{_fig(o.ece, o.ece_ci)} now; LaECE_0 {_fig(t.laece0, t.laece0_ci) if t else 'n/a'} "
            "then -> "
            f"{_fig(o.laece0, o.laece0_ci)} now"
        )
    return out


def _required_text(d: dict[str, Any], key: str, where: str) -> str:
    w = f"{where}.{key}" if where else key
    v = read_text(d.get(key), w)
    if v is None:
        raise InputError(f"`{w}` is missing")
    return v


def _read_verdict(d: dict[str, Any], key: str, where: str, allowed: tuple[str, ...]) -> str:
    v = _required_text(d, key, where)
    if v not in allowed:
        raise InputError(f"`{where}.{key}` must be one of {', '.join(allowed)}, got {v!r}")
    return v


def _read_leaf_record(cls: type, d: Any, where: str) -> Any:
    return cls(**read_leaf_fields(cls, read_object(d, where, optional=False), where))


def _read_counts(v: Any, where: str) -> list[int]:
    out = []
    for i, x in enumerate(read_items(v, where)):
        n = read_number(x, f"{where}[{i}]")
        if n is None or n < 0 or n != int(n):
            raise InputError(f"`{where}[{i}]` must be a count, got {x!r}")
        out.append(int(n))
    return out
