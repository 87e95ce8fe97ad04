"""Conformal class sets for kept boxes (split conformal, Vovk et al.; the LAC score of Sadinle et al.):
for each box, the classes whose probability is high enough that the set holds the class of the object
the box found with probability at least ``1 - alpha`` (:class:`ClassSets`, :func:`run_class_sets`).

The probabilities are the box's per-class sigmoids normalised to sum to 1 (``logits``: every class's
raw logit, kept by a capture with ``all_logits=True``). The score of a calibration box is
``1 - p_true``, ``p_true`` the probability of the class of the object it matched (class-agnostic
matching at IoU >= ``iou``, highest conf first, one-to-one: the box's own predicted class may be
wrong). With ``q`` the ``ceil((n + 1)(1 - alpha))``-th smallest of the ``n`` scores, a new box's set
is ``{c: 1 - p_c <= q}``; it holds the true class with probability ``>= 1 - alpha`` when the boxes are
exchangeable. Boxes of one image are not independent, so over images the guarantee is approximate;
the benchmark measures it with image-level splits.

A run's ``boxes.parquet`` has no ``logits`` column: ``det-calib calibrate`` does not keep them (the
capture can: :func:`det_calib.capture.predictor.capture_boxes` with ``all_logits=True``), so
:func:`run_class_sets` stops with one line on such a run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.data.box_view import usable_rows
from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.errors import InputError
from det_calib.io import write_json
from det_calib.numeric import sigmoid
from det_calib.record.run_result import RunResult
from det_calib.thresholds.thresholds_file import THRESHOLDS_FILE, read_thresholds

__all__ = ["ClassSets", "agnostic_true_class", "check_class_logits", "class_probabilities", "run_class_sets"]


def class_probabilities(logits: np.ndarray) -> np.ndarray:
    """(n, C) per-class sigmoids of ``logits`` normalised to sum to 1 per box."""
    p = sigmoid(np.asarray(logits, dtype=np.float64))
    return p / np.maximum(p.sum(1, keepdims=True), 1e-300)


@dataclass
class ClassSets:
    """Split-conformal class sets at level ``1 - alpha``; ``fit`` sets ``qhat_`` and ``n_``."""

    alpha: float = 0.1
    qhat_: float = field(default=math.nan, init=False)
    n_: int = field(default=0, init=False)

    def fit(self, probs: np.ndarray, y: np.ndarray) -> ClassSets:
        """Fit on (n, C) probabilities of matched boxes and (n,) their objects' classes."""
        if not (isinstance(self.alpha, (int, float)) and 0 < self.alpha < 1):
            raise InputError(f"Expected argument `alpha` in (0, 1), but got {self.alpha!r}")
        probs, y = np.asarray(probs, dtype=np.float64), np.asarray(y, dtype=np.int64)
        if probs.ndim != 2 or len(y) != len(probs):
            raise InputError(f"Expected `probs` of shape (n, C) with n = len(y) = {len(y)}, but got {probs.shape}")
        scores = np.sort(1 - probs[np.arange(len(y)), y])
        k = math.ceil((len(y) + 1) * (1 - self.alpha))
        self.n_ = len(y)
        self.qhat_ = float(scores[k - 1]) if k <= len(y) else 1.0  # too few boxes: every class
        return self

    def predict(self, probs: np.ndarray) -> np.ndarray:
        """(n, C) boolean sets."""
        if not np.isfinite(self.qhat_):
            raise InputError("ClassSets is not fitted: call fit first")
        return 1 - np.asarray(probs, dtype=np.float64) <= self.qhat_ + 1e-12

    def summary(self, probs: np.ndarray, y: np.ndarray) -> dict[str, Any]:
        """Coverage (sets holding ``y``) and mean size on boxes with known classes ``y``."""
        s = self.predict(probs)
        y = np.asarray(y, dtype=np.int64)
        return {"alpha": self.alpha, "qhat": self.qhat_, "n_fit": self.n_, "boxes": int(len(y)),
                "coverage": float(s[np.arange(len(y)), y].mean()) if len(y) else None,
                "mean_size": float(s.sum(1).mean()) if len(y) else None}


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-12)


