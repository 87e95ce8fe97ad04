"""The Ultralytics checks of a run: val of the original and the calibrated checkpoint, and the
detection change of a per-class map folded into the model.
"""

from __future__ import annotations

import logging
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.calibrators import registry
from det_calib.calibrators.base import equivalent_conf
from det_calib.capture.exported import make_capturer
from det_calib.capture.family_registry import family_of
from det_calib.data.box_view import BoxView
from det_calib.data.ground_truth import Split
from det_calib.evaluation.map_check import (
    ValIncomplete,
    coco_maps,
    ultralytics_val_heads,
)
from det_calib.job.inputs import Inputs
from det_calib.job.settings import Settings
from det_calib.numeric import logit_threshold, sigmoid
from det_calib.pipeline.val_view import ValScan, val_view_scan, write_split_yaml
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.run_result import (
    Calibrator,
    DetectionChange,
    ValCheck,
    ValMap,
)

_log = logging.getLogger(__name__)

_SHARED_PASS = (
    "the original's figures come from the same Ultralytics val pass: the original checkpoint's "
    "Detect head "
    "on the same neck features, through the same validator's postprocess and Ultralytics' own "
    "metric code"
)
"""How :func:`~det_calib.evaluation.map_check.ultralytics_val_heads` obtains the original model's
figures from the calibrated checkpoint's pass (quoted in the run's notes; a model family says its
own, ``val_words``)."""


_VAL_MAP_KEYS = ("map50_95", "map50", "mask_map50_95", "mask_map50", "pose_map50_95", "pose_map50")
"""The figures of a val that must agree for the calibrated checkpoint to count as identical at its equivalent floor."""

_VAL_BATCH = 16
"""Batch of the Ultralytics val checks: val's own default (they check plain val, not the capture)."""


def detection_change(
    inputs: Inputs,
    ckpt: Path,
    ev: Split,
    head: str,
    eval_boxes: pl.DataFrame,
    record: Calibrator,
    s: Settings,
) -> DetectionChange:
    """Measure what folding a per-class map into the model changes: capture the eval split through
    the calibrated checkpoint and compare with the original boxes rescored by the same map."""

    _log.info("%s head: measuring the folded per-class map's detections on `%s`", head, ev.name)
    # the same capture as the original's (its batch: 1 on a CPU, exactly single-image predict)
    cap = make_capturer(ckpt, s.capture_options(heads=(head,), imgsz=inputs.imgsz))
    folded = cap(ev.images, split=ev.name, image_names=ev.image_names(), progress=s.progress)
    del cap
    cal = calibrator_of(record)
    every = BoxView.from_boxes(eval_boxes, geometry=False, ignore=False)
    p_post = every.scored(cal).conf
    # compare above the calibrated conf that every class's raw capture floor maps to: above it the
    # original capture holds every box the post-hoc deployment would output
    nc = len(inputs.ds.names)
    zf = np.full(nc, logit_threshold(s.conf_floor) if s.conf_floor > 0 else -50.0)
    probe = BoxView(
        logit=zf, conf=sigmoid(zf), correct=None, cls=np.arange(nc), image_id=np.zeros(nc, np.int64)
    )  # one box per class at the capture floor
    floor = max(s.conf_floor, float(probe.scored(cal).conf.max()))
    post = eval_boxes.with_columns(pl.Series("conf_cal", p_post)).filter(pl.col("conf_cal") > floor)
    fold = folded.with_columns(pl.col("conf").cast(pl.Float64).alias("conf_cal")).filter(
        pl.col("conf_cal") > floor
    )

    def keys(df: pl.DataFrame, with_cls: bool) -> set:
        cols = [df["image_id"].to_numpy()] + [
            np.round(df[c].to_numpy() * 100).astype(np.int64) for c in ("x1", "y1", "x2", "y2")
        ]
        if with_cls:
            cols.append(df["cls"].to_numpy())
        return set(zip(*(c.tolist() for c in cols), strict=True))

    kp, kf = keys(post, True), keys(fold, True)
    pos_p, pos_f = keys(post, False), keys(fold, False)
    both_pos = pos_p & pos_f
    changed = len(both_pos) - len({k[:5] for k in kp & kf})
    thr = min(s.conf)
    post_k, fold_k = post.filter(pl.col("conf_cal") > thr), fold.filter(pl.col("conf_cal") > thr)
    kpk, kfk = keys(post_k, True), keys(fold_k, True)
    m0, m1 = coco_maps(
        eval_boxes,
        ev.gt,
        ev.sizes,
        [sigmoid(every.logit), p_post],
        max_dets=s.max_det,
        engine=s.map_engine,
    )
    m2 = coco_maps(
        folded,
        ev.gt,
        ev.sizes,
        [folded["conf"].to_numpy()],
        max_dets=s.max_det,
        engine=s.map_engine,
    )[0]
    return DetectionChange(
        split=ev.name,
        conf_floor=floor,
        boxes_posthoc=post.height,
        boxes_folded=fold.height,
        changed_class=int(max(changed, 0)),
        only_posthoc=len(kp - kf),
        only_folded=len(kf - kp),
        kept_conf=thr,
        kept_posthoc=post_k.height,
        kept_folded=fold_k.height,
        kept_only_posthoc=len(kpk - kfk),
        kept_only_folded=len(kfk - kpk),
        map50_95_original=m0["map50_95"],
        map50_95_posthoc=m1["map50_95"],
        map50_95_folded=m2["map50_95"],
        map50_original=m0["map50"],
        map50_posthoc=m1["map50"],
        map50_folded=m2["map50"],
    )


