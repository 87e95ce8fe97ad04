"""Three COCO bbox evaluations of the same boxes: pycocotools, faster-coco-eval and det_calib's engine.

The boxes are :mod:`det_calib.demo.coco_shaped`'s set (seeded; 80 classes, about 7 ground-truth
boxes and 200 boxes per image at conf 0.001), the ``nms`` head's ``test`` split, at 400 and 5,000
images by default: the set :mod:`benchmarks.bench_scale` measures the post-capture job on. Each
engine runs in a fresh process with COCOeval's default parameters (10 IoU thresholds, 4 area
ranges, ``maxDets`` 1, 10, 100) and is timed, wall and CPU, in two parts:

- **input**: what the engine needs before it evaluates: pycocotools' and faster-coco-eval's
  ``COCO`` index and ``loadRes`` of an ``(n, 7)`` array (a Python dict per box), det_calib's flat
  arrays;
- **evaluate + accumulate**: COCOeval's two steps (the engine does both in one call).

What these two parts add to the process's memory is measured as their peak RSS (``VmHWM``, reset
through ``/proc/self/clear_refs`` once the boxes are read) less the RSS before them. Then, untimed,
what each gives for the comparison: the precision ``(T, R, K, A, M)`` and recall arrays, the 12
figures ``summarize`` prints, and the matches of area range "all": pycocotools' ``evalImgs`` ``dtMatches`` (the ground
truth each detection took at each IoU threshold), the engine's ``CocoEval.matches`` (the same
table), faster-coco-eval's ``eval["matched"]`` (the (detection, ground truth) pairs matched at
some threshold in some area range, compared with the same union of pycocotools' ``dtMatches``; its
``evaluate`` is run a second time with ``extra_calc`` for them). pycocotools
is the reference: for each other engine the table says whether its arrays are bit-identical, the
largest difference and how many entries differ, the largest difference of the 12 figures and how
many matches differ.

Run from the repository root (the 5,000-image set takes about 200 MB of disk under ``--work``; the
same folder as ``bench_scale.py --work`` reuses its sets)::

    PYTHONPATH=. python benchmarks/bench_coco_engines.py [--images 400 5000] [--work DIR] [--doc]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from bench_scale import coco_shaped_set

REPO = Path(__file__).resolve().parents[1]

ENGINE = r"""
import contextlib, io, json, sys, time
import numpy as np
import polars as pl
from det_calib.capture.parts import read_parts
from det_calib.data import load_data_yaml, load_split
from det_calib.evaluation.coco_engine import _coco_eval
from det_calib.matching.one_to_one import collapse_inverted

root, engine, out = sys.argv[1:4]
sp = load_split(load_data_yaml(f"{root}/data.yaml"), "test")
boxes = read_parts(f"{root}/parts/test").filter(pl.col("head") == "nms")
b = collapse_inverted(boxes)
dets = np.column_stack([b["image_id"], b["x1"], b["y1"], b["x2"] - b["x1"], b["y2"] - b["y1"],
                        boxes["conf"], b["cls"]]).astype(np.float64)
g = sp.gt
g_xywh = np.column_stack([g["x1"], g["y1"], g["x2"] - g["x1"], g["y2"] - g["y1"]])
cats = np.unique(np.concatenate([g["cls"].to_numpy(), b["cls"].to_numpy()]).astype(np.int64))
seen = {"boxes": len(dets), "ground_truth": g.height}


def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024


import gc
gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from here: what the engine's parts add
seen["base_rss"] = status("VmRSS")


def timed(name, fn):
    t0, c0 = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        r = fn()
    seen[name] = [time.perf_counter() - t0, time.process_time() - c0]
    return r


if engine == "det_calib":
    arrays = timed("input", lambda: (dets[:, 0].astype(np.int64), dets[:, 1:5], dets[:, 5],
                                     dets[:, 6].astype(np.int64), g["image_id"].to_numpy(), g_xywh,
                                     g["cls"].to_numpy(), g["crowd"].to_numpy()))
    ev = timed("evaluate", lambda: _coco_eval(*arrays, categories=cats))
    seen["peak_rss"] = status("VmHWM")
    precision, recall = ev.precision, ev.recall
    matches = _coco_eval(*arrays, categories=cats, matches=True).matches
