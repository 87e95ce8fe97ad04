"""The deployed kept-set ECE of a task model's calibrated.pt through plain Ultralytics (issues 39 and 40).

The machinery of ``measure_segment.py`` (segment models) and ``measure_pose_obb.py`` (pose and OBB models).
For each size (``--limit 64``, ``--limit 128`` and the full splits by default) :func:`measure_sizes` runs the
default command ``det-calib calibrate --model MODEL [--limit N] --out RUNS/<size>`` (no ``--data``: the demo
model's own data; a run folder that already holds a ``calibration.json`` is measured as it is, unless
``rerun``), then for each head of the run a child Python process that blocks det_calib loads the original
model and the run's ``calibrated.pt`` with ``ultralytics.YOLO`` and runs ``predict`` at ``conf`` = 0.25, one
image at a time, over the run's eval split (as many images as the run used). The child keeps each kept box's
task payload as Ultralytics gives it: a segment model's mask (``retina_masks=True``, encoded as a pycocotools
RLE at the image size), a pose model's keypoints (``Results.keypoints.data``), an OBB model's rotated box
(``Results.obb.xywhr``; its ``xyxy`` is the box). This process matches the kept boxes to the ground truth
one-to-one by the run's rule, at the run's IoU, with the run's own ``match_split`` on the split read as the run
reads it (``load_task_split``) (:func:`kept_set_figures`):

- ``mask``: mask IoU, COCO ``segm``;
- ``oks``: OKS, COCO ``keypoints``, with the sigmas the run recorded;
- ``rotated``: ProbIoU, as Ultralytics' OBB validator;
- ``box``: box IoU, COCO ``bbox`` (a run that recorded no rule; ``--match box`` for any model);

and computes the kept-set ECE (the run's bins) of the original's and of calibrated.pt's kept boxes.

The issue's Done-when line: the calibrated ECE at most 0.85x the raw one on average over the three sizes x
both heads, and no case above 1.05x (:func:`verdict`).
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

from det_calib.data.matching_rule import MEASURE_WORDS

CHILD = r"""
import json, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "det_calib" or name.startswith("det_calib."):
            raise ImportError("det_calib is blocked in this process")
sys.meta_path.insert(0, Block())
import numpy as np
from ultralytics import YOLO
args = json.loads(sys.argv[1])
out = {}

def payload(r, task):
    if task == "segment":
        from pycocotools import mask as mask_utils
        m = np.asfortranarray(r.masks.data.cpu().numpy().astype(np.uint8).transpose(1, 2, 0))
        return [e["counts"].decode() for e in mask_utils.encode(m)]
    if task == "pose":
        return r.keypoints.data.cpu().numpy().tolist()
    if task == "obb":
        return r.obb.xywhr.cpu().numpy().tolist()
    return [None] * len(r.boxes)

for tag, path in (("raw", args["original"]), ("calibrated", args["calibrated"])):
    model = YOLO(path, task=args.get("task"))  # an engine's file says its task only through this hint
    task = out.setdefault("task", model.task)
    if task != model.task:
        raise SystemExit(f"{path} is a {model.task} model, the original a {task} model")
    rows, extra = [], []
    for i, img in enumerate(args["images"]):
        r = model.predict(img, conf=args["conf"], nms=args["nms"], imgsz=args["imgsz"],
                          retina_masks=task == "segment", verbose=False)[0]
        b = r.obb if task == "obb" else r.boxes
        if b is None or not len(b):
            continue
        for xyxy, c, k in zip(b.xyxy.cpu().numpy().tolist(), b.conf.cpu().numpy().tolist(),
                              b.cls.cpu().numpy().astype(int).tolist()):
            rows.append([i, *xyxy, c, k])
        extra += payload(r, task)
    out[tag] = {"rows": rows, "payload": extra}
out["det_calib_loaded"] = any(m == "det_calib" or m.startswith("det_calib.") for m in sys.modules)
json.dump(out, open(args["out"], "w"))
"""

THRESHOLD = 0.25
DONE_MEAN, DONE_MAX = 0.85, 1.05

TASK_MAPS = {
    "segment": (("box mAP", "eval.map_identical"), ("mask mAP", "eval.mask_map_identical")),
    "pose": (
        ("box mAP", "eval.map_identical"),
        ("OKS mAP", "eval.pose_map_identical"),
        ("Ultralytics pose val", "ultralytics_val.identical_at_equivalent_floor"),
    ),
    "obb": (
        ("hull box mAP", "eval.map_identical"),
        ("OBB mAP (Ultralytics val)", "ultralytics_val.identical_at_equivalent_floor"),
    ),
    "detect": (("box mAP", "eval.map_identical"),),
}
"""Per task, the mAP checks of the run's record a table shows: (heading, the head record's attribute path). The
evaluator's are pycocotools' protocols (``bbox``, ``segm``, ``keypoints``); Ultralytics' val (one pass for both
heads: box, mask, pose mAP, and an OBB model's rotated mAP) is identical where all its figures are."""