def run_ultralytics_checks(
    inputs: Inputs, ckpt: Path, ev: Split, records: dict[str, Calibrator], s: Settings
) -> dict[str, ValCheck]:
    """Ultralytics val of the calibrated checkpoint, every head in one pass (the other heads decoded
    from the features of the stock one, :func:`det_calib.evaluation.map_check.ultralytics_val_heads`);
    the original's figures from the same pass."""
    if s.coco_gt:
        return {
            h: ValCheck.not_run(
                ev.name, "Ultralytics val reads YOLO txt labels, not the --coco-gt file"
            )
            for h in inputs.heads
        }

    floors = {h: _calibrated_floor(records[h], s) for h in inputs.heads}
    confs = {h: (s.conf_floor, s.conf_floor if f is None else f) for h, f in floors.items()}
    with tempfile.TemporaryDirectory(prefix="det_calib_eval_") as tmp:
        yml = write_split_yaml(inputs.ds, ev, Path(tmp))
        # val's own default batch: the check is plain Ultralytics val (its letterbox and batching)
        family = family_of(
            inputs.yolo
        )  # a model family's original is validated on a pass of its own
        how = _SHARED_PASS if family is None else family.val_words
        _log.info(
            "Ultralytics val (%s): calibrated checkpoint, the original %s",
            " + ".join(f"{h} head" for h in inputs.heads),
            "on the same pass" if how == _SHARED_PASS else "on a pass of its own",
        )
        try:
            figures = ultralytics_val_heads(
                inputs.model,
                ckpt,
                yml,
                split="val",
                confs=confs,
                imgsz=inputs.imgsz,
                batch=_VAL_BATCH,
                device=s.device,
                own_rule=inputs.matching is not None and inputs.matching.by != "box",
            )
        except ValIncomplete as e:
            _log.warning("Ultralytics val not completed: %s", e)
            return {
                h: ValCheck(split=ev.name, completed=False, note=f"not completed: {e}")
                for h in inputs.heads
            }
        except Exception as e:  # val needs YOLO txt labels; with COCO JSON GT it may not run
            _log.warning("Ultralytics val skipped: %s", e)
            return {h: ValCheck.not_run(ev.name, str(e)) for h in inputs.heads}
        seen = _same_split(
            val_view_scan(Path(tmp), ev, len(inputs.ds.names)), ev, len(inputs.ds.names)
        )
    if seen.verified is False:
        _log.warning("Ultralytics val %s", seen.note)
        return dict.fromkeys(inputs.heads, seen)
    return {
        h: _check_of(ev.name, records[h], s, *figures[h], floors[h], how=how).with_seen(seen)
        for h in inputs.heads
    }


def _same_split(scan: ValScan, ev: Split, nc: int) -> ValCheck:
    """Whether val read the run's split: the same images and, per class, the same labelled instances
    (:func:`det_calib.pipeline.val_view.val_view_scan` of the pass). A :class:`ValCheck` with the counts:
    ``verified`` True, or False with a note that names the difference (and no mAP: the pass measured
    another split)."""
    expected = np.bincount(ev.gt["cls"].to_numpy().astype(np.int64), minlength=nc)[:nc]
    same = scan.images == list(range(len(ev.images))) and np.array_equal(scan.instances, expected)
    counts = dict(
        images_seen=len(scan.images),
        images_expected=len(ev.images),
        instances_seen=int(scan.instances.sum()),
        instances_expected=int(expected.sum()),
        skipped=scan.skipped,
    )
    if same:
        return ValCheck(split=ev.name, verified=True, **counts)
    note = (
        f"NOT verified: Ultralytics val saw {len(scan.images):,} of {len(ev.images):,} images, "
        f"{int(scan.instances.sum()):,} of {int(expected.sum()):,} instances"
    )
    differ = [i for i in range(nc) if scan.instances[i] != expected[i]]
    if differ and len(scan.images) == len(ev.images):
        note += f" (class {differ[0]}: {int(scan.instances[differ[0]])} against {int(expected[differ[0]])})"
    if scan.skipped:
        note += f"; first skipped: {scan.skipped[0]}"
    note += "; its mAP is not reported"
    return ValCheck(split=ev.name, verified=False, note=note, **counts)


