"""The Matching section of a segment, pose or OBB model's run: which overlap made a box correct (box
IoU, mask IoU, OKS or rotated IoU), in words, and a picture of a few eval images with their matched and
unmatched masks (segment), keypoints (pose, matched by OKS) or rotated boxes (OBB, matched by rotated IoU).

Written for runs that record a matching rule (``calibration.json``'s ``matching``: a segment, pose
or OBB model's run); a detector's report has no such section. The picture reads the eval split's images
and ground truth again from the run's data (only the images it shows), and the kept boxes' masks,
keypoints or rotated boxes from ``boxes.parquet`` (the ``segm``, ``kpts`` or ``xywhr`` column the
capture writes; a segment model's run on box labels captured no mask, so the picture's few images are
captured again with their masks); the pose and OBB panels come from :mod:`det_calib.report.task_examples`.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.data.box_view import kept_mask, usable_rows
from det_calib.data.matching_rule import MatchingRule
from det_calib.errors import InputError
from det_calib.record.run_folder import Run
from det_calib.tasks.segment.labels import SEGM_COLUMN, load_segment_split
from det_calib.tasks.segment.report_plots import MaskPanel, mask_examples_figure

from .context import ReportContext
from .document import Heading, Para
from .page import Page
from .task_examples import MAX_IMAGES, example_images, reread_split, run_task_panels
from .task_plots import pose_examples_figure, rotated_examples_figure

log = logging.getLogger(__name__)

__all__ = ["MAX_IMAGES", "example_images", "matching_section", "matching_words"]

_BOX_PAYLOAD = {"box": "the masks of the model's boxes are not compared",
                "oks": "the keypoints of the model's boxes are not compared",
                "rotated": "the rotated boxes are not compared; for an OBB model each box is the axis-aligned box "
                           "around its rotated box, predicted and ground truth"}


def matching_words(rule: MatchingRule, iou: float) -> str:
    """The matching rule of a run in words (the section's first paragraph)."""
    if rule.by == "oks":
        return _oks_words(rule, iou)
    if rule.by == "rotated":
        return (f"A box counts as correct when its rotated box overlaps a ground-truth rotated box of the same class "
                f"with rotated IoU >= {iou:g}, each ground truth taken at most once, boxes in descending conf, as "
                "Ultralytics' OBB validator decides a detection's correctness: the overlap is ProbIoU (one minus "
                "the Hellinger distance between the Gaussians of the two boxes, so boxes turned by a right angle "
                "with their sides swapped compare as the same box), not the polygons' IoU; an overlap tie goes to "
                "the earlier ground truth. The rotated boxes are the model's (centre, sides, angle) and the label "
                f"quadrilaterals' minimum-area rectangles. Why rotated IoU: {rule.reason} (--match {rule.option}). "
                "Every figure of this report (ECE, reliability, thresholds) counts correct boxes this way.")
    if rule.masks:
        return (f"A box counts as correct when its mask overlaps a ground-truth mask of the same class with "
                f"IoU >= {iou:g}, each ground truth taken at most once, boxes in descending conf (COCO's `segm` "
                "protocol, as pycocotools evaluates instance masks; crowd regions absorb the boxes on them, "
                "which are then left out). A box's mask is the one the model predicts for it, at the image's "
                "size; the ground-truth masks are the label polygons (or COCO segmentations) rasterised by "
                f"pycocotools. Why mask IoU: {rule.reason} (--match {rule.option}). Every figure of this report "
                "(ECE, reliability, thresholds) counts correct boxes this way.")
    # the reason names the task (det_calib.tasks.match_rule.choose_matching's words for --match box)
    payload = _BOX_PAYLOAD["rotated" if "OBB model" in rule.reason else "oks" if "pose model" in rule.reason else "box"]
    return (f"A box counts as correct when its box overlaps a ground-truth box of the same class with IoU >= "
            f"{iou:g}, each ground truth taken at most once, boxes in descending conf (COCO's `bbox` protocol); "
            f"{payload}. Why box IoU: {rule.reason} (--match {rule.option}).")


def _oks_words(rule: MatchingRule, iou: float) -> str:
    sigmas = ", ".join(f"{x:.4g}" for x in rule.sigmas) if rule.sigmas else "see calibration.json"
    return (f"A box counts as correct when its keypoints match a ground truth of the same class with OKS >= {iou:g} "
            "(object keypoint similarity: the mean over the ground truth's labelled keypoints of "
            "exp(-d^2 / (2 s^2 (2 sigma)^2)), d the distance, s^2 the object's area), each ground truth taken at "
            "most once, boxes in descending conf (COCO's `keypoints` protocol, as pycocotools evaluates it; a "
            "ground truth without labelled keypoints, or a crowd, absorbs boxes that are then left out). "
            f"Keypoints labelled but not visible (v = 1) count, unlabelled ones (v = 0) do not. Sigmas: {sigmas}. "
            f"Why OKS: {rule.reason} (--match {rule.option}). Every figure of this report (ECE, reliability, "
            "thresholds) counts correct boxes this way.")


def matching_section(page: Page, ctx: ReportContext) -> None:
    """The Matching section: the rule in words; the picture of a few eval images (the first head's boxes
    kept at the lowest --conf by the deployed scores)."""
    rule = ctx.run.result.matching
    if rule is None:
        return
    page.add(Heading(2, "Matching", "matching"), Para(matching_words(rule, ctx.run.settings.iou_match)))
    s = ctx.subjects[0]
    conf = s.low if s.low is not None else 0.25
    if rule.by in ("oks", "rotated"):
        _task_picture(page, ctx, rule, s.head, conf)
        return
    if SEGM_COLUMN not in ctx.run.boxes.columns:  # a pose or OBB model's run matched by box IoU: no picture
        return
    try:
        panels = example_panels(ctx.run, s.head, conf)
    except (InputError, OSError) as e:  # the data moved since the run, or a label changed
        page.add(Para(f"(The picture of matched masks is not drawn: {e}.)"))
        return
    if not panels:
        page.add(Para(f"(No picture: no box of the {s.head} head with a mask is kept at conf {conf:g}.)"))
        return
    how = "mask" if rule.masks else "box"
    page.fig(f"matching_{s.head}", mask_examples_figure(panels),
             f"{len(panels)} eval images, {s.head} head: the masks of the boxes kept at conf {conf:g} (deployed "
             f"scores), green where the box is correct by {how} IoU >= {ctx.run.settings.iou_match:g}, red where "
             "it is not; ground-truth masks outlined in white (a ground truth with no green mask on it was missed)",
             f"Eval images with kept masks coloured by whether they matched a ground truth by {how} IoU")


def _task_picture(page: Page, ctx: ReportContext, rule: MatchingRule, head: str, conf: float) -> None:
    """The picture of a pose run's matched keypoints or an OBB run's matched rotated boxes."""
    what = "keypoints" if rule.by == "oks" else "rotated boxes"
    try:
        panels = run_task_panels(ctx.run, head, conf)
    except (InputError, OSError) as e:  # the data moved since the run, or a label changed
        page.add(Para(f"(The picture of matched {what} is not drawn: {e}.)"))
        return
    if not panels:
        page.add(Para(f"(No picture: no box of the {head} head with {what} is kept at conf {conf:g}.)"))
        return
    t = ctx.run.settings.iou_match
    kept = (f"{len(panels)} eval images, {head} head: the {what} of the boxes kept at conf {conf:g} (deployed "
            "scores)")
    if rule.by == "oks":
        png = pose_examples_figure(panels)
        caption = (f"{kept}, green where the box is correct by OKS >= {t:g}, red where it is not, a matched box's "
                   "keypoints joined to its ground truth's; ground-truth keypoints in white (hollow: labelled but "
                   "occluded, v = 1; unlabelled ones are not drawn)")
    else:
        png = rotated_examples_figure(panels)
        caption = (f"{kept}, green where the box is correct by rotated IoU (ProbIoU) >= {t:g}, red where it is "
                   "not; ground-truth rotated boxes outlined in white (one with no green box on it was missed)")
    measure = "OKS" if rule.by == "oks" else "ProbIoU"
    page.fig(f"matching_{head}", png,
             f"{caption}. Each box is labelled with its class, conf and {measure}: the {measure} of its match, or "
             f"for a box that matched nothing its best {measure} with a ground truth of its class",
             f"Eval images with the kept boxes' {what} coloured by whether they matched a ground truth by {measure}")


def _kept(run: Run, head: str, conf: float) -> pl.DataFrame:
    """The head's eval boxes that the figures count (crowd-matched ones left out), kept at ``conf`` under the
    deployed scores (``calibrated``, else raw)."""
    b = run.boxes
    if SEGM_COLUMN not in b.columns:
        return b.clear()
    b = usable_rows(b, head=head, split=run.eval_split(head))
    return b.filter(kept_mask(b["calibrated" if "calibrated" in b.columns else "conf"].to_numpy(), conf))


def example_panels(run: Run, head: str, conf: float) -> list[MaskPanel]:
    """The picture's panels: up to :data:`MAX_IMAGES` eval images (:func:`example_images`) with their
    ground-truth masks and kept masks."""
    kept = _kept(run, head, conf)
    names = example_images(kept)
    if not names:
        return []
    sp, ids = reread_split(run, run.eval_split(head) or "", names,
                           lambda ds, split, limit: load_segment_split(ds, split, coco_gt=run.settings.coco_gt,
                                                                       limit=limit))
    names = [n for n in names if n in ids]
    kept = kept.filter(pl.col("image").is_in(names))
    if kept[SEGM_COLUMN].null_count():  # captured on box labels, without masks: rebuilt for these images
        kept = _rebuilt_masks(run, head, kept, [sp.images[ids[n]] for n in names], names)
    rows = {n: kept.filter(pl.col("image") == n) for n in names}
    return [_panel(run, sp, ids[n], rows[n], n) for n in names if rows[n].height]


def _rebuilt_masks(run: Run, head: str, kept: pl.DataFrame, images: list, names: list[str]) -> pl.DataFrame:
    """``kept`` with the ``segm`` of each box: the run's model captures ``images`` again with the run's capture
    settings (one image a pass, masks kept) and each kept box takes the mask of the captured box of its image
    and class nearest it (the same box at batch 1; within half a pixel at any batch)."""
    from det_calib.capture.predictor import Capturer

    s = run.settings
    cap = Capturer(run.result.model, heads=(head,), conf=s.conf_floor, iou=s.nms_iou, max_det=s.max_det,
                   imgsz=s.imgsz, workers=1, payload=True)
    again = cap(images, image_names=names, progress=False)
    corners = ("x1", "y1", "x2", "y2")
    segm: list[bytes | None] = []
    for r in kept.select("image", "cls", *corners, SEGM_COLUMN).iter_rows():
        if r[-1] is not None:
            segm.append(r[-1])
            continue
        same = again.filter((pl.col("image") == r[0]) & (pl.col("cls") == r[1]))
        gap = np.abs(same.select(corners).to_numpy() - np.array(r[2:6])).max(1)
        segm.append(same[SEGM_COLUMN][int(gap.argmin())] if len(gap) and gap.min() < 0.5 else None)
    return kept.with_columns(pl.Series(SEGM_COLUMN, segm, dtype=pl.Binary)).filter(pl.col(SEGM_COLUMN).is_not_null())


def _decode(counts: bytes, w: int, h: int) -> np.ndarray:
    from pycocotools import mask as mask_utils

    with warnings.catch_warnings():  # pycocotools' decode under numpy 2 warns of its own array protocol
        warnings.filterwarnings("ignore", message=".*copy keyword", category=DeprecationWarning)
        return mask_utils.decode({"size": [h, w], "counts": counts})


def _panel(run: Run, sp, image_id: int, rows: pl.DataFrame, name: str) -> MaskPanel:
    import cv2  # Ultralytics' own image reader (same orientation as the capture)

    w, h = (int(v) for v in sp.sizes[image_id])
    im = cv2.imread(str(sp.images[image_id]), cv2.IMREAD_COLOR)
    if im is None:
        raise InputError(f"cannot read image {sp.images[image_id]}")
    g = sp.gt.filter(pl.col("image_id") == image_id)
    gt = [_decode(c, w, h) for c in g[SEGM_COLUMN].to_list() if c is not None]
    gt_boxes = [tuple(r[:4]) for r in g.select("x1", "y1", "x2", "y2", SEGM_COLUMN).iter_rows() if r[4] is None]
    rows = rows.sort("conf")  # the most confident on top
    state = ["matched" if ok else "unmatched" for ok in rows["correct"].to_list()]
    score = rows["calibrated"] if "calibrated" in rows.columns else rows["conf"]
    labels = [f"{run.class_name(int(c))} {s:.2f}" for c, s in zip(rows["cls"].to_list(), score.to_list())]
    n_ok = state.count("matched")
    return MaskPanel(
        title=f"{Path(name).name}: {n_ok} matched, {len(state) - n_ok} not",
        image=cv2.cvtColor(im, cv2.COLOR_BGR2RGB),
        gt=np.stack(gt) if gt else np.zeros((0, h, w), np.uint8),
        masks=np.stack([_decode(c, w, h) for c in rows[SEGM_COLUMN].to_list()]),
        state=state, labels=labels, corners=list(zip(rows["x1"].to_list(), rows["y1"].to_list())),
        gt_boxes=gt_boxes,
    )