else:
    if engine == "pycocotools":
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval as Eval
        kw = {}
    else:
        from faster_coco_eval import COCO
        from faster_coco_eval import COCOeval_faster as Eval
        kw = {"print_function": lambda *a: None}
    gd = g.to_dict(as_series=False)
    anns = [{"id": k + 1, "image_id": int(gd["image_id"][k]), "category_id": int(gd["cls"][k]),
             "bbox": [float(v) for v in g_xywh[k]], "area": float(g_xywh[k, 2] * g_xywh[k, 3]),
             "iscrowd": int(gd["crowd"][k])} for k in range(g.height)]

    def build():
        coco = COCO()
        coco.dataset = {"images": [{"id": i, "width": int(w), "height": int(h)}
                                   for i, (w, h) in enumerate(sp.sizes)],
                        "annotations": anns, "categories": [{"id": int(c)} for c in cats]}
        coco.createIndex()
        return coco, coco.loadRes(dets)

    coco, res = timed("input", build)
    ev = Eval(coco, res, "bbox", **kw)
    timed("evaluate", lambda: (ev.evaluate(), ev.accumulate()))
    seen["peak_rss"] = status("VmHWM")
    precision, recall = np.asarray(ev.eval["precision"]), np.asarray(ev.eval["recall"])
    matches = np.full((10, len(dets)), -1, dtype=np.int64)
    if engine == "pycocotools":
        pairs = set()
        for e in ev.evalImgs:
            if e is None:
                continue
            ids = np.asarray(e["dtIds"], dtype=np.int64) - 1
            m = np.asarray(e["dtMatches"], dtype=np.int64).reshape(10, -1) - 1
            t, d = np.nonzero(m >= 0)
            pairs |= set(zip(ids[d].tolist(), m[t, d].tolist()))
            if e["aRng"] == ev.params.areaRng[0]:
                matches[:, ids] = m
        np.save(f"{out}/pairs_{engine}.npy", np.array(sorted(pairs)).reshape(-1, 2))
    else:
        ev2 = Eval(coco, res, "bbox", extra_calc=True, **kw)
        ev2.evaluate()
        ev2.accumulate()
        pairs = np.array([[int(x) for x in k.split("_")] for k in ev2.eval["matched"]]) - 1
        np.save(f"{out}/pairs_{engine}.npy", pairs.reshape(-1, 2))
        matches = None
np.save(f"{out}/precision_{engine}.npy", precision)
np.save(f"{out}/recall_{engine}.npy", recall)
if matches is not None:
    np.save(f"{out}/matches_{engine}.npy", matches)
