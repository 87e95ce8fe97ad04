"""Time det_calib's vectorised weighted boxes fusion against ensemble-boxes on the same boxes.

Inputs: the member boxes of an ensemble run (``--run RUN``: its ``members.parquet``, every
member on both splits, one head), or a seeded synthetic workload shaped like it (``--images``
images, ``--members`` members, ``--dets`` boxes each at conf 0.001: ~40% jittered copies of
~10 objects per image, 8 classes). ensemble-boxes is called image by image with boxes
normalised to [0, 1], as its API expects; det_calib fuses every image in one call. Both fused
outputs are compared (scores and boxes to 1e-6) and both costs printed side by side, median of
``--repeats``.

Usage:
    python3 benchmarks/bench_fusion.py [--run det_calib_ensemble] [--head nms] [--rule avg]
    python3 benchmarks/bench_fusion.py --images 400 --members 3 --dets 300
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np

from det_calib.ensemble.fusion import ENSEMBLE_BOXES_CONF_TYPE, weighted_boxes_fusion


def synthetic(n_images: int, n_members: int, dets: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_images):
        n_obj = max(1, rng.poisson(10))
        xy = rng.uniform(0, 0.85, (n_obj, 2))
        obj = np.hstack([xy, xy + rng.uniform(0.02, 0.15, (n_obj, 2))])
        obj_cls = rng.integers(0, 8, n_obj)
        for m in range(n_members):
            near = rng.random(dets) < 0.4
            k = rng.integers(0, n_obj, dets)
            xy = rng.uniform(0, 0.9, (dets, 2))
            b = np.hstack([xy, xy + rng.uniform(0.01, 0.1, (dets, 2))])
            b[near] = obj[k[near]] + rng.normal(0, 0.01, (near.sum(), 4))
            b = np.clip(b, 0, 1)
            b[:, 2:] = np.maximum(b[:, 2:], b[:, :2] + 1e-3)
            cls = np.where(near, obj_cls[k], rng.integers(0, 8, dets))
            s = np.where(near, rng.beta(4, 2, dets), rng.beta(1, 20, dets)) * 0.999 + 0.001
            rows.append((np.full(dets, i), np.full(dets, m), b, s, cls))
    img, mem, b, s, c = (np.concatenate([r[j] for r in rows]) for j in range(5))
    return img, mem, b, s, c, n_members


def from_run(run: str, head: str):
    import polars as pl

    df = pl.read_parquet(f"{run}/members.parquet").filter(pl.col("head") == head)
    key = df.select(pl.struct("split", "image_id").rank("dense").alias("k"))["k"].to_numpy() - 1
    wh = df.select("img_w", "img_h").to_numpy().astype(np.float64)
    scale = np.hstack([wh, wh])
    b = df.select("x1", "y1", "x2", "y2").to_numpy() / scale
    b = np.clip(b, 0, 1)
    mem = df["member"].to_numpy().astype(np.int64)
    return key, mem, b, df["conf"].to_numpy(), df["cls"].to_numpy(), int(mem.max()) + 1


def run_ours(img, mem, b, s, c, m, rule):
    f = weighted_boxes_fusion(b, s, c, groups=img, members=mem, n_members=m)
    return f.group, f.boxes, f.scores(rule), f.label


def run_reference(img, mem, b, s, c, m, rule):
    from ensemble_boxes import weighted_boxes_fusion as wbf

    order = np.argsort(img, kind="stable")
    img, mem, b, s, c = img[order], mem[order], b[order], s[order], c[order]
    bounds = np.searchsorted(img, np.arange(img.max() + 2))
    out = []
    for i in range(len(bounds) - 1):
        lo, hi = bounds[i], bounds[i + 1]
        if lo == hi:
            continue
        mm = mem[lo:hi]
        parts = [np.flatnonzero(mm == k) + lo for k in range(m)]
        rb, rs, rl = wbf(
            [b[p] for p in parts],
            [s[p] for p in parts],
            [c[p] for p in parts],
            iou_thr=0.55,
            conf_type=ENSEMBLE_BOXES_CONF_TYPE[rule],
        )
        out.append((np.full(len(rs), i), rb, rs, rl))
    return tuple(np.concatenate([o[j] for o in out]) for j in range(4))


def _canon(g, bx, sc, lab):
    o = np.lexsort((bx[:, 1], bx[:, 0], lab, -sc, g))
    return g[o], bx[o], sc[o], lab[o].astype(np.int64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--run", help="an ensemble run folder (its members.parquet); default: synthetic boxes"
    )
    ap.add_argument("--head", default="nms")
    ap.add_argument("--rule", default="avg", choices=list(ENSEMBLE_BOXES_CONF_TYPE))
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--dets", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--doc", metavar="NAME", help="also write the result to docs/generated/NAME.md")
    args = ap.parse_args()
    data = (
        from_run(args.run, args.head)
        if args.run
        else synthetic(args.images, args.members, args.dets)
    )
    n_img = len(np.unique(data[0]))
    print(f"{len(data[3]):,} member boxes, {data[5]} members, {n_img} images, rule {args.rule}")
    times = {}
    got = {}
    for name, fn in (("det_calib (vectorised)", run_ours), ("ensemble-boxes 1.0.9", run_reference)):
        ts = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            with warnings.catch_warnings():  # ensemble-boxes warns once per zero-area box it skips
                warnings.simplefilter("ignore")
                got[name] = fn(*data, args.rule)
            ts.append(time.perf_counter() - t)
        times[name] = statistics.median(ts)
    a, r = (_canon(*got[k]) for k in got)
    same = len(a[2]) == len(r[2]) and bool(
        (a[0] == r[0]).all()
        and np.allclose(a[2], r[2], atol=1e-6)
        and np.allclose(a[1], r[1], atol=1e-6)
        and (a[3] == r[3]).all()
    )
    lines = [
        f"{len(data[3]):,} member boxes, {data[5]} members, {n_img} images, rule {args.rule}",
        f"fused boxes: {len(a[2]):,} (det_calib) vs {len(r[2]):,} (ensemble-boxes); equal to 1e-6: "
        f"{same}",
    ]
    print(lines[-1])
    base = times["ensemble-boxes 1.0.9"]
    lines.append(f"{'':24} {'seconds':>9} {'ms / image':>11} {'vs ensemble-boxes':>18}")
    for k, t in times.items():
        lines.append(f"{k:24} {t:9.3f} {1000 * t / n_img:11.2f} {t / base:17.3f}x")
    print("\n".join(lines[2:]))
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table(
            args.doc,
            "```\n" + "\n".join(lines) + "\n```",
            note=f"Medians of {args.repeats} runs; the ratios are what to read.",
        )


if __name__ == "__main__":
    main()
