"""``check.json`` as typed records: the tests and verdicts of one head (:class:`HeadCheck`,
labelled images; :class:`HeadShift`, unlabelled), and the whole check (:class:`CheckResult`),
with their checked reader; the verdict words and exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from det_calib.codec import Record, spec
from det_calib.data.matching_rule import MatchingRule
from det_calib.io import write_json
from det_calib.job.detections_file import DetectionsRead
from det_calib.record.checked_json import read_json_file
from det_calib.record.eval_record import OperatingFigures
from det_calib.record.size_record import SizeFigures
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
class CalibrationTests(Record):
    """The calibration tests of one head's boxes kept at ``conf`` (calibrated conf > ``conf``).

    ``observed`` correct against ``expected`` (the sum of calibrated confidences); ``z`` and
    ``p_value`` of calibration in the large (variance: the larger of ``sum p (1 - p)`` and the
    image-clustered one; ``design_effect`` their ratio), of every kept box; ``detectable_gap`` the
    gap between fraction correct and mean confidence that the kept boxes outside the crowded
    images can show at p = 0.05 (before ``crowded_*`` were recorded: of every kept box); ``hl_*`` the
    Hosmer–Lemeshow test over ``hl_groups`` equal-mass bins (null with fewer than 60 kept boxes);
    ``mean_conf_then``/``fraction_correct_then`` the same boxes' figures on the run's eval split.
    The verdict tests change against the run: ``gap``/``gap_then`` (fraction correct minus mean
    conf) with ``change_z``/``change_p`` (:func:`det_calib.check.drift_tests.citl_change`), and the two-sample
    binned test ``binned_change_*`` over ``binned_change_bins`` bins (:func:`~.drift_tests.binned_change`),
    both outside the crowded images of either side (the images holding many boxes each, whose
    squared residuals would set the clustered variance alone); ``crowded_rate_p`` tests whether
    their share of the images changed.
    """

    conf: float | None = None
    boxes: int | None = None
    images: int | None = None
    observed: int | None = None
    expected: float | None = None
    mean_conf: float | None = None
    fraction_correct: float | None = None
    z: float | None = None
    p_value: float | None = None
    design_effect: float | None = None
    detectable_gap: float | None = None
    hl_groups: int | None = None
    hl_statistic: float | None = None
    hl_p_value: float | None = None
    boxes_then: int | None = None
    mean_conf_then: float | None = None
    fraction_correct_then: float | None = None
    z_then: float | None = None
    p_value_then: float | None = None
    gap_then: float | None = None
    gap: float | None = None
    change_z: float | None = None
    change_p: float | None = None
    binned_change_statistic: float | None = None
    binned_change_bins: int | None = None
    binned_change_p: float | None = None
    tests: int | None = None
    """Tests in the Bonferroni family of the verdict (the change in the large, the binned change,
    the change of each class tested, the change in the rate of crowded images)."""
    crowded_images: int | None = None
    """Crowded images of the new kept boxes (:func:`~det_calib.check.drift_tests.crowded_images`); the
    change tests (``gap``, ``change_*``, ``binned_change_*``, per class) run without them on both sides."""
    crowded_boxes: int | None = None
    crowded_observed: int | None = None
    crowded_expected: float | None = None
    crowded_variance_share: float | None = None
    """Their share of the image-clustered variance of the new kept boxes' observed - expected."""
    crowded_images_then: int | None = None
    crowded_boxes_then: int | None = None
    crowded_observed_then: int | None = None
    crowded_expected_then: float | None = None
    crowded_rate_p: float | None = None
    """Two-sided p-value of the change in the share of crowded images (exact conditional test,
    :func:`~det_calib.check.drift_tests.count_change`); in the verdict's family when either side has one."""
    images_then: int | None = None
    images_new: int | None = None
    """Images of the run's eval split and of the new split (with or without a kept box)."""
    rest_boxes: int | None = None
    rest_observed: int | None = None
    rest_expected: float | None = None
    rest_z: float | None = None
    rest_p_value: float | None = None
    """Calibration in the large of the new kept boxes outside the crowded images."""


