"""Capture a classify model's logits through Ultralytics' own classification predictor.

Ultralytics' ``Classify`` head computes ``z = linear(...)`` and, at inference, returns
``(softmax(z), z)``; its predictor keeps ``softmax(z)`` as ``Results.probs``. The capture runs
``YOLO(model).predict`` one image at a time, as a deployment does, with Ultralytics' own
classification predictor extended to keep the head's second output, ``z``: the logits before the
softmax, as float32, exactly those whose softmax is ``Results.probs`` (tested). An exported engine
returns only the softmax; its logits are taken as ``log p``, which differ from ``z`` by one
constant per image that a temperature does not see (``softmax((z - c) / T) = softmax(z / T)``);
vector and matrix scaling are then maps of those log-probabilities. Their precision is float32's
smallest probability.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from det_calib.errors import InputError
from det_calib.tasks import CLASSIFY, answers_per_image

__all__ = ["ClassifyCapture", "capture_classify"]


@dataclass(frozen=True)
class ClassifyCapture:
    """Every image's logits and Ultralytics' own probabilities for it.

    Attributes:
        paths: The images, in the order captured.
        logits: ``(n, K)`` float32 logits before the softmax (``log p`` for an exported engine).
        probs: ``(n, K)`` float32 ``Results.probs`` of Ultralytics' predictor, as it returned them.
        names: The model's class names, by class id.
        from_log_probs: True when ``logits`` are ``log p`` of an engine that returns only the softmax.
    """

    paths: tuple[Path, ...]
    logits: np.ndarray
    probs: np.ndarray
    names: tuple[str, ...]
    from_log_probs: bool = False


def capture_classify(
    model: str | Path | Any,
    images: Sequence[Path],
    *,
    imgsz: int | None = None,
    device: str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> ClassifyCapture:
    """Run Ultralytics' classification predictor over ``images`` and keep each image's logits.

    Args:
        model: A classify checkpoint or export (a path), or a loaded ``ultralytics.YOLO``.
        images: Image paths; each is predicted alone (batch 1).
        imgsz: Inference size (default: the model's own).
        device: Torch device of a ``.pt`` model.
        progress: Called with 1 after each image.

    Raises:
        InputError: The model is not a classify model; an image cannot be read.
    """
    from ultralytics import YOLO

    yolo = model if hasattr(model, "predict") else YOLO(str(model), task=CLASSIFY)
    if not answers_per_image(getattr(yolo, "task", None)):
        raise InputError(
            f"{model} is a {getattr(yolo, 'task', 'unknown')} model, not a classify model"
        )
    names = tuple(str(n) for _, n in sorted(yolo.names.items()))
    size = {"imgsz": imgsz} if imgsz else {}
    if not isinstance(getattr(yolo, "predictor", None), _logit_predictor()):
        yolo.predictor = None  # a plain predictor made earlier would not keep the logits
    probs, logits, paths = [], [], []
    for path in images:
        try:
            res = yolo.predict(
                str(path),
                device=device,
                verbose=False,
                batch=1,
                predictor=_logit_predictor(),
                **size,
            )
        except (FileNotFoundError, OSError, ValueError) as e:
            raise InputError(f"cannot read image {path}: {e}") from None
        probs.append(res[0].probs.data.detach().cpu().float().numpy())
        logits.append(getattr(res[0], "det_calib_logits", None))
        paths.append(Path(path))
        if progress:
            progress(1)
    p = np.stack(probs).astype(np.float32) if probs else np.zeros((0, len(names)), np.float32)
    if all(z is not None for z in logits):
        z = np.stack(logits).astype(np.float32) if logits else np.zeros((0, len(names)), np.float32)
        return ClassifyCapture(tuple(paths), z, p, names)
    with np.errstate(divide="ignore"):
        z = (
            np.log(p.astype(np.float64))
            .clip(min=np.log(np.finfo(np.float32).tiny))
            .astype(np.float32)
        )
    return ClassifyCapture(tuple(paths), z, p, names, from_log_probs=True)


@functools.cache
def _logit_predictor():
    """Ultralytics' classification predictor, keeping the head's second output (the logits) on
    each result as ``det_calib_logits`` (a ``.pt`` model's head returns ``(softmax(z), z)``; an
    export returns the softmax alone, and no logits are kept)."""
    from ultralytics.models.yolo.classify import ClassificationPredictor

    class LogitPredictor(ClassificationPredictor):
        def postprocess(self, preds, img, orig_imgs):
            results = super().postprocess(preds, img, orig_imgs)
            if isinstance(preds, (list, tuple)) and len(preds) == 2:
                for r, z in zip(results, preds[1]):
                    r.det_calib_logits = z.detach().cpu().float().numpy()
            return results

    return LogitPredictor
