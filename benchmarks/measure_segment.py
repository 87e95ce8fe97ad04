"""The deployed kept-set ECE of a segment model's calibrated.pt, measured through plain Ultralytics (issue 39).

For each size (``--limit 64``, ``--limit 128`` and the full splits by default) this runs the default
command ``det-calib calibrate --model MODEL [--limit N] --out RUNS/<size>`` (no ``--data``: the demo seg
model's own data; a run folder that already holds a ``calibration.json`` is measured as it is, unless
``--rerun``), then for each head of the run a child Python process that blocks det_calib loads the original
model and the run's ``calibrated.pt`` with ``ultralytics.YOLO`` and runs ``predict(retina_masks=True)`` at
``conf`` = 0.25, one image at a time, over the run's eval split (as many images as the run used); it encodes
each kept box's mask as a pycocotools RLE at the image size. This process matches the kept boxes to the
ground truth one-to-one by the run's rule (mask IoU, COCO ``segm``, where the run matched by masks; box IoU
otherwise; ``--match`` overrides), at the run's IoU, and computes the kept-set ECE (the run's bins) of the
original's and of calibrated.pt's kept boxes: :func:`kept_set_figures`.

The issue's Done-when line: the calibrated ECE at most 0.85x the raw one on average over the three sizes x
both heads, and no case above 1.05x. ``--doc`` writes the table to docs/generated/segment_deployed_ece.md.

Run from the repository root::

    python3 benchmarks/measure_segment.py --model datasets/shapes/yolo26n_shapes_seg.pt --doc
    python3 benchmarks/measure_segment.py --model M --data D --limits 64 --runs /tmp/seg_runs -- --match box
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

CHILD = r"""
import json, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "det_calib" or name.startswith("det_calib."):
            raise ImportError("det_calib is blocked in this process")
sys.meta_path.insert(0, Block())
import numpy as np
from pycocotools import mask as mask_utils
from ultralytics import YOLO
args = json.loads(sys.argv[1])
out = {}
for tag, path in (("raw", args["original"]), ("calibrated", args["calibrated"])):
    model = YOLO(path)
    rows, rles = [], []
    for i, img in enumerate(args["images"]):
        r = model.predict(img, conf=args["conf"], nms=args["nms"], imgsz=args["imgsz"], retina_masks=True,
                          verbose=False)[0]
        if not len(r.boxes):
            continue
        b = r.boxes
        for xyxy, c, k in zip(b.xyxy.cpu().numpy().tolist(), b.conf.cpu().numpy().tolist(),
                              b.cls.cpu().numpy().astype(int).tolist()):
            rows.append([i, *xyxy, c, k])
        m = np.asfortranarray(r.masks.data.cpu().numpy().astype(np.uint8).transpose(1, 2, 0))
        rles += [e["counts"].decode() for e in mask_utils.encode(m)]
    out[tag] = {"rows": rows, "segm": rles}
out["det_calib_loaded"] = any(m == "det_calib" or m.startswith("det_calib.") for m in sys.modules)
json.dump(out, open(args["out"], "w"))
"""

THRESHOLD = 0.25
DONE_MEAN, DONE_MAX = 0.85, 1.05


def prediction_table(rows: list, segm: list[str]) -> pl.DataFrame:
    """The child's kept boxes as a box table: ``image_id``, ``x1..y2``, ``conf``, ``cls`` and ``segm`` (RLE counts)."""
    a = np.array(rows, dtype=np.float64).reshape(-1, 7)
    return pl.DataFrame({"image_id": a[:, 0].astype(np.int64), "x1": a[:, 1], "y1": a[:, 2], "x2": a[:, 3],
                         "y2": a[:, 4], "conf": a[:, 5], "cls": a[:, 6].astype(np.int32),
                         "segm": pl.Series([s.encode() for s in segm], dtype=pl.Binary)})


