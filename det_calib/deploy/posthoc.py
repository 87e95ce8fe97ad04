"""Apply a calibration after the detector's own selection (post-hoc), from ``calibration.json``.

Folded into the model (``calibrated.pt``), a per-class map acts before the detector picks its
boxes: it can change which class wins a box (the argmax before NMS) and which boxes make the
cross-class top ``max_det``. Applied here, after the detector's selection, every map only
rescores the boxes the original model output: same boxes, same classes, same order within each
class (mAP identical). For one map for every class (temperature, Platt, spline, isotonic) the two
deployments give the same boxes. A size-conditioned map reads each box's size from its corners
and the image's size (it has no folded form; :func:`det_calib.attach` also applies it at predict
time, with every class's probability). The logit is rebuilt here from the reported float32 conf,
which loses precision close to 1; ``attach`` reads the logits themselves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from det_calib.calibrators.base import log_area
from det_calib.data.box_view import BoxView
from det_calib.errors import InputError
from det_calib.numeric import logit
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.run_result import read_calibrators
from det_calib.tasks import result_boxes_attr
from det_calib.validation import check_choice

__all__ = ["apply_calibrator", "load_calibrators"]


def load_calibrators(calibration: Any) -> dict[str, Any]:
    """Head -> fitted calibrator of a ``calibration.json`` (a path, its dict, or a RunResult)."""

    return {h: calibrator_of(r) for h, r in read_calibrators(calibration).items()}


def apply_calibrator(results: Any, calibration: Any, *, head: str | None = None) -> Any:
    """Rescore Ultralytics ``Results`` in place with a run's calibrator (post-hoc deployment).

    Each box's conf is turned back into its logit (float64), mapped by the calibrator of its
    class, and written back as ``result.boxes`` (a new ``Boxes`` with the new conf column; for an OBB
    model ``result.obb``, its size-conditioned maps reading the rotated box's axis-aligned hull, as the run);
    boxes, classes and the box order
    are left as the detector produced them.

    Args:
        results: One ``ultralytics.engine.results.Results`` or a list of them (``model(...)``).
        calibration: ``calibration.json`` path, its dict, or a :class:`~det_calib.record.run_result.RunResult`.
        head: The head the results came from (``"nms"``: ``model(..., end2end=False)`` / a model
            without a one-to-one head; ``"e2e"``: the NMS-free head). Needed when the run has
            more than one head.

    Returns:
        ``results`` (the same objects).

    Raises:
        InputError: No calibrator for the head, or the head is ambiguous.

    >>> res = det_calib.apply_calibrator(model("img.jpg"), "out/calibration.json", head="nms")  # doctest: +SKIP
    """
    import torch

    cals = load_calibrators(calibration)
    if head is None:
        if len(cals) != 1:
            raise InputError(f"the calibration has heads {', '.join(sorted(cals))}: pass `head`")
        head = next(iter(cals))
    check_choice(head, sorted(cals), "head")

    cal = cals[head]
    many = isinstance(results, (list, tuple))
    for r in results if many else [results]:
        attr = result_boxes_attr(r)
        boxes = getattr(r, attr, None)
        if boxes is None or boxes.data.shape[0] == 0:
            continue
        data = (
            boxes.data
        )  # ... conf, cls last (Boxes: xyxy first; OBB: xywhr first, its hull in .xyxy)
        c = np.clip(data[:, -2].detach().cpu().double().numpy(), 1e-12, 1 - 1e-12)
        k = data[:, -1].detach().cpu().numpy().astype(np.int64)
        h, w = (int(v) for v in boxes.orig_shape[:2])
        la = log_area(
            boxes.xyxy.detach().cpu().double().numpy(), np.full(len(k), w), np.full(len(k), h)
        )
        new = (
            BoxView(
                logit=logit(c),
                conf=c,
                correct=None,
                cls=k,
                image_id=np.zeros(len(k), np.int64),
                log_area=la,
            )
            .scored(cal)
            .conf
        )
        data = data.clone()  # Ultralytics returns inference tensors: rebuild the Boxes, same class
        data[:, -2] = torch.as_tensor(new, dtype=data.dtype, device=data.device)
        setattr(r, attr, type(boxes)(data, boxes.orig_shape))
    return results
