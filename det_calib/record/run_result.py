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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from det_calib import record
from det_calib.data.box_table import HEADS
from det_calib.data.matching_rule import MatchingRule
from det_calib.errors import InputError
from det_calib.io import write_json
from det_calib.record.calibrator_record import (
    Calibrator,
    CandidateRecord,
)
from det_calib.record.checked_json import (
    READERS,
    key_path,
    leaf,
    leaf_dict,
    read_flag,
    read_integer,
    read_items,
    read_json_file,
    read_leaf_fields,
    read_number,
    read_object,
    read_text,
)
from det_calib.record.eval_record import (
    ClassResult,
    EvalResult,
    FitResult,
    TemperatureFit,
    read_shifts,
    temperature_ok,
)
from det_calib.record.size_record import SizeFigures, read_size_figures
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
class ValMap:
    """Ultralytics ``model.val()`` mAP of one checkpoint at one conf floor."""

    conf: float | None = leaf()
    map50_95: float | None = leaf()
    map50: float | None = leaf()
    mask_map50_95: float | None = leaf()
    """Mask mAP of a segment model's val (None: a detector, or not asked for; not written then)."""
    mask_map50: float | None = leaf()
    pose_map50_95: float | None = leaf()
    """Keypoint (OKS) mAP of a pose model's val (None: not a pose model; not written then). An OBB model's
    ``map50_95`` and ``map50`` are those of its rotated boxes (Ultralytics' ``OBBValidator``, ProbIoU)."""
    pose_map50: float | None = leaf()

    def to_dict(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in leaf_dict(self).items()
            if v is not None or not k.startswith(("mask_", "pose_"))
        }


VAL_SEEN_FIELDS = (
    "verified",
    "images_seen",
    "images_expected",
    "instances_seen",
    "instances_expected",
)
"""The fields of :class:`ValCheck` that say what val read against the run's split (with ``skipped``)."""


@dataclass(frozen=True)
class ValCheck:
    """Ultralytics val of the original and the calibrated checkpoint (None: not run).

    ``completed`` is False for a pass that could not be completed (Ultralytics' NMS reached its
    time limit and dropped boxes, :class:`det_calib.evaluation.map_check.ValIncomplete`): it then holds no mAP,
    and ``note`` says why. None otherwise (and in runs written before the field existed).
    """

    split: str | None = leaf(kind=str)
    original: ValMap | None = None
    calibrated: ValMap | None = None
    calibrated_equivalent_floor: ValMap | None = None
    identical_at_equivalent_floor: bool | None = leaf(kind=bool)
    note: str | None = leaf(kind=str)
    completed: bool | None = leaf(kind=bool)
    verified: bool | None = leaf(kind=bool)
    """Whether val read exactly the run's split (images, instances per class); False: no mAP kept, ``note``
    says what differed; None: not compared. ``skipped``: ``"<image>: <reason>"`` per image val left out."""
    images_seen: int | None = leaf(kind=int)
    images_expected: int | None = leaf(kind=int)
    instances_seen: int | None = leaf(kind=int)
    instances_expected: int | None = leaf(kind=int)
    skipped: list[str] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return self.original is not None

    def changes(self) -> dict[str, float]:
        """The figures (``map50_95``, ``mask_map50``...) whose calibrated value (at the equivalent floor)
        differs from the original's by more than 1e-6, with the difference (calibrated - original)."""
        cal, orig = (
            self.calibrated_equivalent_floor,
            leaf_dict(self.original) if self.original else {},
        )
        pairs = {k: (v, getattr(cal, k, None)) for k, v in orig.items() if k != "conf"}
        return {
            k: float(w - v)
            for k, (v, w) in pairs.items()
            if None not in (v, w) and abs(w - v) > 1e-6
        }

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"split": self.split}
        for k in ("original", "calibrated", "calibrated_equivalent_floor"):
            v = getattr(self, k)
            out[k] = None if v is None else v.to_dict()
        if self.identical_at_equivalent_floor is not None:
            out["identical_at_equivalent_floor"] = self.identical_at_equivalent_floor
        if self.completed is False:
            out["completed"] = False
        if self.verified is not None:
            out.update({k: getattr(self, k) for k in VAL_SEEN_FIELDS}, skipped=list(self.skipped))
        out["note"] = self.note
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str) -> ValCheck | None:
        d = read_object(d, where)
        if d is None:
            return None
        maps = {}
        for k in ("original", "calibrated", "calibrated_equivalent_floor"):
            m = read_object(d.get(k), key_path(where, k))
            maps[k] = (
                None if m is None else ValMap(**read_leaf_fields(ValMap, m, key_path(where, k)))
            )
        skipped = [
            read_text(x, f"{key_path(where, 'skipped')}[{i}]")
            for i, x in enumerate(read_items(d.get("skipped"), key_path(where, "skipped")))
        ]
        return cls(**read_leaf_fields(cls, d, where), **maps, skipped=skipped)