def kept_set_figures(table: pl.DataFrame, split, *, match: str, threshold: float = THRESHOLD, iou: float = 0.5,
                     n_bins: int = 15) -> tuple[int, float]:
    """``(kept boxes, kept-set ECE)`` of a predict table on a split.

    Args:
        table: ``image_id``, ``x1..y2``, ``conf``, ``cls`` and, for ``match="mask"``, ``segm`` (each box's mask as
            compressed RLE counts at its image's size).
        split: The split (read by ``load_segment_split`` for mask matching).
        match: ``"mask"`` (mask IoU, COCO ``segm``) or ``"box"`` (box IoU).
        threshold: Boxes with ``conf > threshold`` are kept.
        iou: The IoU a box needs with a same-class ground truth to be correct.
        n_bins: ECE bins.

    Returns:
        The number of kept boxes that count (crowd-matched ones left out) and their ECE (nan if none).
    """
    from det_calib.matching.masks import match_mask_table
    from det_calib.matching.one_to_one import match_boxes
    from det_calib.metrics.operating_point import kept_ece

    kept = table.filter(pl.col("conf") > threshold)
    if match == "mask":
        m = match_mask_table(kept, split.gt, split.sizes, iou_threshold=iou)
    elif match == "box":
        m = match_boxes(kept.drop("segm", strict=False), split.gt, iou=iou, loc_iou=min(iou, 0.1))
    else:
        raise ValueError(f"Expected `match` to be 'mask' or 'box', but got {match!r}")
    m = m.filter(~pl.col("ignore"))
    return m.height, kept_ece(m["conf"].to_numpy(), m["correct"].to_numpy(), threshold=threshold, n_bins=n_bins)


@dataclass
class Case:
    """One size and head: the deployed figures of the original and of calibrated.pt, and what the run said."""

    size: str
    head: str
    method: str
    images: int
    match: str
    raw: tuple[int, float]
    calibrated: tuple[int, float]
    run_raw: float
    run_calibrated: float
    map_identical: bool | None
    mask_map_identical: bool | None

    @property
    def ratio(self) -> float:
        return self.calibrated[1] / self.raw[1]


def calibrate(model: str, data: str | None, limit: int | None, out: Path, extra: list[str], rerun: bool) -> None:
    """``det-calib calibrate`` into ``out`` (skipped when ``out`` holds a finished run and not ``rerun``)."""
    if (out / "calibration.json").is_file() and not rerun:
        return
    cmd = [sys.executable, "-m", "det_calib.cli", "calibrate", "--model", model, "--out", str(out), "-q",
           *(["--data", data] if data else []), *(["--limit", str(limit)] if limit else []), *extra]
    print("$", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True)


def _plain_predict(spec: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        spec = {**spec, "out": str(Path(tmp) / "pred.json")}
        subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], check=True, cwd=tmp)
        pred = json.loads((Path(tmp) / "pred.json").read_text())
    if pred["det_calib_loaded"]:
        raise SystemExit("the child process imported det_calib: the check is not of plain Ultralytics")
    return pred


def measure_run(run: Path, size: str, match: str | None) -> list[Case]:
    """The deployed figures of every head of a finished run (see the module docstring)."""
    from det_calib.data.ground_truth import load_data_yaml, load_split
    from det_calib.data.segments import load_segment_split
    from det_calib.record.run_result import RunResult

    res = RunResult.read(run / "calibration.json")
    st = res.settings
    rule = getattr(getattr(res, "matching", None), "by", None)
    by = match or rule or "box"
    ids = pl.read_parquet(run / "boxes.parquet", columns=["split", "image_id"])
    n = int(ids.filter(pl.col("split") == st.eval_split)["image_id"].max()) + 1
    data = load_data_yaml(res.data)
    sp = load_segment_split(data, st.eval_split, limit=n) if by == "mask" else load_split(data, st.eval_split, limit=n)
    cases = []
    for head in res.heads:
        pred = _plain_predict({"original": res.model, "calibrated": str(run / "calibrated.pt"), "conf": THRESHOLD,
                               "nms": False if head == "e2e" else None, "imgsz": st.imgsz,
                               "images": [str(p) for p in sp.images]})
        fig = {tag: kept_set_figures(prediction_table(pred[tag]["rows"], pred[tag]["segm"]), sp, match=by,
                                     iou=st.iou_match, n_bins=st.ece_bins) for tag in ("raw", "calibrated")}
        hr = res.head(head)
        ev = hr.eval
        cases.append(Case(size=size, head=head, method=hr.calibrator.method if hr.calibrator else "?", images=n,
                          match=by, raw=fig["raw"], calibrated=fig["calibrated"],
                          run_raw=ev.operating_before[0].ece, run_calibrated=ev.operating_after[0].ece,
                          map_identical=ev.map_identical,
                          mask_map_identical=getattr(ev, "mask_map_identical", None)))
    return cases


