"""A segment model's picture in the report's Matching section (the report layer of the segment task's folder):
the rule in words, and a few eval images with the kept boxes' masks, matched and unmatched, over the
ground-truth masks (drawn by :mod:`det_calib.tasks.segment.report_plots`). The eval images and their ground
truth are read again from the run's data (only the images it shows), the kept boxes' masks from
``boxes.parquet``'s ``segm`` column; a run on box labels captured no mask, so the picture's few images are
captured again with their masks.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.capture.predictor import Capturer
from det_calib.data.box_view import kept_mask, usable_rows
from det_calib.data.matching_rule import MatchingRule
from det_calib.errors import InputError
from det_calib.record.run_folder import Run
from det_calib.report.context import ReportContext
from det_calib.report.document import Para
from det_calib.report.page import Page
from det_calib.report.task_examples import example_images, reread_split
from det_calib.tasks.segment.labels import SEGM_COLUMN, load_segment_split
from det_calib.tasks.segment.report_plots import MaskPanel, mask_examples_figure

__all__ = ["BOX_NOTE", "PICTURE", "WORDS", "example_panels", "mask_matching_words", "mask_picture"]


def mask_matching_words(rule: MatchingRule, iou: float) -> str:
    """A run matched by mask IoU, in words (the Matching section's first paragraph)."""
    return (
        "A box counts as correct when its mask overlaps a ground-truth mask of the same class "
        "with "
        f"IoU >= {iou:g}, each ground truth taken at most once, boxes in descending conf (COCO's "
        "`segm` "
        "protocol, as pycocotools evaluates instance masks; crowd regions absorb the boxes on "
        "them, "
        "which are then left out). A box's mask is the one the model predicts for it, at the "
        "image's "
        "size; the ground-truth masks are the label polygons (or COCO segmentations) rasterised by "
        f"pycocotools. Why mask IoU: {rule.reason} (--match {rule.option}). Every figure of this "
        "report "
        "(ECE, reliability, thresholds) counts correct boxes this way."
    )


def mask_picture(
    page: Page, ctx: ReportContext, rule: MatchingRule, head: str, conf: float
) -> None:
    """The picture of a segment run (matched by mask or by box IoU): its kept boxes' masks, green where the box
    is correct, red where it is not."""
    if SEGM_COLUMN not in ctx.run.boxes.columns:
        return
    try:
        panels = example_panels(ctx.run, head, conf)
    except (InputError, OSError) as e:  # the data moved since the run, or a label changed
        page.add(Para(f"(The picture of matched masks is not drawn: {e}.)"))
        return
    if not panels:
        page.add(
            Para(f"(No picture: no box of the {head} head with a mask is kept at conf {conf:g}.)")
        )
        return
    how = "mask" if rule.by == "mask" else "box"
    page.fig(
        f"matching_{head}",
        mask_examples_figure(panels),
        f"{len(panels)} eval images, {head} head: the masks of the boxes kept at conf {conf:g} "
        "(deployed "
        f"scores), green where the box is correct by {how} IoU >= {ctx.run.settings.iou_match:g}, "
        "red where "
        "it is not; ground-truth masks outlined in white (a ground truth with no green mask on it "
        "was missed)",
        f"Eval images with kept masks coloured by whether they matched a ground truth by {how} IoU",
    )


def _kept(run: Run, head: str, conf: float) -> pl.DataFrame:
    """The head's eval boxes that the figures count (crowd-matched ones left out), kept at ``conf`` under the
    deployed scores (``calibrated``, else raw)."""
    b = run.boxes
    if SEGM_COLUMN not in b.columns:
        return b.clear()
    b = usable_rows(b, head=head, split=run.eval_split(head))
    return b.filter(
        kept_mask(b["calibrated" if "calibrated" in b.columns else "conf"].to_numpy(), conf)
    )


def example_panels(run: Run, head: str, conf: float) -> list[MaskPanel]:
    """The picture's panels: up to :data:`MAX_IMAGES` eval images (:func:`example_images`) with their
    ground-truth masks and kept masks."""
    kept = _kept(run, head, conf)
    names = example_images(kept)
    if not names:
        return []
    sp, ids = reread_split(
        run,
        run.eval_split(head) or "",
        names,
        lambda ds, split, limit: load_segment_split(
            ds, split, coco_gt=run.settings.coco_gt, limit=limit
        ),
    )
    names = [n for n in names if n in ids]
    kept = kept.filter(pl.col("image").is_in(names))
    if kept[
        SEGM_COLUMN
    ].null_count():  # captured on box labels, without masks: rebuilt for these images
        kept = _rebuilt_masks(run, head, kept, [sp.images[ids[n]] for n in names], names)
    rows = {n: kept.filter(pl.col("image") == n) for n in names}
    return [_panel(run, sp, ids[n], rows[n], n) for n in names if rows[n].height]


def _rebuilt_masks(
    run: Run, head: str, kept: pl.DataFrame, images: list, names: list[str]
) -> pl.DataFrame:
    """``kept`` with the ``segm`` of each box: the run's model captures ``images`` again with the run's capture
    settings (one image a pass, masks kept) and each kept box takes the mask of the captured box of its image
    and class nearest it (the same box at batch 1; within half a pixel at any batch)."""

    s = run.settings
    cap = Capturer(
        run.result.model,
        heads=(head,),
        conf=s.conf_floor,
        iou=s.nms_iou,
        max_det=s.max_det,
        imgsz=s.imgsz,
        workers=1,
        payload=True,
    )
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
    return kept.with_columns(pl.Series(SEGM_COLUMN, segm, dtype=pl.Binary)).filter(
        pl.col(SEGM_COLUMN).is_not_null()
    )


def _decode(counts: bytes, w: int, h: int) -> np.ndarray:
    from pycocotools import mask as mask_utils

    with (
        warnings.catch_warnings()
    ):  # pycocotools' decode under numpy 2 warns of its own array protocol
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
    gt_boxes = [
        tuple(r[:4])
        for r in g.select("x1", "y1", "x2", "y2", SEGM_COLUMN).iter_rows()
        if r[4] is None
    ]
    rows = rows.sort("conf")  # the most confident on top
    state = ["matched" if ok else "unmatched" for ok in rows["correct"].to_list()]
    score = rows["calibrated"] if "calibrated" in rows.columns else rows["conf"]
    labels = [
        f"{run.class_name(int(c))} {s:.2f}" for c, s in zip(rows["cls"].to_list(), score.to_list())
    ]
    n_ok = state.count("matched")
    return MaskPanel(
        title=f"{Path(name).name}: {n_ok} matched, {len(state) - n_ok} not",
        image=cv2.cvtColor(im, cv2.COLOR_BGR2RGB),
        gt=np.stack(gt) if gt else np.zeros((0, h, w), np.uint8),
        masks=np.stack([_decode(c, w, h) for c in rows[SEGM_COLUMN].to_list()]),
        state=state,
        labels=labels,
        corners=list(zip(rows["x1"].to_list(), rows["y1"].to_list())),
        gt_boxes=gt_boxes,
    )


PICTURE = mask_picture
"""The picture on the Matching section's page (:mod:`det_calib.report.matching_section` calls it)."""
WORDS = mask_matching_words
"""The run's own rule in words."""
BOX_NOTE = "the masks of the model's boxes are not compared"
"""What a run matched by box IoU leaves out, in words."""
