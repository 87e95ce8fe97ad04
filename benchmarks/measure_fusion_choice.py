"""Judge the ensemble's fusion choice on many cases, not one: fit-split sizes, seeds, heads.

Reads the member boxes of a finished ``det-calib ensemble`` run (its ``members.parquet``: every
member's boxes on the fit and eval splits, both heads) and, for each case, takes a fit subset of
the fit split (``first N``: its first N images, as ``--limit N`` would; ``seed S``: N images drawn
with seed S) and the whole eval split. On each case it runs the ensemble's own head step
(:func:`det_calib.ensemble.ensemble_job.ensemble_head`: every member calibrated on its own, the
fusion chosen on the fit subset's folds, the fused score calibrated, every cell of the fusion
table scored on the eval split) and prints, per head, the eval split's kept-set ECE at the lowest
``--conf`` of:

- **chosen**: the calibrated ensemble under the fusion the rule chose (``auto``, the default);
- **old default**: ``fuse-then-calibrate`` with ``agree`` (the fixed default before the choice);
- **best cell**: the best of the cells in hindsight (a bound no rule that sees only the fit
  split can be expected to reach);
- **bound**: the best calibrated member's kept-set ECE and the upper end of its 95% interval
  (the issue's "Done when" compares the ensemble with it);
- **members' mean**: the mean of the calibrated members' kept-set ECEs (the typical member: the
  best of three, picked on the eval split itself, is a lucky draw as often as a better model);
- **floor**: the sampling floor of the chosen ensemble's kept set (the ECE a perfectly calibrated
  ensemble would score on its kept boxes, mean over label draws): where it is above the bound, a
  perfectly calibrated ensemble would be expected to miss it;

and the mAP50-95 of the chosen fusion against the best member's. The summary counts the cases
where the chosen fusion meets the bound, and where the old default did, and where it is at or below
the members' mean. ``--swap`` exchanges the fit and eval splits (the other direction of the same
two splits: a bias between them shows as opposite signs).

Run from the repository root::

    det-calib ensemble --out runs/ens                       # once (the demo ensemble)
    python3 benchmarks/measure_fusion_choice.py runs/ens --sizes 128 400 --seeds 1 2
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import polars as pl


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="an ensemble run folder (det-calib ensemble --out RUN)")
    ap.add_argument(
        "--sizes", type=int, nargs="+", default=[128, 400], help="fit-subset sizes (images)"
    )
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="*",
        default=[1, 2],
        help="random subsets of each size (besides the first N)",
    )
    ap.add_argument("--n-boot", type=int, default=300, help="bootstrap resamples of the intervals")
    ap.add_argument("--swap", action="store_true", help="exchange the run's fit and eval splits")
    ap.add_argument(
        "--z-simpler",
        type=float,
        default=None,
        help="the rule's margin for a simpler fusion, in "
        "paired standard errors (default the rule's own)",
    )
    args = ap.parse_args()
    logging.disable(logging.INFO)
    if args.z_simpler is not None:
        from det_calib.ensemble import fusion_choice

        fusion_choice.Z_SIMPLER = args.z_simpler

    from det_calib.data.box_table import CAPTURE_COLUMNS, read_boxes
    from det_calib.data.ground_truth import load_data_yaml
    from det_calib.ensemble.ensemble_job import FusionSettings, ensemble_head
    from det_calib.job.inputs import Inputs, load_splits
    from det_calib.job.settings import Settings
    from det_calib.record.run_result import RunResult

    result = RunResult.read(args.run / "calibration.json")
    rec = result.sections.get("ensemble")
    st = result.settings
    fit_name, eval_name = (
        (st.eval_split, st.fit_split) if args.swap else (st.fit_split, st.eval_split)
    )
    s = Settings(
        n_boot=args.n_boot,
        progress=False,
        report=False,
        fit_split=fit_name,
        eval_split=eval_name,
        conf=tuple(st.conf_thresholds),
    )
    ds = load_data_yaml(result.data)
    fit, ev = load_splits(ds, s)
    fz = rec.fusion
    fs = FusionSettings(fusion_iou=fz.iou, fusion_skip=fz.skip, weight=tuple(fz.weights))
    mb = read_boxes(args.run / "members.parquet", matched=False)
    names = [m.name for m in rec.members]
    inputs = Inputs(
        model=Path(rec.members[0].path),
        data=Path(result.data),
        yolo=None,
        ds=ds,
        heads=list(result.heads),
        imgsz=max(rec.members[0].imgsz),
    )
    cases = []
    for n in args.sizes:
        n = min(n, len(fit.images))
        cases.append((f"first {n}", np.arange(n)))
        for seed in args.seeds if n < len(fit.images) else []:
            cases.append(
                (
                    f"{n} seed {seed}",
                    np.sort(np.random.default_rng(seed).choice(len(fit.images), n, replace=False)),
                )
            )
    rows = []
    print(
        "| case | head | chosen (order, rule) | chosen ECE | old default ECE | best cell "
        "(hindsight) | best "
        "member ECE [upper] | members' mean | floor | mAP50-95 chosen vs best member | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, ids in cases:
        sub = fit.subset(ids)
        sub_names = np.array(sub.image_names(), dtype=object)
        remap = np.full(len(fit.images), -1, dtype=np.int64)
        remap[ids] = np.arange(len(ids))
        for h in result.heads:
            captured = []
            for i in range(len(names)):
                one = mb.filter((pl.col("member") == i) & (pl.col("head") == h)).select(
                    CAPTURE_COLUMNS
                )
                f = one.filter(
                    (pl.col("split") == fit.name) & pl.col("image_id").is_in(ids.tolist())
                )
                f = f.with_columns(
                    pl.Series("image_id", remap[f["image_id"].to_numpy()]),
                    pl.Series("image", sub_names[remap[f["image_id"].to_numpy()]].tolist()),
                )
                captured.append([f, one.filter(pl.col("split") == ev.name)])
            t0 = time.perf_counter()
            out = ensemble_head(inputs, (sub, ev), h, names, captured, s, fs)
            sec = time.perf_counter() - t0
            eh = out.record
            chosen = eh.ensemble.operating_after[0].ece
            cells = {(r.order, r.score): r for r in eh.table}
            old = cells[("fuse-then-calibrate", "agree")].kept_ece_calibrated
            best_cell = min(
                eh.table,
                key=lambda r: (
                    r.kept_ece_calibrated if r.kept_ece_calibrated is not None else np.inf
                ),
            )
            bm = min(
                eh.members,
                key=lambda m: (
                    m.operating_after[0].ece if m.operating_after[0].ece is not None else np.inf
                ),
            )
            upper = bm.operating_after[0].ece_ci[1] if bm.operating_after[0].ece_ci else None
            best_map = max(m.map50_95 or 0 for m in eh.members)
            mean_member = float(np.mean([m.operating_after[0].ece for m in eh.members]))
            floor = out.result.eval.operating_after[0].ece_floor
            rows.append(
                {
                    "case": label,
                    "head": h,
                    "chosen": chosen,
                    "old": old,
                    "upper": upper,
                    "mean_member": mean_member,
                    "floor": floor,
                    "map": eh.ensemble.map50_95,
                    "best_map": best_map,
                }
            )
            print(
                f"| {label} | `{h}` | {eh.order}, {eh.score} | {_f(chosen)} | {_f(old)} | "
                f"{_f(best_cell.kept_ece_calibrated)} ({best_cell.order}, {best_cell.score}) | "
                f"{_f(bm.operating_after[0].ece)} [{_f(upper)}] | {_f(mean_member)} | {_f(floor)} "
                "| "
                f"{_f(eh.ensemble.map50_95)} vs {_f(best_map)} | {sec:.0f} |",
                flush=True,
            )
    df = pl.DataFrame(rows)
    ok = lambda col: int(((df[col] <= df["upper"]) & df["upper"].is_not_null()).sum())  # noqa: E731
    print(
        f"\ncases: {df.height}; chosen fusion at or below the best calibrated member's upper "
        f"bound: {ok('chosen')}; "
        f"old default (fuse-then-calibrate, agree): {ok('old')}"
    )
    below = int((df["chosen"] <= df["mean_member"]).sum())
    over = int(((df["floor"] > df["upper"]) & df["upper"].is_not_null()).sum())
    print(
        f"chosen at or below the members' mean: {below}; ensemble's floor above the bound (a "
        "perfectly calibrated "
        f"ensemble expected to miss it): {over}"
    )
    print(
        f"mean kept-set ECE: chosen {df['chosen'].mean():.4f}, old default {df['old'].mean():.4f}, "
        "members' mean "
        f"{df['mean_member'].mean():.4f}, floor {df['floor'].mean():.4f}; chosen / old "
        f"largest {(df['chosen'] / df['old']).max():.2f}"
    )
    print(
        "mAP50-95 of the chosen fusion >= the best member's: "
        f"{int((df['map'] >= df['best_map']).sum())} of "
        f"{df.height}"
    )


if __name__ == "__main__":
    main()