def verdict(cases: list[Case]) -> tuple[float, float, bool]:
    """Mean and largest calibrated/raw ratio, and whether the Done-when line holds."""
    r = np.array([c.ratio for c in cases])
    return float(r.mean()), float(r.max()), bool(r.mean() <= DONE_MEAN and r.max() <= DONE_MAX)


def table(cases: list[Case], model: str) -> str:
    def yes(v: bool | None) -> str:
        return "-" if v is None else ("yes" if v else "NO")

    lines = [f"Deployed kept-set ECE at conf {THRESHOLD} of `{model}` (plain Ultralytics `predict`, "
             "`retina_masks=True`) and of the run's `calibrated.pt`, on the run's eval split.", "",
             "| size | head | method | images | matched by | raw boxes | raw ECE | calibrated boxes | calibrated ECE "
             "| ratio | run's raw / calibrated ECE | box mAP identical | mask mAP identical |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---:|---|---|---|"]
    for c in cases:
        lines.append(f"| {c.size} | {c.head} | {c.method} | {c.images} | {c.match} IoU | {c.raw[0]} | {c.raw[1]:.4f} "
                     f"| {c.calibrated[0]} | {c.calibrated[1]:.4f} | {c.ratio:.3f} | {c.run_raw:.4f} / "
                     f"{c.run_calibrated:.4f} | {yes(c.map_identical)} | {yes(c.mask_map_identical)} |")
    mean, worst, ok = verdict(cases)
    lines += ["", f"Ratio calibrated / raw: mean {mean:.3f} (target <= {DONE_MEAN}), largest {worst:.3f} "
              f"(target <= {DONE_MAX}): {'met' if ok else 'NOT met'}."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a segment model (.pt)")
    ap.add_argument("--data", help="data.yaml (default: the run's own default for the model)")
    ap.add_argument("--limits", type=int, nargs="+", default=[64, 128, 0], help="sizes; 0 = the full splits")
    ap.add_argument("--runs", type=Path, default=Path("runs/measure_segment"), help="folder of the run folders")
    ap.add_argument("--match", choices=("mask", "box"), help="match the deployed boxes by this (default: the run's)")
    ap.add_argument("--rerun", action="store_true", help="calibrate again even where a finished run is found")
    ap.add_argument("--doc", action="store_true",
                    help="write docs/generated/segment_deployed_ece.md (segment_deployed_ece_box.md with --match box)")
    ap.add_argument("calibrate_args", nargs="*", help="after --: more options of det-calib calibrate")
    args = ap.parse_args()
    cases = []
    for limit in args.limits:
        size = f"--limit {limit}" if limit else "full"
        run = args.runs / (f"limit{limit}" if limit else "full")
        calibrate(args.model, args.data, limit or None, run, args.calibrate_args, args.rerun)
        for c in measure_run(run, size, args.match):
            print(f"{size} [{c.head}] {c.method}, {c.match} IoU: raw {c.raw[0]} boxes ECE {c.raw[1]:.4f}, "
                  f"calibrated.pt {c.calibrated[0]} boxes ECE {c.calibrated[1]:.4f}, ratio {c.ratio:.3f}", flush=True)
            cases.append(c)
    body = table(cases, args.model)
    print(body)
    if args.doc:
        from doc_table import write_doc_table

        write_doc_table("segment_deployed_ece" + ("_box" if args.match == "box" else ""), body)


if __name__ == "__main__":
    main()