def prediction_table(
    rows: list, payload: list | None = None, *, task: str = "segment"
) -> pl.DataFrame:
    """The child's kept boxes as a box table: ``image_id``, ``x1..y2``, ``conf``, ``cls`` and the task's payload.

    The payload column: ``segm`` (RLE counts, bytes) for a segment model, ``kpts`` (each box's K lists
    ``[x, y, conf]``) for pose, ``xywhr`` (``[cx, cy, w, h, angle]``) for OBB; none for a detector.
    """
    a = np.array(rows, dtype=np.float64).reshape(-1, 7)
    t = pl.DataFrame(
        {
            "image_id": a[:, 0].astype(np.int64),
            "x1": a[:, 1],
            "y1": a[:, 2],
            "x2": a[:, 3],
            "y2": a[:, 4],
            "conf": a[:, 5],
            "cls": a[:, 6].astype(np.int32),
        }
    )
    if task == "segment":
        return t.with_columns(
            pl.Series("segm", [s.encode() for s in payload or []], dtype=pl.Binary)
        )
    if task == "pose":
        return t.with_columns(pl.Series("kpts", payload or [], dtype=pl.List(pl.List(pl.Float64))))
    if task == "obb":
        return t.with_columns(pl.Series("xywhr", payload or [], dtype=pl.Array(pl.Float64, 5)))
    return t


def kept_set_figures(
    table: pl.DataFrame,
    split,
    *,
    match: str,
    threshold: float = THRESHOLD,
    iou: float = 0.5,
    n_bins: int = 15,
    sigmas=None,
) -> tuple[int, float]:
    """``(kept boxes, kept-set ECE)`` of a predict table on a split, matched by the run's own ``match_split``.

    Args:
        table: ``image_id``, ``x1..y2``, ``conf``, ``cls`` and the payload the rule needs: ``segm`` (each box's
            mask as compressed RLE counts at its image's size) for ``mask``, ``kpts`` for ``oks``, ``xywhr``
            for ``rotated``.
        split: The split, read with the ground truth the rule needs (``load_task_split``, as the run reads it).
        match: ``"mask"``, ``"oks"``, ``"rotated"`` or ``"box"`` (see the module docstring).
        threshold: Boxes with ``conf > threshold`` are kept.
        iou: The IoU (OKS, ProbIoU) a box needs with a same-class ground truth to be correct.
        n_bins: ECE bins.
        sigmas: Per-keypoint OKS sigmas for ``oks`` (the run's record has them; default: ``oks_sigmas``' rule).

    Returns:
        The number of kept boxes that count (ignored ones, on a crowd, left out) and their ECE (nan if none).
    """
    from det_calib.data.matching_rule import MatchingRule
    from det_calib.metrics.operating_point import kept_ece
    from det_calib.tasks.match_rule import match_split

    rule = MatchingRule(
        match, sigmas=tuple(float(x) for x in sigmas) if sigmas is not None else None
    )
    kept = table.filter(pl.col("conf") > threshold)
    m = match_split(kept, split, rule, iou=iou, loc_iou=min(iou, 0.1)).filter(~pl.col("ignore"))
    return m.height, kept_ece(
        m["conf"].to_numpy(), m["correct"].to_numpy(), threshold=threshold, n_bins=n_bins
    )


@dataclass
class Case:
    """One size and head: the deployed figures of the original and of calibrated.pt, and what the run said.

    ``maps``: the run's mAP checks, heading (``box mAP``) to identical (None: not measured); ``raw_at_floor``:
    whether the run found the raw kept-set ECE within its sampling floor's range (None: not recorded).
    """

    size: str
    head: str
    method: str
    images: int
    match: str
    raw: tuple[int, float]
    calibrated: tuple[int, float]
    run_raw: float
    run_calibrated: float
    maps: dict[str, bool | None]
    task: str = "segment"
    raw_at_floor: bool | None = None

    @property
    def ratio(self) -> float:
        return self.calibrated[1] / self.raw[1]


def calibrate(
    model: str, data: str | None, limit: int | None, out: Path, extra: list[str], rerun: bool
) -> None:
    """``det-calib calibrate`` into ``out`` (skipped when ``out`` holds a finished run and not ``rerun``)."""
    if (out / "calibration.json").is_file() and not rerun:
        return
    cmd = [
        sys.executable,
        "-m",
        "det_calib.cli",
        "calibrate",
        "--model",
        model,
        "--out",
        str(out),
        "-q",
        *(["--data", data] if data else []),
        *(["--limit", str(limit)] if limit else []),
        *extra,
    ]
    print("$", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True)


