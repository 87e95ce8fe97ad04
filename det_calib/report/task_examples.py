"""The panels of the matching pictures of pose and OBB models, from a box table, the split's ground truth
and the matching result (drawn by :mod:`det_calib.report.task_plots`).

Each builder takes one head's box table with the task's payload column (``kpts`` for pose, ``xywhr`` for
OBB, as the capture writes them), the :class:`~det_calib.data.ground_truth.Split` the boxes were matched
against (read by :func:`~det_calib.data.pose.load_pose_split` / :func:`~det_calib.data.obb.load_obb_split`;
a box's ``image_id`` is the split's image index, as the matching took it) and the
:class:`~det_calib.matching.one_to_one.MatchResult` of
:func:`~det_calib.matching.oks.match_keypoints` / :func:`~det_calib.matching.rotated.match_rotated`,
row for row. It keeps the boxes whose ``score`` is above ``conf`` (and leaves out those the matching
ignored), chooses up to ``n`` images (:func:`example_images`: first those with both a matched and an
unmatched kept box) and reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.data.box_table import KPTS_COLUMN, XYWHR_COLUMN
from det_calib.data.box_view import kept_mask
from det_calib.data.ground_truth import Split
from det_calib.data.obb import split_xywhr
from det_calib.data.pose import split_keypoints
from det_calib.errors import InputError
from det_calib.matching.one_to_one import MatchResult

from .task_plots import PosePanel, RotatedPanel

__all__ = ["MAX_IMAGES", "example_images", "kept_matches", "pose_panels", "read_rgb", "rotated_panels"]

MAX_IMAGES = 4
"""Images a picture shows at most."""
MEASURE = "measure"
"""The column :func:`kept_matches` adds: the match's OKS or ProbIoU (the best one where unmatched)."""
GT_INDEX = "gt_index"


def example_images(kept: pl.DataFrame, n: int = MAX_IMAGES) -> list[str]:
    """Up to ``n`` image names, in image order: first those with both a matched and an unmatched kept
    box, then those with any kept box.

    >>> t = pl.DataFrame({"image": ["a", "a", "b", "c", "c"], "image_id": [0, 0, 1, 2, 2],
    ...                   "correct": [True, False, True, True, False]})
    >>> example_images(t, 2), example_images(t, 3)
    (['a', 'c'], ['a', 'c', 'b'])
    """
    per = (kept.group_by("image_id", maintain_order=True)
           .agg(pl.col("image").first(), pl.col("correct").any().alias("hit"), (~pl.col("correct")).any().alias("miss"))
           .sort("image_id"))
    both = per.filter(pl.col("hit") & pl.col("miss"))["image"].to_list()
    rest = per.filter(~(pl.col("hit") & pl.col("miss")))["image"].to_list()
    return (both + rest)[:n]


def kept_matches(boxes: pl.DataFrame, match: MatchResult, *, score: str = "conf", conf: float = 0.25) -> pl.DataFrame:
    """The rows of ``boxes`` kept at ``conf`` by ``score`` and not ignored by ``match``, with the match's
    ``correct``, :data:`MEASURE` and ``gt_index``.

    Raises:
        ValueError: ``match`` is not row for row with ``boxes``; ``boxes`` holds several heads; no ``score``.
    """
    if len(match) != boxes.height:
        raise ValueError(f"Expected a matching result of {boxes.height} rows (one per box), but got {len(match)}")
    if "head" in boxes.columns and boxes["head"].n_unique() > 1:
        raise ValueError(f"Expected the boxes of one head, but got {sorted(boxes['head'].unique().to_list())}")
    if score not in boxes.columns:
        raise ValueError(f"Expected a `{score}` column in the boxes, but got {boxes.columns}")
    t = boxes.with_columns(pl.Series("correct", np.asarray(match.correct, dtype=bool)),
                           pl.Series(MEASURE, np.asarray(match.iou, dtype=np.float64)),
                           pl.Series(GT_INDEX, np.asarray(match.gt_index, dtype=np.int64)))
    keep = kept_mask(t[score].to_numpy(), conf) & ~np.asarray(match.ignore, dtype=bool)
    return t.filter(pl.Series(keep))


def read_rgb(path: Path) -> np.ndarray:
    """An image as (H, W, 3) uint8 RGB, read by OpenCV as Ultralytics reads it (same orientation as the capture)."""
    import cv2

    im = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if im is None:
        raise InputError(f"cannot read image {path}")
    return cv2.cvtColor(im, cv2.COLOR_BGR2RGB)


