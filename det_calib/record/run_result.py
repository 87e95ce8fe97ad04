"""What one calibration run produces, as typed records, and ``calibration.json``.

The pipeline builds a :class:`RunResult`; :meth:`RunResult.write` writes ``calibration.json`` and
:meth:`RunResult.read` reads it back, checked. The report, ``compare``, ``apply`` and the tests
consume these records, never the raw JSON.

The JSON layout is the one the README documents (per-head values keyed by head under ``fit``,
``eval``, ``threshold_shift``, ``per_class``, ``ultralytics_val``) plus ``schema_version``. JSON
``null`` stands for an undefined number (the precision of an empty set, a metric not computed):
every number of a record may be None.

A head's calibrator is a general :class:`Calibrator` (method name + parameters). For the
temperature method the JSON keeps ``temperature: {head: T}``; any other method is written under
``calibrators: {head: {"method": ..., "params": {...}}}``, and candidate calibrators compared by
cross-validation, when a run has them, under ``calibration_candidates: {head: [...]}``.

Adding a per-head calibration metric: a field of :class:`Scores` and one line of
:func:`det_calib.evaluation.figures.scores_of`; its display is one row of the report's metric table.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from det_calib.codec import Record, decode, encode, spec
from det_calib.data.box_table import HEADS
from det_calib.data.matching_rule import MatchingRule
from det_calib.errors import InputError
from det_calib.io import to_json, write_json
from det_calib.record.calibrator_record import Calibrator, CandidateRecord
from det_calib.record.checked_json import read_json_file
from det_calib.record.eval_record import (
    ClassResult,
    EvalResult,
    FitResult,
    TemperatureFit,
    temperature_ok,
)
from det_calib.record.run_sections import decode_sections, encode_sections, section_report
from det_calib.record.size_record import SizeFigures
from det_calib.record.threshold_shift import ThresholdShift
from det_calib.record.timings import Timings

_SCHEMA_VERSION = 1
"""Version of the ``calibration.json`` layout this module writes and reads."""

CALIBRATION_FILE = "calibration.json"


def package_version() -> str:
    """The installed det_calib's version (package metadata), or the source tree's when not installed."""
    from importlib import metadata

    try:
        return metadata.version("det_calib")
    except metadata.PackageNotFoundError:  # run from a source checkout (PYTHONPATH)
        from det_calib import __version__

        return __version__


@dataclass(frozen=True)
class ValMap(Record):
    """Ultralytics ``model.val()`` mAP of one checkpoint at one conf floor."""

    conf: float | None = None
    map50_95: float | None = None
    map50: float | None = None
    mask_map50_95: float | None = spec(None, omit="none")
    """Mask mAP of a segment model's val (None: a detector, or not asked for; not written then)."""
    mask_map50: float | None = spec(None, omit="none")
    pose_map50_95: float | None = spec(None, omit="none")
    """Keypoint (OKS) mAP of a pose model's val (None: not a pose model; not written then). An OBB model's
    ``map50_95`` and ``map50`` are those of its rotated boxes (Ultralytics' ``OBBValidator``, ProbIoU)."""
    pose_map50: float | None = spec(None, omit="none")


_VAL_SEEN_FIELDS = (
    "verified",
    "images_seen",
    "images_expected",
    "instances_seen",
    "instances_expected",
)
"""The fields of :class:`ValCheck` that say what val read against the run's split (with ``skipped``)."""


def _not_verified(r: ValCheck) -> bool:
    return r.verified is None


