"""The options of a capture, in one typed object.

:class:`CaptureOptions` is what :class:`det_calib.capture.predictor.Capturer`,
:class:`det_calib.capture.exported.ExportCapturer`, the capture to parts, the Ray capture and the
calibration run pass around instead of the same list of keyword arguments. The public
:func:`det_calib.capture.predictor.capture` keeps its keyword arguments and builds one.

>>> CaptureOptions(conf=0.01, heads=["nms", "e2e"]).heads
('nms', 'e2e')
>>> CaptureOptions.of(CaptureOptions(conf=0.01), batch=4).batch
4
>>> resolve_batch(None, "cpu"), resolve_batch(4, "cpu")
(1, 4)
>>> CaptureOptions(conf=1.5)
Traceback (most recent call last):
...
det_calib.errors.InputError: Expected argument `conf` in [0, 1), but got 1.5
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from det_calib.data.box_table import Head
from det_calib.errors import InputError

__all__ = ["CaptureOptions", "resolve_batch"]

_CUDA_BATCH = 16
"""Images per forward pass of a capture on a CUDA device when none is asked for (Ultralytics val's
own default batch). Batched convolutions round differently from a batch of one, so a few boxes near
the conf floor come and go (measured in docs/speed.md); on a CPU the default stays 1: exactly
single-image ``predict``."""


def resolve_batch(batch: int | None, device: Any) -> int:
    """The capture's batch: ``batch`` when given; else :data:`CUDA_BATCH` on a CUDA device and 1
    anywhere else (CPU, MPS).

    ``device``: a ``torch.device``, or a device string as Ultralytics' ``select_device`` reads it
    (``"cpu"``, ``"mps"``, ``"0"``, ``"cuda:0"``, ``"0,1"``; None or ``""``: CUDA where torch sees it).
    """
    if batch is not None:
        return int(batch)
    kind = getattr(device, "type", None)
    if kind is None:
        name = "" if device is None else str(device).strip().lower()
        if name in ("cpu", "mps") or name.startswith("mps:"):
            return 1
        import torch

        kind = "cuda" if torch.cuda.is_available() else "cpu"
    return _CUDA_BATCH if kind == "cuda" else 1


@dataclass(frozen=True)
class CaptureOptions:
    """How a capture runs: which heads, conf floor, NMS, image size, batching, device, what it keeps.

    Attributes:
        head: One head mode, ``"nms"`` or ``"e2e"`` (the single-head form).
        heads: Several head modes, or ``"auto"`` (every head the model has). At most one of
            ``head`` and ``heads``; with neither, ``("nms",)`` (see
            :func:`det_calib.capture.predictor.resolve_heads`).
        conf: Conf floor (Ultralytics keeps ``conf > floor``).
        iou: NMS IoU threshold (Ultralytics' predict default 0.7; unused by ``e2e``).
        max_det: Maximum boxes per image and head.
        imgsz: Inference size; None: the model's training size.
        batch: Maximum images per forward pass (same letterboxed shape only); None (default):
            :data:`CUDA_BATCH` on a CUDA device, 1 elsewhere (:func:`resolve_batch`).
        device: Torch device string (``"cpu"``, ``"0"``...); None: Ultralytics' default.
        all_logits: Also keep all nc class logits of each box (a ``logits`` list column).
        workers: Images captured in parallel (threads); None: chosen for the device.
        payload: A segment model's boxes keep their masks (``segm``, rasterised at the image's size); False
            when no figure needs them (box labels): the boxes are the same, ``segm`` is null, and no mask
            is rasterised (:meth:`det_calib.tasks.contract.Task.rebuild_payload`). Not a setting that
            changes the boxes, so not among :meth:`settings`.

    Raises:
        InputError: ``conf``, ``iou``, ``max_det`` or ``batch`` out of range.
    """

    head: Head | None = None
    heads: tuple[Head, ...] | Literal["auto"] | None = None
    conf: float = 0.001
    iou: float = 0.7
    max_det: int = 300
    imgsz: int | None = None
    batch: int | None = None
    device: str | None = None
    all_logits: bool = False
    workers: int | None = None
    payload: bool = True

    def __post_init__(self) -> None:
        if self.heads is not None and not isinstance(self.heads, str):
            object.__setattr__(self, "heads", tuple(self.heads))
        if not 0 <= self.conf < 1:
            raise InputError(f"Expected argument `conf` in [0, 1), but got {self.conf}")
        if not 0 <= self.iou <= 1:
            raise InputError(f"Expected argument `iou` in [0, 1], but got {self.iou}")
        if int(self.max_det) < 1:
            raise InputError(
                f"Expected argument `max_det` to be a positive integer, but got {self.max_det}"
            )
        if self.batch is not None and int(self.batch) < 1:
            raise InputError(
                f"Expected argument `batch` to be a positive integer, but got {self.batch}"
            )

    @classmethod
    def of(cls, options: CaptureOptions | None = None, /, **changes: Any) -> CaptureOptions:
        """``options`` (default: the defaults) with the keyword ``changes`` applied.

        Raises:
            InputError: An unknown option name (one line naming it).
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InputError(
                f"unknown capture option `{unknown[0]}`; the options are: "
                f"{', '.join(sorted(known))}"
            )
        base = options if options is not None else cls()
        return dataclasses.replace(base, **changes) if changes else base

    def with_heads(self, heads: Sequence[Head] | Literal["auto"] | None) -> CaptureOptions:
        """These options for ``heads`` (and no single ``head``)."""
        return dataclasses.replace(self, head=None, heads=heads)

    def settings(self, *, imgsz: Sequence[int], batch: int | None = None) -> dict:
        """The settings that change a capture's output, as captured parts record them: these
        options with the resolved ``imgsz`` (and the batch the capturer really runs; default these
        options' batch resolved for their device)."""
        return {
            "conf": float(self.conf),
            "iou": float(self.iou),
            "max_det": int(self.max_det),
            "imgsz": [int(v) for v in imgsz],
            "batch": resolve_batch(self.batch, self.device) if batch is None else int(batch),
            "all_logits": self.all_logits,
        }
