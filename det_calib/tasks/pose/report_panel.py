"""A pose model's picture in the report's Matching section (the report layer of the pose task's folder): the
rule in words, and a few eval images with the kept boxes' keypoints, matched and unmatched by OKS, over the
ground truth's (built from a run folder by :func:`det_calib.report.task_examples.run_task_panels` with
:data:`PANELS`; :data:`PICTURE` draws them on the report's page).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from det_calib.data.ground_truth import Split
from det_calib.data.matching_rule import MatchingRule
from det_calib.matching.one_to_one import MatchResult
from det_calib.report.context import ReportContext
from det_calib.report.page import Page
from det_calib.report.plots import COLOURS, GT_EDGE
from det_calib.report.task_examples import (
    GT_INDEX,
    MAX_IMAGES,
    TaskPanels,
    box_states,
    box_texts,
    chosen_rows,
    matched_picture,
    panel_title,
    read_rgb,
)
from det_calib.report.task_plots import GT_DARK, draw_frame, draw_label, examples_figure
from det_calib.tasks.pose.labels import KPTS_COLUMN, load_pose_split, split_keypoints
from det_calib.tasks.pose.matching import match_keypoints, table_keypoints

__all__ = ["BOX_NOTE", "PANELS", "PICTURE", "PosePanel", "WORDS", "pose_examples_figure",
           "pose_matching_words", "pose_panels", "pose_picture", "pose_rematch"]


@dataclass(frozen=True)
class PosePanel:
    """One image of the pose figure.

    Attributes:
        title: The panel's title (the image's name and its counts).
        image: (H, W, 3) uint8 RGB.
        gt_kpts: (m, K, 3) ground-truth keypoints ``x, y, v`` in pixels (``v = 0``: not labelled, not drawn;
            ``v = 1``: labelled, occluded, drawn hollow; ``v = 2``: visible, drawn filled).
        kpts: (n, K, 2 or 3) keypoints of the kept boxes (a third column, the keypoint score, is not used).
        state: Per kept box ``"matched"`` or ``"unmatched"``.
        labels: Per kept box its text (class, conf, OKS), drawn at the top left of its box.
        boxes: Per kept box ``(x1, y1, x2, y2)``, outlined thin in its state's colour.
        gt_index: Per kept box the row of ``gt_kpts`` it matched, else -1 (a matched box's keypoints are
            joined to their ground truth's by thin lines).
    """

    title: str
    image: np.ndarray
    gt_kpts: np.ndarray
    kpts: np.ndarray
    state: Sequence[str]
    labels: Sequence[str] = field(default_factory=tuple)
    boxes: Sequence[tuple[float, float, float, float]] = field(default_factory=tuple)
    gt_index: Sequence[int] = field(default_factory=tuple)


def _gt_points(ax, gt_kpts: np.ndarray) -> None:
    for v, face in ((2, GT_EDGE), (1, "none")):
        pts = gt_kpts[gt_kpts[..., 2] == v]
        if len(pts):
            ax.scatter(pts[:, 0], pts[:, 1], s=22, facecolors=face, edgecolors=GT_EDGE if v == 1 else GT_DARK,
                       linewidths=0.9, zorder=3)


def _pose_panel(ax, p: PosePanel) -> None:
    draw_frame(ax, p.title, p.image)
    _gt_points(ax, p.gt_kpts)
    gt_index = list(p.gt_index) or [-1] * len(p.state)
    for i, st in enumerate(p.state):
        col = COLOURS[st]
        xy = np.asarray(p.kpts[i], dtype=np.float64)[:, :2]
        if i < len(p.boxes):
            x1, y1, x2, y2 = p.boxes[i]
            ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor=col, linewidth=0.6,
                                   linestyle=":", zorder=2))
        g = gt_index[i]
        if g >= 0:
            gk = p.gt_kpts[g]
            for (x, y), (gx, gy, v) in zip(xy, gk):
                if v > 0:
                    ax.plot([x, gx], [y, gy], color=col, linewidth=0.7, zorder=4)
        ax.scatter(xy[:, 0], xy[:, 1], s=10, color=col, edgecolors="white", linewidths=0.4, zorder=5)
        if i < len(p.labels) and i < len(p.boxes):
            draw_label(ax, p.labels[i], p.boxes[i], st, (p.image.shape[1], p.image.shape[0]))


def pose_examples_figure(panels: Sequence[PosePanel], *, title: str | None = None) -> bytes:
    """A row of images: ground-truth keypoints in white (hollow where labelled but occluded), each kept box's
    keypoints in green (matched) or red (unmatched), a matched box's joined to its ground truth's. PNG bytes.

    Raises:
        ValueError: No panel.
    """
    dot = {"marker": "o", "linestyle": "none", "markersize": 5}
    handles = [Line2D([], [], color=COLOURS["matched"], label="keypoints, box matched (correct)", **dot),
               Line2D([], [], color=COLOURS["unmatched"], label="keypoints, box unmatched", **dot),
               Line2D([], [], markerfacecolor=GT_EDGE, markeredgecolor=GT_DARK, color="none",
                      label="ground truth (hollow: occluded)", **dot)]
    return examples_figure(panels, _pose_panel, handles, title)


def pose_panels(boxes: pl.DataFrame, split: Split, match: MatchResult, *, names=None, score: str = "conf",
                conf: float = 0.25, n: int = MAX_IMAGES) -> list[PosePanel]:
    """Up to ``n`` panels of eval images: each kept pose box's keypoints (``kpts``), its state and OKS
    (``match.iou``: the match's, else the best with a same-class ground truth), over the image's
    ground-truth keypoints. ``names``: class id -> name for the labels (default: the ids)."""
    gt_img = split.gt["image_id"].to_numpy()
    all_kpts = split_keypoints(split)
    panels = []
    for i, rows in chosen_rows(boxes, split, match, KPTS_COLUMN, score, conf, n):
        on = np.flatnonzero(gt_img == i)
        local = np.full(len(gt_img), -1, dtype=np.int64)
        local[on] = np.arange(len(on))
        g = rows[GT_INDEX].to_numpy()
        state = box_states(rows)
        panels.append(PosePanel(
            title=panel_title(rows["image"][0], state), image=read_rgb(split.images[i]), gt_kpts=all_kpts[on],
            kpts=np.stack([np.asarray(k, dtype=np.float64) for k in rows[KPTS_COLUMN].to_list()]),
            state=state, labels=box_texts(rows, names, score, "OKS"),
            boxes=list(rows.select("x1", "y1", "x2", "y2").iter_rows()),
            gt_index=[int(local[j]) if ok and j >= 0 else -1 for j, ok in zip(g, rows["correct"].to_list())]))
    return panels


def pose_rematch(rows: pl.DataFrame, sp: Split, rule: MatchingRule, iou: float) -> MatchResult:
    """The run's OKS matching of ``rows`` (every box of their images, in the re-read split's ids) again, with
    the ground-truth row each box took."""
    g = sp.gt
    gk = split_keypoints(sp)
    dk = table_keypoints(rows, KPTS_COLUMN, gk.shape[1])
    return match_keypoints(rows["image_id"], rows["cls"], rows["conf"], dk, g["image_id"], g["cls"], gk,
                           g["area"], g.select("x1", "y1", "x2", "y2").to_numpy(),
                           g["crowd"] if "crowd" in g.columns else None,
                           g["num_keypoints"] if "num_keypoints" in g.columns else None,
                           oks_threshold=iou, sigmas=rule.sigmas)


def pose_matching_words(rule: MatchingRule, iou: float) -> str:
    """A run matched by OKS, in words (the Matching section's first paragraph)."""
    sigmas = ", ".join(f"{x:.4g}" for x in rule.sigmas) if rule.sigmas else "see calibration.json"
    return (f"A box counts as correct when its keypoints match a ground truth of the same class with OKS >= {iou:g} "
            "(object keypoint similarity: the mean over the ground truth's labelled keypoints of "
            "exp(-d^2 / (2 s^2 (2 sigma)^2)), d the distance, s^2 the object's area), each ground truth taken at "
            "most once, boxes in descending conf (COCO's `keypoints` protocol, as pycocotools evaluates it; a "
            "ground truth without labelled keypoints, or a crowd, absorbs boxes that are then left out). "
            f"Keypoints labelled but not visible (v = 1) count, unlabelled ones (v = 0) do not. Sigmas: {sigmas}. "
            f"Why OKS: {rule.reason} (--match {rule.option}). Every figure of this report (ECE, reliability, "
            "thresholds) counts correct boxes this way.")


def pose_picture(page: Page, ctx: ReportContext, rule: MatchingRule, head: str, conf: float) -> None:
    """The picture of a pose run matched by OKS: its kept boxes' keypoints, matched and unmatched (none for a run
    matched by box IoU)."""
    if rule.by != "oks":
        return
    matched_picture(page, ctx, head, conf, what="keypoints", figure=pose_examples_figure, measure="OKS",
                    caption=lambda kept, t: (
                        f"{kept}, green where the box is correct by OKS >= {t:g}, red where it is not, a matched "
                        "box's keypoints joined to its ground truth's; ground-truth keypoints in white (hollow: "
                        "labelled but occluded, v = 1; unlabelled ones are not drawn)"))


PANELS = TaskPanels(column=KPTS_COLUMN, load=load_pose_split, rematch=pose_rematch, build=pose_panels)
"""How :func:`~det_calib.report.task_examples.run_task_panels` builds the picture's panels from a run."""
PICTURE = pose_picture
"""The picture on the Matching section's page (:mod:`det_calib.report.matching_section` calls it)."""
WORDS = pose_matching_words
"""The run's own rule in words."""
BOX_NOTE = "the keypoints of the model's boxes are not compared"
"""What a run matched by box IoU leaves out, in words."""
