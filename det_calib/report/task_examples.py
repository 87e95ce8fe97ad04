"""The panels of the matching pictures of pose and OBB models, from a box table, the split's ground truth
and the matching result (drawn by :mod:`det_calib.report.task_plots`).

Each builder takes one head's box table with the task's payload column (``kpts`` for pose, ``xywhr`` for
OBB, as the capture writes them), the :class:`~det_calib.data.ground_truth.Split` the boxes were matched
against (read by :func:`~det_calib.tasks.pose.labels.load_pose_split` /
:func:`~det_calib.tasks.obb.labels.load_obb_split`; a box's ``image_id`` is the split's image index, as the
matching took it) and the
:class:`~det_calib.matching.one_to_one.MatchResult` of
:func:`~det_calib.tasks.pose.matching.match_keypoints` / :func:`~det_calib.tasks.obb.matching.match_rotated`,
row for row. It keeps the boxes whose ``score`` is above ``conf`` (and leaves out those the matching
ignored), chooses up to ``n`` images (:func:`example_images`: first those with both a matched and an
unmatched kept box) and reads them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.data.box_view import kept_mask, usable_rows
from det_calib.data.ground_truth import EVAL_HALF, FIT_HALF, Dataset, Split, list_images, load_data_yaml
from det_calib.data.matching_rule import MatchingRule
from det_calib.errors import InputError
from det_calib.matching.one_to_one import MatchResult
from det_calib.record.run_folder import Run
from det_calib.tasks.obb.labels import XYWHR_COLUMN, load_obb_split, split_xywhr
from det_calib.tasks.obb.matching import match_rotated
from det_calib.tasks.pose.labels import KPTS_COLUMN, load_pose_split, split_keypoints
from det_calib.tasks.pose.matching import match_keypoints, table_keypoints

from .task_plots import PosePanel, RotatedPanel

__all__ = ["MAX_IMAGES", "example_images", "kept_matches", "pose_panels", "read_rgb", "reread_split", "rotated_panels",
           "run_task_panels"]

MAX_IMAGES = 4
"""Images a picture shows at most."""
MEASURE = "measure"
"""The column :func:`kept_matches` adds: the match's OKS or ProbIoU (the best one where unmatched)."""
GT_INDEX = "gt_index"
ROW = "_row"


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


# ------------------------------------------------------------------------------------------ from a run folder
def reread_split(run: Run, split: str, names: Sequence[str], load: Callable[[Dataset, str, int], Split]
                 ) -> tuple[Split, dict[str, int]]:
    """The run's eval split read again by ``load(dataset, split, limit)`` (with the task's ground truth),
    far enough to hold the images ``names`` (a half split: its whole split). Returns the split and each
    name's image id in it.

    Raises:
        InputError: The split or an image is no longer in the run's data.
    """
    ds = load_data_yaml(run.result.data)
    base = split.removesuffix(EVAL_HALF).removesuffix(FIT_HALF)
    if base not in ds.splits:
        raise InputError(f"split `{base}` is no longer in {run.result.data}")
    sources = ds.splits[base]
    root = sources[0] if len(sources) == 1 and sources[0].is_dir() else ds.root
    listed = {str(_relative(p, root)): i for i, p in enumerate(list_images(sources, split=base))}
    missing = [n for n in names if n not in listed]
    if missing:
        raise InputError(f"image {missing[0]} is no longer in split `{base}`")
    with warnings.catch_warnings():  # the run warned about its data already
        warnings.simplefilter("ignore")
        sp = load(ds, base, max(listed[n] for n in names) + 1)
    return sp, {n: i for i, n in enumerate(sp.image_names())}


def _relative(p: Path, root: Path) -> Path:
    try:
        return p.relative_to(root)
    except ValueError:
        return p


def _rematch(rows: pl.DataFrame, sp: Split, rule: MatchingRule, iou: float) -> MatchResult:
    """The run's matching of ``rows`` (every box of their images, in the re-read split's ids) again, with
    the ground-truth row each box took."""
    g = sp.gt
    if rule.by == "oks":
        gk = split_keypoints(sp)
        dk = table_keypoints(rows, KPTS_COLUMN, gk.shape[1])
        return match_keypoints(rows["image_id"], rows["cls"], rows["conf"], dk, g["image_id"], g["cls"], gk,
                               g["area"], g.select("x1", "y1", "x2", "y2").to_numpy(),
                               g["crowd"] if "crowd" in g.columns else None,
                               g["num_keypoints"] if "num_keypoints" in g.columns else None,
                               oks_threshold=iou, sigmas=rule.sigmas)
    return match_rotated(rows["image_id"], rows["cls"], rows["conf"],
                         np.asarray(rows[XYWHR_COLUMN].to_list(), dtype=np.float64).reshape(-1, 5),
                         g["image_id"], g["cls"], split_xywhr(sp), iou_threshold=iou)


def run_task_panels(run: Run, head: str, conf: float) -> list[PosePanel] | list[RotatedPanel]:
    """The panels of a pose (``matching.by`` ``oks``) or OBB (``rotated``) run's picture: up to
    :data:`MAX_IMAGES` eval images of ``head`` with the boxes kept at ``conf`` by the deployed scores
    (``calibrated``, else raw). The eval images' ground truth is read again from the run's data and their
    boxes matched again by the run's rule, which must give ``boxes.parquet``'s labels.

    Raises:
        InputError: The data moved or changed since the run (an image, a label, the matching).
        ValueError: The run's rule is neither ``oks`` nor ``rotated``.
    """
    rule = run.result.matching
    if rule is None or rule.by not in ("oks", "rotated"):
        raise ValueError(f"Expected a run matched by OKS or rotated IoU, but got {rule}")
    column = KPTS_COLUMN if rule.by == "oks" else XYWHR_COLUMN
    split = run.eval_split(head) or ""
    b = run.boxes
    if column not in b.columns:
        return []
    b = usable_rows(b, head=head, split=split, ignore=False).with_row_index(ROW)
    score = "calibrated" if "calibrated" in b.columns else "conf"
    usable = usable_rows(b)  # the boxes the figures count: those matched to an ignored ground truth left out
    kept = usable.filter(pl.Series(kept_mask(usable[score].to_numpy(), conf)) & pl.col(column).is_not_null())
    names = example_images(kept)
    if not names:
        return []
    load = load_pose_split if rule.by == "oks" else load_obb_split
    sp, ids = reread_split(run, split, names, lambda ds, s, limit: load(ds, s, coco_gt=run.settings.coco_gt,
                                                                         limit=limit))
    rows = b.filter(pl.col("image").is_in(names))
    rows = rows.with_columns(pl.Series("image_id", [ids[n] for n in rows["image"].to_list()], dtype=pl.Int64))
    match = _rematch(rows, sp, rule, run.settings.iou_match)
    was_ignored = ~np.isin(rows[ROW].to_numpy(), usable[ROW].to_numpy())
    if not (np.array_equal(match.correct, rows["correct"].to_numpy()) and np.array_equal(match.ignore, was_ignored)):
        raise InputError(f"the labels of split `{split}` changed since the run (its boxes match differently now)")
    build = pose_panels if rule.by == "oks" else rotated_panels
    return build(rows.drop(ROW), sp, match, names=run.class_names, score=score, conf=conf, n=len(names))
