"""Ultralytics' own classify val (top-1, top-5) on exactly the split det_calib read.

Ultralytics reads a classification dataset's class names from its ``train`` folder and, when that
folder is missing, splits the dataset anew into a new folder; either would let val read something
other than det_calib's split. So val runs on a view: a temporary folder whose ``train`` and
``test`` entries are links to the one split folder (names and images both from it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from det_calib.errors import InputError
from det_calib.tasks import CLASSIFY

__all__ = ["classify_val"]


def classify_val(model: str | Path, data: str | Path, split: str, imgsz: int | None = None) -> dict:
    """Top-1 and top-5 of Ultralytics' classify val of ``model`` on ``data/split``.

    Returns:
        ``{"top1": float, "top5": float}``.
    """
    from ultralytics import YOLO

    source = Path(data).absolute() / split
    if not source.is_dir():
        raise InputError(f"classification data {data}: no `{split}` folder")
    view = Path(tempfile.mkdtemp(prefix="det_calib_cls_val_"))
    try:
        for name in ("train", "test"):
            os.symlink(source, view / name, target_is_directory=True)
        kw = {"imgsz": imgsz} if imgsz else {}
        metrics = YOLO(str(model), task=CLASSIFY).val(
            data=str(view), split="test", batch=16, plots=False, verbose=False, device="cpu", **kw
        )
        return {"top1": float(metrics.top1), "top5": float(metrics.top5)}
    finally:
        shutil.rmtree(view, ignore_errors=True)
