"""The image bootstrap of every interval: :func:`bootstrap_ci` and :func:`bootstrap_sd` resample
images (not boxes) and compute a statistic on each replicate.

Each replicate draws as many images as there are, uniformly with replacement; every box of a
drawn image comes along, once per draw. A statistic with a ``weights`` parameter (all metrics
here have one) is computed as ``statistic(*arrays, weights=w)`` with ``w`` the per-box draw count
of its image (no copying; weights bound in a ``functools.partial`` are multiplied by the draw
counts); any other statistic gets the arrays indexed, ``statistic(*[a[idx] for a in arrays])``.

A statistic that carries a ``_bootstrap_prepare`` attribute (the binned metrics of
:mod:`det_calib.metrics.calibration`: :func:`ece`, :func:`ace`, :func:`mce`, :func:`brier`,
:func:`laece`; :func:`det_calib.metrics.operating_point.kept_ece` and
:meth:`det_calib.metrics.operating_point.LaECE0Targets.statistic`; also as a ``functools.partial``
with keyword options) validates its arrays once, before the replicates, and hoists what does not
depend on the draws (class ids, bins, kept boxes): ``prepare(img, n_img, *arrays, **options)``
returns a :data:`Batch` of its replicates; ECE's replicates are matrix products of per-image bin
sums. All paths give the same numbers for the same seed (up to float summation order): the draws
of a seed are the same on every path (:mod:`det_calib.metrics.bootstrap_tables` holds the pooled
tables and the seeded draw counts).

The interval ``method`` of :func:`bootstrap_ci` (``theta`` the estimate, ``q_lo`` and ``q_hi`` the
``(1 - level)/2`` and ``(1 + level)/2`` percentiles of the replicates):

* ``"bc"``: the bias-corrected percentile interval (Efron 1981): with ``z0 = Phi^-1(share of
  replicates below the estimate, ties counted half)``, the ``Phi(2 z0 -+ z_level)`` percentiles.
  A binned calibration error is biased upward, so plain percentiles sit above the estimate; BC
  moves them back and stays within the replicates' range (never below 0).
* ``"basic"``: ``(2 theta - q_hi, 2 theta - q_lo)``.
* ``"percentile"``: ``(q_lo, q_hi)``.
* ``"normal"``: ``theta -+ z_level * sd(replicates)``: always contains the estimate (it ignores
  the bias), for statistics whose resampling bias exceeds their spread.
* ``"bc-normal"`` (the default): the BC interval where it contains the estimate, else the normal
  one with its low end raised to the lowest replicate or the estimate, whichever is lower (a
  binned error is never below 0): an interval printed next to its estimate always contains it.

``"bc"``, ``"basic"`` and ``"percentile"`` contain the estimate exactly when the estimate lies
between the ``(1 -+ level)/2`` quantiles of the replicates; when sampling bias exceeds the spread
(the estimate below 97.5% of the replicates), no percentile-type interval contains it, and BC
reports the lowest replicates.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import statistics
import warnings
from collections.abc import Callable
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from det_calib.errors import InputError
from det_calib.metrics.binning import dense_ids, uniform_index
from det_calib.metrics.bootstrap_tables import seeded_multiplicities
from det_calib.metrics.metric_inputs import check_positive_int
from det_calib.validation import as_1d

__all__ = ["Batch", "bootstrap_ci", "bootstrap_sd", "group_ece_ci", "weighted_core"]

#: A batch statistic: ``(r, n_img)`` float64 draw counts of ``r`` replicates (row ``b``: how often
#: each image is drawn in replicate ``b``; whole numbers) -> ``(r,)`` float64 values of the statistic.
Batch = Callable[[np.ndarray], np.ndarray]

# drawn image indices held in memory at once (8 MiB of int64)
_DRAW_CHUNK = 1 << 20


def _multiplicities(rng: np.random.Generator, n_img: int, n_boot: int):
    """Yield the draw counts of ``n_boot`` replicates as ``(r, n_img)`` int64 blocks, in order.

    Row ``b`` counts ``rng.integers(0, n_img, size=n_img)`` of replicate ``b``. One call for a
    block of ``r`` replicates, ``rng.integers(0, n_img, size=(r, n_img))``, gives exactly the
    draws of ``r`` successive calls of size ``n_img``: for the default int64 dtype every value
    is one Lemire draw from the bit generator's own ``next_uint32`` (ranges below 2**32) or
    ``next_uint64`` stream, with no buffer local to the call (only the uint8/uint16/bool
    dtypes buffer within a call); ``tests/metrics/test_calibration.py`` pins this.
    """
    rows = max(1, _DRAW_CHUNK // n_img)
    for start in range(0, n_boot, rows):
        r = min(rows, n_boot - start)
        yield _counts(rng.integers(0, n_img, size=(r, n_img)), n_img)


# the draw counts of a few replicates at a time, a count table this long (int64: 128 KiB) that stays in
# the core's cache while its draws are counted: with one count table of a whole block (1M counts, 8 MiB)
# the 1,000 draws of 5,000 and of 50,000 images took about 10% and 25% longer here (numbers the same)
_COUNT_SPAN = 1 << 14


def _counts(draws: np.ndarray, n_img: int) -> np.ndarray:
    """``(r, n_img)`` int64: row ``b`` counts the values of ``draws[b]`` (``(r, n_img)``, each in
    ``range(n_img)``), counted a few rows at a time (:data:`_COUNT_SPAN`): the same counts as one
    ``np.bincount`` of the whole block with each row's values offset into its own range."""
    r = draws.shape[0]
    out = np.empty((r, n_img), dtype=np.int64)
    step = max(1, _COUNT_SPAN // n_img)
    if step == 1:
        for b in range(r):
            out[b] = np.bincount(draws[b], minlength=n_img)
        return out
    offsets = (np.arange(step) * n_img)[:, None]
    for lo in range(0, r, step):
        hi = min(r, lo + step)
        keys = (draws[lo:hi] + offsets[: hi - lo]).ravel()
        out[lo:hi] = np.bincount(keys, minlength=(hi - lo) * n_img).reshape(hi - lo, n_img)
    return out


def _per_replicate(weighted: Callable[[np.ndarray], float], img: np.ndarray) -> Batch:
    """Batch of ``weighted(w)`` with ``w`` (n,) float64 the draw count of each box's image; nan for a
    replicate that draws none of the boxes' images (a part of a set, ``bootstrap_ci``'s ``population``)."""

    def one(w: np.ndarray) -> float:
        return weighted(w) if w.any() else np.nan

    def batch(mult: np.ndarray) -> np.ndarray:
        return np.array([one(m[img]) for m in np.asarray(mult, dtype=np.float64)], dtype=np.float64)

    return batch


def weighted_core(check: Callable, core: Callable) -> Callable[..., Batch]:
    """``prepare`` of a metric from ``check(*arrays, **options) -> (arrays, options)`` (validates
    as the metric does) and ``core(*arrays, weights=w, **options)`` (the same number, unchecked)."""

    def prepare(img, n_img, *arrays, **options) -> Batch:
        args, options = check(*arrays, **options)
        return _per_replicate(lambda w: core(*args, weights=w, **options), img)

    return prepare


def _batch_statistic(
    statistic: Callable, img: np.ndarray, n_img: int, arrays: list[np.ndarray]
) -> Batch | None:
    """The :data:`Batch` of ``statistic`` on ``arrays``, for a statistic with a ``_bootstrap_prepare``
    attribute (also as a ``functools.partial`` with keyword
    options only, ``weights`` not among them); None for any other statistic. Raises what the
    statistic would raise for invalid arrays."""
    fn, options = statistic, {}
    if isinstance(statistic, functools.partial):
        if statistic.args:
            return None
        fn, options = statistic.func, dict(statistic.keywords)
    if "weights" in options:
        return None
    prepare = getattr(fn, "_bootstrap_prepare", None)
    if prepare is None:
        return None
    return prepare(img, n_img, *arrays, **options)


def _accepts_weights(fn: Callable) -> bool:
    try:
        param = inspect.signature(fn).parameters.get("weights")
    except (TypeError, ValueError):
        return False
    return param is not None and param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD)


