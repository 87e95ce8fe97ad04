"""One head's boxes on one split as typed arrays: :class:`BoxView`, the view every evaluation reads.

Built once from the box table (:mod:`det_calib.data.box_table`) for a head and a split, it leaves
out the boxes matched to a crowd annotation (``ignore``; it counts them) and carries, box by box,
the logit, the conf, the match label and class, the image id, the IoU figures and the box itself.
Two operations give the sets every figure is computed on; they are the package's one
implementation of each:

- :meth:`BoxView.scored` — the same boxes scored by a calibrator (the calibrated conf);
- :meth:`BoxView.kept` / :func:`kept_mask` — the boxes kept at a conf threshold. Ultralytics keeps
  a box when ``conf > threshold``, strictly; so does this.

A task's own payload (a mask index, keypoints, an angle) travels in :attr:`BoxView.extra`, one
array per column, row-aligned with the boxes: subsets and scoring carry it unchanged.

>>> import polars as pl
>>> t = pl.DataFrame({"head": ["nms"] * 3, "split": ["test"] * 3, "logit": [0.0, 2.0, -1.0],
...                   "conf": [0.5, 0.88, 0.27], "correct": [True, False, True], "cls": [0, 1, 0],
...                   "image_id": [0, 0, 1], "ignore": [False, False, True]})
>>> v = BoxView.from_boxes(t, head="nms", split="test")
>>> v.n, v.ignored, v.kept(0.5).n
(2, 1, 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from det_calib.calibrators.base import LogitCalibrator, box_kwargs, log_area
from det_calib.errors import InputError
from det_calib.numeric import logit, sigmoid

__all__ = ["BoxView", "kept_mask", "usable_rows", "with_calibrated"]

_BOX_COLUMNS = ("x1", "y1", "x2", "y2")
_SIZE_COLUMNS = (*_BOX_COLUMNS, "img_w", "img_h")
"""The columns a box's relative size is read from (:attr:`BoxView.log_area`)."""
_MATCH_ONLY = ("ignore", "iou", "loc_iou")
"""Columns matching fills besides ``correct`` (a captured, unmatched table has none of them)."""


def kept_mask(conf: Any, threshold: float) -> np.ndarray:
    """The boxes kept at ``threshold``: ``conf > threshold`` (strictly, as Ultralytics' filter keeps them).

    >>> kept_mask(np.array([0.25, 0.2500001, 0.9]), 0.25).tolist()
    [False, True, True]
    """
    return np.asarray(conf) > threshold


def usable_rows(
    boxes: Any,
    *,
    head: str | None = None,
    split: str | None = None,
    ignore: bool = True,
    columns: Iterable[str] | None = None,
) -> Any:
    """The rows of a box table (a DataFrame or a LazyFrame) of ``head`` and ``split`` (None: any) that
    evaluation uses: with ``ignore``, not matched to a crowd annotation (where the table says).
    ``columns``: the table's columns (default ``boxes.columns``)."""
    cols = set(boxes.columns if columns is None else columns)
    keep = pl.lit(True)
    if head is not None:
        keep &= pl.col("head") == head
    if split is not None:
        keep &= pl.col("split") == split
    if ignore and "ignore" in cols:
        keep &= ~pl.col("ignore")
    return boxes.filter(keep)


def _log_area(df: pl.DataFrame, xyxy: np.ndarray | None = None) -> np.ndarray:
    """The boxes' :func:`log_area`; ``xyxy``: their corners where the caller has stacked them already."""
    if xyxy is None:
        xyxy = _xyxy(df)
    return log_area(xyxy, _array(df, "img_w", np.float64), _array(df, "img_h", np.float64))


def _xyxy(df: pl.DataFrame) -> np.ndarray:
    return np.column_stack([_array(df, c, np.float64) for c in _BOX_COLUMNS])


def _array(df: pl.DataFrame, col: str, dtype: Any) -> np.ndarray:
    return df[col].to_numpy().astype(dtype, copy=False)


