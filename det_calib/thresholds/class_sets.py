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

``det-calib calibrate`` keeps them: its capture runs with ``all_logits`` (:meth:`LogitStore.attach`, the
other columns are unchanged) into a :class:`LogitStore` (float16, in a temporary file: the run's memory
holds each box's row there, 8 bytes, not its ``nc`` logits), and the run folder gets ``class_logits.npz``
(:func:`write_class_logits`): float16 logits of the boxes whose calibrated conf is above
:data:`LOGITS_FLOOR`, keyed by their row in ``boxes.parquet`` (about 0.3 MB on the demo;
``boxes.parquet`` itself is unchanged). The floor is on the calibrated conf, known only once the
calibrator is fitted on the boxes the capture has already read, so the capture cannot drop the boxes
below it; the store keeps them on disk instead (``2 nc`` bytes a box). A run without them
(``--boxes``, ``--detections``, a top-k export, a run written before) gets one line from
:func:`run_class_sets`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.data.box_table import LOGITS_ROW
from det_calib.data.box_view import usable_rows
from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.errors import InputError
from det_calib.io import write_json
from det_calib.numeric import sigmoid
from det_calib.record.run_result import RunResult
from det_calib.thresholds.thresholds_file import THRESHOLDS_FILE, read_thresholds

__all__ = [
    "LOGITS_FILE",
    "ClassSets",
    "LogitStore",
    "agnostic_true_class",
    "check_class_logits",
    "class_probabilities",
    "read_class_logits",
    "run_class_sets",
    "write_class_logits",
]

LOGITS_FILE = "class_logits.npz"
_LOGITS_FLOOR = 0.05
"""Boxes at or below this calibrated conf keep no per-class logits (class sets are for kept boxes)."""


class LogitStore:
    """Every class's logit of each captured box, as ``class_logits.npz`` stores them (float16), in an unnamed
    temporary file rather than in memory: the capture appends each image's ``(n, nc)`` block
    (:meth:`append`, which returns the rows it took) and the box table carries each box's row
    (:data:`LOGITS_ROW`), so the run's memory holds 8 bytes a box instead of ``4 nc`` (about 0.3 GB a
    head and split of a million boxes at 80 classes). Which boxes the file keeps depends on their
    calibrated conf, unknown while the fit split is captured, so every box's logits are written;
    :func:`write_class_logits` reads back the kept ones."""

    def __init__(self, nc: int, directory: str | Path | None = None) -> None:
        import tempfile
        import threading
        import weakref

        self.nc, self.n = int(nc), 0
        self._f = tempfile.TemporaryFile(dir=directory)
        self._lock = threading.Lock()  # the capture's worker threads append
        # closed when the store goes (or the process ends), on every path: an open file left to the collector
        # would print a ResourceWarning on the run's console
        self._closer = weakref.finalize(self, self._f.close)

    def append(self, logits: np.ndarray) -> np.ndarray:
        """Store ``(n, nc)`` logits (float16, as the file keeps them: float32 to float16 is the rounding of the
        float16 conversion the file made of the same values); returns their ``(n,)`` rows."""
        lg = np.ascontiguousarray(np.asarray(logits, dtype=np.float16).reshape(-1, self.nc))
        with self._lock:
            self._f.seek(0, 2)
            self._f.write(lg.tobytes())
            start, self.n = self.n, self.n + len(lg)
        return np.arange(start, start + len(lg), dtype=np.int64)

    def gather(self, rows: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
        """``(len(rows), nc)`` float16 logits of ``rows``, read a chunk of stored rows at a time (in order of
        the file, so memory holds one chunk beside the result)."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.nc), dtype=np.float16)
        order = np.argsort(rows, kind="stable")
        srt = rows[order]
        width = 2 * self.nc
        for lo in range(0, self.n, chunk):
            a, b = np.searchsorted(srt, [lo, lo + chunk])
            if a == b:
                continue
            self._f.seek(lo * width)
            block = np.frombuffer(self._f.read(min(chunk, self.n - lo) * width), dtype=np.float16)
            out[order[a:b]] = block.reshape(-1, self.nc)[srt[a:b] - lo]
        return out

    def attach(self, cap: Any) -> Any:
        """Turn on every class's logit in a capturer (``calibrate``'s), where it can give them (a ``.pt``
        detector or a per-anchor export; not a top-k export), into this store: the table gets their rows
        (:data:`LOGITS_ROW`) in place of a ``logits`` column; the other columns are unchanged. Returns
        ``cap``."""
        info = getattr(cap, "info", None)
        if hasattr(cap, "all_logits") and not getattr(info, "rows", False):
            cap.all_logits = True
            cap.logit_store = self
        return cap

    def close(self) -> None:
        self._closer()


def write_class_logits(
    folder: str | Path, boxes: pl.DataFrame, store: LogitStore | None = None
) -> None:
    """Move a run's per-class ``logits`` column out of ``boxes`` (in place) into ``folder/class_logits.npz``:
    float16, the rows whose calibrated conf is above :data:`LOGITS_FLOOR`, keyed by row and image. With
    ``store``, the table's :data:`LOGITS_ROW` column names each box's logits there (the column is dropped
    the same way). A table without either column is left as it is and nothing is written."""
    if "logits" not in boxes.columns and (store is None or LOGITS_ROW not in boxes.columns):
        return
    held = boxes.drop_in_place("logits" if "logits" in boxes.columns else LOGITS_ROW)
    conf = (
        boxes["calibrated"].to_numpy()
        if "calibrated" in boxes.columns
        else boxes["conf"].to_numpy()
    )
    rows = np.flatnonzero(np.nan_to_num(conf, nan=0.0) > _LOGITS_FLOOR)
    if held.name == LOGITS_ROW:
        arr = store.gather(held.to_numpy()[rows])
    else:
        lg = held.gather(rows).to_list()
        arr = np.asarray(lg, dtype=np.float16).reshape(
            len(rows), max((len(v) for v in lg), default=0)
        )
    np.savez_compressed(
        Path(folder) / LOGITS_FILE,
        row=rows.astype(np.int32),
        logits=arr,
        image_id=boxes["image_id"].to_numpy()[rows].astype(np.int32),
        floor=np.float64(_LOGITS_FLOOR),
    )


def read_class_logits(
    run_dir: str | Path, boxes: pl.DataFrame
) -> tuple[np.ndarray, np.ndarray, float]:
    """(rows, (rows, C) float logits, floor) of a run's boxes: from ``class_logits.npz``, or a ``logits``
    column of ``boxes.parquet`` (floor 0)."""
    if "logits" in boxes.columns:
        return np.arange(boxes.height), np.stack(boxes["logits"].to_list()).astype(np.float64), 0.0
    with np.load(Path(run_dir) / LOGITS_FILE) as z:
        rows, lg, img = z["row"].astype(np.int64), z["logits"].astype(np.float64), z["image_id"]
        floor = float(z["floor"])
    if rows.size and (
        rows.max() >= boxes.height or not np.array_equal(boxes["image_id"].to_numpy()[rows], img)
    ):
        raise InputError(
            f"{Path(run_dir) / LOGITS_FILE} does not match the run's boxes.parquet (written by "
            "another run)",
            param=(),
        )
    return rows, lg, floor


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
            raise InputError(
                f"Expected `probs` of shape (n, C) with n = len(y) = {len(y)}, but got "
                f"{probs.shape}"
            )
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
        return {
            "alpha": self.alpha,
            "qhat": self.qhat_,
            "n_fit": self.n_,
            "boxes": int(len(y)),
            "coverage": float(s[np.arange(len(y)), y].mean()) if len(y) else None,
            "mean_size": float(s.sum(1).mean()) if len(y) else None,
        }


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
    bx, gx, conf, gcls = (
        boxes.select(cols).to_numpy(),
        gt.select(cols).to_numpy(),
        boxes["conf"].to_numpy(),
        gt["cls"].to_numpy(),
    )
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


def run_class_sets(
    run_dir: str | Path,
    *,
    head: str = "nms",
    alpha: float = 0.1,
    keep: float = 0.25,
    write: bool = True,
) -> dict[str, Any]:
    """Class sets of a run's kept boxes (calibrated conf > ``keep``), fitted on the fit split's matched
    boxes and checked on the eval split's; written under ``heads.<head>.class_sets`` of the run's
    ``thresholds.json`` when it has the head.

    Raises:
        InputError: The run kept no per-class logits, or bad ``alpha`` or ``keep``.
    """
    check_class_logits(run_dir, alpha=alpha)
    run_dir = Path(run_dir)
    boxes = pl.read_parquet(run_dir / "boxes.parquet").with_row_index("_row")
    rows, logits, floor = read_class_logits(run_dir, boxes)
    if keep < floor:
        raise InputError(
            f"Expected `keep` at least {floor:g} (the run keeps per-class logits of the boxes "
            "above "
            f"it), but got {keep!r}"
        )
    pos = np.full(boxes.height, -1, dtype=np.int64)
    pos[rows] = np.arange(len(rows))
    run = RunResult.read(run_dir / "calibration.json")
    ds = load_data_yaml(run.data)
    parts = {}
    for name, split in (("fit", run.settings.fit_split), ("eval", run.settings.eval_split)):
        b = usable_rows(boxes, head=head, split=split).filter(pl.col("calibrated") > keep)
        gt = load_split(ds, split, coco_gt=run.settings.coco_gt).gt.filter(~pl.col("crowd"))
        y = agnostic_true_class(b, gt, iou=float(run.settings.iou_match))
        probs = class_probabilities(logits[pos[b["_row"].to_numpy()]])
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
    """Raise InputError unless ``alpha`` is in (0, 1) and the run kept per-class logits (``class_logits.npz``,
    or a ``logits`` column in its box table)."""
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise InputError(f"Expected argument `class_sets` (alpha) in (0, 1), but got {alpha!r}")
    path = Path(run_dir) / "boxes.parquet"
    if not path.is_file():
        raise InputError(f"box table not found: {path}")
    if not (Path(run_dir) / LOGITS_FILE).is_file() and "logits" not in pl.read_parquet_schema(path):
        raise InputError(
            f"{Path(run_dir)} has no per-class logits ({LOGITS_FILE}): class sets need every "
            "class's "
            "logit, which `det-calib calibrate` keeps when it runs the model itself (not with "
            "--boxes, "
            "--detections or a top-k export; rerun calibrate)",
            param=(),
        )
