"""COCO scale: the post-capture job against one pycocotools evaluation of one head on the same boxes.

The set is :mod:`det_calib.demo.coco_shaped` (seeded; 80 classes, about 7 ground-truth boxes and
200 boxes per image and head at conf 0.001, both heads; written through the project's parts
writer), at 400, 1,600 and 5,000 images per split by default. For each size and each ``--method``
(``temperature`` and the default ``auto``):

- the job: ``calibrate --boxes PARTS --no-val`` on both heads (fit on ``calib``, report on
  ``test``, default bootstrap, report written), in a fresh process: wall seconds, the seconds of
  each stage (the run's ``timings``, :mod:`det_calib.job.clock`), peak RSS, and the box table's in-memory size;
- the reference: pycocotools on the ``nms`` head's ``test`` boxes, built as det_calib built them
  for it (``loadRes`` of an ``(n, 7)`` array) and timed as ``loadRes``, ``evaluate``,
  ``accumulate``, in a fresh process; the ratio printed is the job's seconds over
  ``evaluate + accumulate``.

Then per size: seconds per image of the job, and the change from 1,600 to 5,000 images.

Run from the repository root (the 5,000-image set takes about 200 MB of disk under ``--work``)::

    PYTHONPATH=. python benchmarks/bench_scale.py [--images 400 1600 5000] [--method temperature auto]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

JOB = r"""
import json, sys, time
from det_calib.job import clock
from det_calib.job.process_tuning import set_blas_threads
from det_calib.capture import load_detector
from det_calib.pipeline import calibrate
import det_calib.report, det_calib.evaluation.coco_engine, matplotlib.pyplot, polars as pl
root, method, out = sys.argv[1], sys.argv[2], sys.argv[3]
set_blas_threads(1)  # as the command line runs (det_calib.job.process_tuning)
_model = load_detector(f"{root}/model.pt")
# the fixed part: the interpreter, its imports and the model loaded, before any box is read
fixed = next(int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmRSS:"))
del _model
t0 = time.perf_counter()
run = calibrate(f"{root}/model.pt", f"{root}/data.yaml", out=out, boxes=f"{root}/parts", method=method,
                head="both", run_val=False, progress=False)
total = time.perf_counter() - t0
peak = clock.overall_peak()
print(json.dumps({
    "seconds": total,
    "peak_rss": peak,
    "fixed_rss": fixed,
    "table_bytes": int(run.boxes.estimated_size()),
    "boxes": run.boxes.height,
    "engine": run.result.results["nms"].eval.map_engine,
    "stages": [{"name": n, "seconds": st.wall, "peak_rss": st.peak_rss or 0}
               for n, st in run.result.timings.stages.items()],
}))
"""

REFERENCE = r"""
import contextlib, io, json, resource, sys, time
import numpy as np
import polars as pl
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from det_calib.data import load_data_yaml, load_split
from det_calib.capture.parts import read_parts
from det_calib.matching.one_to_one import collapse_inverted
root = sys.argv[1]
sp = load_split(load_data_yaml(f"{root}/data.yaml"), "test")
boxes = read_parts(f"{root}/parts/test").filter(pl.col("head") == "nms")
g = sp.gt.to_dict(as_series=False)
anns = [{"id": k + 1, "image_id": int(g["image_id"][k]), "category_id": int(g["cls"][k]),
         "bbox": [g["x1"][k], g["y1"][k], g["x2"][k] - g["x1"][k], g["y2"][k] - g["y1"][k]],
         "area": (g["x2"][k] - g["x1"][k]) * (g["y2"][k] - g["y1"][k]), "iscrowd": int(g["crowd"][k])}
        for k in range(sp.gt.height)]
classes = sorted(set(g["cls"]) | set(boxes["cls"].to_list()))
b = collapse_inverted(boxes).select("image_id", "x1", "y1", "x2", "y2", "cls").to_numpy()
dets = np.column_stack([b[:, 0], b[:, 1], b[:, 2], b[:, 3] - b[:, 1], b[:, 4] - b[:, 2],
                        boxes["conf"].to_numpy(), b[:, 5]])
t = {}
with contextlib.redirect_stdout(io.StringIO()):
    coco = COCO()
    coco.dataset = {"images": [{"id": i, "width": int(w), "height": int(h)} for i, (w, h) in enumerate(sp.sizes)],
                    "annotations": anns, "categories": [{"id": c, "name": str(c)} for c in classes]}
    coco.createIndex()
    t0 = time.perf_counter(); res = coco.loadRes(dets); t["loadRes"] = time.perf_counter() - t0
    ev = COCOeval(coco, res, "bbox"); ev.params.maxDets = [300]
    t0 = time.perf_counter(); ev.evaluate(); t["evaluate"] = time.perf_counter() - t0
    t0 = time.perf_counter(); ev.accumulate(); t["accumulate"] = time.perf_counter() - t0
p = ev.eval["precision"][:, :, :, 0, 0]
t["map50_95"] = float(p[p > -1].mean())
t["boxes"] = len(dets)
t["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(t))
"""


def _python(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "YOLO_OFFLINE": "1", "YOLO_VERBOSE": "False"}
    r = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=REPO
    )
    if r.returncode:
        raise SystemExit(f"bench_scale: a run failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB"


def _set(work: Path, n: int) -> Path:
    from det_calib.demo.coco_shaped import write_coco_shaped

    root = work / f"coco_shaped_{n}"
    if not (root / "parts" / "test" / "part-all.parquet").is_file():
        t0 = time.perf_counter()
        s = write_coco_shaped(root, n)
        print(f"  wrote {root} in {time.perf_counter() - t0:.0f} s: boxes {s.boxes}", flush=True)
    return root


def _print_job(n: int, method: str, job: dict, ref: dict) -> None:
    ea = ref["evaluate"] + ref["accumulate"]
    print(
        f"\n{n} images per split, --method {method}: {job['seconds']:.1f} s, peak RSS "
        f"{_gib(job['peak_rss'])} "
        f"(box table {_gib(job['table_bytes'])}, {job['boxes']:,} boxes; fixed part "
        f"{_gib(job['fixed_rss'])}; "
        f"2 x table + fixed = {_gib(2 * job['table_bytes'] + job['fixed_rss'])}); mAP engine "
        f"{job['engine']}"
    )
    for st in job["stages"]:
        print(f"  {st['name']:<48} {st['seconds']:8.1f} s  peak {_gib(st['peak_rss'])}")
    print(
        f"  pycocotools, nms head, test split ({ref['boxes']:,} boxes): loadRes "
        f"{ref['loadRes']:.1f} s, "
        f"evaluate {ref['evaluate']:.1f} s, accumulate {ref['accumulate']:.1f} s, peak "
        f"{_gib(ref['peak_rss'])}"
    )
    print(
        f"  job / (evaluate + accumulate) = {job['seconds']:.1f} / {ea:.1f} = "
        f"{job['seconds'] / ea:.2f}x",
        flush=True,
    )


ISSUE_COLUMNS = {
    "fit and choice (CV with auto)": ("fit and choice",),
    "figures (mAP check, intervals, per class)": ("figures",),
}
"""The columns of issue 26's table, from the run's stages (a step's own parts are not timed: the figures
stage holds the mAP check, the bootstrap intervals and the per-class figures)."""


def _issue_row(n: int, method: str, job: dict, ref: dict) -> str:
    secs = {st["name"]: st["seconds"] for st in job["stages"]}
    cells = [
        f"{sum(secs.get(s, 0.0) for s in parts):.0f} s" if any(s in secs for s in parts) else "–"
        for parts in ISSUE_COLUMNS.values()
    ]
    ratio = job["seconds"] / (ref["evaluate"] + ref["accumulate"])
    return (
        f"| {n:,}, `--method {method}` | {job['seconds']:.0f} s | "
        + " | ".join(cells)
        + f" | {job['peak_rss'] / 2**30:.2f} GiB | {ratio:.2f}x |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, nargs="+", default=[400, 1600, 5000])
    ap.add_argument("--method", nargs="+", default=["temperature", "auto"])
    ap.add_argument(
        "--work",
        type=Path,
        default=None,
        help="where the sets are written (kept; default a temp dir)",
    )
    ap.add_argument(
        "--reuse-reference",
        action="store_true",
        help="take pycocotools' seconds from an earlier run on the same set (quick looks; the ratio "
        "is honest only when both ran under the same load)",
    )
    ap.add_argument(
        "--doc", action="store_true", help="also write the table to docs/generated/bench_scale.md"
    )
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"bench_scale: sets under {work}; load average {os.getloadavg()[0]:.1f}", flush=True)
    per_image: dict[str, dict[int, float]] = {m: {} for m in args.method}
    rows: list[str] = []
    for n in args.images:
        root = _set(work, n)
        cached = root / "pycocotools_reference.json"
        if args.reuse_reference and cached.is_file():
            ref = json.loads(cached.read_text())
            print(f"  pycocotools' seconds from {cached} (an earlier run)", flush=True)
        else:
            ref = _python(REFERENCE, str(root))
            cached.write_text(json.dumps(ref))
        for method in args.method:
            with tempfile.TemporaryDirectory(dir=work) as out:
                job = _python(JOB, str(root), method, str(Path(out) / "run"))
            _print_job(n, method, job, ref)
            per_image[method][n] = job["seconds"] / n
            rows.append(_issue_row(n, method, job, ref))
    header = (
        "| images per split | total | "
        + " | ".join(ISSUE_COLUMNS)
        + " | peak RSS | job / pycocotools |"
    )
    table = "\n".join([header, "|---" * (len(ISSUE_COLUMNS) + 4) + "|", *rows])
    print("\n" + table)
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table(
            "bench_scale", table, note=f"Load average {os.getloadavg()[0]:.1f} at the end."
        )
    print(f"\nseconds per image (load average now {os.getloadavg()[0]:.1f}):")
    for method, d in per_image.items():
        cells = ", ".join(f"{n}: {v * 1000:.1f} ms" for n, v in d.items())
        change = (
            f"; 1,600 -> 5,000: {d[5000] / d[1600] - 1:+.1%}" if 1600 in d and 5000 in d else ""
        )
        print(f"  --method {method}: {cells}{change}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
