"""Measure every calibrator on the embedded demo: fit on ``calib``, evaluate on ``test``.

Stage 1 (``--capture``) runs the demo detector over both splits, both heads, matches the boxes
at IoU 0.5 and saves them with the ground truth under ``--cache`` (Parquet), so the slow part
runs once. Stage 2 (default) fits raw / temperature / platt / class-temperature / class-platt /
isotonic / class-isotonic / auto on the ``calib`` boxes and prints, on ``test``: ECE (15 bins)
of the boxes kept at conf 0.25 with a basic bootstrap interval, LaECE_0 at 0.25 (reference
conventions, 25 bins), all-box ECE, all-box NLL, and the kept-set ECE of the worst raw class.

Run from the repository root::

    python3 benchmarks/measure_calibrators.py --capture   # once, 3-10 min on CPU
    python3 benchmarks/measure_calibrators.py
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import polars as pl


def capture_all(cache: Path) -> None:
    from det_calib import demo
    from det_calib.capture import capture, load_detector
    from det_calib.data import load_data_yaml, load_split
    from det_calib.pipeline import match_boxes

    cache.mkdir(parents=True, exist_ok=True)
    yolo = load_detector(demo.demo_model())
    ds = load_data_yaml(demo.demo_data_yaml())
    for name in ("calib", "test"):
        sp = load_split(ds, name)
        sp.gt.write_parquet(cache / f"gt_{name}.parquet")
        for head in ("nms", "e2e"):
            t0 = time.time()
            raw = capture(yolo, sp.images, head=head, split=name, image_names=sp.image_names(), progress=False)
            boxes = match_boxes(raw, sp.gt, iou=0.5, loc_iou=0.1)
            boxes.write_parquet(cache / f"boxes_{name}_{head}.parquet")
            print(f"{name} {head}: {boxes.height} boxes in {time.time() - t0:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capture", action="store_true", help="capture and match the boxes (slow) and exit")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/det_calib_measure"))
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--criterion", choices=("nll", "ece"), default="nll")
    args = ap.parse_args()
    if args.capture:
        capture_all(args.cache)
        return
    run(args)


def _fit(method: str, fb: pl.DataFrame, *, min_conf: float, criterion: str):
    from det_calib.selection import make_calibrator, select_calibrator

    z, y, k, g = (fb[c].to_numpy() for c in ("logit", "correct", "cls", "image_id"))
    if method == "auto":
        sel = select_calibrator(z, y, classes=k, groups=g, min_conf=min_conf, criterion=criterion)
        return sel.calibrator, sel
    kw = {"classes": k, "groups": g} if method.startswith("class-") else {}
    return make_calibrator(method).fit(z, y, **kw), None


def run(args) -> None:
    from det_calib.metrics import bootstrap_ci, ece, nll
    from det_calib.operating import kept_ece, laece0

    methods = ["none", "temperature", "platt", "class-temperature", "class-platt", "isotonic", "class-isotonic", "auto"]
    gt = pl.read_parquet(args.cache / "gt_test.parquet")
    gxy = gt.select("x1", "y1", "x2", "y2").to_numpy()
    for head in ("e2e", "nms"):
        fb = pl.read_parquet(args.cache / f"boxes_calib_{head}.parquet").filter(~pl.col("ignore"))
        eb = pl.read_parquet(args.cache / f"boxes_test_{head}.parquet")
        eb_use = eb.filter(~pl.col("ignore"))
        ze, ye, ke, ie = (eb_use[c].to_numpy() for c in ("logit", "correct", "cls", "image_id"))
        raw_kept = kept_ece(1 / (1 + np.exp(-ze)), ye, threshold=args.conf)
        per_cls_raw = {
            int(c): kept_ece(1 / (1 + np.exp(-ze[ke == c])), ye[ke == c], threshold=args.conf) for c in np.unique(ke)
        }
        worst = max(per_cls_raw, key=lambda c: per_cls_raw[c])
        print(f"\n== head {head}: fit {fb.height} calib boxes, eval {eb_use.height} test boxes; "
              f"worst raw class {worst} (kept-set ECE {per_cls_raw[worst]:.4f}) ==")
        print(f"{'method':<18} {f'kept ECE@{args.conf:.2f} [95% BC]':<30} {f'LaECE0@{args.conf:.2f}':>11} "
              f"{'all ECE':>8} {'all NLL':>8} {'worst cls':>9} {'fit s':>6}  chosen/params")
        for method in methods:
            t0 = time.time()
            cal, sel = _fit(method, fb, min_conf=args.conf, criterion=args.criterion)
            dt = time.time() - t0
            kw = {"classes": ke} if method.startswith("class-") or method == "auto" else {}
            try:
                pe = cal.predict_proba(ze, **kw)
            except TypeError:
                pe = cal.predict_proba(ze)
            ke_ = kept_ece(pe, ye, threshold=args.conf)

            def stat(p, y, weights=None):
                return kept_ece(p, y, threshold=args.conf, weights=weights)

            lo, hi = bootstrap_ci(stat, ie, pe, ye, n_boot=args.n_boot, seed=0)
            # LaECE_0 on all test boxes (crowd handled by the matcher)
            zall = eb["logit"].to_numpy()
            kall = eb["cls"].to_numpy()
            try:
                pall = cal.predict_proba(zall, classes=kall)
            except TypeError:
                pall = cal.predict_proba(zall)
            la = laece0(eb["image_id"].to_numpy(), eb.select("x1", "y1", "x2", "y2").to_numpy(), kall, pall,
                        gt["image_id"].to_numpy(), gxy, gt["cls"].to_numpy(),
                        gt["crowd"].to_numpy() if "crowd" in gt.columns else None, threshold=args.conf)
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
            print(f"{method:<18} {ke_:.4f} [{lo:.4f}, {hi:.4f}]{'':<8} {la:>11.4f} {ece(pe, ye):>8.4f} "
                  f"{nll(pe, ye):>8.4f} {wc:>9.4f} {dt:>6.1f}  {extra}", flush=True)
        print(f"(raw kept-set ECE {raw_kept:.4f})")


if __name__ == "__main__":
    main()
