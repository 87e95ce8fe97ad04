"""Benchmark: :func:`det_calib.metrics.calibration.bootstrap_ci` against its previous per-replicate loop.

Synthetic detection data shaped like the demo's eval split: ``--images`` images (400) with
``--boxes`` boxes in all (35,000), ``--classes`` classes (10, one of them rare: its boxes sit in
three images, so some replicates draw none of them), confidences ``sigmoid(N(-2, 2^2))``,
labels ``Bernoulli(conf^1.3)``, the IoU target of a correct box ``U(0.5, 1)``. Ground truth for
:class:`det_calib.metrics.operating_point.LaECE0Targets` is planted per image, the detections jittered copies
of it plus background boxes.

Timed, for each statistic the pipeline bootstraps (``--n-boot`` replicates, seed 0):

- ``before``: the loop ``bootstrap_ci`` ran until this change, re-created here from the same
  public and private functions it called: one ``rng.integers(0, n_img, n_img)`` per replicate,
  then for ECE three vector-matrix products of per-image bin sums, for LaECE the unchecked
  core (class ids and bins recomputed every replicate), for the kept-set ECE and LaECE_0 the
  public statistic with ``weights=`` (validation, kept mask and bins every replicate);
- ``after``: ``bootstrap_ci`` itself (its interval, and the estimate it evaluates, included).

Both replicate sets are compared (``max |rel diff|``: 0 where the float operations are the same,
~1e-16 where the summation order changed) and the median times printed with their ratio.

Run from the repository root::

    PYTHONPATH=. python3 benchmarks/bench_bootstrap.py [--n-boot 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import numpy as np

from det_calib.metrics import calibration as metrics
from det_calib.metrics.calibration import bootstrap_ci, ece, laece, uniform_index
from det_calib.metrics.detection_metrics import laece_core
from det_calib.metrics.operating_point import LaECE0Targets, kept_ece


def make_data(n_img: int, n_box: int, n_cls: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    n_gt = max(1, n_box // (n_img * 8))  # ground-truth boxes per image
    gi = np.repeat(np.arange(n_img), n_gt)
    gc = rng.integers(0, n_cls - 1, gi.size)  # the rare class n_cls - 1 has no ground truth here
    xy = rng.uniform(0, 560, (gi.size, 2))
    gx = np.column_stack([xy, xy + rng.uniform(20, 80, (gi.size, 2))])
    # detections: 4 jittered copies of each ground-truth box, the rest background boxes
    src = np.repeat(np.arange(gi.size), 4)
    n_bg = n_box - src.size
    di = np.concatenate([gi[src], rng.integers(0, n_img, n_bg)])
    dc = np.concatenate([gc[src], rng.integers(0, n_cls - 1, n_bg)])
    dx = np.concatenate(
        [
            gx[src] + rng.normal(0, 6, (src.size, 4)),
            np.column_stack(
                [q := rng.uniform(0, 560, (n_bg, 2)), q + rng.uniform(20, 80, (n_bg, 2))]
            ),
        ]
    )
    rare = rng.choice(n_box, 60, replace=False)  # the rare class: boxes of three images only
    dc[rare], di[rare] = n_cls - 1, rng.integers(0, 3, rare.size)
    z = rng.normal(-2.0, 2.0, n_box)
    z[: src.size] += 2.0
    conf = 1.0 / (1.0 + np.exp(-z))
    y = rng.random(n_box) < conf**1.3
    iou = np.where(y, rng.uniform(0.5, 1.0, n_box), 0.0)
    targets = LaECE0Targets(di, dx, dc, z, gi, gx, gc)
    return dict(img=di, conf=conf, y=y, iou=iou, cls=dc, targets=targets)


def old_replicates(kind: str, d: dict, *, n_boot: int, seed: int, thr: float) -> np.ndarray:
    """The replicates of the previous ``bootstrap_ci`` loop (one draw and one call per replicate)."""
    _, img = np.unique(d["img"], return_inverse=True)
    n_img = int(img.max()) + 1
    rng = np.random.default_rng(seed)
    stats = np.empty(n_boot)
    c, y = d["conf"], d["y"]
    if kind == "ece":
        cell = img * 15 + uniform_index(c, 15)
        per = [
            np.bincount(cell, weights=v, minlength=n_img * 15).reshape(n_img, 15)
            for v in (np.ones_like(c), c, y)
        ]
        for b in range(n_boot):
            mult = np.bincount(rng.integers(0, n_img, size=n_img), minlength=n_img).astype(
                np.float64
            )
            count, s_conf, s_tgt = (mult @ t for t in per)
            total = count.sum()
            ne = count > 0
            stats[b] = (
                np.sum(count[ne] / total * np.abs(s_tgt[ne] / count[ne] - s_conf[ne] / count[ne]))
                if total > 0
                else np.nan
            )
        return stats
    if kind == "laece":
        t, k = metrics.as_unit(d["iou"], "target_iou"), metrics.as_int_ids(d["cls"], "cls")
        inner = functools.partial(laece_core, c, t, k, n_bins=25)
        call = lambda w: inner(w=w)  # noqa: E731
    elif kind == "kept_ece":
        call = lambda w: kept_ece(c, y, threshold=thr, n_bins=15, weights=w)  # noqa: E731
    else:
        f = d["targets"].statistic(threshold=thr, n_bins=25)
        call = lambda w: f(c, weights=w)  # noqa: E731
    for b in range(n_boot):
        mult = np.bincount(rng.integers(0, n_img, size=n_img), minlength=n_img)
        stats[b] = call(mult[img].astype(np.float64))
    return stats


def new_call(kind: str, d: dict, *, thr: float):
    """``(statistic, arrays, method)`` as the pipeline passes them to ``bootstrap_ci``."""
    c, y = d["conf"], d["y"]
    if kind == "ece":
        return functools.partial(ece, n_bins=15), (c, y), "bc"
    if kind == "laece":
        return functools.partial(laece, n_bins=25), (c, d["iou"], d["cls"]), "bc"
    if kind == "kept_ece":
        return functools.partial(kept_ece, threshold=thr, n_bins=15), (c, y), "bc"
    return d["targets"].statistic(threshold=thr, n_bins=25), (c,), "normal"


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--boxes", type=int, default=35_000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument(
        "--threshold", type=float, default=0.25, help="operating threshold of kept ECE / LaECE_0"
    )
    ap.add_argument("--repeats", type=int, default=3, help="runs per side; the median is reported")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    d = make_data(args.images, args.boxes, args.classes, args.seed)
    _, img = np.unique(d["img"], return_inverse=True)
    kept = int((d["conf"] > args.threshold).sum())
    print(
        f"bootstrap_ci, {args.n_boot} replicates; {args.boxes:,} boxes in {args.images} images, "
        f"{args.classes} classes, {kept:,} above conf {args.threshold}"
    )
    print()
    print(
        f"{'statistic':<12} {'before [s]':>11} {'after [s]':>10} {'speed-up':>9} "
        f"{'max |rel diff|':>15}"
    )
    print(f"{'-' * 12} {'-' * 11} {'-' * 10} {'-' * 9} {'-' * 15}")
    tot_old = tot_new = 0.0
    for kind in ("ece", "laece", "kept_ece", "laece0"):
        t_old, old = timed(
            functools.partial(
                old_replicates, kind, d, n_boot=args.n_boot, seed=0, thr=args.threshold
            ),
            args.repeats,
        )
        stat, arrays, method = new_call(kind, d, thr=args.threshold)
        t_new, _ = timed(
            functools.partial(
                bootstrap_ci, stat, d["img"], *arrays, n_boot=args.n_boot, seed=0, method=method
            ),
            args.repeats,
        )
        new = metrics._replicates(
            stat, img, int(img.max()) + 1, [np.asarray(a) for a in arrays], args.n_boot, 0
        )
        assert np.array_equal(np.isnan(old), np.isnan(new)), kind
        ok = ~np.isnan(old)
        rel = (
            float(np.max(np.abs(new[ok] - old[ok]) / np.maximum(np.abs(old[ok]), 1e-300)))
            if ok.any()
            else 0.0
        )
        tot_old, tot_new = tot_old + t_old, tot_new + t_new
        print(f"{kind:<12} {t_old:>11.3f} {t_new:>10.3f} {t_old / t_new:>8.1f}x {rel:>15.1e}")
    print(f"{'all four':<12} {tot_old:>11.3f} {tot_new:>10.3f} {tot_old / tot_new:>8.1f}x")


if __name__ == "__main__":
    main()
