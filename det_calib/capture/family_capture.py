"""The capture of a model family that runs through its own Ultralytics predictor (RT-DETR's
``RTDETRPredictor``): :class:`PredictorCapturer`, which a family's module subclasses with the predictor that
hands back each kept box's class logits (:meth:`PredictorCapturer._logit_predictor`), so that the family's
capture is its predictor's, bit for bit, and its table a :class:`~det_calib.capture.predictor.Capturer`'s.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from det_calib.capture.image_source import progress_bar
from det_calib.capture.options import CaptureOptions, resolve_batch
from det_calib.capture.predictor import (
    Capturer,
    ImageBoxes,
    default_imgsz,
    kept_logits,
    load_detector,
    resolve_heads,
)
from det_calib.errors import InputError, first_line
from det_calib.tasks import get_task

_log = logging.getLogger(__name__)


class PredictorCapturer(Capturer):
    """A detector of a model family prepared once for capture, run through Ultralytics' own predictor of
    the family (its resize to ``imgsz``, its forward pass, its postprocess): the boxes, classes and confs
    of the table are those of ``predict(image, conf=floor)``, bit for bit, with each box's raw class logit
    beside them. The table is a :class:`~det_calib.capture.predictor.Capturer`'s (its ``head`` the
    family's).

    A family subclasses it and gives :meth:`_logit_predictor`: Ultralytics' predictor of the family whose
    ``Results`` each carry ``det_calib_logits``, the ``(n, nc)`` class logits of their ``n`` boxes in
    their boxes' order; and, where it refuses some models of its family, :meth:`_check_model`.

    Args:
        model: A loaded Ultralytics model of the family or the path.
        options: The :class:`~det_calib.capture.options.CaptureOptions` (the NMS IoU and ``workers`` are
            unused: the family's own postprocess, one predictor).
    """

    def __init__(self, model, options: CaptureOptions | None = None, /, **kw: Any) -> None:
        from ultralytics.utils.checks import check_imgsz
        from ultralytics.utils.torch_utils import select_device

        opts = self.options = CaptureOptions.of(options, **kw)
        self.yolo = load_detector(model)
        self.heads = resolve_heads(self.yolo, head=opts.head, heads=opts.heads)
        self.task = self.yolo.task
        self.hooks = get_task(self.task)
        self._check_model()
        self.conf, self.iou = float(opts.conf), float(opts.iou)
        self.max_det = int(opts.max_det)
        self.all_logits, self.payload, self.payload_shape = opts.all_logits, opts.payload, None
        self.nc = len(self.yolo.names)
        self.names = [self.yolo.names[k] for k in sorted(self.yolo.names)]
        try:
            self.device = select_device("" if opts.device is None else opts.device, verbose=False)
        except (ValueError, RuntimeError, AssertionError) as e:
            raise InputError(f"bad device {opts.device!r}: {first_line(e)}") from None
        self.batch = resolve_batch(opts.batch, self.device)
        self.workers = 1
        self.imgsz = check_imgsz(opts.imgsz or default_imgsz(self.yolo), stride=32, min_dim=2)
        self.trace, self.traced = False, None
        self._predictor = self._logit_predictor()

    def _capture(
        self, paths: list[str], sizes: np.ndarray, out: dict, desc: str, progress: bool
    ) -> int:
        """:meth:`Capturer._capture` through the family's own predictor, one ``predict`` call per image
        (``batch`` images with ``batch > 1``)."""
        import torch

        where: dict[str, list[int]] = {}
        for i, p in enumerate(paths):
            where.setdefault(os.path.abspath(p), []).append(i)
        bar = progress_bar(
            len(paths),
            f"{desc} [{'+'.join(self.heads)}]",
            enabled=progress,
            batch=self.batch,
        )
        args = dict(
            conf=self.conf,
            max_det=self.max_det,
            imgsz=list(self.imgsz),
            batch=self.batch,
            device=str(self.device),
            verbose=False,
            save=False,
        )
        try:
            # one call per image (``batch`` images with ``batch > 1``): predict given a list batches it, and a
            # batched forward pass rounds differently from the one-image pass a deployment runs
            unique = list(dict.fromkeys(os.path.abspath(p) for p in paths))
            for i in range(0, len(unique), self.batch):
                chunk = unique[i : i + self.batch]
                try:
                    results = self.yolo.predict(
                        chunk[0] if len(chunk) == 1 else chunk, predictor=self._predictor, **args
                    )
                except FileNotFoundError as e:  # Ultralytics' loader on an image OpenCV cannot read
                    _log.warning("cannot read %s: skipped (%s)", ", ".join(chunk), first_line(e))
                    bar.update(len(chunk))
                    continue
                for r in results:
                    boxes = self._boxes(r)
                    for pos in where.get(os.path.abspath(r.path), []):
                        sizes[pos] = (r.orig_shape[1], r.orig_shape[0])
                        for h in self.heads:
                            out[h][pos] = boxes
                        bar.update(1)
        except (torch.OutOfMemoryError, MemoryError):
            raise InputError(
                f"out of memory running the model with batch {self.batch}: lower `batch`"
            ) from None
        finally:
            bar.close()
        return len(paths) - len(out[self.heads[0]])

    def _boxes(self, r) -> ImageBoxes:
        """One ``Results``' kept boxes, with the class logits its predictor attached (``det_calib_logits``)."""
        lg = np.asarray(r.det_calib_logits, dtype=np.float32).reshape(-1, self.nc)
        cls = r.boxes.cls.cpu().numpy().astype(np.int32)
        z = lg[np.arange(len(cls)), cls]
        return ImageBoxes(
            r.boxes.xyxy.cpu().numpy(), r.boxes.conf.cpu().numpy(), cls, z, kept_logits(self, lg)
        )

    def _logit_predictor(self) -> type:
        """The family's Ultralytics predictor class whose ``Results`` carry ``det_calib_logits``."""
        raise NotImplementedError

    def _check_model(self) -> None:
        """Refuse, in one line, a model of the family the capture cannot take (default: none)."""
