"""COCO scale: the post-capture job against one pycocotools evaluation of one head's boxes.

The set is :mod:`det_calib.demo.coco_shaped` (seeded; 80 classes, about 7 ground-truth boxes and
200 boxes per image and head at conf 0.001, both heads; written through the project's parts
writer), at 400, 1,600 and 5,000 images per split by default. For each size and each ``--method``
(``temperature`` and the default ``auto``) and each ``--head`` (default ``both``; ``nms``: one
head's boxes, what the job costs a one-head detector such as YOLO11, and the very boxes the
reference evaluates):

- the job: ``det-calib calibrate --boxes PARTS --no-val --head H`` (fit on ``calib``, report
  on ``test``, default bootstrap, report written), run as the command line runs it
  (``det_calib.cli.main`` in a fresh process, its process tuned as the command's): wall and CPU
  seconds of its ``calibrate`` call (the CPU of its child processes included), the seconds of each
  stage (the run's ``timings``, :mod:`det_calib.job.clock`); its memory: the command's process's
  peak RSS, split into the fixed part (the interpreter and its imports, before any box is read),
  the box table's in-memory size (and its bytes a box) and the rest; the peak of each child process
  that reads or folds the model (:mod:`det_calib.job.model_process`: torch is never imported in the
  command's process), each measured as its own ``VmHWM`` (``RUSAGE_CHILDREN``'s ``ru_maxrss`` is
  printed too, but it starts at the parent's peak at the fork), and the bound on the two together:
  the parent waits while a child runs, so its RSS then, plus the child's peak, bounds what both
  hold; the run's bound is the largest of that and the parent's own peak;
- the reference: pycocotools on the ``nms`` head's ``test`` boxes, built as det_calib built them
  for it (``loadRes`` of an ``(n, 7)`` array) and timed as ``loadRes``, ``evaluate``,
  ``accumulate``, in a fresh process; the ratios printed are the job's seconds over
  ``evaluate + accumulate``, wall and CPU, side by side (on a shared machine the wall ratio moves
  with the load; the CPU ratio much less).

With ``--repeats N`` the job runs N times at each size compared with pycocotools, in N rounds of one
run of each method and head and then pycocotools (under one load: on a shared machine either moves
by 5 to 10% from one moment to the next), and the run of the median CPU of each is the one
reported (the CPU of every run printed, and noted in the docs table). A size past
``--reference-max`` runs once, with the first ``--head`` only.

Then per size: seconds per image of the job, and per method and head the change of the peak from
the smallest to the largest set, with and without the box table (``--reference-max`` leaves
pycocotools out of the large sets: the job's memory is what those measure).

Run from the repository root (the 5,000-image set takes about 200 MB of disk under ``--work``)::

    PYTHONPATH=. python benchmarks/bench_scale.py [--images 400 1600 5000] [--method temperature auto] \
        [--head both nms]
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
import json, os, resource, sys, time
t_process = time.perf_counter()
import det_calib.cli as cli
from det_calib.job import clock, model_process
root, method, out, head = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
# the command as a user runs it: `det-calib calibrate --boxes PARTS --no-val` (cli.main with the
# process's own argv tunes the process as the command line does); its calibrate() call timed, the
# run it returns and each model child process it starts recorded beside it
sys.argv = ["det-calib", "calibrate", "--model", f"{root}/model.pt", "--data", f"{root}/data.yaml",
            "--boxes", f"{root}/parts", "--method", method, "--head", head, "--no-val",
            "--out", out, "--quiet"]
seen, children = {}, []
def _rss():
    return next(int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmRSS:"))
# a model child's own peak: its VmHWM as it exits (its ru_maxrss, and so RUSAGE_CHILDREN's, starts
# at this process's peak at the fork, not at the child's own); the child code is the job's own, with
# its exit noting the peak in a file
hwm_file = out + ".children_hwm"
os.environ["BENCH_CHILD_HWM"] = hwm_file
model_process._CHILD = "\n".join([
    model_process._CHILD.split("from det_calib")[0],
    "import os",
    "from det_calib.job import model_process as m",
    "_exit = os._exit",
    "def _noting_peak(code):",
    "    hwm = next(x.split()[1] for x in open('/proc/self/status') if x.startswith('VmHWM:'))",
    "    with open(os.environ['BENCH_CHILD_HWM'], 'a') as f:",
    "        f.write(hwm + ' ')",
    "    _exit(code)",
    "os._exit = _noting_peak",
    "m._child_main()",
])
def _cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime
_in_child = model_process._in_child
def in_child(stage, target, *a):  # the parent waits for the child: its memory stays as it was
    child = {"what": target.split(":")[1], "parent_rss": _rss(),
             "torch_in_parent": "torch" in sys.modules}
    try:
        return _in_child(stage, target, *a)
    finally:
        child["peak_rss"] = int(open(hwm_file).read().split()[-1]) * 1024
        children.append(child)
model_process._in_child = in_child
_calibrate = cli.calibrate
def calibrate(*a, **k):
    t0, c0 = time.perf_counter(), _cpu()
    run = _calibrate(*a, **k)
    c1 = _cpu()
    seen.update(seconds=time.perf_counter() - t0, cpu=c1[0] - c0[0], children_cpu=c1[1] - c0[1],
                table_bytes=int(run.boxes.estimated_size()), boxes=run.boxes.height,
                engine=run.result.results["nms"].eval.map_engine,
                stages=[{"name": n, "seconds": st.wall, "cpu": st.cpu, "peak_rss": st.peak_rss or 0}
                        for n, st in run.result.timings.stages.items()])
    return run
cli.calibrate = calibrate
code = cli.main()
assert code == 0, code
stages = [st["name"] for st in seen["stages"]]
before = stages[: stages.index("capture")] if "capture" in stages else []
print(json.dumps({
    **seen,
    "cpu": seen["cpu"] + seen["children_cpu"],
    "command_seconds": time.perf_counter() - t_process,
    "peak_rss": clock.overall_peak(),  # this process, the command's whole life
    "children_peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
    "children": children,
    # the fixed part: the interpreter and its imports, before any box is read (the model: in a child)
    "fixed_rss": max(st["peak_rss"] for st in seen["stages"] if st["name"] in before),
    "torch_in_parent": "torch" in sys.modules,
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
    t0, c0 = time.perf_counter(), time.process_time(); ev.evaluate()
    t["evaluate"], t["evaluate_cpu"] = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time(); ev.accumulate()
    t["accumulate"], t["accumulate_cpu"] = time.perf_counter() - t0, time.process_time() - c0
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


def coco_shaped_set(work: Path, n: int) -> Path:
    """The seeded COCO-shaped set of ``n`` images a split under ``work`` (written once, then reused;
    bench_coco_engines.py reads the same sets)."""
    from det_calib.demo.coco_shaped import write_coco_shaped

    root = work / f"coco_shaped_{n}"
    if not (root / "parts" / "test" / "part-all.parquet").is_file():
        t0 = time.perf_counter()
        s = write_coco_shaped(root, n)
        print(f"  wrote {root} in {time.perf_counter() - t0:.0f} s: boxes {s.boxes}", flush=True)
    return root


def _ref_seconds(ref: dict | None) -> tuple[float, float] | None:
    """pycocotools' ``evaluate + accumulate``: (wall, CPU) seconds; None where it was not run."""
    if ref is None:
        return None
    return (
        ref["evaluate"] + ref["accumulate"],
        ref.get("evaluate_cpu", ref["evaluate"]) + ref.get("accumulate_cpu", ref["accumulate"]),
    )