def _replicates(
    statistic: Callable,
    img: np.ndarray,
    n_img: int,
    arrays: list[np.ndarray],
    n_boot: int,
    seed: int,
    within: tuple[int, np.ndarray] | None = None,
) -> np.ndarray:
    """(n_boot,) values of ``statistic`` on the replicates of seed ``seed`` (``img``: (n,) image
    index of each box in ``range(n_img)``). Every path gives the numbers of the indexed one,
    ``statistic(*[a[idx] for a in arrays])``, from the same draws. ``within``: ``(n_pop, columns)``
    where the replicates draw ``n_pop`` images and the boxes' images are ``columns`` of them
    (``(n_img,)``, increasing); None draws the ``n_img`` images themselves."""
    n_draw, columns = (n_img, None) if within is None else within

    def draws(dtype=np.int64):
        return seeded_multiplicities(
            seed, n_draw, n_boot, _multiplicities, _DRAW_CHUNK, dtype=dtype, columns=columns
        )

    batch = None
    if isinstance(statistic, functools.partial) and "weights" in statistic.keywords:
        # weights bound by the caller: a replicate weighs each box by them times its draw count
        bound = np.asarray(statistic.keywords["weights"], dtype=np.float64)
        if bound.shape != img.shape:
            raise InputError(
                f"Expected the statistic's bound `weights` to have shape {img.shape} (one per "
                "box), "
                f"but got {bound.shape}"
            )
        rest = {k: v for k, v in statistic.keywords.items() if k != "weights"}
        inner = functools.partial(statistic.func, *statistic.args, *arrays, **rest)
        batch = _per_replicate(lambda w: inner(weights=bound * w), img)
    elif _accepts_weights(statistic):
        batch = _batch_statistic(statistic, img, n_img, arrays)
        if batch is None:
            inner = functools.partial(statistic, *arrays)
            batch = _per_replicate(lambda w: inner(weights=w), img)
    if batch is not None:
        return np.concatenate([batch(mult) for mult in draws(np.float64)])
    stats = np.empty(n_boot)
    order = np.argsort(img, kind="stable")
    per_img = np.bincount(img, minlength=n_img)
    start = np.concatenate([[0], np.cumsum(per_img)[:-1]])
    b = 0
    for block in draws():
        for mult in block:
            drawn = np.repeat(np.arange(n_img), mult)  # image k appears mult[k] times, in order
            lens = per_img[drawn]
            offs = np.repeat(start[drawn] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
            idx = order[offs + np.arange(lens.sum())]
            stats[b] = statistic(*[a[idx] for a in arrays]) if idx.size else np.nan
            b += 1
    return stats


def bootstrap_sd(
    statistic: Callable[..., float],
    image_ids: ArrayLike,
    *arrays: ArrayLike,
    n_boot: int = 1000,
    seed: int = 0,
) -> float:
    """Standard deviation of a statistic over the image bootstrap of :func:`bootstrap_ci` (the same
    replicates for the same seed; replicates that give nan are dropped): its standard error.

    >>> img = np.repeat(np.arange(40), 5)
    >>> x = np.arange(200) % 2.0
    >>> bootstrap_sd(lambda v, weights=None: float(np.average(v, weights=weights)), img, x, n_boot=200) > 0
    True
    """
    n_boot = check_positive_int(n_boot, "n_boot")
    ids = as_1d(image_ids, "image_ids")
    arrs = [np.asarray(a) for a in arrays]
    if len(ids) == 0 or any(len(a) != len(ids) for a in arrs):
        raise InputError(
            f"Expected `image_ids` and every array to have the same non-zero length, but got "
            f"{len(ids)} and {[len(a) for a in arrs]}"
        )
    img = _image_index(ids)
    stats = _replicates(statistic, img, int(img.max()) + 1, arrs, n_boot, seed)
    good = stats[np.isfinite(stats)]
    return float(good.std(ddof=1)) if good.size > 1 else float("nan")


def bootstrap_ci(
    statistic: Callable[..., float],
    image_ids: ArrayLike,
    *arrays: ArrayLike,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    method: Literal["bc-normal", "bc", "basic", "percentile", "normal"] = "bc-normal",
    estimate: float | None = None,
    population: ArrayLike | None = None,
) -> tuple[float, float]:
    """Bootstrap interval of a statistic, resampling images (not boxes); bias-corrected by default,
    and always containing the estimate by default.

    How the replicates are drawn and computed, and what each interval ``method`` is: see
    :mod:`det_calib.metrics.bootstrap`.

    Args:
        statistic: Function of the arrays returning a float, e.g. :func:`ece` or
            ``functools.partial(ece, n_bins=10)``.
        image_ids: (n,) image id of each box (any hashable numpy dtype).
        *arrays: Arrays with n rows (first axis), passed positionally to ``statistic``.
        n_boot: Number of bootstrap replicates.
        seed: Seed for ``np.random.default_rng``; same seed, same interval.
        level: Coverage in (0, 1); the percentile interval is the ``(1 - level)/2`` and
            ``(1 + level)/2`` percentiles of the replicates (2.5 and 97.5 for 0.95).
        method: ``"bc-normal"`` (default: the bias-corrected interval where it contains the
            estimate, else the normal one), ``"bc"``, ``"basic"``, ``"percentile"`` or
            ``"normal"``; see :mod:`det_calib.metrics.bootstrap`.
        estimate: ``statistic(*arrays)`` where the caller has computed it already (the figure the
            interval is printed beside): not computed again; None computes it.
        population: The image ids of a whole set's boxes (every box's, in any order), of which
            the boxes are a part (a class's boxes, a size bin's): each
            replicate draws as many images as the set has, from the set (the draws of the set's
            own interval, the same seed), and the statistic sees the part's boxes of the images
            drawn. A part's number of images then varies from replicate to replicate, as it
            would in a new set; a replicate that draws none of its images gives nan and is
            dropped, without a warning. None (default): the boxes' own images are drawn.

    Returns:
        ``(low, high)``. Replicates where the statistic is nan are dropped (with a warning, where
        ``population`` is None).

    >>> from det_calib.metrics.calibration import brier
    >>> rng = np.random.default_rng(0)
    >>> img = np.repeat(np.arange(50), 20)  # 50 images of 20 boxes
    >>> conf = rng.uniform(size=1000)
    >>> correct = rng.uniform(size=1000) < conf
    >>> lo, hi = bootstrap_ci(brier, img, conf, correct, n_boot=200, seed=1)
    >>> bool(lo < brier(conf, correct) < hi)
    True
    """
    n_boot = check_positive_int(n_boot, "n_boot")
    if not (isinstance(level, numbers.Real) and 0.0 < level < 1.0):
        raise InputError(f"Expected argument `level` to be a number in (0, 1), but got {level!r}")
    ids, arrs = _checked_arrays(image_ids, arrays)
    if len(ids) == 0:
        return float("nan"), float("nan")
    img, within = _draw_index(ids, population)
    stats = _replicates(statistic, img, int(img.max()) + 1, arrs, n_boot, seed, within)
    bad = np.isnan(stats)
    if bad.all():
        return float("nan"), float("nan")
    if bad.any() and population is None:
        warnings.warn(
            f"bootstrap_ci: {int(bad.sum())} of {n_boot} replicates gave nan and were dropped",
            stacklevel=2,
        )
    return _interval(
        statistic, arrs, stats[~bad], method=method, alpha=(1.0 - level) / 2.0, estimate=estimate
    )


def _image_index(ids: np.ndarray) -> np.ndarray:
    """(n,) int64: each box's image as its rank among the distinct ``ids`` (``np.unique``'s inverse).
    Non-negative integer ids of a range no wider than twice the boxes (a run's image ids) are ranked by
    counting, not sorting: the same numbers."""
    return dense_ids(ids)[1]


def ece_of_sums(sums: np.ndarray, n_bins: int) -> np.ndarray:
    """The ECE of each set of per-bin sums (last axis: the ``n_bins`` bins' sums of ``target - conf``,
    then the box count): ``sum |s| / count``, a bin's term ``count / total * |s_tgt / count - s_conf /
    count|`` being ``|s_tgt - s_conf| / total``; nan where no box weighs."""
    total = sums[..., n_bins]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.abs(sums[..., :n_bins]).sum(axis=-1) / total
    out[total <= 0] = np.nan
    return out


# the dense (image x group cell) sums of one block of groups held at once (float64); groups beyond it are
# taken a block at a time, each product then reading every draw again
_GROUP_TABLE_BYTES = 32 << 20


def group_ece_ci(
    conf: np.ndarray,
    correct: np.ndarray,
    groups: np.ndarray,
    image_ids: np.ndarray,
    population: np.ndarray,
    estimates: np.ndarray,
    *,
    n_bins: int = 15,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    method: Literal["bc-normal", "bc", "basic", "percentile", "normal"] = "bc-normal",
) -> list[tuple[float, float] | None]:
    """The ECE interval (equal-width bins) of each group of boxes (a class, a size bin), all from the draws of
    one set's images: group ``g``'s is ``bootstrap_ci(functools.partial(ece, n_bins=n_bins), image_ids[m],
    conf[m], correct[m], population=population, estimate=estimates[g], ...)`` with ``m = groups == g`` (equal
    up to float summation order; tested), where every draw block is read once for many groups: each
    replicate's sums are one dense product of its draw counts with the (image x group, bin) sums of target
    - conf and the box counts, a block of groups at a time (:data:`_GROUP_TABLE_BYTES`).

    Args:
        conf, correct: (n,) confidence in [0, 1] and 0/1 of each box (checked by the caller).
        groups: (n,) group of each box in ``range(len(estimates))``.
        image_ids: (n,) image id of each box, each in ``population``.
        population: the image ids of the whole set's boxes (see :func:`bootstrap_ci`).
        estimates: (G,) each group's ECE, the figure its interval is printed beside.

    Returns:
        One ``(low, high)`` per group; None for a group without boxes.
    """
    n_groups = len(estimates)
    g = np.asarray(groups, dtype=np.int64)
    c = np.asarray(conf, dtype=np.float64)
    out: list[tuple[float, float] | None] = [None] * n_groups
    if not g.size:
        return out
    pos, n_pop = _positions(np.asarray(image_ids), population)  # each box's image among the draws
    width = n_bins + 1  # a group's bins' sums of target - conf, then its box count
    cell = g * width
    gap = np.asarray(correct, dtype=np.float64) - c
    binned = cell + uniform_index(c, n_bins)
    per_block = max(1, _GROUP_TABLE_BYTES // (8 * n_pop * width))
    alpha = (1.0 - level) / 2.0
    has = np.bincount(g, minlength=n_groups) > 0
    for lo in range(0, n_groups, per_block):
        hi = min(n_groups, lo + per_block)
        m = (g >= lo) & (g < hi)
        if not has[lo:hi].any():
            continue
        k = hi - lo
        at = pos[m] * (k * width) - lo * width
        size = n_pop * k * width
        table = np.bincount(at + binned[m], weights=gap[m], minlength=size)
        table += np.bincount(at + cell[m] + n_bins, minlength=size)
        table = table.reshape(n_pop, k * width)
        reps = []
        for mult in seeded_multiplicities(
            seed, n_pop, n_boot, _multiplicities, _DRAW_CHUNK, dtype=np.float64
        ):
            reps.append(ece_of_sums((mult @ table).reshape(-1, k, width), n_bins))
        stats = np.concatenate(reps)
        for j in np.flatnonzero(has[lo:hi]):
            col = stats[:, j]
            good = col[~np.isnan(col)]
            out[lo + j] = (
                _interval(None, [], good, method=method, alpha=alpha, estimate=estimates[lo + j])
                if good.size
                else (float("nan"), float("nan"))
            )
    return out


def _draw_index(
    ids: np.ndarray, population: ArrayLike | None
) -> tuple[np.ndarray, tuple[int, np.ndarray] | None]:
    """Each box's image as its rank among the boxes' distinct images, and what the replicates draw:
    None (those images), or ``(n_pop, columns)``: the ``n_pop`` distinct images of ``population`` (a
    whole set's image ids), the boxes' images being ``columns`` of them (increasing)."""
    if population is None:
        return _image_index(ids), None
    pos, n_pop = _positions(ids, population)
    columns, img = dense_ids(pos)
    return img, (n_pop, columns)


def _positions(ids: np.ndarray, population: ArrayLike) -> tuple[np.ndarray, int]:
    """Each box's image as its position among the distinct ids of ``population`` (a whole set's image
    ids, in increasing order: the draws' images), and how many there are."""
    pop = dense_ids(as_1d(population, "population"))[0]
    if pop.size == 0:
        raise InputError("Expected argument `population` to hold a set's image ids, but got none")
    pos = np.minimum(np.searchsorted(pop, ids), pop.size - 1)
    missing = pop[pos] != ids
    if missing.any():
        raise InputError(
            f"Expected every image id to be in `population`, but {int(missing.sum())} boxes' are not "
            f"(first: {ids[missing][0]!r})"
        )
    return pos, int(pop.size)


def _checked_arrays(
    image_ids: ArrayLike, arrays: tuple[ArrayLike, ...]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """:func:`bootstrap_ci`'s image ids and arrays, checked: at least one array, each of their length."""
    ids = as_1d(image_ids, "image_ids")
    arrs = [np.asarray(a) for a in arrays]
    if not arrs:
        raise InputError("Expected at least one array after `image_ids`, but got none")
    for i, a in enumerate(arrs):
        if a.ndim == 0 or len(a) != len(ids):
            got = "a scalar" if a.ndim == 0 else str(len(a))
            raise InputError(
                f"Expected arguments `image_ids` and `arrays[{i}]` to have the same length, "
                f"but got {len(ids)} and {got}"
            )
    return ids, arrs


def _interval(
    statistic: Callable[..., float],
    arrs: list[np.ndarray],
    good: np.ndarray,
    *,
    method: str,
    alpha: float,
    estimate: float | None = None,
) -> tuple[float, float]:
    """The ``method`` interval (see the module docstring) from the finite replicates ``good``; the
    estimate is ``estimate`` or else ``statistic(*arrs)``, computed only for the methods that need it."""
    if method not in ("bc-normal", "bc", "basic", "percentile", "normal"):
        raise InputError(
            "Expected argument `method` to be 'bc-normal', 'bc', 'basic', 'percentile' or "
            f"'normal', but got {method!r}"
        )
    if method == "percentile":
        lo, hi = np.percentile(good, [100.0 * alpha, 100.0 * (1.0 - alpha)])
        return float(lo), float(hi)
    theta = float(statistic(*arrs) if estimate is None else estimate)
    if method == "bc-normal":
        lo, hi = _bc_interval(good, theta, alpha)
        if lo <= theta <= hi or math.isnan(theta):
            return lo, hi
        lo, hi = _normal_interval(good, theta, alpha)
        return max(lo, min(float(good.min()), theta)), hi
    if method == "normal":
        return _normal_interval(good, theta, alpha)
    if method == "basic":
        q_lo, q_hi = np.percentile(good, [100.0 * alpha, 100.0 * (1.0 - alpha)])
        return float(2 * theta - q_hi), float(2 * theta - q_lo)
    return _bc_interval(good, theta, alpha)


def _normal_interval(good: np.ndarray, theta: float, alpha: float) -> tuple[float, float]:
    half = (
        statistics.NormalDist().inv_cdf(1.0 - alpha) * float(np.std(good, ddof=1))
        if good.size > 1
        else 0.0
    )
    return theta - half, theta + half


def _bc_interval(good: np.ndarray, theta: float, alpha: float) -> tuple[float, float]:
    """The bias-corrected percentile interval of replicates ``good`` around the estimate ``theta``."""
    nd = statistics.NormalDist()
    # ties with the estimate within float summation error (a replicate that redraws every image
    # once is the estimate, summed in another order) count half, as exact ties
    tie = np.isclose(good, theta, rtol=1e-12, atol=1e-15)
    share = (np.count_nonzero((good < theta) & ~tie) + 0.5 * np.count_nonzero(tie)) / good.size
    share = min(max(share, 0.5 / good.size), 1.0 - 0.5 / good.size)
    z0, za = nd.inv_cdf(share), nd.inv_cdf(1.0 - alpha)
    lo, hi = np.percentile(good, [100.0 * nd.cdf(2 * z0 - za), 100.0 * nd.cdf(2 * z0 + za)])
    return float(lo), float(hi)