@dataclass(frozen=True, eq=False)
class BoxView:
    """The usable boxes (not crowd-matched) of one head on one split, row-aligned arrays of length n.

    Attributes:
        logit: (n,) float64, the logit ``conf`` is the sigmoid of (the calibrated logit in a scored view).
        conf: (n,) float64, the box's confidence (what Ultralytics reports in a raw view, float32
            rounded; the calibrated conf in a scored view).
        correct: (n,) bool, matched to a same-class ground truth at the run's IoU (None: a captured
            table, not matched yet).
        cls: (n,) int64, predicted class.
        image_id: (n,) int64, the image within the capture.
        iou, loc_iou: (n,) float64 or None: the match's IoU and its IoU at the LaECE threshold.
        xyxy: (n, 4) float64 or None: the box corners in image pixels.
        log_area: (n,) float64 or None: ``log(box area / image area)``
            (:func:`~det_calib.calibrators.base.log_area`; where the table has the corners and image
            sizes), the size a size-conditioned map reads.
        extra: Column name -> (n,) or (n, ...) array: any other column (image sizes, a run's
            ``calibrated`` conf, a task payload such as a mask index, keypoints or an angle).
        head, split: What the boxes are (None when the table was not filtered by it).
        ignored: Boxes of the head and split left out as crowd-matched.
        raw_logit, raw_conf: The raw scores (the same arrays as ``logit``/``conf`` in a raw view).
        calibrator: The calibrator that scored the view (None: raw).
    """

    logit: np.ndarray
    conf: np.ndarray
    correct: np.ndarray | None
    cls: np.ndarray
    image_id: np.ndarray
    iou: np.ndarray | None = None
    loc_iou: np.ndarray | None = None
    xyxy: np.ndarray | None = None
    log_area: np.ndarray | None = None
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)
    head: str | None = None
    split: str | None = None
    ignored: int = 0
    raw_logit: np.ndarray | None = None
    raw_conf: np.ndarray | None = None
    calibrator: LogitCalibrator | None = None

    def __post_init__(self) -> None:
        n = len(self.conf)
        if self.raw_logit is None:
            object.__setattr__(self, "raw_logit", self.logit)
        if self.raw_conf is None:
            object.__setattr__(self, "raw_conf", self.conf)
        for name, a in self._arrays().items():
            if a is not None and (np.ndim(a) == 0 or len(a) != n):
                raise InputError(
                    f"BoxView: `{name}` has shape {np.shape(a)}, expected ({n}, ...) like `conf`"
                )
        if self.xyxy is not None and (self.xyxy.ndim != 2 or self.xyxy.shape[1] != 4):
            raise InputError(f"BoxView: `xyxy` has shape {self.xyxy.shape}, expected ({n}, 4)")

    def _arrays(self) -> dict[str, np.ndarray | None]:
        return {
            "logit": self.logit,
            "conf": self.conf,
            "correct": self.correct,
            "cls": self.cls,
            "image_id": self.image_id,
            "iou": self.iou,
            "loc_iou": self.loc_iou,
            "xyxy": self.xyxy,
            "log_area": self.log_area,
            "raw_logit": self.raw_logit,
            "raw_conf": self.raw_conf,
            **self.extra,
        }

    # building -----------------------------------------------------------------------------------

    @classmethod
    def from_boxes(
        cls,
        boxes: pl.DataFrame,
        *,
        head: str | None = None,
        split: str | None = None,
        extra: Iterable[str] = (),
        geometry: bool = True,
        ignore: bool = True,
        conf: Any = None,
    ) -> BoxView:
        """The view of a box table's rows of ``head`` and ``split`` (each None: every row).

        Args:
            boxes: A box table (``boxes.parquet``'s columns; a captured table, not matched yet,
                gives ``correct`` None).
            extra: Further columns to carry in :attr:`extra` (those the table has; a run's
                ``calibrated`` is always carried when present).
            geometry: Carry ``iou``, ``loc_iou`` and the box corners, where the table has them
                (False: the scores and labels only, the memory a report over a large run needs).
            ignore: Leave out the boxes matched to a crowd annotation (False: every row, e.g. to
                write a column back to the table, or for COCOeval, which ignores them itself).
            conf: The boxes' scores given apart, one per row of ``boxes`` (a table of labels
                scored elsewhere; its ``logit`` is then the scores' logit where the table has
                none); with it, ``boxes`` must already be the rows wanted (no head, split or
                ``ignore`` filter). A table with neither ``conf`` nor ``conf=`` gets its logits' sigmoid.
        """
        if conf is not None:
            if head is not None or split is not None or (ignore and "ignore" in boxes.columns):
                raise InputError(
                    "BoxView.from_boxes: `conf` given apart needs the table's rows as they are "
                    "(head=None, split=None, ignore=False)"
                )
            conf = np.asarray(conf, dtype=np.float64).reshape(-1)
            if conf.shape != (boxes.height,):
                raise InputError(
                    f"Expected `conf` of length {boxes.height}, but got {conf.shape[0]}"
                )
        want = ["logit", "conf", "correct", "cls", "image_id", "ignore"]
        if geometry:
            want += ["iou", "loc_iou", *_BOX_COLUMNS]
        more = [
            c for c in dict.fromkeys([*extra, "calibrated"]) if c in boxes.columns and c not in want
        ]
        sized = set(_SIZE_COLUMNS) <= set(boxes.columns)
        if sized:
            want += [c for c in _SIZE_COLUMNS if c not in want and c not in more]
        optional = (
            "correct",
            *_MATCH_ONLY,
            *_BOX_COLUMNS,
            "conf",
            *(("logit",) if conf is not None else ()),
        )
        missing = [c for c in want if c not in boxes.columns and c not in optional]
        if missing:
            raise InputError(f"box table is missing columns {missing}; has {boxes.columns}")
        # the columns used, then one filter: only those are copied (at COCO scale the table is the memory)
        df = (
            usable_rows(boxes.lazy(), head=head, split=split, ignore=False, columns=boxes.columns)
            .select([c for c in want if c in boxes.columns] + more)
            .collect()
        )
        ignored = 0
        if ignore and "ignore" in df.columns:
            ignored = int(df["ignore"].sum())
            if ignored:
                df = usable_rows(df, columns=df.columns)
        has = set(df.columns)
        if conf is None:
            conf = (
                _array(df, "conf", np.float64)
                if "conf" in has
                else sigmoid(_array(df, "logit", np.float64))
            )
        xyxy = _xyxy(df) if geometry and has >= set(_BOX_COLUMNS) else None
        return cls(
            logit=_array(df, "logit", np.float64) if "logit" in has else logit(conf),
            conf=conf,
            correct=_array(df, "correct", bool) if "correct" in has else None,
            cls=_array(df, "cls", np.int64),
            image_id=_array(df, "image_id", np.int64),
            iou=_array(df, "iou", np.float64) if "iou" in has else None,
            loc_iou=_array(df, "loc_iou", np.float64) if "loc_iou" in has else None,
            xyxy=xyxy,
            log_area=_log_area(df, xyxy) if sized else None,  # the corners stacked once
            extra={c: df[c].to_numpy() for c in more},
            head=head,
            split=split,
            ignored=ignored,
        )

    # the two operations -------------------------------------------------------------------------

    @property
    def n(self) -> int:
        return int(len(self.conf))

    def subset(self, mask: Any) -> BoxView:
        """The boxes ``mask`` selects (a boolean mask, an index array or a slice), every column with them."""
        arrays = {k: (None if a is None else a[mask]) for k, a in self._arrays().items()}
        extra = {k: arrays.pop(k) for k in self.extra}
        return replace(self, extra=extra, **arrays)

    def kept(self, threshold: float) -> BoxView:
        """The boxes kept at ``threshold`` (``conf > threshold``, :func:`kept_mask`), under this view's scores."""
        return self.subset(kept_mask(self.conf, threshold))

    def scored(
        self,
        calibrator: LogitCalibrator | None,
        *,
        recorded: bool = False,
        from_logit: bool = False,
    ) -> BoxView:
        """The same boxes scored by ``calibrator``: ``logit`` its calibrated logit, ``conf`` the conf
        it deploys (:meth:`~det_calib.calibrators.base.LogitCalibrator.deployed_conf`: the raw conf
        itself under ``none``). None: the raw view.

        Args:
            recorded: Take the conf from the run's own ``calibrated`` column where the view carries
                it (the scores the run wrote, read back rather than recomputed).
            from_logit: The conf as ``sigmoid`` of the calibrated logit in float64, also where the
                map deploys the raw conf (``none``: the float32 conf Ultralytics reports). The
                same number for every other map; the mAP check ranks by it (no float32 ties) and
                ``thresholds`` scores by it.
        """
        z, p = self.raw_logit, self.raw_conf
        if calibrator is None:
            if from_logit:
                return replace(self, logit=z, conf=sigmoid(z), calibrator=None)
            return (
                self if self.calibrator is None else replace(self, logit=z, conf=p, calibrator=None)
            )
        kw = box_kwargs(calibrator, classes=np.asarray(self.cls), log_area=self.log_area)
        t = np.asarray(
            calibrator.transform_logits(np.asarray(z, dtype=np.float64), **kw), dtype=np.float64
        )
        if from_logit:
            conf = sigmoid(t)
        elif recorded and "calibrated" in self.extra:
            conf = np.asarray(self.extra["calibrated"], dtype=np.float64)
        else:
            conf = sigmoid(t) if calibrator.uses_size else calibrator.deployed_conf(z, self.cls, p)
        return replace(self, logit=t, conf=conf, calibrator=calibrator)

    def as_recorded(self) -> BoxView:
        """The boxes under the scores their run wrote (the ``calibrated`` column the view carries),
        where the calibrator itself is not at hand: ``conf`` that column, ``logit`` its logit."""
        if "calibrated" not in self.extra:
            raise InputError(
                "the box table has no `calibrated` column (written by runs of det_calib >= 0.1)"
            )
        conf = np.asarray(self.extra["calibrated"], dtype=np.float64)
        return replace(self, logit=logit(conf), conf=conf)


def with_calibrated(boxes: pl.DataFrame, calibrator: LogitCalibrator) -> pl.DataFrame:
    """The box table with a ``calibrated`` column: each box's conf under ``calibrator``
    (:meth:`BoxView.scored`, float64; the raw ``conf`` itself under ``none``), every row."""
    view = BoxView.from_boxes(boxes, geometry=False, ignore=False)
    return boxes.with_columns(
        pl.Series("calibrated", view.scored(calibrator).conf, dtype=pl.Float64)
    )
