"""Conf thresholds with a guarantee the user chooses: recall, false positives per image, precision, or
several at once (Learn-then-Test), per image, globally or per class (:func:`control`).

The unit is the **image**: the calibration images are assumed exchangeable with the new images, and
every per-image risk below is a mean over images. A box is kept at ``t`` when its calibrated conf is
``> t`` (strictly, as Ultralytics keeps boxes).

Risks (each a per-image loss, monotone in ``t``)
------------------------------------------------
``recall``
    ``L_i(t) = missed_i(t) / gt_i``: the fraction of image ``i``'s objects that no kept box matches
    (COCO one-to-one matching at the run's IoU), over the images with at least one object (of the
    class, per class). The target ``recall >= r`` is ``E[L] <= 1 - r``: the **mean per-image
    recall** of new images is at least ``r`` (the pooled object recall is reported beside it).
``fp``
    ``L_i(t) = FP_i(t)``, the wrong boxes kept in image ``i`` (of the class, per class), over every
    image. Target ``E[FP per image] <= k``. The loss is bounded only by ``fp_cap`` (default the run's
    ``max_det``: a detector outputs no more boxes), and every finite-sample bound pays for that
    range: with ``max_det`` 300 a few hundred images rarely certify one false positive per image. A
    smaller ``fp_cap`` is an assumption ("no image has more than ``fp_cap`` false positives above the
    threshold"); the guarantee holds under it, and losses above it are clipped.
``precision`` with ``precision_unit="image"`` (the default)
    ``L_i(t) = FP_i(t) / kept_i(t)``, the image's false discovery proportion, over the images that keep
    a box at ``t`` (which depends on their scores only, so they are an exchangeable sample of such
    images). Target ``E[L] <= 1 - p``: the **mean precision of the images that keep a box** is at least
    ``p``. Tested where enough images keep a box that an observed FDP of half the target would certify
    (a rule on counts, no labels). Not monotone in ``t``; the fixed sequence (high to low conf) needs no
    monotonicity, so it has the high-probability guarantee only. The same rule as ``det-calib
    thresholds``' certified precision (:func:`~det_calib.thresholds.certification.certify_image_precision`).
``precision`` with ``precision_unit="pooled"``
    The precision of all kept boxes pooled, ``sum TP / sum kept >= p``, as the per-image loss
    ``L_i(t) = p min(FP_i, fp_cap) - (1 - p) TP_i`` with target ``E[L] <= 0``, tested by betting
    (:func:`~det_calib.thresholds.certification.betting_pvalue`): valid over images whatever the boxes
    of an image do together, with the range ``p fp_cap`` as its only bound (with ``max_det`` 300 a few
    hundred images certify nothing; a smaller ``fp_cap`` is an assumption, as for ``fp``). Tested where a
    precision halfway between ``p`` and 1 in every image would certify (a rule on the kept counts). It
    replaces the box-level binomial test with the design effect, which broke on the demo's nms head
    (benchmarks/bench_conformal.py); it has no in-expectation form.

Guarantees
----------
``"probability"`` (default): ``P(risk(t_hat) <= target) >= 1 - delta`` over the calibration images.
Each risk's thresholds are tested in a fixed sequence from its safe end (recall: low to high conf;
fp and precision: high to low conf) with the Hoeffding-Bentkus p-value of Bates et al. (2021)
(``min(exp(-n h(R_hat, a)), e P(Bin(n, a) <= ceil(n R_hat)))`` on losses scaled to [0, 1]), the
sequence stopping at the first failure. With several risks, each sequence runs at
``delta / m`` (Bonferroni over the ``m`` risks), so the family-wise error over every threshold and
risk is at most ``delta`` (Learn-then-Test, Angelopoulos et al. 2021), and any threshold certified
for every risk is valid; the lowest is returned (the most recall).

``"expectation"`` (conformal risk control, Angelopoulos et al. 2022): ``E[risk(t_hat)] <= target``
over calibration and new image together, for recall and fp: the last threshold, scanning from the
safe end, with ``(n R_hat(t) + B) / (n + 1) <= target`` (``B`` the loss's bound: 1 for recall,
``fp_cap`` for fp). Precision keeps its high-probability test (at ``delta``).

A row that cannot be certified says so: ``too_few_images`` (even a perfect calibration set of this
size could not certify the target: a rule on counts, no labels) or ``target_not_reached``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from det_calib.errors import InputError
from det_calib.thresholds.certification import (
    betting_pvalue,
    hb_pvalue,
    image_fdp,
    min_images,
    testable,
)

__all__ = ["ImageCounts", "RiskTargets", "control", "figures", "hb_pvalue", "image_counts"]

_RISKS = ("precision", "recall", "fp")
_GUARANTEES = ("probability", "expectation")
_Guarantee = Literal["probability", "expectation"]
_PrecisionUnit = Literal["pooled", "image"]


@dataclass(frozen=True)
class RiskTargets:
    """The risks a user asks for (None: not asked) and the guarantee's level.

    Attributes:
        precision: Target precision in (0, 1).
        recall: Target mean per-image recall in (0, 1).
        max_fp: Target mean false positives per image (> 0).
        delta: Error level of the high-probability guarantee, in (0, 1).
        guarantee: ``"probability"`` or ``"expectation"`` (see the module docstring).
        fp_cap: Bound on the false positives of one image (the fp loss's range).
        precision_unit: ``"image"`` (the mean precision of the images that keep a box, Hoeffding-Bentkus) or
            ``"pooled"`` (the precision of all boxes pooled, testing by betting; its range is ``fp_cap``).
    """

    precision: float | None = None
    recall: float | None = None
    max_fp: float | None = None
    delta: float = 0.1
    guarantee: _Guarantee = "probability"
    fp_cap: float = 300.0
    precision_unit: _PrecisionUnit = "image"

    def __post_init__(self) -> None:
        for name in ("precision", "recall"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and 0 < v < 1):
                raise InputError(f"Expected argument `target_{name}` in (0, 1), but got {v!r}")
        if self.max_fp is not None and not (
            isinstance(self.max_fp, (int, float)) and self.max_fp > 0
        ):
            raise InputError(
                f"Expected argument `max_fp_per_image` to be larger than 0, but got {self.max_fp!r}"
            )
        if not (isinstance(self.delta, (int, float)) and 0 < self.delta < 1):
            raise InputError(f"Expected argument `delta` in (0, 1), but got {self.delta!r}")
        if self.guarantee not in _GUARANTEES:
            raise InputError(
                f"Expected argument `guarantee` among {_GUARANTEES}, but got {self.guarantee!r}"
            )
        if not (isinstance(self.fp_cap, (int, float)) and self.fp_cap >= 1):
            raise InputError(
                f"Expected argument `fp_cap` to be at least 1, but got {self.fp_cap!r}"
            )
        if self.max_fp is not None and self.max_fp >= self.fp_cap:
            raise InputError(
                f"Expected `max_fp_per_image` below `fp_cap` ({self.fp_cap:g}), but got "
                f"{self.max_fp!r}"
            )
        if self.precision_unit not in ("pooled", "image"):
            raise InputError(
                f"Expected argument `precision_unit` to be 'pooled' or 'image', but got "
                f"{self.precision_unit!r}"
            )
        if not self.asked:
            raise InputError(
                "Expected at least one of `target_precision`, `target_recall`, `max_fp_per_image`"
            )

    @property
    def asked(self) -> list[str]:
        """The risks asked for, in :data:`RISKS` order."""
        return [
            r for r, v in zip(_RISKS, (self.precision, self.recall, self.max_fp)) if v is not None
        ]

    def params(self) -> dict[str, Any]:
        return {
            "target_precision": self.precision,
            "target_recall": self.recall,
            "max_fp_per_image": self.max_fp,
            "delta": self.delta,
            "guarantee": self.guarantee,
            "fp_cap": self.fp_cap,
            "precision_unit": self.precision_unit,
            "risks": self.asked,
        }


@dataclass(frozen=True)
class ImageCounts:
    """Per-image counts on a grid of thresholds, every image of the split (none left out).

    Attributes:
        grid: (G,) increasing thresholds.
        kept: (m, G) boxes with score > grid[j] in each image.
        tp: (m, G) correct boxes among them.
        n_gt: (m,) objects in each image (the selection's: one class, or all).
    """

    grid: np.ndarray
    kept: np.ndarray
    tp: np.ndarray
    n_gt: np.ndarray

    def subset(self, rows: np.ndarray) -> ImageCounts:
        return ImageCounts(self.grid, self.kept[rows], self.tp[rows], self.n_gt[rows])


def image_counts(
    score: np.ndarray,
    correct: np.ndarray,
    image_idx: np.ndarray,
    n_gt: np.ndarray,
    *,
    grid: np.ndarray,
) -> ImageCounts:
    """Count kept and correct boxes per image and threshold.

    Args:
        score: (n,) calibrated scores.
        correct: (n,) matched flags.
        image_idx: (n,) row of each box's image, in ``0 .. len(n_gt) - 1``.
        n_gt: (m,) objects per image (images without boxes included).
        grid: (G,) increasing thresholds.
    """
    n_gt = np.asarray(n_gt, dtype=np.float64)
    m, g = len(n_gt), len(grid)
    idx = np.asarray(image_idx, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= m):
        raise InputError(f"Expected `image_idx` in [0, {m}), but got values up to {int(idx.max())}")
    top = np.searchsorted(grid, np.asarray(score, dtype=np.float64), side="left")  # kept at j < top

    def acc(w: np.ndarray) -> np.ndarray:
        h = np.zeros((m, g + 1))
        np.add.at(h, (idx, top), w)
        return np.cumsum(h[:, ::-1], axis=1)[:, ::-1][:, 1:]

    y = np.asarray(correct, dtype=np.float64)
    return ImageCounts(np.asarray(grid, dtype=np.float64), acc(np.ones_like(y)), acc(y), n_gt)


def _risk_curves(c: ImageCounts, t: RiskTargets) -> dict[str, tuple[np.ndarray, Any, float, float]]:
    """Each per-image risk asked for: (empirical risk per threshold, images (per threshold for the image
    precision), bound B, target), in the loss's own units (recall: miss fraction; fp: false positives per
    image; precision: the false discovery proportion of the images that keep a box)."""
    out: dict[str, tuple[np.ndarray, Any, float, float]] = {}
    if t.precision is not None and t.precision_unit == "image":
        fdp, n_img = image_fdp(c.kept, c.tp)  # over the images that keep a box: n varies with t
        out["precision"] = (fdp, n_img, 1.0, 1 - t.precision)
    if t.recall is not None:
        has = c.n_gt > 0
        loss = 1 - c.tp[has] / c.n_gt[has, None]
        out["recall"] = (
            loss.mean(0) if has.any() else np.full(len(c.grid), np.nan),
            int(has.sum()),
            1.0,
            1 - t.recall,
        )
    if t.max_fp is not None:
        fp = np.minimum(c.kept - c.tp, t.fp_cap)
        out["fp"] = (
            fp.mean(0) if len(fp) else np.full(len(c.grid), np.nan),
            len(fp),
            t.fp_cap,
            t.max_fp,
        )
    return out


def _sequence(ok: np.ndarray, *, upward: bool) -> np.ndarray:
    """Fixed-sequence testing: the tested points passed before the first failure, from the low end
    (``upward``) or from the high end."""
    seq = ok if upward else ok[::-1]
    stop = int(np.argmin(seq)) if not seq.all() else len(seq)
    passed = np.zeros(len(seq), dtype=bool)
    passed[:stop] = True
    return passed if upward else passed[::-1]


def _pooled_precision_loss(c: ImageCounts, target: float, fp_cap: float) -> np.ndarray:
    """(m, G) per-image losses ``target FP_i - (1 - target) TP_i`` (``FP_i`` clipped at ``fp_cap``): their
    mean is at most 0 exactly when the pooled precision ``sum TP / sum kept`` is at least ``target``."""
    return target * np.minimum(c.kept - c.tp, fp_cap) - (1 - target) * c.tp


def _certified_set(
    name: str,
    c: ImageCounts,
    t: RiskTargets,
    level: float,
    curve: tuple[np.ndarray, Any, float, float] | None,
) -> tuple[np.ndarray, str | None]:
    """The thresholds certified for one risk at error ``level``, and a flag when none is."""
    if name == "precision" and curve is None:  # pooled: testing by betting on per-image losses
        # tested where a precision halfway between the target and 1 in every image would certify: a rule on
        # the kept counts only (no label), so tiny sets at the top cannot stop the sequence at once
        hi = t.precision * t.fp_cap
        test = testable(c.kept.sum(0), target=t.precision, delta=level)
        test[test] = betting_pvalue(-c.kept[:, test] * (1 - t.precision) / 2, hi=hi) <= level
        if not test.any():
            return np.zeros(len(c.grid), dtype=bool), "too_few_boxes"
        cols = np.flatnonzero(test)
        p = betting_pvalue(_pooled_precision_loss(c, t.precision, t.fp_cap)[:, cols], hi=hi)
        ok = np.zeros(len(c.grid), dtype=bool)
        ok[cols] = _sequence(p <= level, upward=False)
        return ok, None if ok.any() else "target_not_reached"
    risk, n, b, target = curve
    upward = name == "recall"  # recall is safe at low conf; fp and precision at high conf
    hb = (
        t.guarantee == "probability" or name == "precision"
    )  # image precision is not monotone: no CRC
    n_arr = np.broadcast_to(np.asarray(n, dtype=np.float64), risk.shape)
    if hb:
        test = n_arr >= min_images(target / b, level)
        if (
            name == "precision"
        ):  # n varies with t: tested where an observed FDP of half the target would
            test &= (
                hb_pvalue(target / 2, n_arr, target) <= level
            )  # certify (a rule on counts, no label)
    else:
        test = n_arr > 0
    if not test.any():
        return np.zeros(len(risk), dtype=bool), "too_few_images"
    cols = np.flatnonzero(test)
    if not hb:
        good = (n_arr[cols] * risk[cols] + b) / (n_arr[cols] + 1) <= target + 1e-12
    else:
        good = hb_pvalue(risk[cols] / b, n_arr[cols], target / b) <= level
    ok = np.zeros(len(risk), dtype=bool)
    ok[cols] = _sequence(good, upward=upward)
    return ok, None if ok.any() else "target_not_reached"


def _plug_in_index(c: ImageCounts, t: RiskTargets) -> int:
    """The threshold the empirical risks alone would choose (no guarantee): the lowest meeting every
    target (recall alone: the highest); -1 where none. Its distance to the certified one is the cost."""
    ok = np.ones(len(c.grid), dtype=bool)
    if t.precision is not None and t.precision_unit == "pooled":
        n, k = c.kept.sum(0), c.tp.sum(0)
        ok &= (n > 0) & (k >= t.precision * n - 1e-9)
    for risk, _, _, target in _risk_curves(c, t).values():
        ok &= np.nan_to_num(risk, nan=np.inf) <= target + 1e-12
    if not ok.any():
        return -1
    only_recall = t.asked == ["recall"]
    return int(np.flatnonzero(ok)[-1] if only_recall else np.flatnonzero(ok)[0])


def control(c: ImageCounts, t: RiskTargets) -> dict[str, Any]:
    """The threshold certified for every risk of ``t`` on the calibration images ``c``.

    Returns:
        ``threshold`` (1.0 when nothing is certified), ``certified``, ``flag`` (None, or the first
        risk's reason: ``too_few_images``, ``too_few_boxes``, ``target_not_reached``), ``flags`` per
        risk, ``plug_in_threshold`` (the empirical choice) and ``cost`` (threshold minus it), and the
        calibration-side figures at the threshold (``fit``).
    """
    asked = t.asked
    level = t.delta / len(asked) if t.guarantee == "probability" else t.delta
    curves = _risk_curves(c, t)
    ok, flags = np.ones(len(c.grid), dtype=bool), {}
    for name in asked:
        s, flags[name] = _certified_set(name, c, t, level, curves.get(name))
        ok &= s
    if ok.any():
        j = int(np.flatnonzero(ok)[-1] if asked == ["recall"] else np.flatnonzero(ok)[0])
        flag = None
    else:
        j = -1
        flag = next(
            (f for f in flags.values() if f), "target_not_reached"
        )  # each alone passes: not jointly
    jp = _plug_in_index(c, t)
    thr = float(c.grid[j]) if j >= 0 else 1.0
    plug = float(c.grid[jp]) if jp >= 0 else None
    return {
        "threshold": thr,
        "certified": j >= 0,
        "flag": flag,
        "flags": flags,
        "level_per_risk": level,
        "plug_in_threshold": plug,
        "cost": None if (plug is None or j < 0) else abs(thr - plug),
        "fit": figures(c, thr),
    }


def figures(c: ImageCounts, thr: float) -> dict[str, Any]:
    """Precision (pooled, and the mean over the images that keep a box), recall (pooled and mean per image),
    false positives per image and boxes kept at ``thr`` (on the grid; 1.0 keeps nothing)."""
    if thr >= 1:
        kept, tp = np.zeros(len(c.n_gt)), np.zeros(len(c.n_gt))
    else:
        j = int(np.searchsorted(c.grid, thr))
        kept, tp = c.kept[:, j], c.tp[:, j]
    has = c.n_gt > 0
    n, k, g = float(kept.sum()), float(tp.sum()), float(c.n_gt.sum())
    fdp, n_img = image_fdp(kept[:, None], tp[:, None])
    return {
        "precision": k / n if n else None,
        "recall": k / g if g else None,
        "precision_per_image": float(1 - fdp[0]) if n_img[0] else None,
        "images_kept": int(n_img[0]),
        "recall_per_image": float(np.mean(tp[has] / c.n_gt[has])) if has.any() else None,
        "fp_per_image": float(np.mean(kept - tp)) if len(kept) else None,
        "kept": int(n),
        "images": int(len(c.n_gt)),
        "n_gt": int(g),
    }
