"""Box-size bins for reliability by size: COCO's small / medium / large and bins of relative area.

Two schemes, each a partition of the boxes by the **box's own** area (the predicted box: what a
calibrator, and a user at predict time, can see; pycocotools also sizes an unmatched detection by
its own area):

- ``coco``: area in image pixels ``< 32²`` (small), ``< 96²`` (medium), else large, as
  pycocotools' ``areaRng`` (whose ranges share their end points; here each box is in one bin).
- ``relative``: ``area / image area`` below 0.3%, below 3%, else. Fixed bins, not quantiles of a
  run, so that ``compare`` and ``check`` read the same bins across runs and splits; placed at
  COCO's own thresholds on COCO's typical 640x480 image (32² / 307,200 = 0.33%, 96² / 307,200 = 3.0%),
  so on COCO the two schemes nearly agree, while on images of another resolution the relative
  bins scale with the image (a 32-pixel box is small on a 4K frame and large on a 64-pixel crop).

>>> xyxy = np.array([[0, 0, 10, 10], [0, 0, 50, 50], [0, 0, 200, 200]], dtype=float)
>>> [b.name for b in SIZE_BINS if b.mask(xyxy, np.full(3, 640), np.full(3, 480))[1]]
['medium', '0.3–3%']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SIZE_BINS", "SizeBin"]

_SCHEMES: tuple[str, ...] = ("coco", "relative")


@dataclass(frozen=True)
class SizeBin:
    """One size bin: ``lo <= measure < hi`` of its ``scheme`` (``coco``: area in pixels;
    ``relative``: area over image area)."""

    scheme: str
    name: str
    lo: float
    hi: float

    @property
    def label(self) -> str:
        """The bin in a few words (``small (< 32²)``, ``relative area 0.3–3%``)."""
        if self.scheme == "coco":
            lo, hi = (
                math.isqrt(int(self.lo)),
                (None if math.isinf(self.hi) else math.isqrt(int(self.hi))),
            )
            return f"{self.name} ({'< ' + str(hi) + '²' if not lo else (f'{lo}²–{hi}²' if hi else f'≥ {lo}²')})"
        return f"relative area {self.name}"

    def mask(self, xyxy: Any, img_w: Any, img_h: Any) -> np.ndarray:
        """``(n,)`` bool: the boxes (corners in image pixels, their images' sizes) in this bin."""
        area = _box_area(xyxy)
        if self.scheme == "relative":
            area = area / (
                np.asarray(img_w, dtype=np.float64) * np.asarray(img_h, dtype=np.float64)
            )
        return (area >= self.lo) & (area < self.hi)


SIZE_BINS: tuple[SizeBin, ...] = (
    SizeBin("coco", "small", 0.0, 32.0**2),
    SizeBin("coco", "medium", 32.0**2, 96.0**2),
    SizeBin("coco", "large", 96.0**2, math.inf),
    SizeBin("relative", "< 0.3%", 0.0, 0.003),
    SizeBin("relative", "0.3–3%", 0.003, 0.03),
    SizeBin("relative", "≥ 3%", 0.03, math.inf),
)
"""Every bin, scheme by scheme, smallest first."""


def _box_area(xyxy: Any) -> np.ndarray:
    """Area in pixels of each box (``(n, 4)`` corners; an inverted side counts as 0)."""
    b = np.asarray(xyxy, dtype=np.float64).reshape(-1, 4)
    return np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