@dataclass(frozen=True)
class DetectionChange:
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

    split: str | None = leaf(kind=str)
    conf_floor: float | None = leaf()
    boxes_posthoc: int | None = leaf(kind=int)
    boxes_folded: int | None = leaf(kind=int)
    changed_class: int | None = leaf(kind=int)
    only_posthoc: int | None = leaf(kind=int)
    only_folded: int | None = leaf(kind=int)
    kept_conf: float | None = leaf()
    kept_posthoc: int | None = leaf(kind=int)
    kept_folded: int | None = leaf(kind=int)
    kept_only_posthoc: int | None = leaf(kind=int)
    kept_only_folded: int | None = leaf(kind=int)
    map50_95_original: float | None = leaf()
    map50_95_posthoc: float | None = leaf()
    map50_95_folded: float | None = leaf()
    map50_original: float | None = leaf()
    map50_posthoc: float | None = leaf()
    map50_folded: float | None = leaf()

    @property
    def identical(self) -> bool:
        return self.only_posthoc == 0 and self.only_folded == 0 and self.changed_class == 0


@dataclass(frozen=True)
class HeadResult:
    """Everything a run found for one head."""

    calibrator: Calibrator | None = None
    fit: FitResult | None = None
    eval: EvalResult | None = None
    threshold_shift: list[ThresholdShift] = field(default_factory=list)
    per_class: list[ClassResult] = field(default_factory=list)
    ultralytics_val: ValCheck | None = None
    candidates: list[CandidateRecord] | None = None
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
class Bootstrap:
    """Settings of the bootstrap intervals (resampling unit: image)."""

    n_boot: int = 1000
    seed: int = 0
    level: float = 0.95
    unit: str = "image"


