"""The ``shapes`` demo dataset as a classification dataset: one crop per labelled object.

Each labelled object of a ``shapes`` image (:mod:`det_calib.demo.shapes`) gives one square crop,
centred on its box, ``CROP_MARGIN`` times the box's longer side (at least ``MIN_CROP`` pixels),
padded with the image's edge pixels where it leaves the image and resized to ``CROP_SIZE``. Crops
are written as Ultralytics reads a classification dataset: one folder per class under each split
(``train/``, ``val/``, ``test/``; ``val`` holds the crops of the detection dataset's ``calib``
split). Partly hidden objects and the confusable pairs (circle/ellipse, square/rectangle,
hexagon/circle) keep the task uncertain, so a classifier's softmax has something to calibrate.

Examples:
    >>> from det_calib.tasks.classify.demo_crops import _crops_of
    >>> crops = _crops_of(0, "test", 3)
    >>> {c.shape for _, c in crops} <= {(_CROP_SIZE, _CROP_SIZE, 3)}
    True
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from det_calib.demo import cache_dir
from det_calib.demo.shapes import CLASS_NAMES, GENERATOR_VERSION, SPLIT_SIZES, render_image

_log = logging.getLogger(__name__)

_CROP_SIZE = 64
"""Side of every written crop, in pixels."""

_CROP_MARGIN = 1.3
"""A crop's side over its object's longer box side."""

_MIN_CROP = 16
"""Smallest crop side taken from the image, in pixels (tiny objects keep some context)."""

_CLASSIFY_SPLITS: dict[str, str] = {"train": "train", "val": "calib", "test": "test"}
"""Classification split (Ultralytics' folder name) -> the detection split its crops come from."""


def _crops_of(seed: int, split: str, index: int) -> list[tuple[int, np.ndarray]]:
    """The crops of one rendered ``shapes`` image.

    Returns:
        ``(class id, crop)`` per labelled object, in label order; each crop a uint8 BGR array of
        shape (``CROP_SIZE``, ``CROP_SIZE``, 3).
    """
    import cv2

    img, labels = render_image(seed, split, index)
    h, w = img.shape[:2]
    out = []
    for c, cx, cy, bw, bh in labels:
        side = max(_MIN_CROP, round(_CROP_MARGIN * max(bw * w, bh * h)))
        x0, y0 = round(cx * w - side / 2), round(cy * h - side / 2)
        pad = side  # enough edge padding for any crop centred inside the image
        padded = cv2.copyMakeBorder(img, pad, pad, pad, pad, cv2.BORDER_REPLICATE)
        crop = padded[y0 + pad : y0 + pad + side, x0 + pad : x0 + pad + side]
        interp = cv2.INTER_AREA if side > _CROP_SIZE else cv2.INTER_LINEAR
        out.append((int(c), cv2.resize(crop, (_CROP_SIZE, _CROP_SIZE), interpolation=interp)))
    return out


def _write_classify_split(root: Path, split: str, n_images: int, *, seed: int = 0) -> int:
    """Write the crops of the first ``n_images`` images of the detection split that ``split`` comes
    from into ``root/split/<class name>/``. Returns the number of crops written."""
    import cv2

    source = _CLASSIFY_SPLITS[split]
    for name in CLASS_NAMES:
        (root / split / name).mkdir(parents=True, exist_ok=True)
    count = 0
    for i in range(n_images):
        for j, (c, crop) in enumerate(_crops_of(seed, source, i)):
            path = root / split / CLASS_NAMES[c] / f"{source}_{i:05d}_{j:02d}.png"
            if not cv2.imwrite(str(path), crop):
                raise OSError(f"could not write {path}")
            count += 1
    return count


def classify_root(cache: Path, *, seed: int = 0, splits: dict[str, int] | None = None) -> Path:
    """The classification dataset folder under ``cache``, its splits written on first use.

    Args:
        cache: Folder the dataset lives in (``det_calib.demo.cache_dir()`` for the demo).
        seed: Dataset seed; the demo classifier was trained on seed 0.
        splits: Images per detection split to crop (default: every image of
            :data:`~det_calib.demo.shapes.SPLIT_SIZES`), keyed by classification split.

    Returns:
        The folder to give Ultralytics' classification trainer or validator as ``data``.
    """
    sizes = splits or {k: SPLIT_SIZES[v] for k, v in _CLASSIFY_SPLITS.items()}
    root = Path(cache) / f"shapes-classify-v{GENERATOR_VERSION}-seed{seed}"
    for split, n in sizes.items():
        done = root / f".{split}.complete"
        if n and not (done.is_file() and done.read_text() == str(n)):
            _log.info(
                "cropping %d %s images of the shapes demo into %s (first use)", n, split, root
            )
            count = _write_classify_split(root, split, n, seed=seed)
            done.write_text(str(n))
            _log.info("wrote %d crops", count)
    return root


def _demo_data(*, with_train: bool = False, seed: int = 0) -> Path:
    """The demo's class folders in the cache (:func:`det_calib.demo.cache_dir`), cropped on first use; the
    ``train`` split only ``with_train`` (only training needs it). What ``demo_data_yaml(task="classify")``
    returns."""
    splits = {k: SPLIT_SIZES[v] for k, v in _CLASSIFY_SPLITS.items() if with_train or k != "train"}
    return classify_root(cache_dir(), seed=seed, splits=splits)


DEMO_MODEL = "yolo26n_shapes_cls.pt"
"""The demo classifier's file name among the demo files (YOLO26n-cls trained on these crops:
:func:`det_calib.demo.demo_task_model` with ``task="classify"``)."""
DEMO_DATA = _demo_data
"""The task's demo data (:func:`det_calib.demo.demo_data_yaml` with ``task="classify"``)."""
