"""Per-class conf thresholds on calibrated scores: a certified target precision, max-F1, LRP-optimal.

A box is kept at threshold ``t`` when its calibrated conf is ``> t`` (strictly, as Ultralytics'
conf filter). Thresholds are chosen on the **fit** split of a calibration run and checked on the
**eval** split, per class and globally (one threshold for every class).

Criteria
--------
``target_precision``
    The lowest threshold whose precision on new images is at least ``target`` with probability
    at least ``1 - delta``. Candidate thresholds are tested in a fixed order from high to low
    (fixed-sequence testing, as in Learn-then-Test, Angelopoulos et al. 2021): at each ``t`` the
    null hypothesis ``precision(t) < target`` is rejected when the exact binomial tail
    ``P(Bin(n, target) >= k) <= delta`` (equivalently: the one-sided Clopper-Pearson lower bound
    at level ``1 - delta`` is at least the target), with ``n`` boxes kept and ``k`` of them
    correct; testing stops at the first failure and the last rejected threshold is returned.
    Fixed-sequence testing controls the family-wise error at ``delta`` without a multiplicity
    correction, so ``P(precision(t_hat) < target) <= delta``. Thresholds with too few boxes to
    test are skipped before testing (:func:`testable`: an observed precision halfway between the
    target and 1 must be able to certify); that rule reads the counts ``n`` only, no label, so
    the sequence is fixed given the scores and the test stays exact.

    Boxes of one image are not independent (duplicates, a hard image with many wrong boxes), so a
    test that counts boxes as independent trials is optimistic. With ``unit="image"`` (the default) the
    **images** are the units: the certified quantity is the mean precision of the images that keep a box
    of the class (each image's share of correct boxes among those it keeps above ``t``), and the test is
    Hoeffding-Bentkus on those images' false discovery proportions (bounded in [0, 1]), with the same
    fixed sequence; the thresholds tested are those where an observed FDP of half ``1 - target`` would
    certify (a rule on counts). Which images keep a box depends on their scores only, so the guarantee
    is exact over exchangeable images whatever the boxes of one image do together. ``precision_lower``
    is 1 minus the Hoeffding-Bentkus upper bound of the mean FDP. It needs images, not boxes: about 100
    images keeping a box of the class at 0.9 and delta 0.1 (``min_certifiable_images``). The former
    image-level rule (the box-level test on Korn-Graubard effective counts, ``deff``, still reported as a
    diagnostic) broke its guarantee on the demo (benchmarks/bench_conformal.py). ``unit="box"`` is the
    plain binomial test on boxes assumed independent: not a guarantee over images.

    The guarantee is per class (each class's threshold is certified at ``delta`` on its own),
    and it is about the precision of the population the fit images were drawn from.

    A class that cannot be certified is flagged, never silently: ``too_few_boxes`` (fewer
    boxes than the smallest testable set, :func:`min_certifiable`) or ``target_not_reached`` (no threshold passes). It
    falls back to the stated ``fallback`` rule: ``"global"`` (the threshold certified for all
    classes pooled; its guarantee is for the pooled precision, not the class's) or ``"drop"``
    (threshold 1: no box of the class is kept). Where ``"global"`` is asked but the pooled
    threshold is not certified either, the class is dropped, and flagged so.

``max_f1``
    The threshold that maximises ``F1 = 2 TP / (kept + n_gt)`` on the fit split.

``lrp``
    The threshold that minimises the LRP error of Oksuz et al. (ECCV 2018; TPAMI 2021) with
    ``tau = 0.5``: ``LRP = (sum_TP (1 - IoU) / (1 - tau) + FP + FN) / (TP + FP + FN)``, the
    criterion the reference detector-calibration toolkit (Kuzucu et al., ECCV 2024) uses for its
    per-class thresholds. TP are the boxes matched at the run's IoU (``correct``).

Ties between thresholds (max-F1, LRP) go to the lowest threshold (more recall at the same
score). All criteria search the same grid of thresholds (default ``0, 0.001, ..., 0.999``).

Validation on the eval split: realised precision and recall per class at the chosen thresholds
and, for ``target_precision``, the fraction of image-bootstrap resamples of the eval split in
which the realised precision reaches the target (``coverage``; with ``unit="image"`` the precision
is the mean precision of the images that keep a box, as certified, and ``meets_target`` reads it
too). That figure mixes the eval
split's own sampling noise with the fit's: a class whose true precision sits exactly at the
target would show about 0.5; a threshold with margin shows close to 1.

Deployment: :func:`filter_results` applies per-class thresholds to plain Ultralytics
``Results`` of the calibrated checkpoint (whose conf *is* the calibrated score).

>>> from det_calib.thresholds.per_class import tune_run
>>> doc = tune_run("runs/calib", head="nms", target_precision=0.9, delta=0.1)  # doctest: +SKIP
>>> doc["heads"]["nms"]["criteria"]["target_precision"]["per_class"][0]["threshold"]  # doctest: +SKIP
"""

from __future__ import annotations

from det_calib.thresholds.certification import (
    betainc,
    binom_sf,
    certify_image_precision,
    certify_precision,
    design_effect,
    image_fdp,
    min_certifiable,
    precision_lower_bound,
    testable,
)
from det_calib.thresholds.criteria import CRITERIA, Criterion, Fallback, Unit
from det_calib.thresholds.grid_counts import DEFAULT_GRID, ClassCounts, counts_by_image
from det_calib.thresholds.results_filter import filter_results
from det_calib.thresholds.run_head import HeadTransforms, RunHead, ScoreFn, load_head, tune_run
from det_calib.thresholds.thresholds_file import (
    DEFAULT_TARGET_PRECISION,
    FORMAT,
    THRESHOLDS_FILE,
    VERSION,
    class_thresholds,
    read_thresholds,
    summary_lines,
    write_thresholds,
)
from det_calib.thresholds.tuning import tune

__all__ = [
    "CRITERIA",
    "DEFAULT_GRID",
    "DEFAULT_TARGET_PRECISION",
    "FORMAT",
    "THRESHOLDS_FILE",
    "VERSION",
    "ClassCounts",
    "Criterion",
    "Fallback",
    "HeadTransforms",
    "RunHead",
    "ScoreFn",
    "Unit",
    "betainc",
    "binom_sf",
    "certify_image_precision",
    "certify_precision",
    "class_thresholds",
    "counts_by_image",
    "design_effect",
    "filter_results",
    "image_fdp",
    "load_head",
    "min_certifiable",
    "precision_lower_bound",
    "read_thresholds",
    "summary_lines",
    "testable",
    "tune",
    "tune_run",
    "write_thresholds",
]
