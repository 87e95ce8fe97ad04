"""Every option of a calibration run (:class:`Settings`), its validation, and its recorded form
(:meth:`Settings.recorded` -> :class:`~det_calib.record.run_result.RecordedSettings`, and back with
:meth:`Settings.from_recorded`): the one mapping between the two.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from det_calib.calibrators import registry
from det_calib.capture.options import CaptureOptions, resolve_batch
from det_calib.data.box_table import HEADS, Head
from det_calib.data.matching_rule import MATCH_CHOICES
from det_calib.errors import InputError
from det_calib.evaluation.figures import DECE_BINS
from det_calib.evaluation.map_check import MAP_ENGINES
from det_calib.record.run_result import (
    Bootstrap,
    RecordedSettings,
)
from det_calib.selection.cross_validation import CRITERIA
from det_calib.thresholds.thresholds_file import DEFAULT_TARGET_PRECISION
from det_calib.validation import check_choice

_log = logging.getLogger(__name__)

_HeadChoice = Literal["auto", Head, "both"]
"""What a run calibrates (``--head``): one head, ``both`` (the two heads of a dual YOLO detect head,
:mod:`det_calib.job.inputs`), or ``auto`` (every head the model has)."""
_HEAD_CHOICES: tuple[str, ...] = ("auto", *HEADS, "both")


def _calibration_methods() -> tuple[str, ...]:
    """Values of ``--method``: every registered method but ``none``, then ``auto``."""
    return (*(m for m in registry.methods() if m != "none"), "auto")


def _words(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def _method_help() -> str:
    """The help of ``--method`` (the registered methods)."""
    glob = registry.global_methods()
    named = [m for m in glob if m != "none"] + [
        m for m in registry.methods() if registry.method_spec(m).reranks
    ]
    return (
        "calibration map: auto (default: chosen per head by cross-validation grouped by image "
        "among "
        f"{_words(glob)}, the maps that keep every box's ranking; `none` keeps the raw scores), or "
        "one by "
        f"name: {', '.join(named)}"
    )


def _per_class_help() -> str:
    """The help of ``--per-class`` (the registered per-class methods)."""
    per = ", ".join(m for m in registry.methods() if registry.method_spec(m).per_class)
    return (
        f"let --method auto also consider the per-class maps ({per}; they can change which class "
        "wins a box, "
        "see the mAP promise)"
    )


def _size_maps_help() -> str:
    """The help of ``--size-maps`` (the registered size-conditioned methods)."""
    size = ", ".join(m for m in registry.methods() if registry.method_spec(m).uses_size)
    return (
        f"let --method auto also consider the size-conditioned maps ({size}; they read each box's "
        "size, "
        "re-rank boxes, so mAP is measured before and after, and cannot fold into calibrated.pt: "
        "deploy them with det_calib.attach)"
    )


_FIT_RANGES: tuple[str, ...] = ("all", "operating")


def fit_floors(
    method: str, fit_range: str | None, fit_min_conf: float | None, conf: tuple[float, ...]
) -> tuple[float, ...]:
    """Fit floors (raw conf above which boxes are fitted on; 0.0 = every box) for the settings.

    ``fit_range``: ``"all"`` (0.0), ``"operating"`` (half the lowest ``conf``: the boxes a user
    keeps, with a margin for boxes the map may lift over the threshold), or a number in [0, 1).
    None: ``all`` for one method; ``--method auto`` tries ``all`` and ``operating``.
    ``fit_min_conf`` (the older option) is the same as a numeric ``fit_range``.
    """
    operating = round(min(conf) / 2, 6)
    if fit_min_conf is not None:
        if fit_range is not None:
            raise InputError(
                "give `fit_range` or `fit_min_conf`, not both (`fit_min_conf` X is `fit_range` X)"
            )
        fit_range = str(fit_min_conf)
    if fit_range is None:
        return (0.0, operating) if method == "auto" else (0.0,)
    if fit_range == "all":
        return (0.0,)
    if fit_range == "operating":
        return (operating,)
    try:
        v = float(fit_range)
    except ValueError:
        raise InputError(
            f"Expected `fit_range` to be all, operating or a conf in [0, 1), but got {fit_range!r}"
        ) from None
    if not 0 <= v < 1:
        raise InputError(
            f"Expected `fit_range` to be all, operating or a conf in [0, 1), but got {fit_range!r}"
        )
    return (v,)


def opt(default: Any, help: str, *, flag: str | None = None, **extra: Any) -> Any:
    """A settings field: its default, its help, and (``flag``) its command-line option."""
    meta = {"help": help, **extra}
    if flag:
        meta["flag"] = flag
    return field(default=default, metadata=meta)


@dataclass
class Settings:
    """Every option of a calibration run (recorded in calibration.json).

    Each field carries its default and its help; the command line's options of ``calibrate`` are
    generated from them (metadata ``flag``: the option; ``negate``: a ``--no-...`` switch that sets
    the field to False; ``choices``; ``repeat``: the option may be given several times;
    ``auto_only``: an option of ``--method auto``'s choice, refused beside a named method;
    ``fusion_choice``: one that ``det-calib ensemble``'s choice of fusion reads too, whatever the
    method).
    """

    fit_split: str | None = opt(
        None, "split to fit on (default: calib; see docs/cli.md)", flag="--fit-split"
    )
    eval_split: str | None = opt(None, "split to report on (default: test)", flag="--eval-split")
    head: _HeadChoice = opt(
        "auto",
        "nms: one-to-many head + NMS (Ultralytics default); e2e: NMS-free one-to-one "
        "head (nms=False); both: those two; detr: an RT-DETR's decoder queries; auto "
        "(default): every head the model has",
        flag="--head",
        choices=_HEAD_CHOICES,
    )
    iou: float = opt(0.5, "IoU for a box to count as correct (default 0.5)", flag="--iou")
    match: str = opt(
        "auto",
        "what the IoU compares: auto (default: the task's own rule: masks for a segment model "
        "on data with a mask for every ground truth, OKS for a pose model, rotated IoU for an OBB "
        "model; "
        "else boxes), mask, oks, rotated, or box (any model)",
        flag="--match",
        choices=MATCH_CHOICES,
    )
    loc_iou: float = opt(0.1, "IoU threshold of the matching behind LaECE / LaACE")
    conf: tuple[float, ...] = opt(
        (0.25,),
        "deployment conf threshold to report the kept-set shift at (repeatable; default 0.25)",
        flag="--conf",
        repeat=True,
    )
    method: str = opt("auto", _method_help, flag="--method", choices=_calibration_methods)
    per_class: bool = opt(False, _per_class_help, flag="--per-class", switch=True)
    target: str = opt(
        "correct",
        "what the calibrated conf means: correct (default: the probability that the box "
        "matches a ground truth at --iou) or iou (the expected IoU of the box with its ground "
        "truth, "
        "0 when it matches none: the target of LaECE_0, which becomes the run's headline); see "
        "docs/targets.md",
        flag="--target",
        choices=registry.TARGETS,
    )
    size_maps: bool = opt(False, _size_maps_help, flag="--size-maps", switch=True)
    fit_range: str | None = opt(
        None,
        "boxes to fit on: all, operating (raw conf >= half the lowest --conf), or "
        "a raw conf floor; default all, and --method auto tries all and operating",
        flag="--fit-range",
    )
    fit_min_conf: float | None = opt(
        None, "same as --fit-range FLOOR (the older name)", flag="--fit-min-conf"
    )
    criterion: str = opt(
        "nll",
        "what --method auto minimises on held-out folds, over the boxes above the "
        "lowest --conf: nll (default), brier or ece",
        flag="--criterion",
        choices=CRITERIA,
        auto_only=True,
    )
    cv_folds: int = opt(
        5,
        "folds of --method auto's cross-validation, grouped by image (default 5)",
        flag="--cv-folds",
        auto_only=True,
        fusion_choice=True,
    )
    cv_repeats: int = opt(
        5,
        "fold assignments --method auto scores every candidate on (default 5; with 1 the "
        "cross-validation takes a fifth of the time, but a close call can then change with "
        "--seed)",
        flag="--cv-repeats",
        auto_only=True,
        fusion_choice=True,
    )
    conf_floor: float = opt(
        0.001, "capture conf floor (default 0.001, as val)", flag="--conf-floor"
    )
    nms_iou: float = opt(0.7, "IoU of non-maximum suppression (nms head)")
    max_det: int = opt(300, "boxes per image at most (default 300)", flag="--max-det")
    imgsz: int | None = opt(
        None, "inference size (default: the model's training size)", flag="--imgsz"
    )
    batch: int | None = opt(
        None,
        "images per capture forward pass, same letterbox shape only (default: 16 on a "
        "CUDA device, about 3x faster there and not bit-exact, see docs/speed.md; 1 elsewhere: "
        "exactly single-image predict)",
        flag="--batch",
    )
    device: str | None = opt(
        None, "torch device, e.g. cpu, 0, cuda:0 (default: Ultralytics' choice)", flag="--device"
    )
    coco_gt: str | None = opt(
        None, "COCO JSON ground truth instead of YOLO txt labels", flag="--coco-gt"
    )
    ece_bins: int = opt(15, "ECE bins (default 15)", flag="--bins")
    laece_bins: int = opt(25, "LaECE bins")
    min_class_boxes: int = opt(50, "classes with fewer boxes are flagged 'few boxes'")
    n_boot: int = opt(1000, "bootstrap resamples for intervals (default 1000)", flag="--n-boot")
    seed: int = opt(
        0,
        "seed of everything random in a run: the fit/eval halves of a one-split dataset, --method "
        "auto's fold assignments (seeds SEED .. SEED + --cv-repeats - 1) and the per-class maps' "
        "folds, "
        "the bootstrap resamples of the intervals and of the threshold coverage, and the draws of "
        "the "
        "sampling floor (default 0: the same run gives the same figures)",
        flag="--seed",
    )
    map_engine: str = opt(
        "det_calib",
        "what scores the mAP check: det_calib (default: COCO mAP on det_calib's "
        "vectorised matching, pycocotools' figures in a fraction of its time) or pycocotools",
        flag="--map-engine",
        choices=MAP_ENGINES,
    )
    run_val: bool = opt(True, "skip the Ultralytics val runs", flag="--no-val", negate=True)
    report: bool = opt(True, "skip report.html/report.md", flag="--no-report", negate=True)
    limit: int | None = opt(
        None, "use only the first N images of each split (quick runs)", flag="--limit"
    )
    boxes: str | None = opt(
        None,
        "fit, evaluate and report from the boxes of an earlier run (its folder or "
        "boxes.parquet) or from `det-calib capture` parts (a folder of parts, or of one "
        "sub-folder per split) instead of capturing again",
        flag="--boxes",
    )
    detections: str | None = opt(
        None,
        "calibrate a file of detections from any engine or detector instead of "
        "running a model: a COCO results JSON, a folder of Ultralytics "
        "predict(save_txt=True, save_conf=True) label files, or a "
        "CSV/Parquet table (docs/detections.md)",
        flag="--detections",
    )
    progress: bool = opt(True, "no progress output", flag="--quiet", negate=True, short="-q")
    # per-class conf thresholds (det_calib.thresholds.per_class); also the options of `det-calib thresholds`
    target_precision: float | None = opt(
        None,
        "tune per-class conf thresholds certified at this precision and write thresholds.json "
        f"(calibrate: only when given; thresholds: default {DEFAULT_TARGET_PRECISION})",
        flag="--target-precision",
    )
    delta: float = opt(
        0.1,
        "the precision guarantee of the thresholds fails with probability <= delta (default 0.1)",
        flag="--delta",
    )
    threshold_unit: str = opt(
        "image",
        "what the precision guarantee is over: image (default: the mean precision "
        "of the images that keep a box, valid over new images) or box (boxes as independent "
        "draws: no guarantee over images)",
        flag="--threshold-unit",
        choices=("image", "box"),
    )
    threshold_fallback: str = opt(
        "global",
        "threshold of a class that cannot be certified: global (default: "
        "the global certified threshold) or drop (no box kept)",
        flag="--threshold-fallback",
        choices=("global", "drop"),
    )

    def validate(self, *, fusion_choice: bool = False) -> None:
        """Check every option; errors name the field (the CLI shows its option). ``fusion_choice``:
        the settings of an ensemble, whose choice of fusion reads the cross-validation's options."""
        if not 0 < self.iou <= 1:
            raise InputError(f"Expected `iou` in (0, 1], but got {self.iou}")
        if not 0 <= self.loc_iou <= 1:
            raise InputError(f"Expected `loc_iou` in [0, 1], but got {self.loc_iou}")
        for c in self.conf:
            if not 0 < c < 1:
                raise InputError(f"Expected every `conf` in (0, 1), but got {c}")
        if self.fit_min_conf is not None and not 0 <= self.fit_min_conf < 1:
            raise InputError(f"Expected `fit_min_conf` in [0, 1), but got {self.fit_min_conf}")
        check_choice(self.method, _calibration_methods(), "method")
        check_choice(self.match, MATCH_CHOICES, "match")
        check_choice(self.criterion, CRITERIA, "criterion")
        check_choice(self.target, registry.TARGETS, "target")
        if int(self.cv_folds) < 2:
            raise InputError(
                f"Expected `cv_folds` to be an integer larger than 1, but got {self.cv_folds}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise InputError(
                f"Expected `seed` to be an integer of 0 or more, but got {self.seed!r}"
            )
        if int(self.cv_repeats) < 1:
            raise InputError(
                f"Expected `cv_repeats` to be an integer larger than 0, but got {self.cv_repeats}"
            )
        self.fit_floors()
        if not 0 <= self.conf_floor < min(self.conf):
            raise InputError(
                f"Expected `conf_floor` in [0, {min(self.conf)}), but got {self.conf_floor}"
            )
        for name, what, attr in (
            ("per_class", "per-class", "per_class"),
            ("size_maps", "size-conditioned", "uses_size"),
        ):
            if getattr(self, name) and self.method != "auto":
                maps = [m for m in registry.methods() if getattr(registry.method_spec(m), attr)]
                raise InputError(
                    f"`{name}` lets `method` auto also consider the {what} maps; with `method` "
                    f"{self.method} it would do nothing: drop it, or name one of them as `method` "
                    f"({', '.join(maps)})"
                )
        if self.method != "auto":
            # a value other than its default (a call that sets it; the CLI also refuses one given at
            # its default, as only it can tell given from not given)
            for f in fields(self):
                if fusion_choice and f.metadata.get("fusion_choice"):
                    continue
                if f.metadata.get("auto_only") and getattr(self, f.name) != f.default:
                    raise InputError(
                        f"`{f.name}` sets `method` auto's choice; with `method` {self.method} there "
                        "is no choice to set: drop it"
                    )
        check_choice(self.map_engine, MAP_ENGINES, "map_engine")
        check_choice(self.head, _HEAD_CHOICES, "head")
        if self.limit is not None and self.limit < 1:
            raise InputError(
                f"Expected `limit` to be an integer larger than 0, but got {self.limit}"
            )
        if self.target_precision is not None and not 0 < self.target_precision < 1:
            raise InputError(
                f"Expected `target_precision` in (0, 1), but got {self.target_precision}"
            )
        if not 0 < self.delta < 1:
            raise InputError(f"Expected `delta` in (0, 1), but got {self.delta}")
        if self.target_precision is None:  # calibrate tunes thresholds only when asked
            for name in ("delta", "threshold_unit", "threshold_fallback"):
                if getattr(self, name) != _SETTINGS_FIELDS[name].default:
                    raise InputError(
                        f"`{name}` sets the thresholds tuned at `target_precision`; without it "
                        "calibrate tunes none: give `target_precision`, or drop it"
                    )
        for name in ("batch", "max_det", "ece_bins", "laece_bins", "n_boot"):
            if (name != "batch" or self.batch is not None) and int(getattr(self, name)) < 1:
                raise InputError(
                    f"Expected `{name}` to be an integer larger than 0, but got "
                    f"{getattr(self, name)}"
                )

    def capture_options(self, *, heads: Sequence[str], imgsz: int | None) -> CaptureOptions:
        """The options of this run's capture of ``heads`` at ``imgsz`` (conf floor, NMS IoU,
        ``max_det``, batch and device from these settings)."""
        return CaptureOptions(
            heads=tuple(heads),
            conf=self.conf_floor,
            iou=self.nms_iou,
            max_det=self.max_det,
            imgsz=imgsz,
            batch=self.batch,
            device=self.device,
        )

    def capture_settings(self, imgsz: int, *, batch: int | None = None) -> dict[str, Any]:
        """The capture settings of a run, as :class:`det_calib.capture.predictor.Capturer` records
        them (``batch``: the batch the capture ran; default the run's, resolved for its device)."""
        return {
            **self.compared_capture_settings(imgsz),
            "batch": resolve_batch(self.batch, self.device) if batch is None else int(batch),
            "limit": self.limit,  # read back by --boxes RUN without --limit
        }

    def compared_capture_settings(self, imgsz: int) -> dict[str, Any]:
        """The capture settings boxes must agree on to be reused (the batch, which may need torch to
        resolve, left out)."""
        return {
            "conf": float(self.conf_floor),
            "iou": float(self.nms_iou),
            "max_det": int(self.max_det),
            "imgsz": int(imgsz),
        }

    def auto_methods(self) -> tuple[str, ...]:
        """The methods ``--method auto`` cross-validates, among those ``--target`` can fit: the maps
        that keep every box's ranking, with ``--per-class`` the per-class maps, with ``--size-maps``
        the size-conditioned ones."""
        return tuple(
            m
            for m in registry.target_methods(self.target)
            if not registry.method_spec(m).reranks
            or (self.per_class and registry.method_spec(m).per_class)
            or (self.size_maps and registry.method_spec(m).uses_size)
        )

    def fit_floors(self) -> tuple[float, ...]:
        """The fit floor(s) (raw conf; 0.0 = every box) asked for (see :func:`fit_floors`)."""
        return fit_floors(self.method, self.fit_range, self.fit_min_conf, tuple(self.conf))

    def recorded(self, *, imgsz: int, fit_split: str, eval_split: str) -> RecordedSettings:
        """The settings as ``calibration.json`` records them (``fit_min_conf``: the fit floor, or
        null when ``auto`` tried several: each head's calibrator records its own)."""
        floors = self.fit_floors()
        auto = self.method == "auto"
        return RecordedSettings(
            **{rec: getattr(self, name) for name, rec in _RECORDED_AS.items()},
            fit_min_conf=floors[0] if len(floors) == 1 else None,
            method=self.method,
            fit_range=self.fit_range if self.fit_min_conf is None else str(self.fit_min_conf),
            criterion=self.criterion if auto else None,
            cv_folds=self.cv_folds if auto else None,
            cv_repeats=self.cv_repeats if auto else None,
            auto_per_class=self.per_class if auto else None,
            auto_size_maps=self.size_maps if auto else None,
            imgsz=imgsz,
            conf_thresholds=tuple(self.conf),
            dece_bins=DECE_BINS,
            bootstrap=Bootstrap(n_boot=self.n_boot, seed=self.seed),
            fit_split=fit_split,
            eval_split=eval_split,
            coco_gt=self.coco_gt,
        )

    @classmethod
    def of_call(
        cls, settings: Settings | None, options: dict[str, Any], *, fusion_choice: bool = False
    ) -> Settings:
        """The settings of a call of a job (``calibrate``, ``ensemble``): ``settings``, or settings
        made of the keyword ``options`` (not both), checked (``fusion_choice``: an ensemble's, see
        :meth:`validate`).

        Raises:
            InputError: Both given, an unknown option, or what :meth:`validate` refuses.
        """
        if settings is not None and options:
            raise InputError("pass either `settings` or keyword options, not both")
        unknown = [k for k in options if k not in _SETTINGS_FIELDS]
        if unknown:
            raise InputError(
                f"unknown option `{unknown[0]}`; options are {', '.join(_SETTINGS_FIELDS)}"
            )
        s = settings or cls(**options)
        s.conf = tuple(float(c) for c in (s.conf if isinstance(s.conf, Sequence) else (s.conf,)))
        s.validate(fusion_choice=fusion_choice)
        return s

    @classmethod
    def from_recorded(cls, st: RecordedSettings, **options: Any) -> Settings:
        """The settings that reproduce a recorded run's labelling, capture and figures (``det-calib
        check`` reads a run with them); ``options`` set the rest (validated)."""
        s = cls(
            **{name: getattr(st, rec) for name, rec in _RECORDED_AS.items()},
            conf=tuple(st.conf_thresholds),
            imgsz=st.imgsz,
            seed=st.bootstrap.seed,
            **{"n_boot": st.bootstrap.n_boot, **options},
        )
        s.validate()
        return s


#: Settings field -> the :class:`~det_calib.record.run_result.RecordedSettings` field that records it
#: as is (the one mapping between a run's options and ``calibration.json``; the other recorded values
#: are derived in :meth:`Settings.recorded`).
_RECORDED_AS: dict[str, str] = {
    "iou": "iou_match",
    "loc_iou": "loc_iou_match",
    "conf_floor": "conf_floor",
    "nms_iou": "nms_iou",
    "max_det": "max_det",
    "ece_bins": "ece_bins",
    "laece_bins": "laece_bins",
    "min_class_boxes": "min_class_boxes",
    "target": "target",
}


_SETTINGS_FIELDS = {f.name: f for f in fields(Settings)}