@dataclass(frozen=True)
class ValCheck(Record):
    """Ultralytics val of the original and the calibrated checkpoint (None: not run).

    ``completed`` is False for a pass that could not be completed (Ultralytics' NMS reached its
    time limit and dropped boxes, :class:`det_calib.evaluation.map_check.ValIncomplete`): it then holds no mAP,
    and ``note`` says why. None otherwise (and in runs written before the field existed).
    """

    split: str | None = None
    original: ValMap | None = None
    calibrated: ValMap | None = None
    calibrated_equivalent_floor: ValMap | None = None
    identical_at_equivalent_floor: bool | None = spec(None, omit="none")
    completed: bool | None = spec(None, omit=lambda r: r.completed is not False)
    verified: bool | None = spec(None, omit="none")
    """Whether val read exactly the run's split (images, instances per class); False: no mAP kept, ``note``
    says what differed; None: not compared. ``skipped``: ``"<image>: <reason>"`` per image val left out."""
    images_seen: int | None = spec(None, omit=_not_verified)
    images_expected: int | None = spec(None, omit=_not_verified)
    instances_seen: int | None = spec(None, omit=_not_verified)
    instances_expected: int | None = spec(None, omit=_not_verified)
    skipped: list[str] = spec(default_factory=list, omit=_not_verified)
    note: str | None = None

    @classmethod
    def not_run(cls, split: str, note: str) -> ValCheck:
        """No val of ``split``, and why (``note``: "not run: <note>")."""
        return cls(split=split, note=f"not run: {note}")

    def with_seen(self, seen: ValCheck) -> ValCheck:
        """This check with what val read of the split as ``seen`` says it (``verified``, the images and
        instances seen and expected, ``skipped``)."""
        return dataclasses.replace(
            self, **{k: getattr(seen, k) for k in _VAL_SEEN_FIELDS}, skipped=list(seen.skipped)
        )

    @property
    def ran(self) -> bool:
        return self.original is not None

    def changes(self) -> dict[str, float]:
        """The figures (``map50_95``, ``mask_map50``...) whose calibrated value (at the equivalent floor)
        differs from the original's by more than 1e-6, with the difference (calibrated - original)."""
        cal, orig = self.calibrated_equivalent_floor, encode(self.original) if self.original else {}
        pairs = {k: (v, getattr(cal, k, None)) for k, v in orig.items() if k != "conf"}
        return {
            k: float(w - v)
            for k, (v, w) in pairs.items()
            if None not in (v, w) and abs(w - v) > 1e-6
        }


@dataclass(frozen=True)
class DetectionChange(Record):
    """A per-class map folded into the model, measured: its detections against the original
    model's boxes rescored post-hoc by the same map (what the fold would give if it changed no
    box). Boxes are the same when image, class and coordinates (to 0.01 px) agree.

    ``changed_class``: boxes output by both with another class; ``only_posthoc`` / ``only_folded``:
    boxes one side has and the other lacks (top-k and conf-floor effects, class changes
    included), compared above ``conf_floor``: the highest calibrated conf any class's raw capture
    floor maps to (below it the original capture lacks boxes the folded model may output);
    ``kept_*``: the same counts among boxes above ``kept_conf``. ``map*``: pycocotools
    on the eval split: original model raw, post-hoc rescored, folded model.
    """

    split: str | None = None
    conf_floor: float | None = None
    boxes_posthoc: int | None = None
    boxes_folded: int | None = None
    changed_class: int | None = None
    only_posthoc: int | None = None
    only_folded: int | None = None
    kept_conf: float | None = None
    kept_posthoc: int | None = None
    kept_folded: int | None = None
    kept_only_posthoc: int | None = None
    kept_only_folded: int | None = None
    map50_95_original: float | None = None
    map50_95_posthoc: float | None = None
    map50_95_folded: float | None = None
    map50_original: float | None = None
    map50_posthoc: float | None = None
    map50_folded: float | None = None

    @property
    def identical(self) -> bool:
        return self.only_posthoc == 0 and self.only_folded == 0 and self.changed_class == 0


