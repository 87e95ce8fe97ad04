"""Per-class thresholds applied to Ultralytics ``Results`` of the calibrated checkpoint (whose conf
*is* the calibrated score): :func:`filter_results`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from det_calib.data.box_view import kept_mask
from det_calib.tasks import result_boxes_attr

__all__ = ["filter_results"]


def filter_results(
    results: Any, thresholds: Mapping[int, float], *, default: float | None = None
) -> Any:
    """Keep, in Ultralytics ``Results``, the boxes whose conf is above their class's threshold.

    Run the calibrated checkpoint (``calibrated.pt``, whose conf is the calibrated score) with
    ``predict(conf=min(thresholds.values()))`` or lower, then filter::

        results = filter_results(YOLO("calibrated.pt").predict(src, conf=0.001), th)

    Args:
        results: One ``ultralytics.engine.results.Results`` or a list of them.
        thresholds: ``{class id: threshold}``; a box is kept when ``conf > threshold``.
        default: Threshold for classes not in ``thresholds``; None drops them.

    Returns:
        The same shape as ``results`` (a new ``Results`` per image).
    """
    table = dict(thresholds)
    single = not isinstance(results, (list, tuple))
    out = []
    for r in [results] if single else results:
        boxes = getattr(r, result_boxes_attr(r), None)  # an OBB model's: Results.obb
        if boxes is None or len(boxes) == 0:
            out.append(r)
            continue
        cls = boxes.cls.cpu().numpy().astype(np.int64)
        conf = boxes.conf.cpu().numpy().astype(np.float64)
        thr = np.array(
            [table.get(int(c), np.inf if default is None else default) for c in cls],
            dtype=np.float64,
        )
        keep = np.flatnonzero(kept_mask(conf, thr))
        out.append(r[keep])
    return out[0] if single else out