print(json.dumps(seen))
"""

ENGINES = ("pycocotools", "faster-coco-eval", "det_calib")
# (average precision or recall, IoU threshold or None for all, area index, maxDets index): the 12
# lines of COCOeval.summarize for bbox, in its order
SUMMARY = (
    ("ap", None, 0, 2),
    ("ap", 0.5, 0, 2),
    ("ap", 0.75, 0, 2),
    ("ap", None, 1, 2),
    ("ap", None, 2, 2),
    ("ap", None, 3, 2),
    ("ar", None, 0, 0),
    ("ar", None, 0, 1),
    ("ar", None, 0, 2),
    ("ar", None, 1, 2),
    ("ar", None, 2, 2),
    ("ar", None, 3, 2),
)
IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)


def stats(precision: np.ndarray, recall: np.ndarray) -> np.ndarray:
    """The 12 figures COCOeval.summarize prints, from the accumulated arrays (-1 where undefined)."""
    out = []
    for kind, thr, area, md in SUMMARY:
        a = precision[:, :, :, area, md] if kind == "ap" else recall[:, :, area, md]
        if thr is not None:
            a = a[np.isclose(IOU_THRESHOLDS, thr)]
        v = a[a > -1]
        out.append(float(v.mean()) if v.size else -1.0)
    return np.array(out)


def _python(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=REPO
    )
    if r.returncode:
        raise SystemExit(f"bench_coco_engines: a run failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compare(out: Path) -> dict[str, dict]:
    """Each engine against pycocotools: arrays, the 12 figures, the matches."""
    ref_p, ref_r = (
        np.load(out / "precision_pycocotools.npy"),
        np.load(out / "recall_pycocotools.npy"),
    )
    ref_m = np.load(out / "matches_pycocotools.npy")
    ref_s = stats(ref_p, ref_r)
    rows = {}
    for engine in ENGINES[1:]:
        p, r = np.load(out / f"precision_{engine}.npy"), np.load(out / f"recall_{engine}.npy")
        diff = np.concatenate([np.abs(p - ref_p).ravel(), np.abs(r - ref_r).ravel()])
        row = {
            "identical": bool(np.array_equal(p, ref_p) and np.array_equal(r, ref_r)),
            "max_diff": float(diff.max()),
            "entries_differ": int((diff > 0).sum()),
            "entries": int(diff.size),
            "stats_diff": float(np.abs(stats(p, r) - ref_s).max()),
        }
        m_file = out / f"matches_{engine}.npy"
        if m_file.is_file():  # the whole dtMatches table
            m = np.load(m_file)
            row["matches"] = f"{int((m != ref_m).any(axis=0).sum())} of {ref_m.shape[1]:,} differ"
            row["matches_kind"] = "dtMatches, every IoU threshold, area all"
        else:  # matched pairs at some threshold, in some area range
            theirs = {tuple(x) for x in np.load(out / f"pairs_{engine}.npy").tolist()}
            ref = {tuple(x) for x in np.load(out / "pairs_pycocotools.npy").tolist()}
            row["matches"] = f"{len(theirs ^ ref)} of {len(ref):,} pairs differ"
            row["matches_kind"] = "the pairs matched at some IoU threshold in some area range"
        rows[engine] = row
    rows["pycocotools"] = {"stats": ref_s.round(4).tolist()}
    return rows


HEADER = (
    "| images | engine | boxes | input, wall / CPU | evaluate + accumulate, wall / CPU | CPU "
    "against pycocotools (evaluate + accumulate) | memory the two add (peak) | precision and recall against "
    "pycocotools | 12 figures, largest difference | matches against pycocotools |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def _row(n: int, engine: str, m: dict, ref: dict, cmp: dict) -> str:
    ratio = m["evaluate"][1] / ref["evaluate"][1]
    if engine == "pycocotools":
        arrays, figures, matches = "(the reference)", "–", "–"
    else:
        c = cmp[engine]
        arrays = (
            "bit-identical"
            if c["identical"]
            else f"{c['entries_differ']:,} of {c['entries']:,} entries differ, "
            f"by at most {c['max_diff']:.1e}"
        )
        figures = f"{c['stats_diff']:.1e}"
        matches = f"{c['matches']} ({c['matches_kind']})"
    return (
        f"| {n:,} | {engine} | {m['boxes']:,} | {m['input'][0]:.2f} s / {m['input'][1]:.2f} s | "
        f"{m['evaluate'][0]:.2f} s / {m['evaluate'][1]:.2f} s | {ratio:.3f}x | "
        f"{(m['peak_rss'] - m['base_rss']) / 2**30:.2f} GiB | {arrays} | {figures} | {matches} |"
    )


def _without_work(args: list[str]) -> list[str]:
    """The command line without ``--work DIR`` (a local folder)."""
    out, skip = [], False
    for a in args:
        if skip or a == "--work" or a.startswith("--work="):
            skip = a == "--work"
            continue
        out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, nargs="+", default=[400, 5000])
    ap.add_argument("--work", type=Path, default=None, help="where the sets are written (kept)")
    ap.add_argument("--doc", action="store_true", help="write docs/generated/coco_engines.md")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_coco_engines_"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    print(f"bench_coco_engines: sets under {work}; load average {load0:.1f}", flush=True)
    rows, figures = [], []
    for n in args.images:
        root = coco_shaped_set(work, n)
        with tempfile.TemporaryDirectory(dir=work) as out:
            seen = {}
            for engine in ENGINES:
                seen[engine] = _python(ENGINE, str(root), engine, out)
                print(f"  {n:,} images, {engine}: {seen[engine]}", flush=True)
            cmp = compare(Path(out))
        rows += [_row(n, e, seen[e], seen["pycocotools"], cmp) for e in ENGINES]
        figures.append(f"{n:,} images: pycocotools' 12 figures {cmp['pycocotools']['stats']}")
    table = "\n".join([HEADER, *rows])
    print("\n" + table + "\n\n" + "\n".join(figures))
    if args.doc:
        from doc_table import write_doc_table

        note = (
            f"Load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (2 CPU "
            "cores shared with other work; each engine in a fresh process, one after another). "
            "faster-coco-eval 1.8.0, the `nms` head's `test` boxes of the COCO-shaped set."
        )
        write_doc_table(
            "coco_engines",
            table + "\n\n" + "\n".join(f"- {x}" for x in figures),
            note=note,
            command="python3 benchmarks/bench_coco_engines.py "
            + " ".join(_without_work(argv if argv is not None else sys.argv[1:])),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