@dataclass(frozen=True)
class CrowdedImage(Record):
    """A crowded image of the new kept boxes, named in the verdict line and on the page: its kept
    boxes (and their share of all kept boxes), correct against expected, and its share of the
    image-clustered variance of the kept boxes' observed - expected."""

    image: str | None = None
    boxes: int | None = None
    box_share: float | None = None
    observed: int | None = None
    expected: float | None = None
    variance_share: float | None = None


@dataclass(frozen=True)
class DetectionTests(Record):
    """Detection quality of one head at ``conf``, now against the run's eval split (``*_then``).

    Precision = correct kept boxes / kept boxes, recall = correct kept boxes / ground-truth boxes;
    ``*_z``/``*_p`` their two-ratio test (image-clustered variances; precision's outside the crowded
    images where either side has one, ``precision_rest*``); mAP with the calibrated scores
    by det_calib's COCO engine (pycocotools' figures; the run's: its eval ``map50_after``/``map50_95_after``).
    """

    conf: float | None = None
    images: int | None = None
    images_then: int | None = None
    kept: int | None = None
    kept_then: int | None = None
    n_gt: int | None = None
    n_gt_then: int | None = None
    precision: float | None = None
    precision_then: float | None = None
    precision_z: float | None = None
    precision_p: float | None = None
    recall: float | None = None
    recall_then: float | None = None
    recall_z: float | None = None
    recall_p: float | None = None
    kept_per_image: float | None = None
    kept_per_image_then: float | None = None
    map50: float | None = None
    map50_then: float | None = None
    map50_95: float | None = None
    map50_95_then: float | None = None
    precision_rest: float | None = None
    precision_rest_then: float | None = None
    """Precision of the kept boxes outside the crowded images, now and then (null where neither side
    has one); where given, ``precision_z``/``precision_p`` test these."""


@dataclass(frozen=True)
class ClassCheck(Record):
    """One class at the lowest conf threshold: kept boxes, calibration in the large now (``z``,
    ``p_value``) and its change against the run's eval split (``change_z``, ``change_p``; ``tested``
    when the class has at least ``min_boxes`` kept boxes on both; ``drifted`` when the change is
    below the Bonferroni level), kept-set ECE, precision and recall now and then."""

    cls: int | None = None
    name: str | None = None
    kept: int | None = None
    observed: int | None = None
    expected: float | None = None
    z: float | None = None
    p_value: float | None = None
    change_z: float | None = None
    change_p: float | None = None
    tested: bool | None = None
    drifted: bool | None = None
    kept_ece: float | None = None
    n_gt: int | None = None
    precision: float | None = None
    recall: float | None = None
    kept_then: int | None = None
    precision_then: float | None = None
    recall_then: float | None = None


@dataclass(frozen=True)
class HeadCheck(Record):
    """One head on labelled new images: the tests, the kept-set figures now and then, verdicts."""

    head: str
    method: str
    split: str
    calibration: CalibrationTests = spec(required=True)
    detection: DetectionTests = spec(required=True)
    operating: list[OperatingFigures] = field(default_factory=list)
    operating_then: list[OperatingFigures] = field(default_factory=list)
    per_class: list[ClassCheck] = field(default_factory=list)
    calibration_verdict: Literal[HOLDS, DRIFTED, TOO_FEW] = spec(HOLDS, required=True)
    detection_verdict: Literal[HOLDS, CHANGED] = spec(HOLDS, required=True)
    calibration_line: str = ""
    detection_line: str = ""
    by_size: list[SizeFigures] = spec(default_factory=list, omit="empty")
    """Reliability by box size on the new images (``by_size`` in the JSON, written when computed)."""
    crowded: list[CrowdedImage] = spec(default_factory=list, omit="empty")
    """The crowded images of the new kept boxes, most boxes first (``crowded`` in the JSON, written when any)."""