def plain_predict(spec: dict) -> dict:
    """The child's predictions (see :data:`CHILD`): ``task``, and ``raw`` / ``calibrated`` rows and payloads."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = {**spec, "out": str(Path(tmp) / "pred.json")}
        subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], check=True, cwd=tmp)
        pred = json.loads((Path(tmp) / "pred.json").read_text())
    if pred["det_calib_loaded"]:
        raise SystemExit(
            "the child process imported det_calib: the check is not of plain Ultralytics"
        )
    return pred


def rule_split(run_model: str, data, split: str, by: str, n: int):
    """The first ``n`` images of ``split`` read for the model's task as the run reads them (``load_task_split``)
    with the ground truth the rule ``by`` matches against, and the model's task."""
    from det_calib.capture.exported import is_export, read_export
    from det_calib.capture.predictor import load_detector
    from det_calib.tasks.task_splits import load_task_split

    task = read_export(run_model).task if is_export(run_model) else load_detector(run_model).task
    return load_task_split(data, split, task=task, match=by, limit=n), task


def _attr(obj, path: str):
    """``obj.a.b`` for ``path`` ``"a.b"``; None where a step is missing."""
    for name in path.split("."):
        obj = getattr(obj, name, None)
    return obj


def _case(res, head: str, size: str, n: int, by: str, task: str, fig: dict) -> Case:
    hr = res.head(head)
    ev = hr.eval
    before = ev.operating_before[0]
    return Case(
        size=size,
        head=head,
        method=hr.calibrator.method if hr.calibrator else "?",
        images=n,
        match=by,
        raw=fig["raw"],
        calibrated=fig["calibrated"],
        run_raw=before.ece,
        run_calibrated=ev.operating_after[0].ece,
        maps={name: _attr(hr, path) for name, path in TASK_MAPS.get(task, TASK_MAPS["detect"])},
        task=task,
        raw_at_floor=before.at_floor,
    )


def measure_run(
    run: Path, size: str, match: str | None, calibrated: Path | None = None
) -> list[Case]:
    """The deployed figures of every head of a finished run (see the module docstring); ``calibrated``: what the
    user ships instead of the run's ``calibrated.pt`` (the calibrated engine of a run on an export)."""
    from det_calib.data.ground_truth import load_data_yaml
    from det_calib.record.run_result import RunResult

    res = RunResult.read(run / "calibration.json")
    st = res.settings
    by = match or getattr(getattr(res, "matching", None), "by", None) or "box"
    ids = pl.read_parquet(run / "boxes.parquet", columns=["split", "image_id"])
    n = int(ids.filter(pl.col("split") == st.eval_split)["image_id"].max()) + 1
    sp, task = rule_split(res.model, load_data_yaml(res.data), st.eval_split, by, n)
    sigmas = (
        res.matching.sigmas
        if by == "oks" and res.matching is not None and res.matching.by == "oks"
        else None
    )
    cases = []
    for head in res.heads:
        pred = plain_predict(
            {
                "original": res.model,
                "calibrated": str(calibrated or run / "calibrated.pt"),
                "task": task,
                "conf": THRESHOLD,
                "nms": False if head == "e2e" else None,
                "imgsz": st.imgsz,
                "images": [str(p) for p in sp.images],
            }
        )
        if pred["task"] != task:
            raise SystemExit(
                f"plain Ultralytics reads {res.model} as a {pred['task']} model, det_calib as "
                f"{task}"
            )
        fig = {
            tag: kept_set_figures(
                prediction_table(pred[tag]["rows"], pred[tag]["payload"], task=task),
                sp,
                match=by,
                iou=st.iou_match,
                n_bins=st.ece_bins,
                sigmas=sigmas,
            )
            for tag in ("raw", "calibrated")
        }
        cases.append(_case(res, head, size, n, by, task, fig))
    return cases


def measure_sizes(
    model: str,
    data: str | None,
    limits: list[int],
    runs: Path,
    extra: list[str],
    rerun: bool,
    match: str | None,
) -> list[Case]:
    """Calibrate (or reuse) one run per size under ``runs`` and measure each head; prints a line per case."""
    cases = []
    for limit in limits:
        size = f"--limit {limit}" if limit else "full"
        run = runs / (f"limit{limit}" if limit else "full")
        calibrate(model, data, limit or None, run, extra, rerun)
        for c in measure_run(run, size, match):
            print(
                f"{size} [{c.head}] {c.method}, {MEASURE_WORDS[c.match]}: raw {c.raw[0]} boxes ECE "
                f"{c.raw[1]:.4f}, "
                f"calibrated.pt {c.calibrated[0]} boxes ECE {c.calibrated[1]:.4f}, ratio "
                f"{c.ratio:.3f}",
                flush=True,
            )
            cases.append(c)
    return cases


