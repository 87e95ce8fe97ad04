"""Apply a det_calib portable map where det_calib is not: pure Python, the ``math`` module only.

Copy this file next to your engine (a Jetson, a Hailo or RKNN board, a DeepStream probe). A run's
``portable_map.json`` (:mod:`det_calib.deploy.portable`) holds, per head, one map of the logit per class
(``maps[c]``; a map shared by every class is repeated):

- ``{"kind": "identity"}``: the score itself;
- ``{"kind": "affine", "a", "b"}``: ``a * z + b`` (temperature: ``a = 1/T, b = 0``; Platt; per-class Platt);
- ``{"kind": "piecewise", "x", "y", "left_slope", "right_slope"}``: linear between knots ``(x, y)``, the
  slopes outside them (spline and isotonic maps, per class or not);
- ``{"kind": "size-affine", "a", "b", "c"}``: ``a * z + b + c * log(box area / image area)``.

``z = log(p / (1 - p))`` of the engine's score ``p`` (clipped to ``[eps, 1 - eps]``), the calibrated score
``1 / (1 + exp(-t))``. Equal scores get equal calibrated scores (a map of the score, no tie split).

>>> pmap = {"format": "det_calib.PortableMap", "version": 1, "eps": 1e-6,
...         "heads": {"nms": {"maps": [{"kind": "affine", "a": 0.5, "b": 0.0}]}}}
>>> round(_calibrated_score(pmap, 0.8, 0), 4)
0.6667
"""

from __future__ import annotations

import json
import math

__all__ = []

_MIN_REL_AREA = 1e-8
"""A box area (relative to the image) below this reads as it (a degenerate box), as det_calib fits."""


def _load_map(path: str) -> dict:
    """Read ``portable_map.json``."""
    with open(path, encoding="utf-8") as f:
        pmap = json.load(f)
    if pmap.get("format") != "det_calib.PortableMap" or pmap.get("version") != 1:
        raise ValueError(
            f"Expected a det_calib.PortableMap version 1 in {path}, but got {pmap.get('format')!r}"
        )
    return pmap


def _log_relative_area(
    x1: float, y1: float, x2: float, y2: float, img_w: float, img_h: float
) -> float:
    """``log(box area / image area)``: what a ``size-affine`` map reads."""
    area = max(x2 - x1, 0.0) * max(y2 - y1, 0.0)
    return math.log(max(area / (img_w * img_h), _MIN_REL_AREA))


def _piecewise(m: dict, z: float) -> float:
    x, y = m["x"], m["y"]
    if z <= x[0]:
        return y[0] + m["left_slope"] * (z - x[0])
    if z >= x[-1]:
        return y[-1] + m["right_slope"] * (z - x[-1])
    lo, hi = 0, len(x) - 1
    while hi - lo > 1:  # bisection: x[lo] <= z < x[hi]
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if x[mid] <= z else (lo, mid)
    return y[lo] + (y[hi] - y[lo]) * (z - x[lo]) / (x[hi] - x[lo])


def _calibrated_score(
    pmap: dict, score: float, cls: int, *, head: str | None = None, log_area: float | None = None
) -> float:
    """The calibrated score of one box: its engine's ``score`` in [0, 1] and class id ``cls``.

    Args:
        pmap: ``portable_map.json`` as read by :func:`load_map`.
        head: The head (default: the map's only or first head).
        log_area: :func:`log_relative_area` of the box; a ``size-affine`` map needs it.
    """
    maps = pmap["heads"][head or next(iter(pmap["heads"]))]["maps"]
    m = maps[int(cls)] if len(maps) > 1 else maps[0]
    if m["kind"] == "identity":
        return float(score)
    eps = pmap.get("eps", 1e-6)
    p = min(max(float(score), eps), 1.0 - eps)
    z = math.log(p) - math.log1p(-p)
    if m["kind"] == "affine":
        t = m["a"] * z + m["b"]
    elif m["kind"] == "piecewise":
        t = _piecewise(m, z)
    elif m["kind"] == "size-affine":
        if log_area is None:
            raise ValueError("this map reads the box's size: pass log_area=log_relative_area(...)")
        t = m["a"] * z + m["b"] + m["c"] * log_area
    else:
        raise ValueError(
            f"Expected a map kind identity, affine, piecewise or size-affine, but got {m['kind']!r}"
        )
    return 1.0 / (1.0 + math.exp(-t)) if t >= 0 else math.exp(t) / (1.0 + math.exp(t))
