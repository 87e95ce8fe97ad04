"""The panels of the matching pictures of a task's run (a pose or OBB model's), from a box table, the split's
ground truth and the matching result, with the helpers each task's picture shares.

A task with a picture of its own keeps it in its folder (``det_calib/tasks/<task>/report_panel.py``, reached
through :meth:`~det_calib.tasks.contract.Task.part`): its builder takes one head's box table with the task's
payload column (``kpts`` for pose, ``xywhr`` for OBB, as the capture writes them), the
:class:`~det_calib.data.ground_truth.Split` the boxes were matched against (a box's ``image_id`` is the
split's image index, as the matching took it) and the :class:`~det_calib.matching.one_to_one.MatchResult`
of the task's matching, row for row. It keeps the boxes whose ``score`` is above ``conf`` (and leaves out
those the matching ignored, :func:`chosen_rows`), chooses up to ``n`` images (:func:`example_images`: first
those with both a matched and an unmatched kept box) and reads them. :func:`run_task_panels` builds them
from a run folder, by the task's :class:`TaskPanels`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.data.box_view import kept_mask, usable_rows
from det_calib.data.ground_truth import (
    Dataset,
    Split,
    list_images,
    load_data_yaml,
)
from det_calib.data.matching_rule import MatchingRule
from det_calib.errors import InputError
from det_calib.matching.one_to_one import MatchResult
from det_calib.record.run_folder import Run
from det_calib.report.document import Para
from det_calib.tasks import TASKS

__all__ = [
    "MAX_IMAGES",
    "TaskPanels",
    "box_states",
    "box_texts",
    "chosen_rows",
    "example_images",
    "matched_picture",
    "panel_title",
    "read_rgb",
    "reread_split",
]

MAX_IMAGES = 4
"""Images a picture shows at most."""
_MEASURE = "measure"
"""The column :func:`kept_matches` adds: the match's OKS or ProbIoU (the best one where unmatched)."""
GT_INDEX = "gt_index"
_ROW = "_row"


def example_images(kept: pl.DataFrame, n: int = MAX_IMAGES) -> list[str]:
    """Up to ``n`` image names, in image order: first those with both a matched and an unmatched kept
    box, then those with any kept box.

    >>> t = pl.DataFrame({"image": ["a", "a", "b", "c", "c"], "image_id": [0, 0, 1, 2, 2],
    ...                   "correct": [True, False, True, True, False]})
    >>> example_images(t, 2), example_images(t, 3)
    (['a', 'c'], ['a', 'c', 'b'])
    """
    per = (
        kept.group_by("image_id", maintain_order=True)
        .agg(
            pl.col("image").first(),
            pl.col("correct").any().alias("hit"),
            (~pl.col("correct")).any().alias("miss"),
        )
        .sort("image_id")
    )
    both = per.filter(pl.col("hit") & pl.col("miss"))["image"].to_list()
    rest = per.filter(~(pl.col("hit") & pl.col("miss")))["image"].to_list()
    return (both + rest)[:n]


def _kept_matches(
    boxes: pl.DataFrame, match: MatchResult, *, score: str = "conf", conf: float = 0.25
) -> pl.DataFrame:
    """The rows of ``boxes`` kept at ``conf`` by ``score`` and not ignored by ``match``, with the match's
    ``correct``, :data:`_MEASURE` and ``gt_index``.

    Raises:
        ValueError: ``match`` is not row for row with ``boxes``; ``boxes`` holds several heads; no ``score``.
    """
    if len(match) != boxes.height:
        raise ValueError(
            f"Expected a matching result of {boxes.height} rows (one per box), but got {len(match)}"
        )
    if "head" in boxes.columns and boxes["head"].n_unique() > 1:
        raise ValueError(
            f"Expected the boxes of one head, but got {sorted(boxes['head'].unique().to_list())}"
        )
    if score not in boxes.columns:
        raise ValueError(f"Expected a `{score}` column in the boxes, but got {boxes.columns}")
    t = boxes.with_columns(
        pl.Series("correct", np.asarray(match.correct, dtype=bool)),
        pl.Series(_MEASURE, np.asarray(match.iou, dtype=np.float64)),
        pl.Series(GT_INDEX, np.asarray(match.gt_index, dtype=np.int64)),
    )
    keep = kept_mask(t[score].to_numpy(), conf) & ~np.asarray(match.ignore, dtype=bool)
    return t.filter(pl.Series(keep))