@dataclass(frozen=True)
class ShiftTests(Record):
    """One head on unlabelled new images against the run's eval split (``*_then``), boxes kept at
    ``conf``: the KS distance of their calibrated confidences, boxes kept per image, class mix
    (chi-square), each with its image-level permutation p-value (``n_perm`` permutations)."""

    conf: float | None = None
    images: int | None = None
    images_then: int | None = None
    kept: int | None = None
    kept_then: int | None = None
    mean_conf: float | None = None
    mean_conf_then: float | None = None
    kept_per_image: float | None = None
    kept_per_image_then: float | None = None
    ks: float | None = None
    ks_p: float | None = None
    per_image_p: float | None = None
    class_chi2: float | None = None
    class_chi2_p: float | None = None
    n_perm: int | None = None


_COUNTS = (lambda v: all(n >= 0 for n in v), "a list of counts")


@dataclass(frozen=True)
class HeadShift(Record):
    """One head on unlabelled new images: the label-free tests, the class counts, a verdict."""

    head: str
    method: str
    tests: ShiftTests = spec(required=True)
    class_counts: list[int] = spec(default_factory=list, check=_COUNTS)
    class_counts_then: list[int] = spec(default_factory=list, check=_COUNTS)
    verdict: Literal[NO_SHIFT, SHIFTED, TOO_FEW_IMAGES] = spec(NO_SHIFT, required=True)
    line: str = ""


@dataclass(kw_only=True)
class CheckResult(Record):
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

    schema_version: int = spec(
        _CHECK_SCHEMA_VERSION,
        required=True,
        check=(
            lambda v: v == _CHECK_SCHEMA_VERSION,
            f"{_CHECK_SCHEMA_VERSION} (the check.json layout this det_calib reads)",
        ),
    )
    det_calib_version: str = ""
    created: str | None = None
    kind: Literal["labelled", "unlabelled"]
    run: str
    model: str
    data: str | None = None
    split: str | None = None
    images: str | None = None
    reference_split: str
    conf: float
    alpha: float
    min_boxes: int = spec(missing=0)
    n_boot: int = 1000
    seed: int = 0
    heads: list[str]
    labelled: dict[str, HeadCheck] = field(default_factory=dict)
    unlabelled: dict[str, HeadShift] = field(default_factory=dict)
    calibration_verdict: str | None = None
    detection_verdict: str | None = None
    shift_verdict: str | None = None
    exit_code: int = spec(
        0, required=True, check=(lambda c: c in EXIT_CODES, f"one of {sorted(EXIT_CODES)}")
    )
    timings: Timings | None = spec(None, omit="none")
    matching: MatchingRule | None = spec(None, omit="none")
    """A labelled check of a segment model's run: the run's matching rule, which labelled the new boxes too."""
    seen_images: dict[str, int] | None = spec(None, omit="none")
    """How many of the new images the run itself used, per split of the run (by resolved path): a check
    on them compares the run with itself. Absent when none."""
    detections: dict[str, Any] | None = spec(None, omit="none")
    """``check --detections``: what was read of the file (:class:`~det_calib.job.detections_file.DetectionsRead`'s
    fields); None where a model captured the new images."""

    @property
    def exit_meaning(self) -> str:
        """What :attr:`exit_code` means (:data:`EXIT_CODES`)."""
        return EXIT_CODES[self.exit_code]

    def lines(self) -> list[str]:
        """The verdicts, one line per question and head."""
        out = []
        if self.detections is not None:
            read = DetectionsRead.from_dict(self.detections, "detections")
            out.append(read.summary_lines(self.heads[0], scope="the checked images")[0])
        for h, c in self.labelled.items():
            out += [
                f"[{h}] {c.calibration_line}",
                *(f"[{h}] {x}" for x in _kept_set_lines(c)),
                f"[{h}] {c.detection_line}",
            ]
        for h, s in self.unlabelled.items():
            out.append(f"[{h}] {s.line}")
        return out

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
