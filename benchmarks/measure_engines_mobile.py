"""Calibrate the demo detector as it runs on phones and edge boards: LiteRT FP32, LiteRT INT8, NCNN.

Exports the demo detector with Ultralytics' own ``export`` (``format="litert"``; ``format="litert",
int8=True, data=..., fraction=...``; ``format="ncnn"``), runs ``calibrate`` on the ``.pt`` and on
each export (head ``nms``, the one the exports carry; the default ``--method auto``), compares the
four runs, and checks, per export:

- captured scores against Ultralytics ``predict`` on the export (first ``--parity`` eval images);
- the equivalent raw threshold: plain ``predict(conf=t)`` on the raw export keeps exactly the boxes
  whose calibrated score is above 0.25, image by image over the whole eval split;
- the calibrated engine: the run's calibrator folded into the ``.pt`` and exported again with the
  export's own arguments (``det-calib apply --model EXPORT --source demo.pt``), its kept-set ECE at
  0.25 as plain Ultralytics scores it (a ``--method temperature`` run on it reads its raw figure)
  against the run's calibrated figure, and its scores against the calibrator applied to the raw
  engine's scores, box by box.

Writes the table to ``docs/generated/engines_mobile.md`` (``--doc``) and prints it.

    python3 benchmarks/measure_engines_mobile.py                      # full demo splits (about 15 min on 2 cores)
    python3 benchmarks/measure_engines_mobile.py --limit 60 --doc ''  # quick look, no doc written
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("YOLO_VERBOSE", "False")
os.environ.setdefault("YOLO_OFFLINE", "1")
# OpenMP workers that sleep instead of spinning while they wait (read when the OpenMP runtime loads, so before
# torch): on a shared machine NCNN's predict took 3.4 s per image without it, 0.035 s with it
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parent))

ENGINES = ("pt", "litert_fp32", "litert_int8", "ncnn")
EXPORTS = {
    "litert_fp32": ("demo.tflite", {"format": "litert"}),
    "litert_int8": ("demo_int8.tflite", {"format": "litert", "int8": True}),
    "ncnn": ("demo_ncnn_model", {"format": "ncnn"}),
}
CALIBRATED = {
    "litert_fp32": "calibrated.tflite",
    "litert_int8": "calibrated_int8.tflite",
    "ncnn": "calibrated_ncnn_model",
}


def export_demo(folder: Path, data: Path, fraction: float) -> dict[str, Path]:
    """The demo .pt and its three exports in ``folder`` (an export already there is reused)."""
    from ultralytics import YOLO

    from det_calib.demo import demo_model

    folder.mkdir(parents=True, exist_ok=True)
    pt = folder / "demo.pt"
    if not pt.exists():
        shutil.copy(demo_model(), pt)
    out = {"pt": pt}
    for name, (file, kw) in EXPORTS.items():
        path = folder / file
        if not path.exists():
            t0 = time.time()
            extra = {"data": str(data), "fraction": fraction} if kw.get("int8") else {}
            made = Path(YOLO(str(pt)).export(**kw, **extra))
            assert made == path, (made, path)
            print(f"exported {name} in {time.time() - t0:.0f} s")
        out[name] = path
    return out


def eval_images(run: Path) -> list[Path]:
    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.record.run_result import RunResult

    r = RunResult.read(run / "calibration.json")
    return list(
        load_split(
            load_data_yaml(r.data), r.settings.eval_split, limit=r.head("nms").eval.images
        ).images
    )


def threshold_check(
    export: Path, run: Path, raw_conf: float, conf: float = 0.25
) -> tuple[int, int, int]:
    """Plain ``predict(conf=raw_conf)`` on the raw export against the run's calibrated set at ``conf``:
    (images, boxes kept by predict, images whose kept confs differ from the calibrated set's)."""
    import polars as pl
    from ultralytics import YOLO

    from det_calib.record.run_result import RunResult

    split = RunResult.read(run / "calibration.json").settings.eval_split
    ev = pl.read_parquet(run / "boxes.parquet").filter(
        (pl.col("head") == "nms") & (pl.col("split") == split)
    )
    y = YOLO(str(export), task="detect")
    images = eval_images(run)
    kept = bad = 0
    for i, im in enumerate(images):
        mine = ev.filter((pl.col("image_id") == i) & (pl.col("calibrated") > conf))
        want = np.sort(mine["conf"].to_numpy())
        got = np.sort(y.predict(str(im), conf=raw_conf, verbose=False)[0].boxes.conf.numpy())
        kept += got.size
        bad += int(got.size != want.size or not np.array_equal(got, want.astype(np.float32)))
    return len(images), kept, bad


def calibrated_vs_map(raw: Path, cal: Path, run: Path, n_images: int) -> tuple[float, int]:
    """Largest |calibrated engine's score - the run's calibrator on the raw engine's score| over boxes found
    in both (same class, box within 1 px), on the first ``n_images`` eval images; and how many boxes."""
    from ultralytics import YOLO

    from det_calib.deploy.calibrated_export import calibrated_probs
    from det_calib.deploy.posthoc import load_calibrators

    calib = load_calibrators(run / "calibration.json")["nms"]
    yr, yc = YOLO(str(raw), task="detect"), YOLO(str(cal), task="detect")
    worst, n = 0.0, 0
    for im in eval_images(run)[:n_images]:
        r = yr.predict(str(im), conf=0.001, verbose=False)[0].boxes
        c = yc.predict(str(im), conf=0.001, verbose=False)[0].boxes
        if not len(r) or not len(c):
            continue
        want = calibrated_probs(calib, r.conf.numpy(), r.cls.numpy().astype(int), 8)
        d = np.abs(c.xyxy.numpy()[:, None] - r.xyxy.numpy()[None]).max(-1)
        d[c.cls.numpy()[:, None] != r.cls.numpy()[None]] = np.inf
        ci, ri = np.nonzero(d < 1.0)
        if ci.size:
            worst = max(worst, float(np.abs(c.conf.numpy()[ci] - want[ri]).max()))
            n += ci.size
    return worst, n


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/det_calib_engines_mobile"))
    ap.add_argument("--limit", type=int, help="first N images of each split")
    ap.add_argument(
        "--fraction", type=float, default=0.2, help="share of the calib split for INT8 statistics"
    )
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument(
        "--parity",
        type=int,
        default=50,
        help="eval images for the predict and calibrated-engine checks",
    )
    ap.add_argument(
        "--doc", default="docs/generated/engines_mobile.md", help="table written here ('' for none)"
    )
    a = ap.parse_args()

    from measure_engines import predict_parity

    from det_calib.demo import demo_data_yaml
    from det_calib.deploy import engine_record
    from det_calib.deploy.reexport import reexport_calibrated
    from det_calib.io import atomic_path
    from det_calib.pipeline.calibrate_job import calibrate
    from det_calib.record.run_folder import load_run
    from det_calib.report import compare_runs
    from det_calib.report.engines_section import engine_figures

    data = Path(demo_data_yaml())
    models = export_demo(a.out / "models", data, a.fraction)
    runs, seconds = {}, {}
    for name in ENGINES:
        t0 = time.time()
        runs[name] = a.out / f"run_{name}"
        calibrate(
            models[name],
            data,
            out=runs[name],
            head="nms",
            limit=a.limit,
            n_boot=a.n_boot,
            progress=False,
            run_val=name == "pt",
            report=False,
        )
        seconds[name] = time.time() - t0
        print(f"calibrated {name} in {seconds[name]:.0f} s")
    compare_runs(*(str(r) for r in runs.values()), out_dir=a.out / "compare", labels=list(runs))

    rows = []
    for name in ENGINES:
        run = load_run(runs[name])
        f = next(f for f in engine_figures(run, "nms") if f.conf == 0.25)
        rec = engine_record(runs[name]) if name != "pt" else None
        rows.append(
            dict(
                name=name,
                engine=f.engine,
                method=run.head("nms").calibrator.method,
                kept=f.kept_raw,
                kept_cal=f.kept_calibrated,
                mean=f.mean_raw_conf,
                raw=f.ece_raw,
                cal=f.ece_calibrated,
                t=f.raw_conf,
                step=rec.score_step if rec else None,
                s=seconds[name],
            )
        )

    checks = []
    for name in EXPORTS:
        row = next(r for r in rows if r["name"] == name)
        worst, n = predict_parity(models[name], runs[name], a.parity)
        n_img, kept, bad = threshold_check(models[name], runs[name], row["t"])
        t0 = time.time()
        cal_path = a.out / CALIBRATED[name]
        reexport_calibrated(models[name], models["pt"], runs[name] / "calibration.json", cal_path)
        t_export = time.time() - t0
        check_run = a.out / f"check_{name}"
        calibrate(
            cal_path,
            data,
            out=check_run,
            head="nms",
            limit=a.limit,
            n_boot=a.n_boot,
            progress=False,
            method="temperature",
            report=False,
        )
        plain = next(f for f in engine_figures(load_run(check_run), "nms") if f.conf == 0.25)
        dmap, nmap = calibrated_vs_map(models[name], cal_path, runs[name], a.parity)
        checks.append(
            dict(
                engine=row["engine"],
                parity=worst,
                n_parity=n,
                n_img=n_img,
                kept=kept,
                bad=bad,
                cal_kept=plain.kept_raw,
                cal_ece=plain.ece_raw,
                run_ece=row["cal"],
                run_kept=row["kept_cal"],
                dmap=dmap,
                nmap=nmap,
                t_export=t_export,
            )
        )

    split = (
        "the full calib and test splits"
        if a.limit is None
        else f"the first {a.limit} images of each split"
    )
    lines = [
        "<!-- written by "
        f"benchmarks/measure_engines_mobile.py{'' if a.limit is None else f' --limit {a.limit}'}"
        " -->",
        f"Demo detector, head `nms`, fit `calib`, eval `test` ({split}); INT8 statistics on "
        f"{a.fraction:.0%} of `calib`; `--method auto`. Kept-set ECE at conf 0.25 (15 bins, IoU "
        "0.5).",
        "",
        "| engine | chosen | kept at 0.25 raw | mean raw conf of kept | kept-set ECE raw → "
        "calibrated | ratio "
        "| equivalent raw threshold | score step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        step = "float" if r["step"] is None else f"{r['step']:.6g}"
        t = "per class" if r["t"] is None else f"{r['t']:.6f}"
        lines.append(
            f"| {r['engine']} | {r['method']} | {r['kept']:,} | {r['mean']:.3f} | {r['raw']:.4f} → "
            f"{r['cal']:.4f} | {r['cal'] / r['raw']:.3f} | {t} | {step} |"
        )
    lines += [
        "",
        "Checks of each export (Ultralytics `predict` on the export, no det_calib in the loop):",
        "",
        "| engine | captured conf vs `predict`, max diff | raw engine at its equivalent threshold: "
        "images "
        "whose kept set differs from the calibrated set | calibrated engine (re-exported): kept at "
        "0.25, "
        "kept-set ECE vs the run's calibrated | its scores vs the calibrator on the raw engine's, "
        "max diff "
        "| re-export (s) |",
        "|---|---|---|---|---|---|",
    ]
    for c in checks:
        lines.append(
            f"| {c['engine']} | {c['parity']:.2e} ({c['n_parity']} images) | {c['bad']} of "
            f"{c['n_img']} "
            f"({c['kept']:,} boxes kept) | {c['cal_kept']:,} vs {c['run_kept']:,}; "
            f"{c['cal_ece']:.4f} vs "
            f"{c['run_ece']:.4f} (diff {abs(c['cal_ece'] - c['run_ece']):.4f}) | {c['dmap']:.2e} "
            f"({c['nmap']:,} boxes, {a.parity} images) | {c['t_export']:.0f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if a.doc:
        doc = Path(a.doc)
        with atomic_path(doc) as tmp:
            Path(tmp).write_text(text, encoding="utf-8")
        print(f"wrote {doc}")
    print(f"compare: {a.out / 'compare' / 'compare.html'}")


if __name__ == "__main__":
    main()