def agnostic_true_class(boxes: pl.DataFrame, gt: pl.DataFrame, *, iou: float = 0.5) -> np.ndarray:
    """(n,) class of the object each box matches whatever its class (IoU >= ``iou``, highest conf first,
    one-to-one), -1 for a box that matches none. ``boxes``: image_id, x1..y2, conf; ``gt``: image_id,
    x1..y2, cls (crowd regions left out)."""
    out = np.full(boxes.height, -1, dtype=np.int64)
    cols = ["x1", "y1", "x2", "y2"]
    bi, gi = boxes["image_id"].to_numpy(), gt["image_id"].to_numpy()
    bx, gx, conf, gcls = boxes.select(cols).to_numpy(), gt.select(cols).to_numpy(), boxes["conf"].to_numpy(), \
        gt["cls"].to_numpy()
    for img in np.intersect1d(np.unique(bi), np.unique(gi)):
        rows, grows = np.flatnonzero(bi == img), np.flatnonzero(gi == img)
        rows = rows[np.argsort(-conf[rows], kind="stable")]
        m = _iou(bx[rows], gx[grows])
        free = np.ones(len(grows), dtype=bool)
        for r, ious in zip(rows, m):
            ious = np.where(free, ious, -1.0)
            j = int(np.argmax(ious))
            if ious[j] >= iou:
                free[j] = False
                out[r] = gcls[grows[j]]
    return out


def run_class_sets(run_dir: str | Path, *, head: str = "nms", alpha: float = 0.1, keep: float = 0.25,
                   write: bool = True) -> dict[str, Any]:
    """Class sets of a run's kept boxes (calibrated conf > ``keep``), fitted on the fit split's matched
    boxes and checked on the eval split's; written under ``heads.<head>.class_sets`` of the run's
    ``thresholds.json`` when it has the head.

    Raises:
        InputError: The run's ``boxes.parquet`` has no per-class ``logits`` column, or bad ``alpha``.
    """
    check_class_logits(run_dir, alpha=alpha)
    run_dir = Path(run_dir)
    boxes = pl.read_parquet(run_dir / "boxes.parquet")
    run = RunResult.read(run_dir / "calibration.json")
    ds = load_data_yaml(run.data)
    parts = {}
    for name, split in (("fit", run.settings.fit_split), ("eval", run.settings.eval_split)):
        b = usable_rows(boxes, head=head, split=split).filter(pl.col("calibrated") > keep)
        gt = load_split(ds, split, coco_gt=run.settings.coco_gt).gt.filter(~pl.col("crowd"))
        y = agnostic_true_class(b, gt, iou=float(run.settings.iou_match))
        probs = class_probabilities(np.stack(b["logits"].to_list()))
        parts[name] = (probs[y >= 0], y[y >= 0])
    cs = ClassSets(alpha).fit(*parts["fit"])
    out = {"head": head, "keep": keep, **cs.summary(*parts["eval"])}
    path = run_dir / THRESHOLDS_FILE
    if write and path.is_file():
        doc = read_thresholds(path)
        if head in doc["heads"]:
            doc["heads"][head]["class_sets"] = out
            write_json(path, doc)
    return out


def check_class_logits(run_dir: str | Path, *, alpha: float) -> None:
    """Raise InputError unless ``alpha`` is in (0, 1) and the run's box table has per-class ``logits``."""
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise InputError(f"Expected argument `class_sets` (alpha) in (0, 1), but got {alpha!r}")
    path = Path(run_dir) / "boxes.parquet"
    if not path.is_file():
        raise InputError(f"box table not found: {path}")
    if "logits" not in pl.read_parquet_schema(path):
        raise InputError(f"{path} has no per-class `logits` column: class sets need every class's logit "
                         "(det-calib calibrate does not keep them; see docs/thresholds.md)", param=())
