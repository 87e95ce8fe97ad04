"""Ultralytics val before and after calibration, on every demo task model, head and split size.

For each demo model (the detector, and the segment, pose and OBB models) and each ``--limit`` (a small
split and the whole one), one default ``det-calib calibrate`` (``--method auto``, both heads) on the model's
demo data; from its ``calibration.json``, per head: the chosen map, what val read against the run's split
(images and instances: the check is *verified* only when they are the same), and each val figure of the
original and of the calibrated checkpoint (at its equivalent floor) with their difference.

``--doc`` writes docs/generated/val_identity.md (included by docs/methods.md). Run from the repository root::

    PYTHONPATH=. python3 benchmarks/measure_val_identity.py --out /tmp/val_identity --doc
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
MODELS = {
    "detect": "yolo26n_shapes.pt",
    "segment": "yolo26n_shapes_seg.pt",
    "pose": "yolo26n_shapes_pose.pt",
    "obb": "yolo26n_shapes_obb.pt",
}
FIGURES = (("map50_95", "box"), ("mask_map50_95", "mask"), ("pose_map50_95", "keypoint"))


def _data(task: str) -> Path:
    from det_calib.demo import demo_data_yaml

    return demo_data_yaml(task=task)


def run_case(task: str, limit: int | None, out: Path) -> Path:
    """One default run of a demo model (its own demo data), unless its folder already holds one."""
    run = out / f"{task}_{limit or 'all'}"
    if not (run / "calibration.json").is_file():
        model = ROOT / "det_calib" / "demo" / "assets" / MODELS[task]
        cmd = [
            sys.executable,
            "-m",
            "det_calib.cli",
            "calibrate",
            "--model",
            str(model),
            "--data",
            str(_data(task)),
            "-q",
            "--no-report",
            *(["--limit", str(limit)] if limit else []),
            "--out",
            str(run),
        ]
        subprocess.run(cmd, check=True)
    return run


def rows_of(task: str, limit: int | None, run: Path) -> list[list[str]]:
    rec = json.loads((run / "calibration.json").read_text())
    rows = []
    for head, uv in rec["ultralytics_val"].items():
        cal_rec, temps = rec.get("calibrators") or {}, rec.get("temperature") or {}
        method = (
            cal_rec[head]["method"]
            if cal_rec.get(head)
            else f"temperature {temps[head]:.3f}"
            if temps.get(head) is not None
            else "none"
        )
        seen = (
            f"{uv.get('images_seen')}/{uv.get('images_expected')} images, "
            f"{uv.get('instances_seen')}/{uv.get('instances_expected')} instances"
        )
        if not uv.get("verified"):
            rows.append([task, str(limit or "all"), head, method, seen, "NOT verified", "", "", ""])
            continue
        orig, cal = uv["original"], uv["calibrated_equivalent_floor"]
        for key, words in FIGURES:
            if orig.get(key) is None:
                continue
            d = cal[key] - orig[key]
            rows.append(
                [
                    task,
                    str(limit or "all"),
                    head,
                    method,
                    seen,
                    words,
                    f"{orig[key]:.6f}",
                    f"{cal[key]:.6f}",
                    "0 (identical)" if abs(d) <= 1e-6 else f"{d:+.2g}",
                ]
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--out", type=Path, required=True, help="folder of the runs (a run already there is reused)"
    )
    ap.add_argument(
        "--limits", default="64,all", help="split sizes: comma-separated --limit values, `all`"
    )
    ap.add_argument("--tasks", default=",".join(MODELS), help="comma-separated demo models")
    ap.add_argument("--doc", action="store_true", help="write docs/generated/val_identity.md")
    args = ap.parse_args(argv)
    limits = [None if x == "all" else int(x) for x in args.limits.split(",")]
    head = [
        "Model",
        "Images",
        "Head",
        "Map",
        "Val read",
        "mAP50-95",
        "Original",
        "Calibrated",
        "Difference",
    ]
    rows = []
    for task in args.tasks.split(","):
        for limit in limits:
            rows += rows_of(task, limit, run_case(task, limit, args.out))
            print(f"{task} {limit or 'all'}: done", flush=True)
    body = (
        "\n".join(
            ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(r) + " |" for r in rows]
        )
        + "\n"
    )
    print(body)
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table(
            "val_identity",
            body,
            command="PYTHONPATH=. python3 benchmarks/measure_val_identity.py "
            f"--limits {args.limits} --tasks {args.tasks} --out RUNS --doc",
            note="Ultralytics val of the original and of the calibrated checkpoint (at the "
            "equivalent floor) in one pass per run; the difference is calibrated - original.",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