@dataclass(frozen=True)
class RecordedSettings:
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
    fit_split: str | None
    eval_split: str | None
    coco_gt: str | None
    method: str = "temperature"
    fit_range: str | None = None
    criterion: str | None = None
    cv_folds: int | None = None
    cv_repeats: int | None = None
    auto_per_class: bool | None = None
    target: str = "correct"
    auto_size_maps: bool | None = None
    """Whether ``--method auto`` also considered the size-conditioned maps (``--size-maps``; the key is
    written only when it did)."""

    _KINDS = {
        "iou_match": float,
        "loc_iou_match": float,
        "fit_min_conf": float,
        "conf_floor": float,
        "nms_iou": float,
        "max_det": int,
        "imgsz": int,
        "ece_bins": int,
        "laece_bins": int,
        "min_class_boxes": int,
    }

    def to_dict(self) -> dict[str, Any]:
        return {
            "iou_match": self.iou_match,
            "loc_iou_match": self.loc_iou_match,
            "fit_min_conf": self.fit_min_conf,
            "conf_floor": self.conf_floor,
            "nms_iou": self.nms_iou,
            "max_det": self.max_det,
            "imgsz": self.imgsz,
            "conf_thresholds": list(self.conf_thresholds),
            "ece_bins": self.ece_bins,
            "laece_bins": self.laece_bins,
            "dece_bins": list(self.dece_bins),
            "min_class_boxes": self.min_class_boxes,
            "bootstrap": dataclasses.asdict(self.bootstrap),
            "splits": {"fit": self.fit_split, "eval": self.eval_split},
            "coco_gt": self.coco_gt,
            "method": self.method,
            "fit_range": self.fit_range,
            "criterion": self.criterion,
            "cv_folds": self.cv_folds,
            "cv_repeats": self.cv_repeats,
            "auto_per_class": self.auto_per_class,
            # written where it is not the default (a default run's record is the one earlier versions wrote)
            **({"target": self.target} if self.target != "correct" else {}),
            **({"auto_size_maps": True} if self.auto_size_maps else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> RecordedSettings:
        vals: dict[str, Any] = {}
        for k, kind in cls._KINDS.items():
            v = READERS[kind](d.get(k), key_path(where, k))
            if v is None and k not in ("imgsz", "fit_min_conf"):
                raise InputError(f"`{key_path(where, k)}` is missing")
            vals[k] = v
        conf = [
            read_number(x, f"{key_path(where, 'conf_thresholds')}[{i}]")
            for i, x in enumerate(
                read_items(d.get("conf_thresholds"), key_path(where, "conf_thresholds"))
            )
        ]
        dece = [
            read_integer(x, f"{key_path(where, 'dece_bins')}[{i}]")
            for i, x in enumerate(read_items(d.get("dece_bins"), key_path(where, "dece_bins")))
        ]
        b = read_object(d.get("bootstrap"), key_path(where, "bootstrap")) or {}
        bw = key_path(where, "bootstrap")
        boot = Bootstrap(
            n_boot=read_integer(b.get("n_boot"), bw + ".n_boot") or Bootstrap.n_boot,
            seed=read_integer(b.get("seed"), bw + ".seed") or 0,
            level=read_number(b.get("level"), bw + ".level") or Bootstrap.level,
            unit=read_text(b.get("unit"), bw + ".unit") or Bootstrap.unit,
        )
        sp = read_object(d.get("splits"), key_path(where, "splits")) or {}
        return cls(
            **vals,
            conf_thresholds=tuple(c for c in conf if c is not None),
            dece_bins=tuple(x for x in dece if x is not None),
            bootstrap=boot,
            fit_split=read_text(sp.get("fit"), key_path(where, "splits.fit")),
            eval_split=read_text(sp.get("eval"), key_path(where, "splits.eval")),
            coco_gt=read_text(d.get("coco_gt"), key_path(where, "coco_gt")),
            method=read_text(d.get("method"), key_path(where, "method")) or "temperature",
            fit_range=read_text(d.get("fit_range"), key_path(where, "fit_range")),
            criterion=read_text(d.get("criterion"), key_path(where, "criterion")),
            cv_folds=read_integer(d.get("cv_folds"), key_path(where, "cv_folds")),
            cv_repeats=read_integer(d.get("cv_repeats"), key_path(where, "cv_repeats")),
            auto_per_class=read_flag(d.get("auto_per_class"), key_path(where, "auto_per_class")),
            target=_read_target(d.get("target"), key_path(where, "target")),
            auto_size_maps=read_flag(d.get("auto_size_maps"), key_path(where, "auto_size_maps")),
        )


def _read_target(v: Any, where: str) -> str:
    """The recorded ``target`` (``correct`` in records written before it existed)."""
    t = read_text(v, where) or "correct"
    if t not in ("correct", "iou"):
        raise InputError(f"Expected `{where}` to be correct or iou, but got {t!r}")
    return t


_PER_HEAD = ("fit", "eval", "threshold_shift", "per_class", "ultralytics_val")


@dataclass
class RunResult:
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
        ensemble: For a ``det-calib ensemble`` run, its members, fusion settings and figures
            (:class:`det_calib.record.ensemble_record.EnsembleRecord`); None for one detector.
    """

    model: str
    data: str
    class_names: list[str]
    heads: list[str]
    settings: RecordedSettings
    results: dict[str, HeadResult]
    corrupt_images: list[str] = field(default_factory=list)
    det_calib_version: str = ""
    created: str | None = None
    seconds: float | None = None
    schema_version: int = _SCHEMA_VERSION
    gt_counts: dict[str, list[int]] | None = None
    ensemble: Any = None
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
            h: r.calibrator.to_dict()
            for h, r in res.items()
            if r.calibrator is not None and r.temperature is None
        }
        if others:
            out["calibrators"] = others
        out.update(self.settings.to_dict())
        out["fit"] = {h: leaf_dict(r.fit) for h, r in res.items() if r.fit is not None}
        out["eval"] = {h: r.eval.to_dict() for h, r in res.items() if r.eval is not None}
        out["threshold_shift"] = {
            h: [s.to_dict() for s in r.threshold_shift] for h, r in res.items()
        }
        out["per_class"] = {h: [c.to_dict() for c in r.per_class] for h, r in res.items()}
        out["ultralytics_val"] = {
            h: r.ultralytics_val.to_dict() for h, r in res.items() if r.ultralytics_val is not None
        }
        cands = {h: [c.to_dict() for c in r.candidates] for h, r in res.items() if r.candidates}
        if cands:
            out["calibration_candidates"] = cands
        changes = {
            h: leaf_dict(r.detection_change)
            for h, r in res.items()
            if r.detection_change is not None
        }
        if changes:
            out["detection_change"] = changes
        tfits = {
            h: r.temperature_fit.to_dict() for h, r in res.items() if r.temperature_fit is not None
        }
        if tfits:
            out["temperature_fit"] = tfits
        sizes = {h: [f.to_dict() for f in r.by_size] for h, r in res.items() if r.by_size}
        if sizes:
            out["by_size"] = sizes
        out["corrupt_images"] = list(self.corrupt_images)
        if self.bad_labels:
            out["bad_labels"] = list(self.bad_labels)
        if self.gt_counts is not None:
            out["gt_counts"] = {sp: [int(n) for n in v] for sp, v in self.gt_counts.items()}
        if self.seconds is not None:
            out["seconds"] = self.seconds
        if self.ensemble is not None:
            out["ensemble"] = self.ensemble.to_dict()
        if self.timings is not None:
            out["timings"] = self.timings.to_dict()
        if self.matching is not None:
            out["matching"] = self.matching.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Any) -> RunResult:
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
        calibrators = calibrators_from_dict(d, heads)
        cands = read_object(d.get("calibration_candidates"), "calibration_candidates") or {}
        changes = read_object(d.get("detection_change"), "detection_change") or {}
        tfits = read_object(d.get("temperature_fit"), "temperature_fit") or {}
        sizes = read_object(d.get("by_size"), "by_size") or {}
        sections = {k: read_object(d.get(k), k) or {} for k in _PER_HEAD}
        results = {}
        for h in heads:
            fit = read_object(sections["fit"].get(h), f"fit.{h}")
            ev = read_object(sections["eval"].get(h), f"eval.{h}")
            results[h] = HeadResult(
                calibrator=calibrators.get(h),
                fit=None
                if fit is None
                else FitResult(**read_leaf_fields(FitResult, fit, f"fit.{h}")),
                eval=None if ev is None else EvalResult.from_dict(ev, f"eval.{h}"),
                threshold_shift=read_shifts(
                    sections["threshold_shift"].get(h), f"threshold_shift.{h}"
                ),
                per_class=[
                    ClassResult.from_dict(c, f"per_class.{h}[{i}]")
                    for i, c in enumerate(
                        read_items(sections["per_class"].get(h), f"per_class.{h}")
                    )
                ],
                ultralytics_val=ValCheck.from_dict(
                    sections["ultralytics_val"].get(h), f"ultralytics_val.{h}"
                ),
                candidates=[
                    CandidateRecord.from_dict(c, f"calibration_candidates.{h}[{i}]")
                    for i, c in enumerate(read_items(cands.get(h), f"calibration_candidates.{h}"))
                ]
                or None,
                detection_change=None
                if changes.get(h) is None
                else DetectionChange(
                    **read_leaf_fields(
                        DetectionChange,
                        read_object(changes[h], f"detection_change.{h}", optional=False),
                        f"detection_change.{h}",
                    )
                ),
                temperature_fit=TemperatureFit.from_dict(tfits.get(h), f"temperature_fit.{h}"),
                by_size=read_size_figures(sizes.get(h), f"by_size.{h}"),
            )
        names = [
            read_text(n, f"class_names[{i}]")
            for i, n in enumerate(read_items(d.get("class_names"), "class_names"))
        ]
        return cls(
            model=read_text(d.get("model"), "model") or "",
            data=read_text(d.get("data"), "data") or "",
            class_names=[n or str(i) for i, n in enumerate(names)],
            heads=list(heads),
            settings=RecordedSettings.from_dict(d, ""),
            results=results,
            corrupt_images=[str(x) for x in read_items(d.get("corrupt_images"), "corrupt_images")],
            det_calib_version=read_text(d.get("det_calib_version"), "det_calib_version") or "",
            created=read_text(d.get("created"), "created"),
            seconds=read_number(d.get("seconds"), "seconds"),
            gt_counts=_gt_counts_from_dict(d),
            ensemble=_ensemble_from_dict(d.get("ensemble")),
            bad_labels=[str(x) for x in read_items(d.get("bad_labels"), "bad_labels")],
            timings=Timings.from_dict(d.get("timings")),
            matching=MatchingRule.from_dict(read_object(d.get("matching"), "matching")),
        )

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


def _ensemble_from_dict(d: Any) -> Any:
    if d is None:
        return None
    # through the package's lazy exports: ensemble_record builds on this module's records

    return record.EnsembleRecord.from_dict(d)


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


def _gt_counts_from_dict(d: dict[str, Any]) -> dict[str, list[int]] | None:
    """``gt_counts`` of a ``calibration.json`` object: split -> ground-truth boxes per class id.

    None when the key is absent (runs written before it existed: count from the dataset).

    Raises:
        InputError: The key is not an object of lists of non-negative integers.
    """
    v = read_object(d.get("gt_counts"), "gt_counts")
    if v is None:
        return None
    out = {}
    for sp, counts in v.items():
        where = f"gt_counts.{sp}"
        if not isinstance(counts, list):
            raise InputError(
                f"`{where}` must be a list of counts per class id, got {type(counts).__name__}"
            )
        out[sp] = [read_integer(n, f"{where}[{i}]") for i, n in enumerate(counts)]
        if any(n is None or n < 0 for n in out[sp]):
            raise InputError(f"`{where}` must hold integers >= 0, got {counts!r}")
    return out


def calibrators_from_dict(
    d: dict[str, Any], heads: list[str] | None = None
) -> dict[str, Calibrator]:
    """Head -> calibrator of a ``calibration.json`` object (``temperature``, then ``calibrators``).

    Args:
        d: The object.
        heads: Heads to read; default every head named in ``temperature`` and ``calibrators``.
    """
    temps = d.get("temperature")
    if not isinstance(temps, dict):
        raise InputError(f"`temperature` must be an object mapping head to T, got {temps!r}")
    others = read_object(d.get("calibrators"), "calibrators") or {}
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


def read_calibrators(path: str | Path) -> dict[str, Calibrator]:
    """Head -> calibrator of a ``calibration.json`` (only the calibrators are read and checked,
    so a file holding just ``{"temperature": {...}}`` is enough).

    Raises:
        InputError: Missing, not JSON, another schema version or a bad calibrator (one line).
    """

    def parse(d: Any) -> dict[str, Calibrator]:
        _check_version(d)
        return calibrators_from_dict(d)

    return read_json_file(path, parse)