def _bound(job: dict) -> int:
    """What the command's process and its model children hold together at most: the parent's peak,
    or the parent's RSS while it waits for a child plus that child's peak."""
    return max(
        [job["peak_rss"], *(c["parent_rss"] + c["peak_rss"] for c in job.get("children", []))]
    )


def _print_job(n: int, label: str, job: dict, ref: dict | None) -> None:
    """One run as printed (``label``: the run's ``--method M --head H``)."""
    per_box = job["table_bytes"] / max(job["boxes"], 1)
    rest = job["peak_rss"] - job["fixed_rss"] - job["table_bytes"]
    print(
        f"\n{n:,} images per split, {label}: {job['seconds']:.1f} s wall, "
        f"{job['cpu']:.1f} s CPU ({job['children_cpu']:.1f} s of it in the model's child processes), "
        f"the command {job['command_seconds']:.1f} s from the interpreter's start; "
        f"mAP engine {job['engine']}; torch imported in the command's process: "
        f"{job['torch_in_parent']}"
    )
    print(
        f"  the command's process: peak RSS {_gib(job['peak_rss'])} = fixed part "
        f"{_gib(job['fixed_rss'])} (interpreter, imports) "
        f"+ box table {_gib(job['table_bytes'])} ({job['boxes']:,} boxes, {per_box:.0f} bytes a "
        "box) "
        f"+ the rest {_gib(rest)} (the stages' working arrays, the allocators' free pages)"
    )
    for c in job.get("children", []):
        print(
            f"  model child ({c['what']}): peak {_gib(c['peak_rss'])}, while the command's process "
            f"held {_gib(c['parent_rss'])}: together at most {_gib(c['parent_rss'] + c['peak_rss'])}"
        )
    print(
        f"  bound on the command and its children together: {_gib(_bound(job))} "
        f"(RUSAGE_CHILDREN's ru_maxrss {_gib(job['children_peak_rss'])}, which starts at the "
        "parent's peak at the fork)"
    )
    for st in job["stages"]:
        print(
            f"  {st['name']:<48} {st['seconds']:8.1f} s  CPU {st.get('cpu', 0.0):8.1f} s  "
            f"peak {_gib(st['peak_rss'])}"
        )
    sec = _ref_seconds(ref)
    if sec is None:
        print("  pycocotools: not run at this size (--reference-max)", flush=True)
        return
    print(
        f"  pycocotools, nms head, test split ({ref['boxes']:,} boxes): loadRes "
        f"{ref['loadRes']:.1f} s, "
        f"evaluate {ref['evaluate']:.1f} s, accumulate {ref['accumulate']:.1f} s "
        f"(CPU {sec[1]:.1f} s), peak {_gib(ref['peak_rss'])}"
    )
    print(
        f"  job / (evaluate + accumulate): wall {job['seconds']:.1f} / {sec[0]:.1f} = "
        f"{job['seconds'] / sec[0]:.2f}x, "
        f"CPU {job['cpu']:.1f} / {sec[1]:.1f} = {job['cpu'] / sec[1]:.2f}x",
        flush=True,
    )