def _chosen(boxes: pl.DataFrame, split: Split, match: MatchResult, column: str, score: str, conf: float,
            n: int) -> list[tuple[int, pl.DataFrame]]:
    """(image id, its kept rows, least confident first) of each chosen image."""
    if column not in boxes.columns:
        raise ValueError(f"Expected a `{column}` column in the boxes (the capture of the task's model), "
                         f"but got {boxes.columns}")
    kept = kept_matches(boxes, match, score=score, conf=conf).filter(pl.col(column).is_not_null())
    out = []
    for name in example_images(kept, n):
        rows = kept.filter(pl.col("image") == name).sort(score, maintain_order=True)
        i = int(rows["image_id"][0])
        if not 0 <= i < len(split.images):
            raise ValueError(f"box image_id {i} is not an image of split `{split.name}` ({len(split.images)} images)")
        out.append((i, rows))
    return out


def _texts(rows: pl.DataFrame, names: Mapping[int, str] | Sequence[str] | None, score: str, measure: str) -> list[str]:
    def name(c: int) -> str:
        try:
            return str(names[c]) if names is not None else str(c)
        except (KeyError, IndexError):
            return str(c)

    shown = np.clip(rows[MEASURE].to_numpy(), 0.0, 1.0)  # ProbIoU's guards leave -5e-8 for boxes far apart
    return [f"{name(int(c))} {s:.2f}, {measure} {m:.2f}"
            for c, s, m in zip(rows["cls"].to_list(), rows[score].to_list(), shown.tolist())]


def _title(name: str, state: list[str]) -> str:
    n_ok = state.count("matched")
    return f"{Path(name).name}: {n_ok} matched, {len(state) - n_ok} not"


def _state(rows: pl.DataFrame) -> list[str]:
    return ["matched" if ok else "unmatched" for ok in rows["correct"].to_list()]


def pose_panels(boxes: pl.DataFrame, split: Split, match: MatchResult, *, names=None, score: str = "conf",
                conf: float = 0.25, n: int = MAX_IMAGES) -> list[PosePanel]:
    """Up to ``n`` panels of eval images: each kept pose box's keypoints (``kpts``), its state and OKS
    (``match.iou``: the match's, else the best with a same-class ground truth), over the image's
    ground-truth keypoints. ``names``: class id -> name for the labels (default: the ids)."""
    gt_img = split.gt["image_id"].to_numpy()
    all_kpts = split_keypoints(split)
    panels = []
    for i, rows in _chosen(boxes, split, match, KPTS_COLUMN, score, conf, n):
        on = np.flatnonzero(gt_img == i)
        local = np.full(len(gt_img), -1, dtype=np.int64)
        local[on] = np.arange(len(on))
        g = rows[GT_INDEX].to_numpy()
        state = _state(rows)
        panels.append(PosePanel(
            title=_title(rows["image"][0], state), image=read_rgb(split.images[i]), gt_kpts=all_kpts[on],
            kpts=np.stack([np.asarray(k, dtype=np.float64) for k in rows[KPTS_COLUMN].to_list()]),
            state=state, labels=_texts(rows, names, score, "OKS"),
            boxes=list(rows.select("x1", "y1", "x2", "y2").iter_rows()),
            gt_index=[int(local[j]) if ok and j >= 0 else -1 for j, ok in zip(g, rows["correct"].to_list())]))
    return panels


def rotated_panels(boxes: pl.DataFrame, split: Split, match: MatchResult, *, names=None, score: str = "conf",
                   conf: float = 0.25, n: int = MAX_IMAGES) -> list[RotatedPanel]:
    """Up to ``n`` panels of eval images: each kept OBB box's rotated box (``xywhr``), its state and
    ProbIoU (``match.iou``: the match's, else the best with a same-class ground truth), over the image's
    ground-truth rotated boxes. ``names``: class id -> name for the labels (default: the ids)."""
    gt_img = split.gt["image_id"].to_numpy()
    gt = split_xywhr(split)
    panels = []
    for i, rows in _chosen(boxes, split, match, XYWHR_COLUMN, score, conf, n):
        state = _state(rows)
        panels.append(RotatedPanel(
            title=_title(rows["image"][0], state), image=read_rgb(split.images[i]), gt=gt[gt_img == i],
            boxes=np.asarray(rows[XYWHR_COLUMN].to_list(), dtype=np.float64).reshape(-1, 5),
            state=state, labels=_texts(rows, names, score, "ProbIoU")))
    return panels
