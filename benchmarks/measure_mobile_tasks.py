"""The deployed kept-set ECE of the calibrated LiteRT and NCNN engines of segment, pose and OBB models, through
plain Ultralytics: what a user ships, not the run's own figures.

For each demo task model (``det_calib/demo/assets/yolo26n_shapes_seg.pt``, ``_pose.pt``, ``_obb.pt``) and engine
(LiteRT FP32, NCNN; exported by Ultralytics at 320, the one-to-many head ``nms``), into ``--out``:

1. ``det-calib calibrate --model ENGINE --data <the task's demo data> [--limit N] --head nms`` (the default
   choice of calibrator);
2. ``det-calib apply --model ENGINE --source MODEL.pt --calibration RUN/calibration.json``: the calibrated
   engine, re-exported by Ultralytics from the folded checkpoint;
3. a child process that blocks det_calib runs plain ``predict`` at conf 0.25 of the raw and of the calibrated
   engine over the run's eval split, and this process scores both kept sets by the task's rule (mask IoU, OKS,
   rotated IoU) with the run's own matching (:func:`deployed_ece.measure_run`).

A case whose run folder and calibrated engine are already in ``--out`` is measured again as it is (step 3 only).
``--doc`` writes docs/generated/mobile_tasks_deployed.md (included by docs/engines_mobile.md). Run from the
repository root::

    PYTHONPATH=. python3 benchmarks/measure_mobile_tasks.py --limit 128 --out /tmp/mobile_tasks --doc
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
MODELS = {
    "segment": "yolo26n_shapes_seg.pt",
    "pose": "yolo26n_shapes_pose.pt",
    "obb": "yolo26n_shapes_obb.pt",
}
ENGINES = {"litert": "calibrated.tflite", "ncnn": "calibrated_ncnn_model"}


def _data(task: str) -> Path:
    from det_calib.demo import demo_data_yaml

    return demo_data_yaml(task=task)


def engine_case(task: str, fmt: str, out: Path, limit: int | None) -> list:
    """Export, calibrate, re-export calibrated and measure one task model on one engine."""
    from deployed_ece import measure_run
    from ultralytics import YOLO

    folder = out / f"{task}_{fmt}"
    pt = folder / MODELS[task]
    if not pt.exists():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "det_calib" / "demo" / "assets" / MODELS[task], pt)
    run, shipped = folder / "run", folder / ENGINES[fmt]
    if not (
        shipped.exists() and (run / "calibration.json").is_file()
    ):  # else: measured again as it is
        engine = Path(YOLO(str(pt)).export(format=fmt, imgsz=320, verbose=False))
        cli = [sys.executable, "-m", "det_calib.cli"]
        subprocess.run(
            [
                *cli,
                "calibrate",
                "--model",
                str(engine),
                "--data",
                str(_data(task)),
                "--head",
                "nms",
                "-q",
                "--no-report",
                *(["--limit", str(limit)] if limit else []),
                "--out",
                str(run),
            ],
            check=True,
        )
        shutil.rmtree(shipped, ignore_errors=True)
        subprocess.run(
            [
                *cli,
                "apply",
                "--model",
                str(engine),
                "--source",
                str(pt),
                "--calibration",
                str(run / "calibration.json"),
                "--out",
                str(shipped),
            ],
            check=True,
        )
    cases = measure_run(
        run, f"{fmt}, " + (f"--limit {limit}" if limit else "full"), None, calibrated=shipped
    )
    for c in cases:
        print(
            f"{task} {fmt} [{c.head}] {c.method}: raw {c.raw[0]} boxes ECE {c.raw[1]:.4f}, "
            "calibrated engine "
            f"{c.calibrated[0]} boxes ECE {c.calibrated[1]:.4f} (the run's own {c.run_raw:.4f} -> "
            f"{c.run_calibrated:.4f}), ratio {c.ratio:.3f}",
            flush=True,
        )
    return cases


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/det_calib_mobile_tasks"))
    ap.add_argument("--limit", type=int, default=128, help="images per split (0: the full splits)")
    ap.add_argument("--tasks", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument(
        "--doc", action="store_true", help="write docs/generated/mobile_tasks_deployed.md"
    )
    args = ap.parse_args()
    from deployed_ece import table

    blocks = []
    for task in args.tasks:
        cases = [c for fmt in ENGINES for c in engine_case(task, fmt, args.out, args.limit or None)]
        shipped = "calibrated engine (`det-calib apply --source`; the raw side: the engine exported from the model)"
        model = f"det_calib/demo/assets/{MODELS[task]}"
        blocks.append(f"**{task}**\n\n" + table(cases, model, floor=True, shipped=shipped))
    body = "\n\n".join(blocks)
    print(body)
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table(
            "mobile_tasks_deployed",
            body,
            command="python3 " + " ".join(["benchmarks/measure_mobile_tasks.py", *sys.argv[1:]]),
        )


if __name__ == "__main__":
    main()
