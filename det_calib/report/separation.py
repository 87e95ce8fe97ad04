"""What the intervals of compared runs can tell apart, and the all-box NLL and Brier intervals a run does not store."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from det_calib.metrics import calibration as metrics
from det_calib.record.run_folder import HeadBoxes, Run
from det_calib.record.run_result import Bootstrap

from .common import (
    ci_pair,
    f4,
    fci,
    num,
)

__all__ = ["SEPARATION_NOTE", "boot_ci", "separation_words"]

SEPARATION_NOTE = (
    "Two runs whose 95% intervals overlap cannot be told apart on these images; intervals that do "
    "not overlap are a clear difference (a conservative reading: each interval is its own run's "
    "image bootstrap, not a paired test)."
)


def _boot_mean(
    metric: Callable[..., float], hb: HeadBoxes, arrays: Sequence[np.ndarray], boot: Bootstrap
) -> tuple[float, float] | None:
    """Image-bootstrap interval of a per-box mean metric (NLL, Brier), resampling images.

    A mean over boxes is ``sum over images of (metric of the image x its boxes) / total boxes``,
    so each image is reduced once to ``(metric(image) * n_image, n_image)`` with ``metric`` itself
    and :func:`det_calib.metrics.bootstrap_ci` resamples those rows: the same draws, and the same
    interval, as resampling the boxes, in O(images) per replicate instead of O(boxes).
    """
    if hb.n == 0:
        return None
    _, inv = np.unique(hb.image_id, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    cuts = np.flatnonzero(np.diff(inv[order])) + 1
    groups = np.split(order, cuts)
    counts = np.array([len(g) for g in groups], dtype=np.float64)
    sums = np.array([metric(*[a[g] for a in arrays]) * len(g) for g in groups])

    def mean_of_images(s: np.ndarray, n: np.ndarray, *, weights: np.ndarray | None = None) -> float:
        w = np.ones_like(n) if weights is None else weights
        return float(np.dot(w, s) / np.dot(w, n))

    lo, hi = metrics.bootstrap_ci(
        mean_of_images,
        np.arange(len(groups)),
        sums,
        counts,
        n_boot=boot.n_boot,
        seed=boot.seed,
        level=boot.level,
    )
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def boot_ci(run: Run, hb: HeadBoxes, key: str, which: str) -> tuple[float, float] | None:
    """The interval of the all-box NLL or Brier score, raw or under the deployed calibrator, from the
    boxes, computed as ``calibrate`` computes the estimate (NLL from logits: a temperature's as
    ``nll_logits(logit, temperature=T)``, any other map's from its calibrated logits)."""
    if not hb.n:
        return None
    boot = run.settings.bootstrap
    if key == "brier":
        prob = hb.conf if which == "before" else hb.conf_after
        return None if prob is None else _boot_mean(metrics.brier, hb, [prob, hb.correct], boot)
    if which == "before":
        return _boot_mean(metrics.nll_logits, hb, [hb.logit, hb.correct], boot)
    if hb.calibrator is None and hb.temperature is not None:
        fn = functools.partial(metrics.nll_logits, temperature=hb.temperature)
        return _boot_mean(fn, hb, [hb.logit, hb.correct], boot)
    z = hb.logit_after
    return None if z is None else _boot_mean(metrics.nll_logits, hb, [z, hb.correct], boot)


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def separation_words(what: str, items: Sequence[tuple[str, Any, Any]]) -> str:
    r"""Which run is lowest on a figure, and which of the others its interval can and cannot tell apart.

    ``items``: ``(run name, estimate, interval)``. Two runs whose intervals overlap "cannot be told
    apart on these images"; intervals that do not overlap are a clear difference.

    >>> items = [("A", 0.10, (0.08, 0.12)), ("B", 0.11, (0.09, 0.14)), ("C", 0.2, (0.15, 0.25))]
    >>> print(separation_words("ECE", items).replace("; ", ";\n"))
    ECE: lowest A 0.1000 [0.0800, 0.1200];
    clearly lower than C (intervals do not overlap);
    it cannot be told apart from B on these images (their intervals overlap)
    """
    ok = [(n, num(v), ci_pair(c)) for n, v, c in items if num(v) is not None]
    if len(ok) < 2:
        return f"{what}: fewer than two runs have it"
    best = min(ok, key=lambda x: x[1])
    others = [x for x in ok if x is not best]
    if all(x[1] == best[1] for x in others):
        return f"{what}: the same for {', '.join(n for n, _, _ in ok)} ({f4(best[1])})"
    clear = [
        n
        for n, _, c in others
        if c is not None and best[2] is not None and not _overlap(c, best[2])
    ]
    ties = [
        n for n, _, c in others if c is not None and best[2] is not None and _overlap(c, best[2])
    ]
    unknown = [n for n, _, c in others if c is None or best[2] is None]
    s = f"{what}: lowest {best[0]} {fci(best[1], best[2])}"
    if clear:
        s += f"; clearly lower than {', '.join(clear)} (intervals do not overlap)"
    if ties:
        s += f"; it cannot be told apart from {' or '.join(ties)} on these images (their intervals overlap)"
    if unknown:
        s += f"; against {', '.join(unknown)}: no interval to tell"
    return s