def verdict(cases: list[Case]) -> tuple[float, float, bool]:
    """Mean and largest calibrated/raw ratio, and whether the Done-when line holds."""
    r = np.array([c.ratio for c in cases])
    return float(r.mean()), float(r.max()), bool(r.mean() <= DONE_MEAN and r.max() <= DONE_MAX)


def _yes(v: bool | None, no: str = "NO") -> str:
    return "-" if v is None else ("yes" if v else no)


def table(
    cases: list[Case],
    model: str,
    *,
    floor: bool = False,
    shipped: str = "the run's `calibrated.pt`",
) -> str:
    """The Markdown table of one model's cases and the verdict line; ``floor`` adds whether the run found the
    raw kept-set ECE at its sampling floor; ``shipped``: what the calibrated side is, in words."""
    predict = "`predict`, `retina_masks=True`" if cases[0].task == "segment" else "`predict`"
    maps = list(cases[0].maps)
    lines = [
        f"Deployed kept-set ECE at conf {THRESHOLD} of `{model}` (plain Ultralytics {predict}) and "
        "of the "
        f"{shipped}, on the run's eval split.",
        "",
        "| size | head | method | images | matched by | raw boxes | raw ECE | calibrated boxes | "
        "calibrated ECE "
        "| ratio | run's raw / calibrated ECE"
        + (" | raw at floor" if floor else "")
        + "".join(f" | {m} identical" for m in maps)
        + " |",
        "|---|---|---|---:|---|---:|---:|---:|---:|---:|---"
        + ("|---" if floor else "")
        + "|---" * len(maps)
        + "|",
    ]
    for c in cases:
        lines.append(
            f"| {c.size} | {c.head} | {c.method} | {c.images} | {MEASURE_WORDS[c.match]} | "
            f"{c.raw[0]} "
            f"| {c.raw[1]:.4f} | {c.calibrated[0]} | {c.calibrated[1]:.4f} | {c.ratio:.3f} | "
            f"{c.run_raw:.4f} "
            f"/ {c.run_calibrated:.4f}"
            + (f" | {_yes(c.raw_at_floor, 'no')}" if floor else "")
            + "".join(f" | {_yes(c.maps[m])}" for m in maps)
            + " |"
        )
    mean, worst, ok = verdict(cases)
    lines += [
        "",
        f"Ratio calibrated / raw: mean {mean:.3f} (target <= {DONE_MEAN}), largest {worst:.3f} "
        f"(target <= {DONE_MAX}): {'met' if ok else 'NOT met'}.",
    ]
    if floor:
        lines.append(floor_line(cases))
    return "\n".join(lines)


def floor_line(cases: list[Case]) -> str:
    """How many cases the run found the raw kept-set ECE at its sampling floor (no calibrator can be shown
    to improve on those), and in how many it deployed no map."""
    known = [c for c in cases if c.raw_at_floor is not None]
    at = sum(bool(c.raw_at_floor) for c in known)
    none = [c for c in cases if c.method == "none"]
    none_at = sum(bool(c.raw_at_floor) for c in none)
    return (
        f"The raw kept-set ECE is within its sampling floor's range in {at} of {len(known)} cases "
        "(there no "
        f"calibrator can be shown to do better); the run deployed no map in {len(none)} case(s), "
        f"{none_at} of "
        "them with the raw ECE at its floor."
    )


def add_arguments(ap: argparse.ArgumentParser, *, runs: str, match: tuple[str, ...]) -> None:
    """The options every deployed-ECE benchmark takes (sizes, run folders, rerun, matching, calibrate's)."""
    ap.add_argument("--data", help="data.yaml (default: the run's own default for the model)")
    ap.add_argument(
        "--limits", type=int, nargs="+", default=[64, 128, 0], help="sizes; 0 = the full splits"
    )
    ap.add_argument("--runs", type=Path, default=Path(runs), help="folder of the run folders")
    ap.add_argument(
        "--match", choices=match, help="match the deployed boxes by this (default: the run's)"
    )
    ap.add_argument(
        "--rerun", action="store_true", help="calibrate again even where a finished run is found"
    )
    ap.add_argument(
        "calibrate_args", nargs="*", help="after --: more options of det-calib calibrate"
    )
