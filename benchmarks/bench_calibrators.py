"""Benchmark: every calibrator candidate, 5-fold CV, on 1,000,000 synthetic boxes, vs scikit-learn.

Synthetic detection data: ``n`` box logits ``z ~ N(-2, 3^2)``, 8 classes, 20 boxes per image,
labels ``~ Bernoulli(sigmoid(a_c z + b_c))`` (per-class planted maps). det_calib runs
:func:`det_calib.selection.cross_validation.select_calibrator` (every method, fit ranges all boxes and conf > 0.125,
5 folds grouped by image, per-class shrinkage chosen on the same folds, final refit) and is
timed end to end. scikit-learn does the same fits on the same folds: ``LogisticRegression``
(no penalty) for Platt, the same on ``z`` without intercept for temperature, the same on the
spline's hinge features ``[z, relu(z - k_1), relu(z - k_2)]`` (knots at the 1/3 and 2/3
quantiles of the correct boxes' logits, as det_calib places them) for the spline, one per class for
the per-class fits (at the one shrinkage value sklearn has: none), and ``IsotonicRegression``
(global and per class); its total is the sum (fits only: it does not score the held-out folds).
det_calib's CV runs on logits pooled to a 0.01 grid (``cv_resolution``), its final refit on the
exact logits; scikit-learn fits the exact logits every time. Only the benchmark imports
scikit-learn.

Run from the repository root::

    python3 benchmarks/bench_calibrators.py             # 1,000,000 boxes
    python3 benchmarks/bench_calibrators.py --n 200000
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from det_calib.calibrators.affine import group_folds, sigmoid
from det_calib.selection.cross_validation import select_calibrator


def data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.0, 3.0, n)
    k = rng.integers(0, 8, n)
    a = np.linspace(0.7, 1.6, 8)
    b = np.linspace(-0.8, 0.6, 8)
    y = rng.random(n) < sigmoid(a[k] * z + b[k])
    return z, y, k, np.arange(n) // 20


def sklearn_same_fits(z, y, k, g, floors, n_folds=5):
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression

    folds = group_folds(z.size, n_folds, g, seed=0)
    times = {}

    def lr(x, t, intercept=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return LogisticRegression(C=np.inf, fit_intercept=intercept, max_iter=1000).fit(
                x.reshape(len(t), -1), t
            )

    def hinges(x, knots):
        return np.column_stack([x] + [np.maximum(x - kn, 0.0) for kn in knots])

    def iso(x, t):
        return IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(x, t)

    fits = {
        "temperature": lambda x, t, c: lr(x, t, intercept=False),
        "platt": lambda x, t, c: lr(x, t),
        "spline": lambda x, t, c: lr(hinges(x, np.quantile(x[t], [1 / 3, 2 / 3])), t),
        "class-temperature": lambda x, t, c: [
            lr(x[c == j], t[c == j], False) for j in np.unique(c)
        ],
        "class-platt": lambda x, t, c: [lr(x[c == j], t[c == j]) for j in np.unique(c)],
        "isotonic": lambda x, t, c: iso(x, t),
        "class-isotonic": lambda x, t, c: [iso(x[c == j], t[c == j]) for j in np.unique(c)],
    }
    for name, fit in fits.items():
        t0 = time.perf_counter()
        for floor in floors:
            rng_mask = sigmoid(z) > floor if floor > 0 else np.ones(z.size, bool)
            for f in range(n_folds):
                tr = (folds != f) & rng_mask
                fit(z[tr], y[tr], k[tr])
        times[name] = time.perf_counter() - t0
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--no-sklearn", action="store_true")
    args = ap.parse_args()
    z, y, k, g = data(args.n)
    floors = (0.0, 0.125)
    t0 = time.perf_counter()
    sel = select_calibrator(
        z, y, classes=k, groups=g, min_conf=0.25, fit_min_confs=floors, n_folds=5, n_repeats=1
    )
    ours = time.perf_counter() - t0
    print(f"{args.n:,} boxes, 8 classes, 5-fold CV grouped by image, fit ranges {floors}")
    print(
        f"det_calib select_calibrator, one 5-fold assignment (all {len(sel.candidates)} candidates "
        "+ per-class "
        f"shrinkage grid + refit): {ours:.2f} s; chosen {sel.chosen.name}"
    )
    t0 = time.perf_counter()
    rep = select_calibrator(
        z, y, classes=k, groups=g, min_conf=0.25, fit_min_confs=floors, n_folds=5
    )
    print(
        f"det_calib select_calibrator as `--method auto` runs it ({rep.n_repeats} assignments x 5 "
        "folds): "
        f"{time.perf_counter() - t0:.2f} s; chosen {rep.chosen.name}"
    )
    if args.no_sklearn:
        return
    sk = sklearn_same_fits(z, y, k, g, floors)
    total = sum(sk.values())
    for name, t in sk.items():
        print(f"  scikit-learn {name:<18} {t:7.2f} s (2 fit ranges x 5 folds, no shrinkage grid)")
    print(f"scikit-learn total {total:.2f} s; det_calib / scikit-learn = {ours / total:.2f}")


if __name__ == "__main__":
    main()
