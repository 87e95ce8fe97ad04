"""Capture raw per-box class logits through Ultralytics' own prediction path.

The only module (with :mod:`det_calib.fold` and :mod:`det_calib.verify`) that imports
Ultralytics. A :class:`~ultralytics.models.yolo.detect.DetectionPredictor` subclass replaces
``postprocess`` only: it calls Ultralytics' ``non_max_suppression`` with ``return_idxs=True`` and
reads, for every kept box, the pre-sigmoid class scores of the head output at the box's anchor.
Pre-processing, inference, NMS/top-k and box scaling are Ultralytics' own, so the captured boxes
and confs are exactly those of ``model.predict(conf=floor)``.

Head modes:

- ``nms``: the one-to-many branch (``cv2``/``cv3``) + NMS; Ultralytics' default (``nms=None``),
  and the only branch of legacy YOLOv8/YOLO11 heads.
- ``e2e``: the one-to-one NMS-free branch (``one2one_cv2``/``one2one_cv3``; YOLO26, YOLOv10),
  selected with ``nms=False``. Its output rows are the top ``max_det`` (anchor, class) pairs;
  they are mapped back to anchors through the head's own ``get_topk_index`` on the same scores.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl
import torch

from det_calib.boxes import CAPTURE_COLUMNS, SCHEMA
from det_calib.errors import InputError, first_line

log = logging.getLogger(__name__)

Head = Literal["nms", "e2e"]


def load_detector(model):
    """Load an Ultralytics detector and check that it is one.

    Args:
        model: Path to a ``.pt`` file, or an ``ultralytics.YOLO`` instance.

    Returns:
        The ``ultralytics.YOLO`` model.

    Raises:
        InputError: Missing or unreadable file, or a model whose task is not ``detect``.
    """
    from ultralytics import YOLO

    if not isinstance(model, (str, Path)):
        yolo = model
    else:
        path = Path(model)
        if path.suffix not in (".pt", ".yaml", ".yml"):
            raise InputError(f"model must be a PyTorch .pt checkpoint (or a model .yaml), got {path}")
        if path.suffix == ".pt" and not path.is_file():
            raise InputError(f"model file not found: {path}")
        try:
            yolo = YOLO(str(path))
        except Exception as e:
            raise InputError(f"cannot load model {path}: {first_line(e)}") from None
    if getattr(yolo, "task", None) != "detect":
        raise InputError(f"model task is `{getattr(yolo, 'task', None)}`, not `detect`: det_calib calibrates detectors")
    if not isinstance(getattr(yolo, "model", None), torch.nn.Module):
        raise InputError("only PyTorch (.pt) models can be captured: exported formats have no raw logits")
    if not available_heads(yolo):
        raise InputError(
            f"the model's last layer is {type(detect_head(yolo)).__name__}, not a YOLO Detect head with a "
            "classification branch (cv3): det_calib supports YOLOv8/YOLO11/YOLO26-style detectors"
        )
    return yolo


def detect_head(yolo) -> torch.nn.Module:
    """The ``Detect`` head module of a loaded model."""
    return yolo.model.model[-1]


def available_heads(yolo) -> list[str]:
    """Head modes the model has: ``["nms", "e2e"]`` for YOLO26/YOLOv10, ``["nms"]`` for legacy heads."""
    head = detect_head(yolo)
    heads: list[str] = []
    if getattr(head, "cv3", None) is not None:
        heads.append("nms")
    if getattr(head, "one2one_cv3", None) is not None:
        heads.append("e2e")
    return heads


def default_imgsz(yolo) -> int:
    """The image size the model was trained at (its checkpoint's ``imgsz``), else 640."""
    args = getattr(yolo, "overrides", {}) or {}
    train_args = (getattr(yolo, "ckpt", None) or {}).get("train_args", {}) or {}
    v = train_args.get("imgsz", args.get("imgsz", 640))
    return int(v if isinstance(v, (int, float)) else max(v))


@functools.lru_cache(maxsize=1)
def _predictor_class():
    # one class for the process: Ultralytics keeps a model's predictor between predict() calls
    # only while the predictor class stays the same (a new class would re-fuse the model each time)
    from ultralytics.models.yolo.detect import DetectionPredictor
    from ultralytics.utils import nms

    class LogitCapturePredictor(DetectionPredictor):
        """Ultralytics' detection predictor that also returns each kept box's raw class logits."""

        def postprocess(self, preds, img, orig_imgs, **kwargs):
            if not (isinstance(preds, (tuple, list)) and len(preds) == 2 and isinstance(preds[1], dict)):
                raise InputError("the model returned no raw head output (exported model, or augment=True?)")
            y, raw = preds
            end2end = bool(getattr(self.model, "end2end", False))
            out, keep = nms.non_max_suppression(
                y,
                self.args.conf,
                self.args.iou,
                self.args.classes,
                self.args.agnostic_nms,
                max_det=self.args.max_det,
                nc=0,
                end2end=end2end,
                return_idxs=True,
            )
            if "one2one" in raw:
                raw = raw["one2one" if end2end else "one2many"]
            scores = raw["scores"]  # (B, nc, anchors), pre-sigmoid
            if end2end:
                head = self.model.model.model[-1]
                _, _, anchor_of_row = head.get_topk_index(scores.sigmoid().permute(0, 2, 1), head.max_det)
            logits = []
            for b, (_det, k) in enumerate(zip(out, keep)):
                k = k.long().view(-1)
                anchors = anchor_of_row[b, k] if end2end else k
                logits.append(scores[b][:, anchors].T.float().cpu())  # (n, nc)
            if not isinstance(orig_imgs, list):
                from ultralytics.utils import ops

                orig_imgs = ops.convert_torch2numpy_batch(orig_imgs)[..., ::-1]
            results = self.construct_results(out, img, orig_imgs)
            for r, lg in zip(results, logits):
                r.det_calib_logits = lg
            return results

    return LogitCapturePredictor


def capture(
    model,
    images: Sequence[str | Path],
    *,
    head: Head = "nms",
    conf: float = 0.001,
    iou: float = 0.7,
    max_det: int = 300,
    imgsz: int | None = None,
    batch: int = 16,
    device: str | None = None,
    split: str = "",
    image_names: Sequence[str] | None = None,
    all_logits: bool = False,
    progress: bool = True,
) -> pl.DataFrame:
    """Run the detector over ``images`` and return one row per output box with its raw logit.

    Args:
        model: ``.pt`` path or ``ultralytics.YOLO`` detector.
        images: Image paths; ``image_id`` in the output is the position in this list.
        head: ``"nms"`` (one-to-many head + NMS, Ultralytics' default) or ``"e2e"`` (NMS-free
            one-to-one head, ``nms=False``).
        conf: Conf floor passed to Ultralytics (it keeps ``conf > floor``).
        iou: NMS IoU threshold (Ultralytics' predict default 0.7; unused by ``e2e``).
        max_det: Maximum boxes per image.
        imgsz: Inference size; default the model's training size.
        batch: Images per forward pass. Ultralytics letterboxes a batch of mixed-size images to a
            common shape, so results equal ``model.predict`` run with the same ``batch``.
        device: Torch device string (``"cpu"``, ``"0"``...); Ultralytics' default when None.
        split: Value of the ``split`` column.
        image_names: Values of the ``image`` column (default: the paths).
        all_logits: Also return all nc class logits of each box in a ``logits`` list column.
        progress: Show a progress bar.

    Returns:
        Box table with the capture columns of :mod:`det_calib.boxes` (no match columns).

    Raises:
        InputError: The model lacks the requested head, or no images were given.
    """
    yolo = load_detector(model)
    if head not in ("nms", "e2e"):
        raise InputError(f"Expected argument `head` to be 'nms' or 'e2e', but got {head!r}")
    heads = available_heads(yolo)
    if head not in heads:
        raise InputError(
            f"the model has no {'one-to-one (NMS-free)' if head == 'e2e' else 'one-to-many'} head "
            f"for `head` {head}; it has: {', '.join(heads)}"
        )
    if not 0 <= conf < 1:
        raise InputError(f"Expected argument `conf` in [0, 1), but got {conf}")
    paths = [str(p) for p in images]
    if not paths:
        raise InputError("no images to capture")
    names = list(image_names) if image_names is not None else paths
    # Ultralytics reports each result's path as an absolute path
    index = {str(Path(p).absolute()): i for i, p in enumerate(paths)}
    imgsz = imgsz or default_imgsz(yolo)

    predictor = _predictor_class()
    cols: dict[str, list] = {c: [] for c in CAPTURE_COLUMNS}
    all_lg: list[np.ndarray] = []
    bar = _progress(len(paths), f"capture {split or 'images'} [{head}]", enabled=progress, batch=batch)
    kw = dict(conf=conf, iou=iou, max_det=max_det, imgsz=imgsz, batch=batch, verbose=False, save=False)
    if device is not None:
        kw["device"] = device
    kw["nms"] = False if head == "e2e" else None
    seen = np.zeros(len(paths), dtype=bool)
    try:
        for r in yolo.predict(source=paths, stream=True, predictor=predictor, **kw):
            i = index[str(Path(r.path).absolute())]
            seen[i] = True
            b = r.boxes
            n = len(b)
            xyxy = b.xyxy.cpu().numpy().astype(np.float64)
            confs = b.conf.cpu().numpy()
            cls = b.cls.cpu().numpy().astype(np.int32)
            lg = r.det_calib_logits.numpy()
            h, w = r.orig_shape
            cols["image"] += [names[i]] * n
            cols["image_id"] += [i] * n
            cols["split"] += [split] * n
            cols["head"] += [head] * n
            for k, c in enumerate(("x1", "y1", "x2", "y2")):
                cols[c].append(xyxy[:, k])
            cols["img_w"] += [w] * n
            cols["img_h"] += [h] * n
            cols["cls"].append(cls)
            cols["conf"].append(confs.astype(np.float64))
            cols["logit"].append(lg[np.arange(n), cls].astype(np.float64))
            if all_logits:
                all_lg.append(lg)
            bar.update(1)
    except InputError:
        raise
    except (torch.OutOfMemoryError, MemoryError):
        raise InputError(f"out of memory running the model with batch {batch}: lower `batch`") from None
    except (ValueError, FileNotFoundError, OSError) as e:  # bad --device, unreadable source...
        raise InputError(f"prediction failed: {first_line(e)}") from None
    if not seen.all():
        warnings.warn(f"Ultralytics skipped {int((~seen).sum())} of {len(paths)} images (unreadable by OpenCV)",
                      stacklevel=2)
    bar.close()
    data = {}
    for c in CAPTURE_COLUMNS:
        v = cols[c]
        data[c] = np.concatenate(v) if v and isinstance(v[0], np.ndarray) else v
    df = pl.DataFrame(data, schema={c: SCHEMA[c] for c in CAPTURE_COLUMNS})
    if all_logits:
        stacked = np.concatenate(all_lg) if all_lg else np.zeros((0, len(yolo.names)), np.float32)
        df = df.with_columns(pl.Series("logits", stacked.tolist(), dtype=pl.List(pl.Float32)))
    return df


class _NoBar:
    def update(self, n: int = 1) -> None:  # noqa: D401
        pass

    def close(self) -> None:
        pass


def _progress(total: int, desc: str, *, enabled: bool, batch: int = 1):
    """A progress bar over ``total`` images that shows no ETA until the speed is known.

    The first result arrives only after model set-up and a whole first batch, so a speed measured
    from the start would promise hours on a run of minutes. The speed clock starts at the first
    result instead, and the speed, percentage and ETA appear once another full ``batch`` has arrived.
    """
    if not enabled:
        return _NoBar()
    from ultralytics.utils import TQDM

    class _Bar(TQDM):
        def __init__(self) -> None:
            super().__init__(total=None, desc=desc, unit="img", disable=False)  # no total: no ETA yet
            self.expected = total
            self.clock: tuple[float, int] | None = None  # (time, count) at the first result

        def update(self, n: int = 1) -> None:
            now, count = time.monotonic(), self.n + n
            if self.clock is None:
                self.clock = (now, count)
            elif self.total is None and count - self.clock[1] >= max(batch, 1) and now > self.clock[0]:
                self.last_rate = (count - self.clock[1]) / (now - self.clock[0])  # the steady speed
                self.total = self.expected
            super().update(n)

        def _format_rate(self, rate: float) -> str:
            return super()._format_rate(rate) if self.total is not None else ""  # no speed until known

        def close(self) -> None:
            self.total = self.expected
            super().close()

    return _Bar()