def read_rgb(path: Path) -> np.ndarray:
    """An image as (H, W, 3) uint8 RGB, read by OpenCV as Ultralytics reads it (same orientation as the capture)."""
    import cv2

    im = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if im is None:
        raise InputError(f"cannot read image {path}")
    return cv2.cvtColor(im, cv2.COLOR_BGR2RGB)


def chosen_rows(
    boxes: pl.DataFrame,
    split: Split,
    match: MatchResult,
    column: str,
    score: str,
    conf: float,
    n: int,
) -> list[tuple[int, pl.DataFrame]]:
    """(image id, its kept rows, least confident first) of each chosen image."""
    if column not in boxes.columns:
        raise ValueError(
            f"Expected a `{column}` column in the boxes (the capture of the task's model), "
            f"but got {boxes.columns}"
        )
    kept = _kept_matches(boxes, match, score=score, conf=conf).filter(pl.col(column).is_not_null())
    out = []
    for name in example_images(kept, n):
        rows = kept.filter(pl.col("image") == name).sort(score, maintain_order=True)
        i = int(rows["image_id"][0])
        if not 0 <= i < len(split.images):
            raise ValueError(
                f"box image_id {i} is not an image of split `{split.name}` ({len(split.images)} "
                "images)"
            )
        out.append((i, rows))
    return out


def box_texts(
    rows: pl.DataFrame, names: Mapping[int, str] | Sequence[str] | None, score: str, measure: str
) -> list[str]:
    """Each row's label: its class name, ``score`` and match measure (``measure`` names it: OKS, ProbIoU)."""

    def name(c: int) -> str:
        try:
            return str(names[c]) if names is not None else str(c)
        except (KeyError, IndexError):
            return str(c)

    shown = np.clip(
        rows[_MEASURE].to_numpy(), 0.0, 1.0
    )  # ProbIoU's guards leave -5e-8 for boxes far apart
    return [
        f"{name(int(c))} {s:.2f}, {measure} {m:.2f}"
        for c, s, m in zip(rows["cls"].to_list(), rows[score].to_list(), shown.tolist())
    ]


def panel_title(name: str, state: list[str]) -> str:
    """A panel's title: the image's file name and its counts of matched and unmatched kept boxes."""
    n_ok = state.count("matched")
    return f"{Path(name).name}: {n_ok} matched, {len(state) - n_ok} not"


def box_states(rows: pl.DataFrame) -> list[str]:
    """Per row ``matched`` (correct) or ``unmatched``."""
    return ["matched" if ok else "unmatched" for ok in rows["correct"].to_list()]


# ------------------------------------------------------------------------------------------ from a run folder
def reread_split(
    run: Run, split: str, names: Sequence[str], load: Callable[[Dataset, str, int], Split]
) -> tuple[Split, dict[str, int]]:
    """The run's eval split read again by ``load(dataset, split, limit)`` (with the task's ground truth),
    far enough to hold the images ``names`` (a half split: its whole split). Returns the split and each
    name's image id in it.

    Raises:
        InputError: The split or an image is no longer in the run's data.
    """
    ds = load_data_yaml(run.result.data)
    base, _ = Split.half_of(split)
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


@dataclass(frozen=True)
class TaskPanels:
    """A task's picture as :func:`run_task_panels` builds it from a run (its ``report_panel`` part's ``PANELS``).

    Attributes:
        column: The box table's payload column the panels draw (``kpts``, ``xywhr``).
        load: ``load(dataset, split, coco_gt=..., limit=...)``: the split read with the task's ground truth.
        rematch: ``rematch(rows, split, rule, iou)``: the run's matching of ``rows`` again, with the
            ground-truth row each box took.
        build: ``build(rows, split, match, names=, score=, conf=, n=)``: the panels.
    """

    column: str
    load: Callable[..., Split]
    rematch: Callable[[pl.DataFrame, Split, MatchingRule, float], MatchResult]
    build: Callable[..., list[Any]]


