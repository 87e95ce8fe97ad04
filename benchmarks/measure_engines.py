"""Calibrate the demo detector as it is deployed: its .pt, its ONNX FP32 and its OpenVINO INT8 export.

Exports the demo detector with Ultralytics' own ``export`` (ONNX FP32; OpenVINO INT8 with NNCF
on ``--fraction`` of the calib split), runs ``calibrate`` on each (the head the exports carry,
``nms``), compares the three runs, writes the INT8 run's report next to the .pt's, and prints,
per engine, the boxes kept at conf 0.25, their mean raw conf, the kept-set ECE raw and
calibrated, the chosen calibrator and the equivalent raw threshold; then the three checks of
the exports: captured scores against Ultralytics ``predict`` on the export, the calibrated
export's scores against the calibrator applied to the engine's raw scores (the plain runtime,
no det_calib in the graph), and the equivalent threshold against the calibrated set.

    python3 benchmarks/measure_engines.py --out /tmp/engines            # full demo splits (minutes)
    python3 benchmarks/measure_engines.py --out /tmp/engines --limit 60  # quick look
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("YOLO_VERBOSE", "False")
os.environ.setdefault("YOLO_OFFLINE", "1")


def export_demo(folder: Path, data: Path, fraction: float) -> dict[str, Path]:
    """The demo detector's .pt, ONNX FP32 and OpenVINO INT8 export in ``folder``."""
    from ultralytics import YOLO

    from det_calib.demo import demo_model

    folder.mkdir(parents=True, exist_ok=True)
    pt = folder / "demo.pt"
    shutil.copy(demo_model(), pt)
    onnx = Path(YOLO(str(pt)).export(format="onnx"))
    t0 = time.time()
    int8 = Path(
        YOLO(str(pt)).export(format="openvino", int8=True, data=str(data), fraction=fraction)
    )
    print(f"exports: {onnx.name}, {int8.name} (INT8 export {time.time() - t0:.0f} s)")
    return {"pt": pt, "onnx": onnx, "int8": int8}


def predict_parity(export: Path, run: Path, n_images: int) -> tuple[float, int]:
    """Largest |captured conf - Ultralytics predict conf| on the first eval images of a run, and their number."""
    import polars as pl
    from ultralytics import YOLO

    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.record.run_result import RunResult

    r = RunResult.read(run / "calibration.json")
    sp = load_split(
        load_data_yaml(r.data),
        r.settings.eval_split,
        limit=min(n_images, r.head("nms").eval.images),
    )
    boxes = pl.read_parquet(run / "boxes.parquet").filter(pl.col("split") == r.settings.eval_split)
    y = YOLO(str(export), task="detect")
    worst = 0.0
    for i, im in enumerate(sp.images):
        got = np.sort(boxes.filter(pl.col("image_id") == i)["conf"].to_numpy())
        want = np.sort(
            y.predict(str(im), conf=r.settings.conf_floor, verbose=False)[0].boxes.conf.numpy()
        )
        assert got.size == want.size, (im, got.size, want.size)
        worst = max(worst, float(np.abs(got - want).max()) if got.size else 0.0)
    return worst, len(sp.images)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/det_calib_engines"))
    ap.add_argument("--limit", type=int, help="first N images of each split")
    ap.add_argument(
        "--fraction", type=float, default=0.2, help="share of the calib split for INT8 statistics"
    )
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument(
        "--doc", action="store_true", help="also write the table to docs/generated/engines.md"
    )
    a = ap.parse_args()

    from det_calib.demo import demo_data_yaml
    from det_calib.deploy import engine_record
    from det_calib.pipeline.calibrate_job import calibrate
    from det_calib.record.run_folder import load_run
    from det_calib.report import compare_runs, write_report
    from det_calib.report.engines_section import engine_figures

    data = Path(demo_data_yaml())
    models = export_demo(a.out / "models", data, a.fraction)
    runs = {}
    for name, m in models.items():
        t0 = time.time()
        calibrate(
            m,
            data,
            out=a.out / f"run_{name}",
            head="nms",
            limit=a.limit,
            n_boot=a.n_boot,
            progress=False,
            run_val=name == "pt",
        )
        runs[name] = a.out / f"run_{name}"
        print(f"calibrated {name} in {time.time() - t0:.0f} s")
    compare_runs(*(str(r) for r in runs.values()), out_dir=a.out / "compare", labels=list(runs))
    write_report(runs["int8"], out_dir=a.out / "report_int8", reference=runs["pt"])
    print(
        f"{'engine':<14} {'calibrator':<12} {'kept':>5} {'mean conf':>9} {'ECE raw':>8} "
        f"{'ECE cal':>8} "
        f"{'equivalent raw threshold':>24}"
    )
    table = [
        "| engine | chosen | kept at 0.25 raw | mean raw conf of kept | kept-set ECE raw → "
        "calibrated | "
        "equivalent raw threshold |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs.values():
        run = load_run(r)
        for f in engine_figures(run, "nms"):
            print(
                f"{f.engine:<14} {run.head('nms').calibrator.method:<12} {f.kept_raw:>5} "
                f"{f.mean_raw_conf:>9.3f} "
                f"{f.ece_raw:>8.4f} {f.ece_calibrated:>8.4f} {f.raw_conf!s:>24}"
            )
            table.append(
                f"| {f.engine} | {run.head('nms').calibrator.method} | {f.kept_raw:,} | "
                f"{f.mean_raw_conf:.3f} | {f.ece_raw:.4f} → {f.ece_calibrated:.4f} | "
                f"{'per class' if f.raw_conf is None else format(f.raw_conf, '.6f')} |"
            )
    if a.doc:
        from doc_table import write_doc_table

        write_doc_table(
            "engines",
            "\n".join(table),
            note="Head `nms`, fit `calib`, eval `test`, `--method auto`.",
        )
    for name in ("onnx", "int8"):
        rec = engine_record(runs[name])
        worst, n = predict_parity(models[name], runs[name], 20)
        print(
            f"{rec.engine}: head {rec.head}; captured conf vs predict on the export, max |diff| on "
            f"{n} eval "
            f"images: {worst:.2e}"
        )
    print(f"wrote {a.out / 'compare' / 'compare.html'} and {a.out / 'report_int8' / 'report.html'}")


if __name__ == "__main__":
    main()