def _equivalent_floor(record: Calibrator, floor: float) -> float | None:
    """The calibrated conf of a box whose raw conf is ``floor``, for a global monotone map (then
    ``calibrated > it`` keeps exactly the boxes with ``raw > floor``; :func:`equivalent_conf`);
    None for per-class maps."""
    if registry.method_spec(record.method).per_class:
        return None
    return equivalent_conf(calibrator_of(record), floor) if floor > 0 else 0.0


def _calibrated_floor(record: Calibrator, s: Settings) -> float | None:
    """Val's conf for the calibrated checkpoint: the equivalent of val's floor; None for a per-class
    map (then val's own floor)."""
    return _equivalent_floor(record, s.conf_floor) if s.conf_floor > 0 else 0.0


def _val_check(
    model: Path,
    ckpt: Path,
    yml: Path,
    split: str,
    record: Calibrator,
    s: Settings,
    kw: dict[str, Any],
    val_shared: Any,
) -> ValCheck:
    """One Ultralytics val pass of ``ckpt`` for one head
    (:func:`det_calib.evaluation.map_check._ultralytics_val_shared`): the calibrated figures are stock val's, the
    original's (at val's floor) come from the same pass.
    A pass whose NMS ran out of time gives a check "not completed", with no mAP."""

    floor = _calibrated_floor(record, s)
    try:
        r0, r1 = val_shared(
            model,
            ckpt,
            yml,
            conf=s.conf_floor if floor is None else floor,
            original_conf=s.conf_floor,
            **kw,
        )
    except ValIncomplete as e:
        _log.warning("Ultralytics val (%s head) not completed: %s", kw.get("head"), e)
        return ValCheck(split=split, completed=False, note=f"not completed: {e}")
    return _check_of(split, record, s, r0, r1, floor)


def _check_of(
    split: str,
    record: Calibrator,
    s: Settings,
    r0: dict[str, float],
    r1: dict[str, float],
    floor: float | None,
    *,
    how: str | None = None,
) -> ValCheck:
    """A head's :class:`ValCheck` from the figures of the shared pass: ``r0`` the original at val's floor,
    ``r1`` the calibrated checkpoint at ``floor`` (its equivalent; None: a per-class map, at val's floor);
    ``how`` the pass's words (default :data:`_SHARED_PASS`)."""

    how = f" How: {how or _SHARED_PASS}."
    if (
        floor is None
    ):  # per-class maps: no single floor keeps the candidate set; report what val measures
        diff = r1["map50_95"] - r0["map50_95"]
        note = (
            f"{record.method} is a per-class map: it can change which class wins a box (the argmax "
            "before NMS) "
            "and the cross-class top-k (max_det), so the calibrated model's detections can differ "
            "from the "
            f"original's (detection_change counts them); measured at val's floor {s.conf_floor}: "
            "mAP50-95 "
            f"{r0['map50_95']:.4f} -> {r1['map50_95']:.4f} ({diff:+.4f}), mAP50 "
            f"{r0['map50']:.4f} -> {r1['map50']:.4f}. Applied after the detector's own selection "
            "(det_calib.apply_calibrator), the detections stay the original ones." + how
        )
        return ValCheck(
            split=split,
            original=ValMap(**r0),
            calibrated=ValMap(**r1),
            identical_at_equivalent_floor=None,
            note=note,
        )
    r2 = r1
    same = all(
        math.isclose(r0[k], r2[k], abs_tol=1e-6) for k in _VAL_MAP_KEYS if r0.get(k) is not None
    )
    lower = floor < s.conf_floor
    what = (
        f"T={record.temperature:.3f}"
        if record.method == "temperature"
        else f"the {record.method} map"
    )
    note = (
        f"At the equivalent floor {floor:.6g} the candidate set of the calibrated checkpoint is "
        "the original "
        f"one: mAP {'identical' if same else 'differs'} ({r0['map50_95']:.4f} vs "
        f"{r2['map50_95']:.4f}). "
        f"At val's own floor {s.conf_floor}, {what} would move some low-score boxes "
        f"{'below' if lower else 'above'} "
        f"it ({'fewer' if lower else 'more'} candidates, mAP can differ slightly); that run is not "
        "repeated here."
    )
    if not same:
        note += " Differences this small come from float32 ties reordering equal-score boxes."
    return ValCheck(
        split=split,
        original=ValMap(**r0),
        calibrated=None,
        calibrated_equivalent_floor=ValMap(**r2),
        identical_at_equivalent_floor=same,
        note=note + how,
    )