ISSUE_COLUMNS = {
    "fit and choice (CV with auto)": ("fit and choice",),
    "figures (mAP check, intervals, per class, by size)": ("figures",),
    "outputs and report": ("outputs", "report"),
}
"""Columns from the run's stages (a step's own parts are not timed: the figures stage holds the mAP
check, the bootstrap intervals, the per-class and by-size figures)."""


def _issue_row(n: int, label: str, job: dict, ref: dict | None) -> str:
    secs = {st["name"]: st["seconds"] for st in job["stages"]}
    cells = [
        f"{sum(secs.get(s, 0.0) for s in parts):.0f} s" if any(s in secs for s in parts) else "–"
        for parts in ISSUE_COLUMNS.values()
    ]
    sec = _ref_seconds(ref)
    ratios = (
        "– | –"
        if sec is None
        else f"{sec[0]:.0f} s / {sec[1]:.0f} s | {job['seconds'] / sec[0]:.2f}x / {job['cpu'] / sec[1]:.2f}x"
    )
    return (
        f"| {n:,}, `{label}` | {job['seconds']:.0f} s / {job['cpu']:.0f} s | "
        + " | ".join(cells)
        + f" | {_bound(job) / 2**30:.2f} GiB | {job['peak_rss'] / 2**30:.2f} GiB | "
        + f"{max([c['peak_rss'] for c in job.get('children', [])] or [0]) / 2**30:.2f} GiB | "
        + f"{job['fixed_rss'] / 2**30:.2f} GiB | "
        + f"{job['table_bytes'] / 2**30:.2f} GiB "
        f"({job['table_bytes'] / max(job['boxes'], 1):.0f} B a box) | " + ratios + " |"
    )


