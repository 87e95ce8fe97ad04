"""Judge the default calibrator choice on many cases, not one: fit-split sizes, seeds, heads.

Reads the boxes of a finished full ``det-calib calibrate`` run on the demo (its ``boxes.parquet``:
every box of the ``calib`` and ``test`` splits, both heads, matched at the run's IoU) and, for
each case, takes a fit subset of ``calib`` and an eval subset of ``test``:

- ``first N``: the first N images of each split, exactly what ``--limit N`` runs (capture is one
  image at a time, so a box does not depend on which other images are in the run);
- ``seed S``: N images of each split drawn at random with seed S (more cases of the same size).

On each case it runs the default automatic choice (:func:`det_calib.pipeline.fitting.choose_calibrator`
with the default candidates and fit ranges, exactly as ``calibrate`` does) and prints the ECE of
the boxes kept at conf 0.25 on the eval subset (15 bins; the run's IoU): raw, the chosen map,
the temperature (the classic method), Platt on all boxes, and the best candidate in hindsight
(every candidate refitted on the fit subset and scored on the eval subset: a bound no rule that
sees only the fit split can be expected to reach). The summary gives the mean and the largest
ratio of chosen to raw, over the ``first N`` cases (the issue's figure) and over every case.

Run from the repository root::

    det-calib calibrate --out runs/demo          # once (the default run on the demo)
    python3 benchmarks/measure_selection.py --run runs/demo
    python3 benchmarks/measure_selection.py --run runs/demo --sizes 64 128 400 --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import polars as pl


def kept_ece(p: np.ndarray, y: np.ndarray, thr: float) -> float:
    from det_calib.metrics.calibration import ece

    m = p > thr
    return ece(p[m], y[m], n_bins=15) if m.any() else math.nan


def one_case(
    boxes: pl.DataFrame,
    head: str,
    fit_ids: list[int],
    eval_ids: list[int],
    thr: float,
    per_class: bool,
    criterion: str = "nll",
) -> dict:
    from det_calib.calibrators.base import calibrated_logits
    from det_calib.calibrators.registry import global_methods, methods
    from det_calib.data.box_view import BoxView
    from det_calib.job.settings import fit_floors
    from det_calib.numeric import logit_threshold, sigmoid
    from det_calib.pipeline.fitting import choose_calibrator
    from det_calib.selection.cross_validation import fit_calibrator

    def part(split: str, ids: list[int]) -> pl.DataFrame:
        return boxes.filter(
            (pl.col("head") == head) & (pl.col("split") == split) & pl.col("image_id").is_in(ids)
        )

    fb, eb = part("calib", fit_ids), part("test", eval_ids)
    ze, ye, ke = (eb[c].to_numpy() for c in ("logit", "correct", "cls"))
    t0 = time.perf_counter()
    choice = choose_calibrator(
        BoxView.from_boxes(fb, geometry=False, ignore=False),
        method="auto",
        floors=fit_floors("auto", None, None, (thr,)),
        criterion=criterion,
        min_conf=thr,
        n_folds=5,
        seed=0,
        methods=methods() if per_class else global_methods(),
    )
    secs = time.perf_counter() - t0

    def score(cal) -> float:
        return kept_ece(sigmoid(calibrated_logits(cal, ze.astype(np.float64), ke)), ye, thr)

    z, y, k, g = (fb[c].to_numpy() for c in ("logit", "correct", "cls", "image_id"))
    z = z.astype(np.float64)
    hind = {}
    for c in choice.selection.candidates:
        if c.error is None and math.isfinite(c.mean):
            m = (
                z > logit_threshold(c.fit_min_conf)
                if c.fit_min_conf > 0
                else np.ones(z.shape[0], dtype=bool)
            )
            cal = fit_calibrator(
                c.method,
                z[m],
                y[m],
                classes=k[m],
                groups=g[m],
                fit_min_conf=c.fit_min_conf,
                in_range=True,
            )
            hind[c.name] = score(cal)
    best = min(hind, key=hind.get)
    return {
        "raw": kept_ece(sigmoid(ze.astype(np.float64)), ye, thr),
        "chosen": choice.selection.chosen.name,
        "chosen_ece": score(choice.calibrator),
        "temperature": hind.get("temperature@0", math.nan),
        "platt": hind.get("platt@0", math.nan),
        "best": best,
        "best_ece": hind[best],
        "seconds": secs,
        "fit_kept": int((z > logit_threshold(thr)).sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--run", type=Path, required=True, help="folder of a full default run on the demo"
    )
    ap.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[64, 128, 400],
        help="images per split (fit and eval)",
    )
    ap.add_argument(
        "--seeds", type=int, nargs="*", default=[1, 2, 3], help="random subsets per size below 400"
    )
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument(
        "--per-class", action="store_true", help="let the choice consider the per-class maps too"
    )
    ap.add_argument(
        "--criterion",
        default="nll",
        choices=("nll", "brier", "ece"),
        help="what the CV scores (nll)",
    )
    args = ap.parse_args()

    from det_calib.data.box_table import read_boxes

    boxes = read_boxes(args.run / "boxes.parquet").filter(~pl.col("ignore"))
    n_img = {
        sp: int(boxes.filter(pl.col("split") == sp)["image_id"].max()) + 1
        for sp in ("calib", "test")
    }
    heads = [h for h in ("nms", "e2e") if h in boxes["head"].unique().to_list()]
    print(
        f"{'case':22s} {'fit kept':>8s} {'raw':>7s} {'chosen':>18s} {'ECE':>7s} {'ratio':>6s} "
        f"{'temp.':>7s} "
        f"{'platt':>7s} {'best in hindsight':>22s} {'s':>5s}"
    )
    first, every, hindsight = [], [], []
    for head in heads:
        for n in args.sizes:
            cases = [("first", None)] + (
                [("seed", s) for s in args.seeds] if n < min(n_img.values()) else []
            )
            for _kind, s in cases:
                if s is None:
                    fi, ei = list(range(min(n, n_img["calib"]))), list(range(min(n, n_img["test"])))
                else:
                    rng = np.random.default_rng(s)
                    fi = sorted(rng.choice(n_img["calib"], n, replace=False).tolist())
                    ei = sorted(rng.choice(n_img["test"], n, replace=False).tolist())
                r = one_case(boxes, head, fi, ei, args.conf, args.per_class, args.criterion)
                ratio = r["chosen_ece"] / r["raw"]
                (first if s is None else every).append(ratio)
                hindsight.append(r["best_ece"] / r["raw"])
                label = f"{head} {n} {'first' if s is None else f'seed {s}'}"
                print(
                    f"{label:22s} {r['fit_kept']:8d} {r['raw']:7.4f} {r['chosen']:>18s} "
                    f"{r['chosen_ece']:7.4f} "
                    f"{ratio:6.2f} {r['temperature']:7.4f} {r['platt']:7.4f} "
                    f"{r['best'] + ' ' + format(r['best_ece'], '.4f'):>22s} {r['seconds']:5.1f}",
                    flush=True,
                )
    every += first
    print(
        f"\nchosen / raw kept-set ECE at conf {args.conf:g}: first-N cases mean "
        f"{np.mean(first):.3f}, "
        f"max {max(first):.2f} ({len(first)} cases); every case mean {np.mean(every):.3f}, "
        f"max {max(every):.2f} ({len(every)} cases); the best candidate in hindsight, every case "
        "mean "
        f"{np.mean(hindsight):.3f}"
    )


if __name__ == "__main__":
    main()
