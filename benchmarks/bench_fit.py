"""Benchmark: det_calib's temperature fit against netcal's ``TemperatureScaling(detection=True)``.

Fits one temperature on synthetic detection data: ``n`` box logits ``z ~ N(-2, 3^2)`` with
labels ``~ Bernoulli(sigmoid(z / 1.7))`` (a planted temperature of 1.7). det_calib is timed as
the median of ``--repeats`` runs of :func:`det_calib.calibrators.temperature.fit_temperature` on the logits;
netcal is fitted once on the confidences ``sigmoid(z)`` (it takes probabilities and rebuilds
the logits) with its default settings, ``method="mle"`` (scipy L-BFGS-B over ``1/T``), which
agree with det_calib to ~1e-5 in ``T``.

Run from the repository root (needs the test extras, ``pip install -e .[test]``)::

    python3 benchmarks/bench_fit.py               # 1,000,000 boxes
    python3 benchmarks/bench_fit.py --n 100000 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
from scipy.special import expit

from det_calib.calibrators.temperature import fit_temperature


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="number of boxes (default 1,000,000)")
    ap.add_argument("--t-true", type=float, default=1.7, help="planted temperature (default 1.7)")
    ap.add_argument(
        "--repeats", type=int, default=3, help="det_calib runs; the median is reported (default 3)"
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    z = rng.normal(-2.0, 3.0, args.n)
    y = rng.random(args.n) < expit(z / args.t_true)

    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        t_ours = fit_temperature(z, y)
        times.append(time.perf_counter() - t0)
    dt_ours = statistics.median(times)

    from netcal.scaling import TemperatureScaling

    conf = expit(z).reshape(-1, 1)
    t0 = time.perf_counter()
    ts = TemperatureScaling(detection=True, method="mle")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts.fit(conf, y.astype(np.float64))
    dt_netcal = time.perf_counter() - t0
    t_netcal = 1.0 / float(
        np.asarray(ts.temperature).reshape(-1)[0]
    )  # netcal stores the weight 1/T

    print(
        f"temperature fit, {args.n:,} boxes, z ~ N(-2, 3^2), planted T = {args.t_true}, "
        f"{int(y.sum()):,} correct ({y.mean():.1%})"
    )
    print()
    print(f"{'method':<44} {'time [s]':>10} {'T':>12}")
    print(f"{'-' * 44} {'-' * 10} {'-' * 12}")
    print(
        f"{f'det_calib fit_temperature (median of {args.repeats})':<44} {dt_ours:>10.3f} "
        f"{t_ours:>12.7f}"
    )
    print(f"{'netcal TemperatureScaling(detection=True)':<44} {dt_netcal:>10.3f} {t_netcal:>12.7f}")
    print()
    print(
        f"det_calib is {dt_netcal / dt_ours:.1f}x faster; |T_det_calib - T_netcal| = "
        f"{abs(t_ours - t_netcal):.2e} "
        f"(relative {abs(t_ours - t_netcal) / t_ours:.2e}); det_calib runs: "
        f"{', '.join(f'{t:.3f}' for t in times)} s"
    )


if __name__ == "__main__":
    main()