HEADER = (
    "| images per split | job, wall / CPU | "
    + " | ".join(ISSUE_COLUMNS)
    + " | peak RSS, the command and its model children together (bound) | the command's process"
    " | its model children (each's own peak) | of the process fixed (imports) | box table"
    " | pycocotools, wall / CPU | job / "
    "pycocotools, "
    "wall / CPU |"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, nargs="+", default=[400, 1600, 5000])
    ap.add_argument("--method", nargs="+", default=["temperature", "auto"])
    ap.add_argument(
        "--head",
        nargs="+",
        choices=["both", "nms"],  # the reference evaluates the nms head's boxes
        default=["both"],
        help="the job's --head, each a run of every method (default both: twice the boxes one "
        "pycocotools evaluation sees; nms: one head's, what the job costs a one-head detector)",
    )
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
        "--reference-max",
        type=int,
        default=None,
        help="run pycocotools only on sets of at most this many images per split (a 50,000-image "
        "evaluation takes the better part of an hour); the job's memory is measured at every size",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run the job this many times at each size compared with pycocotools, in rounds of "
        "one run of each method and head then pycocotools, and report the run of the median CPU "
        "of each (one run moves by 5 to 10%% on a shared machine); a size past --reference-max "
        "runs once (its memory is what it measures)",
    )
    ap.add_argument(
        "--doc", action="store_true", help="also write the table to docs/generated/bench_scale.md"
    )
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    print(f"bench_scale: sets under {work}; load average {load0:.1f}", flush=True)
    runs = {f"--method {m} --head {h}": (m, h) for m in args.method for h in args.head}
    per_image: dict[str, dict[int, float]] = {k: {} for k in runs}
    peaks: dict[str, dict[int, dict]] = {k: {} for k in runs}
    rows: list[str] = []
    repeated: dict[tuple[int, str], list[float]] = {}
    for n in args.images:
        root = coco_shaped_set(work, n)
        cached = root / "pycocotools_reference.json"
        compared = args.reference_max is None or n <= args.reference_max
        reuse = compared and args.reuse_reference and cached.is_file()
        repeats = max(args.repeats, 1) if compared else 1
        refs = [json.loads(cached.read_text())] if reuse else []
        if reuse:
            print(f"  pycocotools' seconds from {cached} (an earlier run)", flush=True)
        # past --reference-max: the memory of the first --head is what a size measures
        here = {k: mh for k, mh in runs.items() if compared or mh[1] == args.head[0]}
        runs_of: dict[str, list[dict]] = {label: [] for label in here}
        for _ in range(repeats):  # a round: every method and head, then pycocotools, under one load
            for label, (method, head) in here.items():
                with tempfile.TemporaryDirectory(dir=work) as out:
                    runs_of[label].append(
                        _python(JOB, str(root), method, str(Path(out) / "run"), head)
                    )
            if compared and not reuse:
                refs.append(_python(REFERENCE, str(root)))
        ref = _median_by(refs, lambda r: _ref_seconds(r)[1]) if refs else None
        if refs and not reuse:
            cached.write_text(json.dumps(ref))
        if len(refs) > 1:
            cpus = ", ".join(f"{_ref_seconds(r)[1]:.1f}" for r in refs)
            print(
                f"\n{n:,} images: pycocotools {len(refs)} times, CPU {cpus} s: the median's below"
            )
            repeated[(n, "pycocotools")] = [_ref_seconds(r)[1] for r in refs]
        for label, done in runs_of.items():
            job = _median_by(done, lambda r: r["cpu"])
            if len(done) > 1:
                cpus = ", ".join(f"{r['cpu']:.1f}" for r in done)
                print(
                    f"\n{n:,} images, {label}: {len(done)} runs, CPU {cpus} s: the median's below"
                )
                repeated[(n, label)] = [r["cpu"] for r in done]
            _print_job(n, label, job, ref)
            per_image[label][n] = job["seconds"] / n
            peaks[label][n] = job
            rows.append(_issue_row(n, label, job, ref))
    table = "\n".join([HEADER, "|---" * (len(ISSUE_COLUMNS) + 9) + "|", *rows])
    print("\n" + table)
    lines = _memory_lines(peaks)
    for line in lines:
        print(line)
    if args.doc:
        from doc_table import write_doc_table

        note = (
            f"Load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (2 CPU "
            "cores shared "
            "with other work: the wall ratio moves with the load, as the job and pycocotools ran "
            "at different "
            "times; the CPU ratio much less)."
        ) + "".join(
            f" At {n:,} images, "
            + (
                f"pycocotools ran {len(c)} times, each right after a round of the job's runs (CPU "
                if m == "pycocotools"
                else f"`{m}`: the job ran {len(c)} times (CPU "
            )
            + ", ".join(f"{x:.1f}" for x in c)
            + " s): the row is the median's."
            for (n, m), c in repeated.items()
        )
        write_doc_table(
            "bench_scale",
            table + ("\n\n" + "\n".join(f"- {x.strip()}" for x in lines) if lines else ""),
            note=note,
            command="python3 benchmarks/bench_scale.py "
            + " ".join(_without_work(argv if argv is not None else sys.argv[1:])),
        )
    print(f"\nseconds per image (load average now {os.getloadavg()[0]:.1f}):")
    for label, d in per_image.items():
        cells = ", ".join(f"{n}: {v * 1000:.1f} ms" for n, v in d.items())
        print(f"  {label}: {cells}")
    return 0


