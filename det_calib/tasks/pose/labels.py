"""Keypoints of the ground truth: YOLO pose labels or COCO ``keypoints``, for pose models.

A split read by :func:`load_pose_split` is the :class:`~det_calib.data.ground_truth.Split` that
:func:`~det_calib.data.ground_truth.load_split` reads (same images, rows, warnings, summaries and
left-out images), each line checked by :func:`check_pose_line`, with three more ground-truth columns:

==============  =============  =====================================================================
kpts            array[f64, 3K] the row's keypoints ``x1, y1, v1, ..., xK, yK, vK``: ``x, y`` in pixels
                               (COCO's pixel-edge frame), ``v`` COCO's visibility (0 not labelled,
                               1 labelled but not visible, 2 visible)
area            float64        the object's area for OKS: COCO's annotation ``area``; for YOLO
                               labels 0.53 x the box's area, Ultralytics' pose-validation rule
num_keypoints   int32          labelled keypoints (COCO's ``num_keypoints``; YOLO: ``v > 0``); COCO
                               ignores a ground truth without any
==============  =============  =====================================================================

A YOLO pose line is ``cls cx cy w h x1 y1 [v1] ... xK yK [vK]`` with ``kpt_shape: [K, 2 or 3]`` from
data.yaml. A line is malformed (its file's image left out with a warning, as for box labels) when
it holds a number of values other than ``5 + K x ndim``, when its box fails
:func:`~det_calib.data.ground_truth.check_label_line`, when a keypoint coordinate lies outside the
image beyond Ultralytics' 1% tolerance, or when a visibility is not 0, 1 or 2 (Ultralytics does
not check visibilities; COCO defines only these three). Keypoints without a visibility
(``ndim = 2``) are labelled and visible (``v = 2``), as Ultralytics marks them.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import polars as pl

from det_calib.data.ground_truth import (
    LABEL_TOLERANCE,
    Dataset,
    Split,
    check_label_line,
    coco_image_ids,
    label_path,
    load_split,
)
from det_calib.errors import InputError

__all__ = [
    "KPTS_COLUMN",
    "AREA_COLUMN",
    "NUM_KEYPOINTS_COLUMN",
    "PoseSpec",
    "pose_spec",
    "load_pose_split",
    "split_keypoints",
    "has_keypoints",
]

KPTS_COLUMN, AREA_COLUMN, NUM_KEYPOINTS_COLUMN = "kpts", "area", "num_keypoints"
"""Names of the ground-truth columns :func:`load_pose_split` adds."""

_YOLO_AREA_FACTOR = 0.53
"""OKS area of a YOLO label: this times its box's area (Ultralytics' ``PoseValidator``, after xtcocotools)."""


@dataclass(frozen=True)
class PoseSpec:
    """The keypoint layout of a pose dataset (data.yaml's ``kpt_shape``, ``flip_idx``, ``kpt_oks_sigmas``).

    Attributes:
        nkpt: Keypoints per object.
        ndim: Values per keypoint in a label line: 2 (``x y``) or 3 (``x y v``).
        flip_idx: Keypoint order after a horizontal flip, when data.yaml gives one.
        sigmas: Per-keypoint OKS sigmas when data.yaml gives ``kpt_oks_sigmas``.
    """

    nkpt: int
    ndim: int
    flip_idx: tuple[int, ...] | None = None
    sigmas: tuple[float, ...] | None = None


def _int_list(value, key: str, path: Path) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise InputError(f"{path}: `{key}` must be a list of integers, got {value!r}")
    return value


def _yaml_dict(path: Path) -> dict:
    import yaml

    d = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    return d if isinstance(d, dict) else {}


def pose_spec(data: Dataset) -> PoseSpec | None:
    """The keypoint layout that ``data``'s yaml declares, or None when it has no ``kpt_shape``.

    Raises:
        InputError: ``kpt_shape`` is not ``[K, 2]`` or ``[K, 3]`` with ``K >= 1``; ``flip_idx`` is not a
            permutation of ``0..K-1``; ``kpt_oks_sigmas`` is not K positive numbers.
    """
    path = data.yaml_path
    d = _yaml_dict(path)
    if d.get("kpt_shape") is None:
        return None
    shape = _int_list(d["kpt_shape"], "kpt_shape", path)
    if len(shape) != 2 or shape[0] < 1 or shape[1] not in (2, 3):
        raise InputError(f"{path}: `kpt_shape` must be [K, 2] or [K, 3] with K >= 1, got {shape}")
    k = shape[0]
    flip = d.get("flip_idx")
    if flip is not None:
        flip = _int_list(flip, "flip_idx", path)
        if sorted(flip) != list(range(k)):
            raise InputError(
                f"{path}: `flip_idx` must be a permutation of 0..{k - 1} (kpt_shape {shape}), got "
                f"{flip}"
            )
    sigmas = d.get("kpt_oks_sigmas")
    if sigmas is not None:
        arr = np.asarray(sigmas, dtype=object).reshape(-1)
        ok = len(arr) == k and all(
            isinstance(s, (int, float)) and not isinstance(s, bool) and s > 0 for s in arr
        )
        if not ok:
            raise InputError(
                f"{path}: `kpt_oks_sigmas` must be {k} positive numbers (kpt_shape {shape}), got "
                f"{sigmas}"
            )
        sigmas = tuple(float(s) for s in arr)
    return PoseSpec(
        nkpt=k, ndim=shape[1], flip_idx=None if flip is None else tuple(flip), sigmas=sigmas
    )


def _check_pose_line(
    tokens: list[str], *, nc: int, nkpt: int, ndim: int
) -> tuple[list[float] | None, str | None]:
    """Parse and check one YOLO pose line ``cls cx cy w h`` + ``nkpt`` keypoints of ``ndim`` values.

    Returns:
        ``(box, None)`` with ``box = [cls, cx, cy, w, h]``, or ``(None, reason)``.
    """
    want = 5 + nkpt * ndim
    if len(tokens) != want:
        layout = "x y v" if ndim == 3 else "x y"
        got = len(tokens) - 5
        seen = f" ({got // ndim} keypoints)" if got > 0 and got % ndim == 0 else ""
        return None, (
            f"expected {want} values `cls cx cy w h` and {nkpt} keypoints `{layout}` (kpt_shape "
            f"[{nkpt}, {ndim}]), got {len(tokens)}{seen}"
        )
    box, reason = check_label_line(tokens[:5], nc=nc)
    if reason is not None:
        return None, reason
    for j in range(nkpt):
        vals = tokens[5 + j * ndim : 5 + (j + 1) * ndim]
        reason = _check_keypoint(vals, j + 1)
        if reason is not None:
            return None, reason
    return box, None


def _check_keypoint(vals: list[str], k: int) -> str | None:
    for t in vals:
        try:
            x = float(t)
        except ValueError:
            return f"keypoint {k}: `{t}` is not a number"
        if not np.isfinite(x):
            return f"keypoint {k}: non-finite value `{t}`"
    for t in vals[:2]:
        if not -LABEL_TOLERANCE <= float(t) <= 1 + LABEL_TOLERANCE:
            return (
                f"keypoint {k} outside the image: value {t} outside [0, 1] (normalised "
                "coordinates, "
                f"tolerance {LABEL_TOLERANCE:g})"
            )
    if len(vals) == 3 and float(vals[2]) not in (0.0, 1.0, 2.0):
        return f"keypoint {k}: visibility {vals[2]} not in {{0, 1, 2}}"
    return None


def _read_pose_file(
    path: Path, *, nc: int, nkpt: int, ndim: int
) -> tuple[list[tuple[int, np.ndarray]], str | None]:
    """Read one YOLO pose label file, keeping each line's keypoints.

    Every line is checked by :func:`check_pose_line`; exact duplicate lines are dropped as
    :func:`~det_calib.data.ground_truth.read_label_file` drops them (same rows, same order).

    Returns:
        ``(rows, problem)``: per label row ``(cls, keypoints)`` with ``keypoints`` a (nkpt, 3)
        float64 array of normalised ``x, y`` and the visibility (2 where ``ndim = 2``); ``problem``
        None or ``"<file>:<line>: <reason>"`` (then ``rows`` is empty).
    """
    rows, seen = [], set()
    for k, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        _, reason = _check_pose_line(tokens, nc=nc, nkpt=nkpt, ndim=ndim)
        if reason is not None:
            return [], f"{path}:{k}: {reason}"
        key = tuple(map(float, tokens))
        if key in seen:
            continue
        seen.add(key)
        kp = np.asarray(key[5:], dtype=np.float64).reshape(nkpt, ndim)
        if ndim == 2:
            kp = np.c_[kp, np.full(nkpt, 2.0)]
        rows.append((int(key[0]), kp))
    return rows, None


def load_pose_split(
    data: Dataset,
    split: str,
    *,
    spec: PoseSpec | None = None,
    coco_gt: str | Path | None = None,
    limit: int | None = None,
) -> Split:
    """One split with each ground-truth row's keypoints, OKS area and labelled-keypoint count.

    Args:
        data: Parsed data.yaml.
        split: Split key in the yaml.
        spec: The keypoint layout (the model's); default: data.yaml's (:func:`pose_spec`), needed
            for YOLO labels. For COCO JSON, the layout of its annotations when neither is given.
        coco_gt: Optional COCO keypoints JSON instead of YOLO pose labels.
        limit: Keep only the first ``limit`` images.

    Raises:
        InputError: What :func:`~det_calib.data.ground_truth.load_split` raises (with the pose checks
            of every line); no ``kpt_shape`` for YOLO labels; data.yaml's ``kpt_shape`` differs from
            ``spec``'s; a COCO annotation whose keypoints disagree with the layout.
    """
    declared = pose_spec(data)
    if spec is not None and declared is not None and declared.nkpt != spec.nkpt:
        raise InputError(
            f"{data.yaml_path}: kpt_shape [{declared.nkpt}, {declared.ndim}] but the model has "
            f"{spec.nkpt} keypoints"
        )
    spec = spec or declared
    if coco_gt is not None:
        sp = load_split(data, split, coco_gt=coco_gt, limit=limit)
        kpts, area, nk = _coco_keypoints(sp, Path(coco_gt), spec)
    else:
        if spec is None:
            raise InputError(
                f"{data.yaml_path}: pose labels need `kpt_shape: [K, 3]` (or [K, 2]) in the "
                "data.yaml"
            )
        check = partial(_check_pose_line, nkpt=spec.nkpt, ndim=spec.ndim)
        sp = load_split(data, split, limit=limit, check_line=check)
        kpts, area, nk = _yolo_keypoints(sp, data.nc, spec)
    k3 = kpts.shape[1]
    gt = sp.gt.with_columns(
        pl.Series(KPTS_COLUMN, kpts, dtype=pl.Array(pl.Float64, k3)),
        pl.Series(AREA_COLUMN, area, dtype=pl.Float64),
        pl.Series(NUM_KEYPOINTS_COLUMN, nk, dtype=pl.Int32),
    )
    return Split(
        name=sp.name,
        images=sp.images,
        sizes=sp.sizes,
        gt=gt,
        corrupt=sp.corrupt,
        root=sp.root,
        bad_labels=sp.bad_labels,
    )


def _yolo_keypoints(
    sp: Split, nc: int, spec: PoseSpec
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows: list[np.ndarray] = []
    classes: list[int] = []
    for img, (w, h) in zip(sp.images, sp.sizes):
        lp = label_path(img)
        per, problem = (
            _read_pose_file(lp, nc=nc, nkpt=spec.nkpt, ndim=spec.ndim)
            if lp.is_file()
            else ([], None)
        )
        if problem is not None:  # pragma: no cover - load_split left such images out
            raise InputError(f"malformed label: {problem}")
        for c, kp in per:
            classes.append(c)
            rows.append((kp * [w, h, 1]).reshape(-1))
    if len(rows) != sp.gt.height or classes != sp.gt["cls"].to_list():  # pragma: no cover
        raise InputError("a label file changed while it was read")
    kpts = np.asarray(rows, dtype=np.float64).reshape(-1, spec.nkpt * 3)
    gt = sp.gt
    box_area = ((gt["x2"] - gt["x1"]) * (gt["y2"] - gt["y1"])).to_numpy()
    return kpts, _YOLO_AREA_FACTOR * box_area, (kpts[:, 2::3] > 0).sum(1).astype(np.int32)


def _coco_annotation_keypoints(a: dict, nkpt: int | None, path: Path) -> np.ndarray:
    kp = a.get("keypoints")
    if kp is None:
        return np.zeros(0 if nkpt is None else 3 * nkpt)
    arr = np.asarray(kp, dtype=np.float64).reshape(-1)
    if nkpt is not None and len(arr) != 3 * nkpt:
        raise InputError(
            f"{path}: annotation {a.get('id')} has {len(arr)} keypoint values, expected "
            f"{3 * nkpt} ({nkpt} keypoints `x y v`)"
        )
    if len(arr) % 3 or not np.isfinite(arr).all() or not np.isin(arr[2::3], (0, 1, 2)).all():
        raise InputError(
            f"{path}: annotation {a.get('id')}: `keypoints` must be x, y, v triples with v in "
            "{0, 1, 2}"
        )
    return arr


def _coco_keypoints(
    sp: Split, path: Path, spec: PoseSpec | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from pycocotools.coco import COCO

    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(path))
    anns = coco.dataset.get("annotations", [])
    nkpt = (
        spec.nkpt
        if spec is not None
        else next((len(a["keypoints"]) // 3 for a in anns if a.get("keypoints")), None)
    )
    if nkpt is None or not any(a.get("keypoints") for a in anns):
        raise InputError(f"{path} has no annotation with `keypoints`: not a COCO keypoints file")
    kpts, area, nk = [], [], []
    for cid in coco_image_ids(coco, sp.images, root=sp.root, path=path):
        for a in coco.loadAnns(coco.getAnnIds(imgIds=[cid])):
            kp = _coco_annotation_keypoints(a, nkpt, path)
            kp = kp if len(kp) else np.zeros(3 * nkpt)
            kpts.append(kp)
            x, y, w, h = a["bbox"]
            area.append(float(a["area"]) if "area" in a else _YOLO_AREA_FACTOR * w * h)
            nk.append(int(a.get("num_keypoints", int((kp[2::3] > 0).sum()))))
    if len(kpts) != sp.gt.height:  # pragma: no cover - the same JSON, read twice
        raise InputError(f"{path} changed while it was read")
    return (
        np.asarray(kpts, dtype=np.float64).reshape(-1, 3 * nkpt),
        np.asarray(area, dtype=np.float64),
        np.asarray(nk, dtype=np.int32),
    )


def split_keypoints(split: Split) -> np.ndarray:
    """(m, K, 3) keypoints ``x, y, v`` of the split's ground-truth rows."""
    if KPTS_COLUMN not in split.gt.columns:
        raise InputError(
            f"split `{split.name}` was read without keypoints (read it for a pose model: "
            "load_task_split)"
        )
    arr = split.gt[KPTS_COLUMN].to_numpy()
    return np.asarray(arr, dtype=np.float64).reshape(split.gt.height, -1, 3)


def has_keypoints(split: Split) -> bool:
    """Whether the split's ground truth has keypoints (OKS matching is possible)."""
    return KPTS_COLUMN in split.gt.columns