@dataclass(frozen=True)
class HeadResult(Record):
    """Everything a run found for one head."""

    calibrator: Calibrator | None = None
    fit: FitResult | None = None
    eval: EvalResult | None = None
    threshold_shift: list[ThresholdShift] = field(default_factory=list)
    per_class: list[ClassResult] = field(default_factory=list)
    ultralytics_val: ValCheck | None = None
    candidates: list[CandidateRecord] | None = spec(None, key="calibration_candidates")
    detection_change: DetectionChange | None = None
    temperature_fit: TemperatureFit | None = None
    by_size: list[SizeFigures] = field(default_factory=list)
    """Reliability by box size (``by_size`` in the JSON; empty in runs written before it existed)."""

    @property
    def temperature(self) -> float | None:
        return None if self.calibrator is None else self.calibrator.temperature

    @property
    def fit_floor(self) -> float | None:
        """The raw conf floor the deployed calibrator was fitted above (0.0: every box): its own
        record's, else (a temperature, whose record is T alone) the selected candidate's; None: unknown."""
        v = None if self.calibrator is None else self.calibrator.params.get("fit_min_conf")
        if isinstance(v, (int, float)):
            return float(v)
        chosen = next((c for c in self.candidates or [] if c.selected), None)
        return None if chosen is None else chosen.fit_min_conf


@dataclass(frozen=True)
class Bootstrap(Record):
    """Settings of the bootstrap intervals (resampling unit: image)."""

    n_boot: int = 1000
    seed: int = 0
    level: float = 0.95
    unit: str = "image"


@dataclass(frozen=True)
class RecordedSettings(Record):
    """The settings a run records in ``calibration.json`` (top-level keys of the same names; ``target``
    only where it is ``iou``: a record without it was fitted to the matched flag, ``correct``)."""

    iou_match: float
    loc_iou_match: float
    fit_min_conf: float | None
    conf_floor: float
    nms_iou: float
    max_det: int
    imgsz: int | None
    conf_thresholds: tuple[float, ...]
    ece_bins: int
    laece_bins: int
    dece_bins: tuple[int, ...]
    min_class_boxes: int
    bootstrap: Bootstrap
    fit_split: str | None = spec(key="splits.fit")
    eval_split: str | None = spec(key="splits.eval")
    coco_gt: str | None
    method: str = "temperature"
    fit_range: str | None = None
    criterion: str | None = None
    cv_folds: int | None = None
    cv_repeats: int | None = None
    auto_per_class: bool | None = None
    target: Literal["correct", "iou"] = spec("correct", omit="default")
    auto_size_maps: bool | None = spec(None, omit="empty")
    """Whether ``--method auto`` also considered the size-conditioned maps (``--size-maps``; the key is
    written only when it did)."""


_SECTIONS = (
    ("fit", "fit", "set"),
    ("eval", "eval", "set"),
    ("threshold_shift", "threshold_shift", "every"),
    ("per_class", "per_class", "every"),
    ("ultralytics_val", "ultralytics_val", "set"),
    ("calibration_candidates", "candidates", "some"),
    ("detection_change", "detection_change", "some"),
    ("temperature_fit", "temperature_fit", "some"),
    ("by_size", "by_size", "some"),
)
"""The per-head sections of ``calibration.json`` (key, :class:`HeadResult` field, which heads): ``every`` head;
the heads where it is ``set`` (the key always written); ``some``: where it holds something (the key written
only then)."""


