"""Reliability by box size on the demo: the default map against the size-conditioned one.

One default run of the demo (``det-calib calibrate``, ``--method auto``: the maps that keep every
box's ranking) captures the boxes; the same boxes are then calibrated again (``--boxes``, no second
capture) with ``--method size-platt`` and with ``--method auto --size-maps`` (auto may then choose
the size map). For each run and head this prints the deployed map, COCO mAP50-95 and mAP50 before
and after (the size map re-ranks boxes, so it can move them), the kept-set ECE and LaECE_0 at the
lowest conf threshold, and the kept-set ECE of each COCO size, raw and calibrated, with its 95%
image-bootstrap interval (the run's own ``by_size`` records).

    python benchmarks/measure_size.py                      # full demo (400 fit + 400 eval images)
    python benchmarks/measure_size.py --limit 128 --out-dir /tmp/size
    python benchmarks/measure_size.py --doc                # writes docs/generated/measure_size.md

Prints a Markdown table; with ``--doc`` writes it to ``docs/generated/measure_size.md``, the table
docs/size_and_hook.md includes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from det_calib.pipeline.calibrate_job import calibrate
from det_calib.record.run_result import RunResult
from det_calib.report.common import f4, fci

RUNS = (
    ("default (auto)", "default", {}),
    ("size-platt", "size_platt", {"method": "size-platt"}),
    ("auto --size-maps", "auto_size_maps", {"size_maps": True}),
)
"""(label, folder, options) of each run."""


def run_all(out: Path, limit: int | None, seed: int) -> dict[str, RunResult]:
    kw = dict(limit=limit, seed=seed, report=False, progress=False)
    base = out / RUNS[0][1]
    calibrate(out=base, **kw)
    runs = {RUNS[0][0]: RunResult.read(base / "calibration.json")}
    for label, name, extra in RUNS[1:]:
        folder = out / name
        calibrate(out=folder, boxes=str(base), **kw, **extra)
        runs[label] = RunResult.read(folder / "calibration.json")
    return runs


def _size_cells(res: RunResult, head: str) -> list[str]:
    coco = {f.bin: f for f in res.head(head).by_size if f.scheme == "coco"}
    cells = []
    for name in ("small", "medium", "large"):
        f = coco.get(name)
        cells.append(
            "n/a"
            if f is None
            else f"{f4(f.ece_before)} → {fci(f.ece_after, f.ece_after_ci)} ({f.boxes_before}→{f.boxes_after})"
        )
    return cells


def table(runs: dict[str, RunResult]) -> str:
    head_row = [
        "run",
        "head",
        "deployed",
        "mAP50-95 raw → cal",
        "mAP50 raw → cal",
        "kept-set ECE raw → cal",
        "LaECE_0 raw → cal",
        "small: ECE raw → cal [95% CI] (boxes)",
        "medium",
        "large",
    ]
    lines = ["| " + " | ".join(head_row) + " |", "|" + "---|" * len(head_row)]
    for label, res in runs.items():
        for h in res.heads:
            r = res.head(h)
            ev = r.eval
            o0, o1 = ev.operating_before[0], ev.operating_after[0]
            cells = [
                label,
                h,
                r.calibrator.method,
                f"{f4(ev.map50_95_before)} → {f4(ev.map50_95_after)}",
                f"{f4(ev.map50_before)} → {f4(ev.map50_after)}",
                f"{f4(o0.ece)} → {fci(o1.ece, o1.ece_ci)}",
                f"{f4(o0.laece0)} → {f4(o1.laece0)}",
                *_size_cells(res, h),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--limit", type=int, default=None, help="images per split (default: the whole demo)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out-dir", type=Path, default=None, help="where the runs go (default: a temporary folder)"
    )
    ap.add_argument("--doc", action="store_true", help="write docs/generated/measure_size.md")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = run_all(a.out_dir or Path(tmp), a.limit, a.seed)
        body = table(runs)
    print(body)
    if a.doc:
        from doc_table import write_doc_table

        conf = min(next(iter(runs.values())).settings.conf_thresholds)
        command = (
            "python3 benchmarks/measure_size.py"
            + (f" --limit {a.limit}" if a.limit else "")
            + (f" --seed {a.seed}" if a.seed else "")
            + " --doc"
        )  # --out-dir (a scratch folder) is no part of it
        write_doc_table(
            "measure_size",
            body,
            command=command,
            note=f"Kept sets at conf {conf:g}; ECE 15 bins at IoU 0.5, LaECE_0 25 bins; "
            "COCO sizes by the predicted box's area in pixels; every run on the same captured "
            "boxes.",
        )


if __name__ == "__main__":
    main()