def _task_panels(rule: MatchingRule | None) -> TaskPanels | None:
    """The panels of the task whose own rule ``rule`` is (None: none has a picture built this way)."""
    for task in TASKS.values():
        own = task.part("report_panel") if rule is not None and task.rule == rule.by else None
        if own is not None and getattr(own, "PANELS", None) is not None:
            return own.PANELS
    return None


def _run_task_panels(run: Run, head: str, conf: float) -> list[Any]:
    """The panels of a run's picture matched by a task's own rule whose task builds its panels here (a pose run
    matched by ``oks``, an OBB run by ``rotated``): up to :data:`MAX_IMAGES` eval images of ``head`` with the
    boxes kept at ``conf`` by the deployed scores (``calibrated``, else raw). The eval images' ground truth is
    read again from the run's data and their boxes matched again by the run's rule, which must give
    ``boxes.parquet``'s labels.

    Raises:
        InputError: The data moved or changed since the run (an image, a label, the matching).
        ValueError: The run's rule is no such task's own (OKS, rotated IoU).
    """
    rule = run.result.matching
    own = _task_panels(rule)
    if own is None:
        raise ValueError(f"Expected a run matched by OKS or rotated IoU, but got {rule}")
    column = own.column
    split = run.eval_split(head) or ""
    b = run.boxes
    if column not in b.columns:
        return []
    b = usable_rows(b, head=head, split=split, ignore=False).with_row_index(_ROW)
    score = "calibrated" if "calibrated" in b.columns else "conf"
    usable = usable_rows(
        b
    )  # the boxes the figures count: those matched to an ignored ground truth left out
    kept = usable.filter(
        pl.Series(kept_mask(usable[score].to_numpy(), conf)) & pl.col(column).is_not_null()
    )
    names = example_images(kept)
    if not names:
        return []
    sp, ids = reread_split(
        run,
        split,
        names,
        lambda ds, s, limit: own.load(ds, s, coco_gt=run.settings.coco_gt, limit=limit),
    )
    rows = b.filter(pl.col("image").is_in(names))
    rows = rows.with_columns(
        pl.Series("image_id", [ids[n] for n in rows["image"].to_list()], dtype=pl.Int64)
    )
    match = own.rematch(rows, sp, rule, run.settings.iou_match)
    was_ignored = ~np.isin(rows[_ROW].to_numpy(), usable[_ROW].to_numpy())
    if not (
        np.array_equal(match.correct, rows["correct"].to_numpy())
        and np.array_equal(match.ignore, was_ignored)
    ):
        raise InputError(
            f"the labels of split `{split}` changed since the run (its boxes match differently now)"
        )
    return own.build(
        rows.drop(_ROW), sp, match, names=run.class_names, score=score, conf=conf, n=len(names)
    )


def matched_picture(
    page: Any,
    ctx: Any,
    head: str,
    conf: float,
    *,
    what: str,
    figure: Any,
    caption: Any,
    measure: str,
) -> None:
    """The Matching section's picture of a run matched by its task's own rule: the panels of
    :func:`run_task_panels` drawn by ``figure(panels)``, captioned ``caption(kept, t)`` (``kept``: which boxes are
    shown, ``t``: the match threshold) and labelled with each box's ``measure``; a line instead where the data
    moved or no box with ``what`` is kept."""
    try:
        panels = _run_task_panels(ctx.run, head, conf)
    except (InputError, OSError) as e:  # the data moved since the run, or a label changed
        page.add(Para(f"(The picture of matched {what} is not drawn: {e}.)"))
        return
    if not panels:
        page.add(
            Para(f"(No picture: no box of the {head} head with {what} is kept at conf {conf:g}.)")
        )
        return
    kept = (
        f"{len(panels)} eval images, {head} head: the {what} of the boxes kept at conf {conf:g} "
        "(deployed "
        "scores)"
    )
    page.fig(
        f"matching_{head}",
        figure(panels),
        f"{caption(kept, ctx.run.settings.iou_match)}. Each box is labelled with its class, conf "
        f"and {measure}: "
        f"the {measure} of its match, or for a box that matched nothing its best {measure} with a "
        "ground truth "
        "of its class",
        f"Eval images with the kept boxes' {what} coloured by whether they matched a ground truth "
        f"by {measure}",
    )