@dataclass
class RunResult(Record):
    """One calibration run: what went in, the settings, and a :class:`HeadResult` per head.

    Attributes:
        model, data: Absolute paths of the checkpoint and the ``data.yaml``.
        class_names: Class names, index = class id.
        heads: Heads calibrated, in order (``"nms"``, ``"e2e"``).
        settings: The recorded settings.
        results: Head -> its results.
        corrupt_images: Image files skipped as unreadable.
        det_calib_version, created, seconds: Version that wrote the run, ISO time, run time.
        gt_counts: Split -> non-crowd ground-truth boxes per class id (a list indexed by class id),
            for the fit and the eval split; None in runs written before the key existed.
        sections: A command's own sections of the file (key -> record, :mod:`det_calib.record.run_sections`;
            ``ensemble`` for a ``det-calib ensemble`` run); empty for one detector's run.
    """

    model: str = spec(missing="")
    data: str = spec(missing="")
    class_names: list[str]
    heads: list[str]
    settings: RecordedSettings = spec(flat=str)
    results: dict[str, HeadResult]
    corrupt_images: list[str] = field(default_factory=list)
    det_calib_version: str = ""
    created: str | None = None
    seconds: float | None = None
    schema_version: int = _SCHEMA_VERSION
    gt_counts: dict[str, list[int]] | None = None
    sections: dict[str, Record] = field(default_factory=dict)
    bad_labels: list[str] = field(default_factory=list)
    """``"<file>:<line>: <reason>"`` of every malformed label file whose image was left out (written
    only when there are some; the warnings name the first few)."""
    timings: Timings | None = None
    """Wall and CPU seconds per stage of the command that wrote the run (None in runs written before)."""
    matching: MatchingRule | None = None
    """How boxes were matched (box or mask IoU, and why); recorded for segment models, None for a
    detector's run (box IoU)."""

    @property
    def temperatures(self) -> dict[str, float]:
        """Head -> T, for the heads calibrated by a temperature."""
        return {h: r.temperature for h, r in self.results.items() if r.temperature is not None}

    def head(self, head: str) -> HeadResult:
        return self.results.get(head) or HeadResult()

    def class_name(self, c: int) -> str:
        return self.class_names[c] if 0 <= c < len(self.class_names) else str(c)

    def section_reports(self) -> list[str]:
        """The modules that show the run's own sections on its report (:attr:`sections`, in order)."""
        return [m for key in self.sections if (m := section_report(key)) is not None]

    # ---------------------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        """The ``calibration.json`` object."""
        res = {h: self.head(h) for h in self.heads}
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "det_calib_version": self.det_calib_version,
            "created": self.created,
            "model": self.model,
            "data": self.data,
            "class_names": list(self.class_names),
            "heads": list(self.heads),
            "temperature": {
                h: r.temperature
                for h, r in res.items()
                if r.calibrator is None or r.temperature is not None
            },
        }
        others = {
            h: encode(r.calibrator)
            for h, r in res.items()
            if r.calibrator is not None and r.temperature is None
        }
        if others:
            out["calibrators"] = others
        out.update(encode(self.settings))
        for key, name, which in _SECTIONS:
            section = {
                h: encode(getattr(r, name))
                for h, r in res.items()
                if which == "every"
                or (getattr(r, name) if which == "some" else getattr(r, name) is not None)
            }
            if section or which != "some":
                out[key] = section
        out["corrupt_images"] = list(self.corrupt_images)
        out.update(
            {
                k: encode(v)
                for k in ("bad_labels", "gt_counts", "seconds")
                for v in [getattr(self, k)]
                if v is not None and v != []
            }
        )
        out.update(encode_sections(self.sections))
        out.update(
            {k: encode(v) for k in ("timings", "matching") if (v := getattr(self, k)) is not None}
        )
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> RunResult:
        """Check and read a ``calibration.json`` object.

        A file without ``schema_version`` is read as version 1 (the same layout, written before
        the field existed); any other version is refused.

        Raises:
            InputError: Another schema version, a missing or mistyped field (one line naming it).
        """
        _check_version(d)
        heads = d.get("heads")
        if not isinstance(heads, list) or not heads or not all(h in HEADS for h in heads):
            raise InputError(f"`heads` must be a non-empty list of {list(HEADS)}, got {heads!r}")
        calibrators = _calibrators_from_dict(d, heads)
        out = decode(cls, d)
        out.sections = decode_sections(d)
        out.results = {
            h: dataclasses.replace(
                decode(HeadResult, d, keys=lambda k, h=h: f"{k}.{h}"), calibrator=calibrators.get(h)
            )
            for h in heads
        }
        if any(n < 0 for counts in (out.gt_counts or {}).values() for n in counts):
            bad = next(
                sp for sp, counts in (out.gt_counts or {}).items() if min(counts, default=0) < 0
            )
            raise InputError(
                f"`gt_counts.{bad}` must hold integers >= 0, got {out.gt_counts[bad]!r}"
            )
        return out

    def as_read(self) -> RunResult:
        """The record as :meth:`read` gives it back once :meth:`write` has written it (NaN as None,
        tuples as lists), without the file: what a run's own readers (its thresholds, its report)
        read before its ``calibration.json`` is written."""
        return type(self).from_dict(json.loads(to_json(self.to_dict())))

    def write(self, path: str | Path) -> Path:
        """Write ``calibration.json`` atomically (NaN as null)."""

        return write_json(path, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> RunResult:
        """Read and check a ``calibration.json``.

        Raises:
            InputError: Missing, not JSON, another schema version or a bad field; the message is
                one line that names the file.
        """
        return read_json_file(path, cls.from_dict)


def _check_version(d: Any) -> None:
    if not isinstance(d, dict):
        raise InputError(f"expected a JSON object, got {type(d).__name__}")
    version = d.get("schema_version", _SCHEMA_VERSION)
    if version != _SCHEMA_VERSION:
        raise InputError(
            f"schema_version {version!r} is not supported (this det_calib reads "
            f"{_SCHEMA_VERSION}); "
            "rerun `det-calib calibrate` with this version"
        )


def _calibrators_from_dict(
    d: dict[str, Any], heads: list[str] | None = None
) -> dict[str, Calibrator]:
    """Head -> calibrator of a ``calibration.json`` object (``temperature``, then ``calibrators``).

    Args:
        d: The object.
        heads: Heads to read; default every head named in ``temperature`` and ``calibrators``.
    """
    temps = d.get("temperature")
    if not isinstance(temps, dict):
        raise InputError(
            "no `temperature` object mapping each head to T: not the calibration.json of a "
            "calibrate run"
            if temps is None
            else f"`temperature` must be an object mapping head to T, got a {type(temps).__name__}"
        )
    others = decode(dict[str, Any] | None, d.get("calibrators"), "calibrators") or {}
    out: dict[str, Calibrator] = {}
    for h in heads if heads is not None else list(dict.fromkeys([*temps, *others])):
        t = temps.get(h)
        if t is not None and not (
            isinstance(t, (int, float)) and not isinstance(t, bool) and temperature_ok(t)
        ):
            raise InputError(f"temperature of head {h} must be a number > 0, got {t!r}")
        if t is not None:
            out[h] = Calibrator.temperature_scaling(t)
        elif h in others:
            out[h] = Calibrator.from_dict(others[h], f"calibrators.{h}")
    return out


def read_calibrators(calibration: str | Path | dict[str, Any] | RunResult) -> dict[str, Calibrator]:
    """Head -> calibrator of a run: its ``calibration.json`` (only the calibrators are read and
    checked, so a file holding just ``{"temperature": {...}}`` is enough), that file's object (a
    dict, read as it is) or its :class:`RunResult` (the heads that have a calibrator).

    Raises:
        InputError: Missing, not JSON, another schema version or a bad calibrator (one line); a
            ``calibration`` of another type.
    """
    if isinstance(calibration, RunResult):
        return {h: r.calibrator for h, r in calibration.results.items() if r.calibrator is not None}
    if isinstance(calibration, dict):
        return _calibrators_from_dict(calibration)
    if not isinstance(calibration, (str, Path)):
        raise InputError(
            f"Expected argument `calibration` to be a path, a dict or a RunResult, but got "
            f"{type(calibration).__name__}"
        )

    def parse(d: Any) -> dict[str, Calibrator]:
        _check_version(d)
        return _calibrators_from_dict(d)

    return read_json_file(calibration, parse)