def _median_by(runs: list[dict], cpu) -> dict:
    """The run of the median ``cpu(run)`` seconds (the lower middle one of an even number)."""
    return sorted(runs, key=cpu)[(len(runs) - 1) // 2]


def _without_work(args: list[str]) -> list[str]:
    """The command's arguments less ``--work DIR`` (a scratch folder), so the recorded line reruns anywhere."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--work":
            skip = True
        elif not a.startswith("--work="):
            out.append(a)
    return out


def _memory_lines(peaks: dict[str, dict[int, dict]]) -> list[str]:
    """Per method and head, the change of the peak between the smallest and the largest set, and of
    the peak less the box table (what does not have to grow with the images)."""
    out = []
    for label, d in peaks.items():
        if len(d) < 2:
            continue
        lo, hi = d[min(d)], d[max(d)]
        grow = hi["peak_rss"] / lo["peak_rss"] - 1
        beside = [j["peak_rss"] - j["table_bytes"] for j in (lo, hi)]
        out.append(
            f"  {label}, {min(d):,} -> {max(d):,} images: peak {_gib(lo['peak_rss'])} -> "
            f"{_gib(hi['peak_rss'])} ({grow:+.0%}); box table {_gib(lo['table_bytes'])} -> "
            f"{_gib(hi['table_bytes'])}; peak less the table {_gib(beside[0])} -> "
            f"{_gib(beside[1])} "
            f"({beside[1] / beside[0] - 1:+.0%})"
        )
    return out


if __name__ == "__main__":
    raise SystemExit(main())
