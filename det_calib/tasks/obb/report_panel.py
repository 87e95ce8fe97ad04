"""An OBB model's picture in the report's Matching section (the report layer of the OBB task's folder): the rule
in words, and a few eval images with the kept boxes' rotated boxes, matched and unmatched by rotated IoU, over
the ground truth's (built from a run folder by :func:`det_calib.report.task_examples.run_task_panels` with
:data:`PANELS`; :data:`PICTURE` draws them on the report's page).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from matplotlib.patches import Patch, Polygon

from det_calib.data.ground_truth import Split
from det_calib.data.matching_rule import MatchingRule
from det_calib.matching.one_to_one import MatchResult
from det_calib.report.context import ReportContext
from det_calib.report.page import Page
from det_calib.report.plots import COLOURS, GT_EDGE
from det_calib.report.task_examples import (
    MAX_IMAGES,
    TaskPanels,
    box_states,
    box_texts,
    chosen_rows,
    matched_picture,
    panel_title,
    read_rgb,
)
from det_calib.report.task_plots import draw_frame, draw_label, examples_figure
from det_calib.tasks.obb.labels import XYWHR_COLUMN, load_obb_split, split_xywhr
from det_calib.tasks.obb.matching import match_rotated

__all__ = ["BOX_NOTE", "PANELS", "PICTURE", "RotatedPanel", "WORDS", "rotated_examples_figure",
           "rotated_matching_words", "rotated_panels", "rotated_picture", "rotated_rematch", "xywhr_corners"]


@dataclass(frozen=True)
class RotatedPanel:
    """One image of the OBB figure.

    Attributes:
        title: The panel's title.
        image: (H, W, 3) uint8 RGB.
        gt: (m, 5) ground-truth rotated boxes ``cx, cy, w, h, angle`` (pixels, radians), outlined in white.
        boxes: (n, 5) rotated boxes of the kept boxes, outlined in their state's colour.
        state: Per kept box ``"matched"`` or ``"unmatched"``.
        labels: Per kept box its text (class, conf, ProbIoU), drawn at its highest corner.
    """

    title: str
    image: np.ndarray
    gt: np.ndarray
    boxes: np.ndarray
    state: Sequence[str]
    labels: Sequence[str] = field(default_factory=tuple)


def xywhr_corners(xywhr) -> np.ndarray:
    """(n, 4, 2) corners of rotated boxes ``cx, cy, w, h, angle``, in order around the box (Ultralytics'
    ``xywhr2xyxyxyxy`` order).

    >>> xywhr_corners([[10, 5, 4, 2, 0.0]]).tolist()
    [[[12.0, 6.0], [12.0, 4.0], [8.0, 4.0], [8.0, 6.0]]]
    """
    b = np.asarray(xywhr, dtype=np.float64).reshape(-1, 5)
    c, s = np.cos(b[:, 4]), np.sin(b[:, 4])
    along = np.stack([c, s], 1) * b[:, 2:3] / 2
    across = np.stack([-s, c], 1) * b[:, 3:4] / 2
    ctr = b[:, :2]
    return np.stack([ctr + along + across, ctr + along - across, ctr - along - across, ctr - along + across], 1)


def _rotated_panel(ax, p: RotatedPanel) -> None:
    draw_frame(ax, p.title, p.image)
    for q in xywhr_corners(p.gt):
        ax.add_patch(Polygon(q, closed=True, fill=False, edgecolor=GT_EDGE, linewidth=1.0, zorder=3))
    for i, (q, st) in enumerate(zip(xywhr_corners(p.boxes), p.state)):
        ax.add_patch(Polygon(q, closed=True, fill=False, edgecolor=COLOURS[st], linewidth=1.1, zorder=4))
        if i < len(p.labels):
            (x1, y1), (x2, _) = q.min(0), q.max(0)
            draw_label(ax, p.labels[i], (x1, y1, x2, y1), st, (p.image.shape[1], p.image.shape[0]))


def rotated_examples_figure(panels: Sequence[RotatedPanel], *, title: str | None = None) -> bytes:
    """A row of images: ground-truth rotated boxes outlined in white, each kept box's rotated box in green
    (matched) or red (unmatched). PNG bytes.

    Raises:
        ValueError: No panel.
    """
    handles = [Patch(facecolor="none", edgecolor=COLOURS["matched"], label="rotated box matched (correct)"),
               Patch(facecolor="none", edgecolor=COLOURS["unmatched"], label="rotated box unmatched"),
               Patch(facecolor="none", edgecolor="#444444", label="ground truth (white)")]
    return examples_figure(panels, _rotated_panel, handles, title)
def rotated_panels(boxes: pl.DataFrame, split: Split, match: MatchResult, *, names=None, score: str = "conf",
                   conf: float = 0.25, n: int = MAX_IMAGES) -> list[RotatedPanel]:
    """Up to ``n`` panels of eval images: each kept OBB box's rotated box (``xywhr``), its state and
    ProbIoU (``match.iou``: the match's, else the best with a same-class ground truth), over the image's
    ground-truth rotated boxes. ``names``: class id -> name for the labels (default: the ids)."""
    gt_img = split.gt["image_id"].to_numpy()
    gt = split_xywhr(split)
    panels = []
    for i, rows in chosen_rows(boxes, split, match, XYWHR_COLUMN, score, conf, n):
        state = box_states(rows)
        panels.append(RotatedPanel(
            title=panel_title(rows["image"][0], state), image=read_rgb(split.images[i]), gt=gt[gt_img == i],
            boxes=np.asarray(rows[XYWHR_COLUMN].to_list(), dtype=np.float64).reshape(-1, 5),
            state=state, labels=box_texts(rows, names, score, "ProbIoU")))
    return panels


def rotated_rematch(rows: pl.DataFrame, sp: Split, rule: MatchingRule, iou: float) -> MatchResult:
    """The run's rotated-IoU matching of ``rows`` (every box of their images, in the re-read split's ids) again,
    with the ground-truth row each box took."""
    g = sp.gt
    return match_rotated(rows["image_id"], rows["cls"], rows["conf"],
                         np.asarray(rows[XYWHR_COLUMN].to_list(), dtype=np.float64).reshape(-1, 5),
                         g["image_id"], g["cls"], split_xywhr(sp), iou_threshold=iou)


def rotated_matching_words(rule: MatchingRule, iou: float) -> str:
    """A run matched by rotated IoU, in words (the Matching section's first paragraph)."""
    return (f"A box counts as correct when its rotated box overlaps a ground-truth rotated box of the same class "
            f"with rotated IoU >= {iou:g}, each ground truth taken at most once, boxes in descending conf, as "
            "Ultralytics' OBB validator decides a detection's correctness: the overlap is ProbIoU (one minus "
            "the Hellinger distance between the Gaussians of the two boxes, so boxes turned by a right angle "
            "with their sides swapped compare as the same box), not the polygons' IoU; an overlap tie goes to "
            "the earlier ground truth. The rotated boxes are the model's (centre, sides, angle) and the label "
            f"quadrilaterals' minimum-area rectangles. Why rotated IoU: {rule.reason} (--match {rule.option}). "
            "Every figure of this report (ECE, reliability, thresholds) counts correct boxes this way.")


def rotated_picture(page: Page, ctx: ReportContext, rule: MatchingRule, head: str, conf: float) -> None:
    """The picture of an OBB run matched by rotated IoU: its kept boxes' rotated boxes, matched and unmatched
    (none for a run matched by box IoU)."""
    if rule.by != "rotated":
        return
    matched_picture(page, ctx, head, conf, what="rotated boxes", figure=rotated_examples_figure, measure="ProbIoU",
                    caption=lambda kept, t: (
                        f"{kept}, green where the box is correct by rotated IoU (ProbIoU) >= {t:g}, red where it is "
                        "not; ground-truth rotated boxes outlined in white (one with no green box on it was missed)"))


PANELS = TaskPanels(column=XYWHR_COLUMN, load=load_obb_split, rematch=rotated_rematch, build=rotated_panels)
"""How :func:`~det_calib.report.task_examples.run_task_panels` builds the picture's panels from a run."""
PICTURE = rotated_picture
"""The picture on the Matching section's page (:mod:`det_calib.report.matching_section` calls it)."""
WORDS = rotated_matching_words
"""The run's own rule in words."""
BOX_NOTE = ("the rotated boxes are not compared; for an OBB model each box is the axis-aligned box around its "
            "rotated box, predicted and ground truth")
"""What a run matched by box IoU leaves out, in words."""
