"""Measure every calibrator on the embedded demo: fit on ``calib``, evaluate on ``test``.

Stage 1 (``--capture``) runs the demo detector over both splits, both heads, matches the boxes
at IoU 0.5 and saves them with the ground truth under ``--cache`` (Parquet), so the slow part
runs once; ``--run DIR`` reads the boxes of a finished ``det-calib calibrate`` run instead (its
``boxes.parquet``, ground truth from its ``data.yaml``). Stage 2 (default) fits every method
(each at each ``--fit-floors`` value) and ``auto`` on the ``calib`` boxes and prints, on
``test``: ECE (15 bins) of the boxes kept at conf 0.25 with a bias-corrected bootstrap
interval, LaECE_0 at 0.25 (reference conventions, 25 bins), all-box ECE, all-box NLL, and the
kept-set ECE of the worst raw class.

``--limits`` adds what the eval split itself allows, per head:

- the sampling floor of the kept-set ECE (labels drawn from the calibrated confidences: a
  perfectly calibrated detector, :func:`det_calib.metrics.operating_point.kept_ece_floor`);
- each family fitted on the ``test`` boxes themselves (in-sample, so optimistic): a kept-set ECE
  that a family cannot reach even fitted on the split it is scored on is out of its reach;
- the worst raw class on both splits (accuracy and mean conf of its kept boxes) and a Platt map
  fitted on that class's ``calib`` boxes vs on its ``test`` boxes: a difference between the two
  splits that no map fitted on ``calib`` can see.

Run from the repository root::

    python3 benchmarks/measure_calibrators.py --capture   # once, 3-10 min on CPU
    python3 benchmarks/measure_calibrators.py --limits
    python3 benchmarks/measure_calibrators.py --run det_calib_out --limits   # from a finished run
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import polars as pl


def capture_all(cache: Path) -> None:
    from det_calib import demo
    from det_calib.capture.predictor import capture, load_detector
    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.matching.one_to_one import match_boxes

    cache.mkdir(parents=True, exist_ok=True)
    yolo = load_detector(demo.demo_model())
    ds = load_data_yaml(demo.demo_data_yaml())
    for name in ("calib", "test"):
        sp = load_split(ds, name)
        sp.gt.write_parquet(cache / f"gt_{name}.parquet")
        for head in ("nms", "e2e"):
            t0 = time.time()
            raw = capture(
                yolo, sp.images, head=head, split=name, image_names=sp.image_names(), progress=False
            )
            boxes = match_boxes(raw, sp.gt, iou=0.5, loc_iou=0.1)
            boxes.write_parquet(cache / f"boxes_{name}_{head}.parquet")
            print(f"{name} {head}: {boxes.height} boxes in {time.time() - t0:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--capture", action="store_true", help="capture and match the boxes (slow) and exit"
    )
    ap.add_argument("--cache", type=Path, default=Path("/tmp/det_calib_measure"))
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--criterion", choices=("nll", "ece"), default="nll")
    ap.add_argument(
        "--fit-floors", default="0,0.125", help="fit floors of each method, comma-separated"
    )
    ap.add_argument(
        "--run", type=Path, help="read the boxes of this finished calibrate run instead of --cache"
    )
    ap.add_argument(
        "--limits", action="store_true", help="also print what the eval split itself allows"
    )
    args = ap.parse_args()
    args.floors = tuple(float(v) for v in args.fit_floors.split(","))
    if args.capture:
        capture_all(args.cache)
        return
    run(args)


def _fit(method: str, fb: pl.DataFrame, *, min_conf: float, criterion: str, floor: float = 0.0):
    from det_calib.selection.cross_validation import fit_calibrator, select_calibrator

    z, y, k, g = (fb[c].to_numpy() for c in ("logit", "correct", "cls", "image_id"))
    if method == "auto":
        sel = select_calibrator(z, y, classes=k, groups=g, min_conf=min_conf, criterion=criterion)
        return sel.calibrator, sel
    return fit_calibrator(method, z, y, classes=k, groups=g, fit_min_conf=floor), None


def _proba(cal, z: np.ndarray, k: np.ndarray) -> np.ndarray:
    try:
        return cal.predict_proba(z, classes=k)
    except TypeError:
        return cal.predict_proba(z)


def load_boxes(args, split: str, head: str) -> pl.DataFrame:
    """The matched boxes of one split and head, from ``--run`` or the ``--capture`` cache."""
    if args.run is None:
        return pl.read_parquet(args.cache / f"boxes_{split}_{head}.parquet")
    b = pl.read_parquet(args.run / "boxes.parquet")
    return b.filter((pl.col("split") == split) & (pl.col("head") == head))


def load_gt(args, split: str) -> pl.DataFrame:
    if args.run is None:
        return pl.read_parquet(args.cache / f"gt_{split}.parquet")
    import json

    from det_calib.data.ground_truth import load_data_yaml, load_split

    data = json.loads((args.run / "calibration.json").read_text())["data"]
    return load_split(load_data_yaml(data), split).gt


def limits(fb: pl.DataFrame, eb: pl.DataFrame, worst: int, args) -> None:
    """What the eval split itself allows (see the module docstring)."""
    from det_calib.metrics.operating_point import kept_ece, kept_ece_floor
    from det_calib.numeric import sigmoid
    from det_calib.selection.cross_validation import fit_calibrator

    ze, ye, ke = (eb[c].to_numpy() for c in ("logit", "correct", "cls"))
    print(
        f"-- limits: kept-set ECE at {args.conf:g} on test; sampling floor = a perfectly "
        "calibrated detector "
        "on the same kept boxes (mean [95% range] of 200 draws)"
    )
    print(
        f"{'method @ floor':<22} {'fit on calib':>12} {'its floor':>22} "
        f"{'fit on test (in-sample)':>24}"
    )
    for method in ("temperature", "platt", "spline", "isotonic"):
        for floor in args.floors:
            row = []
            for src in (fb, eb):
                cal = fit_calibrator(
                    method,
                    src["logit"].to_numpy(),
                    src["correct"].to_numpy(),
                    groups=src["image_id"].to_numpy(),
                    fit_min_conf=floor,
                )
                row.append(cal.predict_proba(ze))
            f = kept_ece_floor(row[0], threshold=args.conf)
            print(
                f"{f'{method} @ {floor:g}':<22} {kept_ece(row[0], ye, threshold=args.conf):>12.4f} "
                f"{f'{f.mean:.4f} [{f.low:.4f}, {f.high:.4f}]':>22} "
                f"{kept_ece(row[1], ye, threshold=args.conf):>24.4f}"
            )
    raw = kept_ece_floor(sigmoid(ze), threshold=args.conf)
    print(
        f"{'none (raw)':<22} {kept_ece(sigmoid(ze), ye, threshold=args.conf):>12.4f} "
        f"{f'{raw.mean:.4f} [{raw.low:.4f}, {raw.high:.4f}]':>22}"
    )
    print(
        f"-- worst raw class {worst}: its boxes kept at {args.conf:g} (raw conf), and a Platt map "
        "fitted on "
        "that class alone, scored on its test boxes"
    )
    m = ke == worst
    raw_w = kept_ece(sigmoid(ze[m]), ye[m], threshold=args.conf)
    for name, src in (("calib", fb), ("test", eb)):
        s = src.filter(pl.col("cls") == worst)
        kept = s.filter(pl.col("logit") > float(np.log(args.conf / (1 - args.conf))))
        cal = fit_calibrator("platt", s["logit"].to_numpy(), s["correct"].to_numpy())
        e = kept_ece(cal.predict_proba(ze[m]), ye[m], threshold=args.conf)
        print(
            f"   {name:<6} {kept.height:>5} kept, accuracy {kept['correct'].mean():.3f} at mean "
            "conf "
            f"{kept['conf'].mean():.3f}; Platt fitted on {name}: test kept-set ECE {raw_w:.4f} -> "
            f"{e:.4f}"
        )


def run(args) -> None:
    from det_calib.calibrators.registry import methods as registered
    from det_calib.metrics.calibration import bootstrap_ci, ece, nll
    from det_calib.metrics.operating_point import kept_ece, laece0

    methods = [(m, f) for m in registered() for f in ((0.0,) if m == "none" else args.floors)] + [
        ("auto", 0.0)
    ]
    gt = load_gt(args, "test")
    gxy = gt.select("x1", "y1", "x2", "y2").to_numpy()
    for head in ("e2e", "nms"):
        fb = load_boxes(args, "calib", head).filter(~pl.col("ignore"))
        eb = load_boxes(args, "test", head)
        eb_use = eb.filter(~pl.col("ignore"))
        ze, ye, ke, ie = (eb_use[c].to_numpy() for c in ("logit", "correct", "cls", "image_id"))
        raw_kept = kept_ece(1 / (1 + np.exp(-ze)), ye, threshold=args.conf)
        per_cls_raw = {
            int(c): kept_ece(1 / (1 + np.exp(-ze[ke == c])), ye[ke == c], threshold=args.conf)
            for c in np.unique(ke)
        }
        worst = max(per_cls_raw, key=lambda c: per_cls_raw[c])
        print(
            f"\n== head {head}: fit {fb.height} calib boxes, eval {eb_use.height} test boxes; "
            f"worst raw class {worst} (kept-set ECE {per_cls_raw[worst]:.4f}) =="
        )
        print(
            f"{'method @ fit floor':<22} {f'kept ECE@{args.conf:.2f} [95% BC]':<30} "
            f"{f'LaECE0@{args.conf:.2f}':>11} "
            f"{'all ECE':>8} {'all NLL':>8} {'worst cls':>9} {'fit s':>6}  chosen/params"
        )
        for method, floor in methods:
            t0 = time.time()
            cal, sel = _fit(method, fb, min_conf=args.conf, criterion=args.criterion, floor=floor)
            dt = time.time() - t0
            pe = _proba(cal, ze, ke)
            ke_ = kept_ece(pe, ye, threshold=args.conf)

            def stat(p, y, weights=None):
                return kept_ece(p, y, threshold=args.conf, weights=weights)

            lo, hi = bootstrap_ci(stat, ie, pe, ye, n_boot=args.n_boot, seed=0)
            # LaECE_0 on all test boxes (crowd handled by the matcher)
            zall = eb["logit"].to_numpy()
            kall = eb["cls"].to_numpy()
            pall = _proba(cal, zall, kall)
            la = laece0(
                eb["image_id"].to_numpy(),
                eb.select("x1", "y1", "x2", "y2").to_numpy(),
                kall,
                pall,
                gt["image_id"].to_numpy(),
                gxy,
                gt["cls"].to_numpy(),
                gt["crowd"].to_numpy() if "crowd" in gt.columns else None,
                threshold=args.conf,
            )
            wc = kept_ece(pe[ke == worst], ye[ke == worst], threshold=args.conf)
            extra = ""
            if sel is not None:
                extra = sel.reason
            elif hasattr(cal, "a_") and np.ndim(cal.a_) == 0:
                extra = f"a={cal.a_:.3f} b={cal.b_:.3f}"
            elif hasattr(cal, "temperature_"):
                extra = f"T={cal.temperature_:.3f}"
            elif hasattr(cal, "shrinkage_"):
                extra = f"lam={cal.shrinkage_:g}"
            elif hasattr(cal, "blend_"):
                extra = f"m={cal.blend_:g}"
            name = method if method in ("none", "auto") else f"{method} @ {floor:g}"
            print(
                f"{name:<22} {ke_:.4f} [{lo:.4f}, {hi:.4f}]{'':<8} {la:>11.4f} {ece(pe, ye):>8.4f} "
                f"{nll(pe, ye):>8.4f} {wc:>9.4f} {dt:>6.1f}  {extra}",
                flush=True,
            )
        print(f"(raw kept-set ECE {raw_kept:.4f})")
        if args.limits:
            limits(fb, eb_use, worst, args)


if __name__ == "__main__":
    main()
